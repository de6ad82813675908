"""The pinned SDK's public surface against what the tests exercise and
what docs/e2b.md says: every public method and attribute of `Sandbox` and
`AsyncSandbox`, found by introspection, is either called by a test of
this directory (for the sync class in a file that uses `Sandbox`, for the
async one in a file that uses `AsyncSandbox`) or listed `not supported`
in the compatibility list of docs/e2b.md; and the list names each one. A
new SDK version fails here with the names it added. Needs no daemon."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Dict, List, Set

import e2b

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[2] / "docs" / "e2b.md"
LINE = re.compile(r"^- `(\w+)`: (supported|not supported) — \S")


def public(cls: type) -> Set[str]:
    """The public names of `cls` that are methods or attributes of a
    sandbox (its class constants, such as default_template, are not)."""
    out = set()
    for name in dir(cls):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, (str, int, float, bool)):
            continue
        out.add(name)
    return out


def listed() -> Dict[str, str]:
    entries: Dict[str, str] = {}
    section = DOC.read_text().split("## Compatibility of each method", 1)
    assert len(section) == 2, "docs/e2b.md has no `## Compatibility of each method` section"
    for line in section[1].splitlines():
        m = LINE.match(line)
        if m:
            assert m.group(1) not in entries, f"{m.group(1)} is listed twice in docs/e2b.md"
            entries[m.group(1)] = m.group(2)
    return entries


def sources(uses: str) -> List[str]:
    """The test files (this one aside) that use the class named `uses`."""
    word = re.compile(rf"\b{uses}\b")
    return [
        p.read_text()
        for p in sorted(HERE.glob("test_*.py"))
        if p.name != Path(__file__).name and word.search(p.read_text())
    ]


def called(name: str, texts: List[str]) -> bool:
    return any(re.search(rf"\.{name}\b", t) for t in texts)


def test_every_public_method_of_the_sdk_is_tested_or_listed_as_not_supported() -> None:
    entries = listed()
    problems = []
    for cls in (e2b.Sandbox, e2b.AsyncSandbox):
        texts = sources(cls.__name__)
        for name in sorted(public(cls)):
            state = entries.get(name)
            if state is None:
                problems.append(f"{cls.__name__}.{name} is not in docs/e2b.md's compatibility list")
            elif state == "supported" and not called(name, texts):
                problems.append(
                    f"{cls.__name__}.{name} is listed supported but no test using {cls.__name__} calls it"
                )
    assert not problems, "\n".join(problems)


def test_the_list_names_nothing_the_sdk_lacks() -> None:
    names = public(e2b.Sandbox) | public(e2b.AsyncSandbox)
    stale = sorted(set(listed()) - names)
    assert not stale, f"docs/e2b.md lists names the pinned SDK does not have: {stale}"


def test_the_sync_and_async_classes_have_the_same_names() -> None:
    assert public(e2b.Sandbox) == public(e2b.AsyncSandbox)

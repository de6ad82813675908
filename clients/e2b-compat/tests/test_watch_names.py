"""A directory watch tells what the client did in E2B's words: the names
the client wrote (never warden's temporary upload name), sync and async;
a polling watcher belongs to the token that made it, and one token holds
a bounded number of them, so one caller can never take every watch of
the daemon."""

from __future__ import annotations

import asyncio
import time
from typing import List, Tuple

import httpx
import pytest
from e2b import AsyncSandbox, FilesystemEventType, Sandbox, SandboxException


def _poll(w, until, timeout: float = 10.0) -> List[Tuple[str, FilesystemEventType]]:
    seen: List[Tuple[str, FilesystemEventType]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += [(e.name, e.type) for e in w.get_new_events()]
        if until(seen):
            break
        time.sleep(0.2)
    return seen


def test_a_watch_names_the_file_the_client_wrote_and_never_a_temporary_one() -> None:
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.files.make_dir("up")
        w = sbx.files.watch_dir("up")
        try:
            sbx.files.write("up/report.csv", "a,b\n")
            seen = _poll(w, lambda s: ("report.csv", FilesystemEventType.WRITE) in s)
            names = {n for n, _ in seen}
            assert names == {"report.csv"}, seen
            assert ("report.csv", FilesystemEventType.CREATE) in seen, seen
            assert ("report.csv", FilesystemEventType.WRITE) in seen, seen
        finally:
            w.stop()
    finally:
        sbx.kill()


@pytest.mark.asyncio
async def test_the_async_watch_names_the_file_the_client_wrote_and_never_a_temporary_one() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.make_dir("up")
        seen: List[Tuple[str, FilesystemEventType]] = []
        h = await sbx.files.watch_dir("up", on_event=lambda e: seen.append((e.name, e.type)))
        await sbx.files.write("up/data.json", "{}")
        for _ in range(50):
            if ("data.json", FilesystemEventType.WRITE) in seen:
                break
            await asyncio.sleep(0.1)
        await h.stop()
        assert {n for n, _ in seen} == {"data.json"}, seen
    finally:
        await sbx.kill()


def test_one_token_holds_a_bounded_number_of_watchers_and_others_still_get_theirs(daemon) -> None:
    greedy = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    other = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    a = Sandbox.create(timeout=120, api_key=greedy)
    b = Sandbox.create(timeout=120, api_key=other)
    held = []
    try:
        with pytest.raises(SandboxException) as refused:
            for _ in range(40):
                held.append(a.files.watch_dir("."))
        # The daemon's bound per token: 12 of its 32 watches (8 are the
        # owner's alone, and one token takes at most half of the rest).
        assert len(held) == 12, len(held)
        assert "12 files watches" in str(refused.value)
        # Another caller is not refused because of the first one's.
        w = b.files.watch_dir(".")
        b.files.write("seen.txt", "x")
        assert ("seen.txt", FilesystemEventType.CREATE) in _poll(
            w, lambda s: ("seen.txt", FilesystemEventType.CREATE) in s
        )
        w.stop()
        # Stopping one gives its place back.
        held.pop().stop()
        held.append(a.files.watch_dir("."))
    finally:
        for h in held:
            try:
                h.stop()
            except Exception:
                pass
        a.kill()
        b.kill()


def test_a_watcher_is_polled_only_by_the_token_that_made_it(daemon) -> None:
    owner = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    sbx = Sandbox.create(timeout=120, api_key=owner)
    try:
        w = sbx.files.watch_dir(".")
        watcher_id = w._watcher_id
        # An admin token reaches every sandbox, yet not another caller's
        # watcher (its events are that caller's).
        thief = daemon.token("admin")
        r = httpx.post(
            f"{daemon.url}/filesystem.Filesystem/GetWatcherEvents",
            json={"watcherId": watcher_id},
            headers={
                "E2b-Sandbox-Id": sbx.sandbox_id,
                "X-Access-Token": thief,
                "Content-Type": "application/json",
                "Connect-Protocol-Version": "1",
            },
        )
        assert r.status_code == 404, r.text
        assert "no watcher" in r.text
        w.stop()
    finally:
        sbx.kill()

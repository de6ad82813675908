"""The code interpreter's packages are no shared cache that one token's
sandbox can write and another token's sandbox runs: the daemon keeps the
pinned wheels where no sandbox sees them and hands each sandbox's
interpreter its own checked copy. A sandbox that deletes the wheels it can
find, and plants a wheel of its own under every pinned name where the
packages used to be cached (a `jupyter_client` that announces itself),
changes nothing for another token: its `run_code` works, never runs the
planted file, and sees nothing the first sandbox wrote."""

from __future__ import annotations

import base64
import io
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, Daemon
from test_code_interpreter import interpreter_profile  # noqa: F401 (a fixture)

e2b_ci = pytest.importorskip("e2b_code_interpreter")

SCOPES = ("sandboxes:read", "sandboxes:write", "exec", "files")
LOCK = REPO / "crates/daemon/src/e2b/interpreter/wheels.lock"

# Where the interpreter's packages were cached, and shared, before.
OLD_CACHE = "~/.cache/pip/warden-code-interpreter"


def planted_wheel() -> bytes:
    """A wheel whose `jupyter_client` leaves a mark and says so."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(
            "jupyter_client/__init__.py",
            "open('/tmp/planted-ran', 'w').write('x')\nprint('PLANTED')\n",
        )
    return buf.getvalue()


def pinned_names() -> list:
    names = []
    for line in LOCK.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line.split()[0])
    return names


def test_a_sandbox_that_replaces_the_wheels_it_sees_changes_nothing_for_another_token(
    daemon: Daemon, interpreter_profile  # noqa: F811
) -> None:
    key_a, key_b = daemon.token(*SCOPES), daemon.token(*SCOPES)
    a = e2b_ci.Sandbox.create(timeout=600, api_key=key_a)
    try:
        # A's interpreter runs (the packages are fetched if need be).
        assert a.run_code("6 * 7").text == "42"
        # A deletes every wheel it can find where they were cached and puts
        # its own under each pinned name, with a mark of its own beside.
        script = (
            "import base64, glob, os\n"
            f"planted = base64.b64decode({base64.b64encode(planted_wheel()).decode()!r})\n"
            f"cache = os.path.expanduser({OLD_CACHE!r})\n"
            "for w in glob.glob(os.path.expanduser('~/.cache/pip/**/*.whl'), recursive=True):\n"
            "    os.remove(w)\n"
            "os.makedirs(cache, exist_ok=True)\n"
            f"for name in {pinned_names()!r}:\n"
            "    open(os.path.join(cache, name), 'wb').write(planted)\n"
            "open(os.path.join(cache, 'mark-of-a'), 'w').write('a')\n"
            "print(len(os.listdir(cache)))\n"
        )
        ex = a.run_code(script)
        assert ex.error is None, ex.error
    finally:
        a.kill()

    b = e2b_ci.Sandbox.create(timeout=600, api_key=key_b)
    try:
        ex = b.run_code(
            "import os, jupyter_client\n"
            f"print(os.path.exists(os.path.join(os.path.expanduser({OLD_CACHE!r}), 'mark-of-a')))\n"
            "print(os.path.exists('/tmp/planted-ran'))\n"
            "6 * 7"
        )
        assert ex.error is None, ex.error
        assert ex.text == "42"
        assert "PLANTED\n" not in ex.logs.stdout, ex.logs
        # Nothing A wrote is seen here, and A's wheel never ran here.
        assert ex.logs.stdout == ["False\nFalse\n"] or ex.logs.stdout == ["False\n", "False\n"], ex.logs
    finally:
        b.kill()

"""The code interpreter's server outlives a restart of the daemon, and the
door still knows it afterwards. Sandboxes outlive the daemon (their
supervisors are detached) and a restarted daemon adopts them; the server
is a command the door started in its sandbox, recorded as the door's
server in the daemon's own records (never in anything the sandbox can
write), so the daemon that comes back takes it up again: `run_code` goes
on with the same kernel (its variables still defined) rather than
starting a second server, the server holds its caller's place among its
long-lived answers as before, and gives it back when it ends. A command
of the token's own, however much it looks like the server, is never
taken for it.

These tests run a daemon of their own (restarted on the same state
directory and E2B address), whose tokens hold few long-lived answers,
so that the places a token holds can be counted by taking the free ones."""

from __future__ import annotations

import threading
import time
from typing import Iterator, List, Tuple

import httpx
import pytest

from conftest import Daemon, point_sdk, restart, serve
from test_code_interpreter import _addresses

e2b_ci = pytest.importorskip("e2b_code_interpreter")

PER_TOKEN = 5
SCOPES = ("sandboxes:read", "sandboxes:write", "exec", "files")

# The interpreter's servers among the sandbox's processes, counted (or
# killed, with `kill`) inside it: the command line the door starts them
# with (`python3 -I -c SERVER serve`) whose code is the door's own (its
# first line).
SERVERS = r"""
import os, signal, sys
mark = b"# The code interpreter inside a code-interpreter-v1 sandbox"
n = 0
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[:-1]
    except OSError:
        continue
    if argv[:3] == [b"python3", b"-I", b"-c"] and argv[-1] == b"serve" and argv[3].startswith(mark):
        n += 1
        if sys.argv[1:] == ["kill"]:
            os.kill(int(p), signal.SIGKILL)
print(n)
"""


@pytest.fixture(scope="module")
def restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    try:
        addrs = _addresses()
    except OSError as e:
        pytest.skip(f"PyPI is not reachable from this host ({e}): the code interpreter's packages cannot be fetched")
    cidrs = [f"{a}/32" if ":" not in a else f"{a}/128" for a in addrs]
    setup = (
        "extends: [code-interpreter-v1]\n"
        "egress:\n"
        "  presets: [pypi]\n"
        f"  allow_cidrs: [{', '.join(cidrs)}]\n"
    )
    base = tmp_path_factory.mktemp("warden-e2b-ci-restart")
    yield from serve(
        base,
        f"sessions:\n  per_token: {PER_TOKEN}\n  per_daemon: 64\n",
        profiles={"code-interpreter-v1-setup.yaml": setup},
        listen=True,
    )


def _servers(sbx, *mode: str) -> int:
    """How many interpreter servers run inside the sandbox, counted there
    (and killed, with mode `kill`)."""
    sbx.files.write("/tmp/servers.py", SERVERS)
    return int(sbx.commands.run(" ".join(["python3", "/tmp/servers.py", *mode])).stdout.strip())


def _tokens_sandbox(d: Daemon, timeout: int = 900) -> Tuple[str, "e2b_ci.Sandbox"]:
    """A new token of `SCOPES` (the SDK pointed at `d` with it) and a
    code-interpreter sandbox it made, living `timeout` seconds."""
    key = d.token(*SCOPES)
    point_sdk(d, key)
    return key, e2b_ci.Sandbox.create(timeout=timeout)


def _native(d: Daemon, key: str) -> httpx.Client:
    return httpx.Client(base_url=d.native, headers={"authorization": f"Bearer {key}"}, timeout=60)  # type: ignore[attr-defined]


def _free_places(d: Daemon, key: str, sandbox: str) -> int:
    """The places among its long-lived answers token `key` has free now:
    background commands started until the next is refused (429), then
    ended and waited for."""
    started: List[str] = []
    with _native(d, key) as c:
        try:
            while len(started) <= PER_TOKEN:
                r = c.post(f"/v1/sandboxes/{sandbox}/exec", json={"argv": ["sleep", "600"], "background": True})
                if r.status_code == 429:
                    assert r.json()["details"]["bound"] == "per_token", r.text
                    break
                assert r.status_code == 202, r.text
                started.append(r.json()["id"])
        finally:
            for ex in started:
                c.post(f"/v1/sandboxes/{sandbox}/execs/{ex}/signal", json={"signal": "SIGKILL"})
            deadline = time.monotonic() + 30
            while started and time.monotonic() < deadline:
                left = [ex for ex in started if c.get(f"/v1/sandboxes/{sandbox}/execs/{ex}").json()["exit_status"] is None]
                if not left:
                    break
                time.sleep(0.1)
    # A place comes back a moment after its command's end is recorded.
    time.sleep(0.5)
    return len(started)


def _run_in(d: Daemon, key: str, sandbox: str, argv: List[str]) -> str:
    """Start `argv` in the background as token `key`, natively: its id."""
    with _native(d, key) as c:
        r = c.post(f"/v1/sandboxes/{sandbox}/exec", json={"argv": argv, "background": True})
        assert r.status_code == 202, r.text
        return str(r.json()["id"])


def _running(d: Daemon, sandbox: str, ex: str) -> bool:
    with d.owner() as c:
        r = c.get(f"/v1/sandboxes/{sandbox}/execs/{ex}")
        r.raise_for_status()
        return r.json()["exit_status"] is None


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_after_a_daemon_restart_run_code_goes_on_with_the_same_server_and_its_place(
    restartable: Daemon, how: str
) -> None:
    d = restartable
    key, sbx = _tokens_sandbox(d)
    try:
        ex = sbx.run_code("x = 41", timeout=400, request_timeout=400)
        assert ex.error is None, ex.error
        assert _servers(sbx) == 1
        free = _free_places(d, key, sbx.sandbox_id)
        # The server holds one of the token's places.
        assert free == PER_TOKEN - 1, free

        restart(d, kill=how == "sigkill")

        # The same server, with the kernel's state: no second one started.
        ex = sbx.run_code("x + 1", timeout=400, request_timeout=400)
        assert ex.error is None, ex.error
        assert ex.text == "42", ex
        assert _servers(sbx) == 1
        # Its place is held again, as before the restart.
        assert _free_places(d, key, sbx.sandbox_id) == free

        # Ended (here from inside the sandbox), it gives its place back;
        # the next run_code starts one server again, holding one place.
        assert _servers(sbx, "kill") == 1
        deadline = time.monotonic() + 30
        while _servers(sbx) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _servers(sbx) == 0
        got = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = _free_places(d, key, sbx.sandbox_id)
            if got == PER_TOKEN:
                break
            time.sleep(0.5)
        assert got == PER_TOKEN, got
        assert sbx.run_code("6 * 7", timeout=400, request_timeout=400).text == "42"
        assert _servers(sbx) == 1
        assert _free_places(d, key, sbx.sandbox_id) == PER_TOKEN - 1
    finally:
        sbx.kill()


def test_a_server_still_starting_when_the_daemon_restarts_is_ended_before_the_next_start(
    restartable: Daemon,
) -> None:
    # A server that has not listened yet when the daemon dies (here one
    # that never will: a jupyter_client that does not return, planted with
    # the mark that the packages are unpacked, as the sandbox may). The
    # daemon that comes back must know it as the server: the next start
    # ends it first, so the sandbox runs one server, not two.
    d = restartable
    key, sbx = _tokens_sandbox(d)
    site = "/tmp/.warden-code-interpreter"
    try:
        sbx.files.write(f"{site}/jupyter_client/__init__.py", "import time\ntime.sleep(10**9)\n")
        sbx.files.write(f"{site}/.unpacked", "")
        first: List[BaseException] = []

        def hung() -> None:
            try:
                sbx.run_code("print('never')", timeout=400, request_timeout=400)
            except BaseException as e:  # the daemon dies under it
                first.append(e)

        t = threading.Thread(target=hung, daemon=True)
        t.start()
        deadline = time.monotonic() + 600
        while _servers(sbx) == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _servers(sbx) == 1
        restart(d, kill=True)
        t.join(timeout=60)
        # What the sandbox planted goes: a new server unpacks and listens.
        sbx.commands.run(f"rm -rf {site}")
        ex = sbx.run_code("6 * 7", timeout=400, request_timeout=400)
        assert ex.text == "42", ex
        assert _servers(sbx) == 1
        assert _free_places(d, key, sbx.sandbox_id) == PER_TOKEN - 1
    finally:
        sbx.kill()


def test_a_command_of_the_tokens_that_looks_like_the_server_is_never_taken_for_it_after_a_restart(
    restartable: Daemon,
) -> None:
    d = restartable
    key, sbx = _tokens_sandbox(d)
    try:
        assert sbx.run_code("1", timeout=400, request_timeout=400).error is None
        # The token's own command with the server's command line (the door
        # starts its server as `python3 -I -c CODE serve`), started before
        # the restart: the daemon records it as a command like any other.
        lookalike = _run_in(
            d,
            key,
            sbx.sandbox_id,
            ["python3", "-I", "-c", "import time\ntime.sleep(600)", "serve"],
        )
        restart(d)
        # The real server ends; the next run_code must start a new one, and
        # a door that took the lookalike for its previous server would end
        # it first (it is the token's own command: it runs on).
        assert _servers(sbx, "kill") == 1
        assert sbx.run_code("2 + 2", timeout=400, request_timeout=400).text == "4"
        assert _running(d, sbx.sandbox_id, lookalike), "the token's own command was ended as the server"
        assert _servers(sbx) == 1
    finally:
        sbx.kill()


def test_a_command_running_across_a_daemon_restart_still_holds_its_place(restartable: Daemon) -> None:
    # The same ledger counts every running command: one started natively
    # in the background is adopted with its place, and gives it back when
    # it ends.
    d = restartable
    key, sbx = _tokens_sandbox(d, timeout=300)
    try:
        ex = _run_in(d, key, sbx.sandbox_id, ["sleep", "600"])
        assert _free_places(d, key, sbx.sandbox_id) == PER_TOKEN - 1
        restart(d, kill=True)
        assert _free_places(d, key, sbx.sandbox_id) == PER_TOKEN - 1
        with _native(d, key) as c:
            r = c.post(f"/v1/sandboxes/{sbx.sandbox_id}/execs/{ex}/signal", json={"signal": "SIGKILL"})
            assert r.status_code == 204, r.text
        deadline = time.monotonic() + 30
        while _running(d, sbx.sandbox_id, ex) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(d, sbx.sandbox_id, ex)
        assert _free_places(d, key, sbx.sandbox_id) == PER_TOKEN
    finally:
        sbx.kill()

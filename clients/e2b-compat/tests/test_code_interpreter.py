"""The unmodified `e2b-code-interpreter` SDK against warden: its default
template is the shipped `code-interpreter-v1` profile, whose IPython
kernel runs inside the sandbox and is reached through the door's port
route. `run_code` gives results, stdout and stderr, errors and charts as
PNG, sync and async.

The interpreter's packages are fetched from PyPI once, by the owner's
`code-interpreter-v1-setup` profile, and kept by the daemon. On this
kind of host PyPI's names resolve to addresses outside the public
Internet, which warden's egress refuses unless the owner allows their
range: the test, as the owner, gives the setup profile exactly those
addresses and nothing else. Without PyPI at all the tests are skipped,
saying why."""

from __future__ import annotations

import base64
import socket
import time
from typing import Iterator, List

import pytest

from conftest import Daemon, serve

e2b_ci = pytest.importorskip("e2b_code_interpreter")

PYPI = ("pypi.org", "files.pythonhosted.org")


def _addresses() -> List[str]:
    out: List[str] = []
    for name in PYPI:
        for info in socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM):
            addr = info[4][0]
            if addr not in out:
                out.append(addr)
    return out


def setup_profile() -> str:
    """The owner's `code-interpreter-v1-setup` profile that reaches PyPI
    at exactly its addresses here (the test is skipped, saying why, when
    PyPI is not reachable)."""
    try:
        addrs = _addresses()
        socket.create_connection((PYPI[0], 443), timeout=10).close()
    except OSError as e:
        pytest.skip(f"PyPI is not reachable from this host ({e}): the code interpreter's packages cannot be fetched")
    cidrs = [f"{a}/32" if ":" not in a else f"{a}/128" for a in addrs]
    return (
        "extends: [code-interpreter-v1]\n"
        "egress:\n"
        "  presets: [pypi]\n"
        f"  allow_cidrs: [{', '.join(cidrs)}]\n"
    )


@pytest.fixture(scope="module")
def interpreter_profile(daemon) -> Iterator[float]:
    text = setup_profile()
    profiles = daemon.state.parent / "config" / "warden" / "profiles"
    (profiles / "code-interpreter-v1-setup.yaml").write_text(text)
    yield time.monotonic()


#: The start period of the daemon that waits a start out (no server that
#: should listen is started by that daemon, so it need not leave room for
#: unpacking and a first kernel as the default 180 s does).
QUICK_START_WITHIN = 10


@pytest.fixture(scope="module")
def quick_give_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon of its own whose owner gives the interpreter's server
    `QUICK_START_WITHIN` seconds to listen (`e2b:
    interpreter_start_within:`), so that a start that gives up is waited
    out in that time rather than the default's."""
    text = setup_profile()
    yield from serve(
        tmp_path_factory.mktemp("warden-e2b-ci-give-up"),
        f"e2b:\n  interpreter_start_within: {QUICK_START_WITHIN}s\n",
        profiles={"code-interpreter-v1-setup.yaml": text},
    )


def _png(b64: str) -> bytes:
    data = base64.b64decode(b64)
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    return data


def test_run_code_gives_results_output_errors_and_charts(interpreter_profile) -> None:
    started = time.monotonic()
    sbx = e2b_ci.Sandbox.create(timeout=600)
    try:
        assert sbx.get_info().template_id == "code-interpreter-v1"
        ex = sbx.run_code("print('hello')\n1 + 1")
        first = time.monotonic() - started
        print(f"first run_code (packages fetched if needed, unpacked, kernel started): {first:.1f} s")
        assert ex.error is None, ex.error
        assert ex.logs.stdout == ["hello\n"]
        assert ex.text == "2"

        ex = sbx.run_code("import sys\nprint('to stderr', file=sys.stderr)")
        assert ex.logs.stderr == ["to stderr\n"]

        # State is kept between calls, as in a notebook.
        sbx.run_code("x = 41")
        assert sbx.run_code("x + 1").text == "42"

        ex = sbx.run_code("1 / 0")
        assert ex.error is not None
        assert ex.error.name == "ZeroDivisionError"
        assert ex.error.value == "division by zero"
        assert "ZeroDivisionError" in ex.error.traceback

        seen: List[str] = []
        ex = sbx.run_code(
            "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nplt.show()",
            on_stdout=lambda m: seen.append(m.line),
        )
        assert ex.error is None, ex.error
        pngs = [r.png for r in ex.results if r.png]
        assert len(pngs) == 1, ex.results
        _png(pngs[0])

        # Per-call environment variables.
        ex = sbx.run_code("import os\nos.environ['GREETING']", envs={"GREETING": "hi"})
        assert ex.text == "'hi'"

        # The sandbox is a sandbox: the kernel reaches no network.
        ex = sbx.run_code(
            "import socket\ntry:\n    socket.create_connection(('pypi.org', 443), 5)\n    print('reached')\n"
            "except OSError as e:\n    print('refused')"
        )
        assert ex.logs.stdout == ["refused\n"], ex.logs
    finally:
        sbx.kill()


def test_a_second_sandbox_runs_code_without_fetching_again(interpreter_profile, daemon) -> None:
    # The owner's setup profile is taken away: nothing can be fetched now,
    # and the daemon's store alone serves.
    setup = daemon.state.parent / "config" / "warden" / "profiles" / "code-interpreter-v1-setup.yaml"
    saved = setup.read_text() if setup.exists() else None
    warm = e2b_ci.Sandbox.create(timeout=300)
    try:
        warm.run_code("1")
    finally:
        warm.kill()
    try:
        setup.write_text("extends: [code-interpreter-v1]\nresources:\n  timeout: 1m\n")
        started = time.monotonic()
        sbx = e2b_ci.Sandbox.create(timeout=300)
        try:
            assert sbx.run_code("6 * 7").text == "42"
            print(f"first run_code from the store: {time.monotonic() - started:.1f} s")
        finally:
            sbx.kill()
    finally:
        if saved is not None:
            setup.write_text(saved)


def test_run_code_is_refused_to_a_caller_without_access(interpreter_profile, daemon) -> None:
    import httpx

    sbx = e2b_ci.Sandbox.create(timeout=300)
    try:
        r = httpx.post(
            f"{daemon.url}/execute",
            json={"code": "print('no')"},
            headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49999"},
        )
        assert r.status_code == 401, r.text
        stranger = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
        r = httpx.post(
            f"{daemon.url}/execute",
            json={"code": "print('no')"},
            headers={
                "E2b-Sandbox-Id": sbx.sandbox_id,
                "E2b-Sandbox-Port": "49999",
                "X-Access-Token": stranger,
            },
        )
        assert r.status_code in (404, 502), r.text
        assert "no" not in r.text.split("sandbox")[0]
    finally:
        sbx.kill()


@pytest.mark.asyncio
async def test_the_async_interpreter_runs_code_and_plots(interpreter_profile) -> None:
    sbx = await e2b_ci.AsyncSandbox.create(timeout=600)
    try:
        ex = await sbx.run_code("print('async')\n[1, 2][5]")
        assert ex.logs.stdout == ["async\n"]
        assert ex.error is not None and ex.error.name == "IndexError"
        ex = await sbx.run_code("import matplotlib.pyplot as plt\nplt.bar([1, 2], [3, 4])\nplt.show()")
        _png(next(r.png for r in ex.results if r.png))
    finally:
        await sbx.kill()


def _server_commands(daemon, sandbox_id: str) -> List[dict]:
    """The sandbox's commands that are the interpreter's server, as the
    owner lists them."""
    with daemon.owner() as c:
        r = c.get(f"/v1/sandboxes/{sandbox_id}/execs")
    r.raise_for_status()
    return [e for e in r.json() if e["argv"][:1] == ["python3"] and e["argv"][-1] == "serve"]


def test_a_module_planted_in_the_workspace_does_not_stop_the_interpreter(interpreter_profile, daemon) -> None:
    # The attack: a module named as one the server imports first (the
    # standard library's json), which never returns, planted where the
    # server's working directory is before its first start. Run with
    # `python3 -c` from the workspace, the server imported it and never
    # listened.
    sbx = e2b_ci.Sandbox.create(timeout=600)
    try:
        sbx.files.write("/workspace/json.py", "import time\ntime.sleep(10**9)\n")
        ex = sbx.run_code("print('served')", timeout=400, request_timeout=400)
        assert ex.error is None, ex.error
        assert ex.logs.stdout == ["served\n"], ex.logs
        # The code itself still runs in the workspace, and imports from it.
        sbx.files.write("/workspace/mine.py", "VALUE = 7\n")
        assert sbx.run_code("import os, mine\n(os.getcwd(), mine.VALUE)").text == "('/workspace', 7)"
        # The server's command line: isolated from the workspace.
        servers = _server_commands(daemon, sbx.sandbox_id)
        assert len(servers) == 1, servers
        assert servers[0]["argv"][1] == "-I", servers[0]["argv"][:2]
    finally:
        sbx.kill()


def test_a_server_that_never_listens_is_ended_when_its_start_gives_up(
    quick_give_up: Daemon, monkeypatch: pytest.MonkeyPatch, wait_until
) -> None:
    # The sandbox may always make its own server hang before it listens
    # (its /tmp is its own): here a jupyter_client that never returns,
    # with the mark that the packages are unpacked. The start gives up
    # after its period (the owner's, here QUICK_START_WITHIN; 180 s by
    # default); the command it started must end then, giving back its
    # place, instead of running uncounted until the sandbox stops.
    daemon = quick_give_up
    for var in ("E2B_API_URL", "E2B_SANDBOX_URL"):
        monkeypatch.setenv(var, daemon.url)
    monkeypatch.setenv("E2B_API_KEY", daemon.token("sandboxes:read", "sandboxes:write", "exec", "files"))
    sbx = e2b_ci.Sandbox.create(timeout=900)
    try:
        site = "/tmp/.warden-code-interpreter"
        sbx.files.write(f"{site}/jupyter_client/__init__.py", "import time\ntime.sleep(10**9)\n")
        sbx.files.write(f"{site}/.unpacked", "")
        started = time.monotonic()
        with pytest.raises(Exception) as refused:
            sbx.run_code("print('never')", timeout=400, request_timeout=400)
        print(f"start gave up after {time.monotonic() - started:.1f} s: {refused.value}")
        assert f"nothing listened on port 49999 within {QUICK_START_WITHIN} s" in str(refused.value), refused.value
        servers = _server_commands(daemon, sbx.sandbox_id)
        assert len(servers) == 1, servers
        assert wait_until(
            lambda: all(e["exit_status"] is not None for e in _server_commands(daemon, sbx.sandbox_id)),
            timeout=30,
        ), _server_commands(daemon, sbx.sandbox_id)
    finally:
        sbx.kill()

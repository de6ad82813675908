"""E2B's MCP onto warden's own: a sandbox made with `mcp={}` answers
warden's MCP tools (commands, files) for that one sandbox at the address
`get_mcp_url()` names, to a real MCP client (the official Python SDK)
holding the token `get_mcp_token()` answers. That token stands for its
caller's power over that one sandbox: it reaches no other sandbox,
creates none, and ends when the sandbox is killed or the caller's token
revoked; it never enters the sandbox. The MCP servers of E2B's catalogue
are refused at create, saying what to do instead."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import pytest
from e2b import AsyncSandbox, NotFoundException, Sandbox, SandboxException

from conftest import Daemon

HERE = Path(__file__).resolve().parent
PYTHON = os.environ.get("WARDEN_TEST_MCP_PYTHON", "/tmp/mcp-venv/bin/python")


def mcp_python() -> str:
    ok = subprocess.run([PYTHON, "-c", "import mcp.client.streamable_http, httpx2"], capture_output=True)
    if ok.returncode != 0:
        pytest.skip(f"the MCP Python SDK is not at {PYTHON} (python3 -m venv /tmp/mcp-venv && /tmp/mcp-venv/bin/pip install mcp)")
    return PYTHON


def session(daemon: Daemon, url: str, token: str, *calls: str) -> dict:
    """A real MCP client's session at `url` (as get_mcp_url() answers it:
    sent to the door, the name in the Host header)."""
    host = urlsplit(url).netloc
    out = subprocess.run(
        [mcp_python(), str(HERE / "mcp_client.py"), f"{daemon.url}/mcp", host, token, *calls],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip(), out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(cmd: str) -> str:
    return "run_command=" + json.dumps({"shell": cmd})


@pytest.fixture(scope="module")
def mcp_key(daemon: Daemon) -> str:
    return daemon.token("sandboxes:read", "sandboxes:write", "exec", "files", "mcp")


@pytest.fixture
def made(mcp_key: str, label: str) -> Iterator[Sandbox]:
    mcp_python()
    sbx = Sandbox.create(mcp={}, metadata={"test": label}, timeout=120, api_key=mcp_key)
    try:
        yield sbx
    finally:
        sbx.kill()


def test_get_mcp_url_names_warden_s_mcp_for_this_sandbox_on_the_door(made: Sandbox, daemon: Daemon) -> None:
    door = urlsplit(daemon.url).port
    assert made.get_mcp_url() == f"https://50005-{made.sandbox_id}.localhost:{door}/mcp"


def test_the_mcp_token_runs_commands_in_this_sandbox_only(made: Sandbox, daemon: Daemon, label: str) -> None:
    made.files.write("marker", label)
    out = session(daemon, made.get_mcp_url(), made.get_mcp_token(), run("cat /home/user/marker; whoami"))
    assert "run_command" in out["tools"], out
    call = out["calls"][0]
    assert not call["error"], call
    assert label in call["text"] and "user" in call["text"], call


def test_the_mcp_token_never_enters_the_sandbox(made: Sandbox) -> None:
    token = made.get_mcp_token()
    assert token and len(token) >= 32
    seen = made.commands.run("env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; ls -a /etc/mcp-gateway 2>&1 || true").stdout
    assert token not in seen


def test_the_mcp_token_does_not_reach_another_sandbox(daemon: Daemon, mcp_key: str, made: Sandbox, label: str) -> None:
    other = Sandbox.create(mcp={}, metadata={"test": label}, timeout=120, api_key=mcp_key)
    try:
        other.files.write("marker", "other-" + label)
        # Its own token at the other sandbox's address: no session.
        out = session(daemon, other.get_mcp_url(), made.get_mcp_token(), run("cat /home/user/marker"))
        assert "refused" in out, out
        assert "other-" + label not in json.dumps(out)
        # Within its own session, the other sandbox by name: refused.
        named = "run_command=" + json.dumps({"argv": ["cat", "/home/user/marker"], "sandbox": other.sandbox_id})
        out = session(daemon, made.get_mcp_url(), made.get_mcp_token(), named)
        assert out["calls"][0]["error"], out
        assert "other-" + label not in out["calls"][0]["text"]
    finally:
        other.kill()


def test_one_key_a_caller_chose_for_two_of_its_sandboxes_reaches_each(daemon: Daemon, mcp_key: str, label: str) -> None:
    # The caller chooses its MCP keys (the SDK a fresh UUID each); one key
    # started for a second sandbox's gateway must not lock the first out.
    mcp_python()
    first = Sandbox.create(mcp={}, metadata={"test": label}, timeout=120, api_key=mcp_key)
    second = Sandbox.create(mcp={}, metadata={"test": label}, timeout=120, api_key=mcp_key)
    try:
        first.files.write("marker", "first-" + label)
        second.files.write("marker", "second-" + label)
        key = first.get_mcp_token()
        second.commands.run(
            "mcp-gateway --config '{}'",
            user="root",
            envs={"GATEWAY_ACCESS_TOKEN": key},
        )
        for sbx, want in ((first, "first-"), (second, "second-")):
            out = session(daemon, sbx.get_mcp_url(), key, run("cat /home/user/marker"))
            assert "calls" in out, out
            assert want + label in out["calls"][0]["text"], out
    finally:
        first.kill()
        second.kill()


def test_the_mcp_token_creates_no_sandbox(daemon: Daemon, made: Sandbox) -> None:
    before = sorted(s["id"] for s in daemon.sandboxes())
    out = session(daemon, made.get_mcp_url(), made.get_mcp_token(), "create_sandbox={}")
    assert out["calls"][0]["error"], out
    assert sorted(s["id"] for s in daemon.sandboxes()) == before


def test_the_mcp_token_ends_when_the_sandbox_is_killed(daemon: Daemon, mcp_key: str, label: str) -> None:
    sbx = Sandbox.create(mcp={}, metadata={"test": label}, timeout=120, api_key=mcp_key)
    url, token = sbx.get_mcp_url(), sbx.get_mcp_token()
    assert "calls" in session(daemon, url, token, run("true"))
    sbx.kill()
    out = session(daemon, url, token, run("true"))
    assert "refused" in out, out


def test_the_mcp_token_ends_when_the_callers_token_is_revoked(daemon: Daemon, label: str) -> None:
    key = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files", "mcp")
    sbx = Sandbox.create(mcp={}, metadata={"test": label}, timeout=120, api_key=key)
    try:
        url, token = sbx.get_mcp_url(), sbx.get_mcp_token()
        assert "calls" in session(daemon, url, token, run("true"))
        with daemon.owner() as c:
            tid = key.split("_")[1]
            assert c.delete(f"/v1/tokens/{tid}").status_code == 204
        out = session(daemon, url, token, run("true"))
        assert "refused" in out, out
    finally:
        with daemon.owner() as c:
            c.delete(f"/v1/sandboxes/{sbx.sandbox_id}", params={"force": "true"})


def test_a_client_that_connects_later_reads_its_callers_token(daemon: Daemon, made: Sandbox, mcp_key: str, label: str) -> None:
    made.files.write("marker", label)
    again = Sandbox.connect(made.sandbox_id, api_key=mcp_key)
    # Read from the gateway's file, which the door answers: one token per
    # caller and sandbox, so the same caller's.
    token = again.get_mcp_token()
    assert token == made.get_mcp_token()
    out = session(daemon, again.get_mcp_url(), token, run("cat /home/user/marker"))
    assert label in out["calls"][0]["text"], out


def test_a_token_without_the_mcp_scope_gets_no_mcp_sandbox(daemon: Daemon, label: str) -> None:
    before = sorted(s["id"] for s in daemon.sandboxes())
    with pytest.raises(SandboxException, match="mcp"):
        Sandbox.create(mcp={}, metadata={"test": label}, timeout=60)
    assert sorted(s["id"] for s in daemon.sandboxes()) == before


def test_an_mcp_server_of_e2b_s_catalogue_is_refused_saying_what_to_do(daemon: Daemon, mcp_key: str, label: str) -> None:
    before = sorted(s["id"] for s in daemon.sandboxes())
    with pytest.raises(SandboxException, match=r"mcp\.github.*mcp=\{\}"):
        Sandbox.create(
            mcp={"github": {"githubPersonalAccessToken": "x"}},  # type: ignore[typeddict-item]
            metadata={"test": label},
            timeout=60,
            api_key=mcp_key,
        )
    assert sorted(s["id"] for s in daemon.sandboxes()) == before


def test_a_sandbox_made_without_mcp_has_no_mcp_token(mcp_key: str, label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=60, api_key=mcp_key)
    try:
        with pytest.raises(NotFoundException, match="mcp=\\{\\}"):
            sbx.get_mcp_token()
        # Nor does its MCP port answer anything.
    finally:
        sbx.kill()


@pytest.mark.asyncio
async def test_the_async_client_gets_the_same_mcp(daemon: Daemon, mcp_key: str, label: str) -> None:
    mcp_python()
    sbx = await AsyncSandbox.create(mcp={}, metadata={"test": label}, timeout=120, api_key=mcp_key)
    try:
        url, token = sbx.get_mcp_url(), await sbx.get_mcp_token()
        assert url.endswith(f"-{sbx.sandbox_id}.localhost:{urlsplit(daemon.url).port}/mcp")
        out = session(daemon, url, token, run("echo async"))
        assert "async" in out["calls"][0]["text"], out
    finally:
        await sbx.kill()

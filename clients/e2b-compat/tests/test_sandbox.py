"""The control API through the unmodified E2B SDK: create, info, list,
timeout and expiry, pause and connect (resuming), kill, and a wrong key."""

from __future__ import annotations

import time

import pytest
from e2b import (
    AuthenticationException,
    NotFoundException,
    Sandbox,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
)

from conftest import EXPIRED
from test_control_surface import COUNTER


def test_a_sandbox_is_created_listed_by_its_metadata_and_killed(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.metadata == {"test": label}
        assert info.template_id == "base"
        listed = Sandbox.list(query=SandboxQuery(metadata={"test": label})).next_items()
        assert [s.sandbox_id for s in listed] == [sbx.sandbox_id]
        assert Sandbox.connect(sbx.sandbox_id).commands.run("echo again").stdout == "again\n"
        assert sbx.is_running() is True
    finally:
        assert sbx.kill() is True
    assert sbx.is_running() is False
    assert Sandbox.list(query=SandboxQuery(metadata={"test": label})).next_items() == []
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)
    assert Sandbox.kill(sbx.sandbox_id) is False


def test_a_sandbox_ends_when_its_timeout_ends_and_set_timeout_moves_the_end(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=2)
    EXPIRED.append(sbx.sandbox_id)
    sbx.set_timeout(6)
    time.sleep(3)
    # Still there past the first end: the timeout was moved.
    assert sbx.commands.run("true").exit_code == 0
    end = sbx.get_info().end_at.timestamp()
    assert end > time.time()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            Sandbox.get_info(sbx.sandbox_id)
        except NotFoundException:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the sandbox outlived its timeout")
    with pytest.raises(NotFoundException):
        sbx.set_timeout(10)
    # The sandbox API says so the way E2B's does.
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run("true")
    with pytest.raises(SandboxNotRunningException):
        sbx.files.read("anything")


def test_a_wrong_api_key_is_refused_with_the_sdks_authentication_error() -> None:
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="wdn_nope_notatoken", timeout=30)
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="e2b_0000").next_items()


def test_an_unknown_template_is_refused_and_nothing_is_left(label: str) -> None:
    with pytest.raises(Exception) as e:
        Sandbox.create(template="no-such-profile", metadata={"test": label})
    assert "no-such-profile" in str(e.value)
    assert Sandbox.list(query=SandboxQuery(metadata={"test": label})).next_items() == []


def test_pause_freezes_the_sandbox_and_connect_resumes_it_where_it_was(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        sbx.commands.run(COUNTER, background=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = sbx.commands.run("cat /workspace/n 2>/dev/null || echo 0")
            if int(r.stdout.strip() or 0) > 3:
                break
            time.sleep(0.2)
        assert sbx.pause() is True
        # Paused twice: the SDK's answer for "already paused".
        assert sbx.beta_pause() is False
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        paused = Sandbox.list(query=SandboxQuery(metadata={"test": label}, state=[SandboxState.PAUSED])).next_items()
        assert [s.sandbox_id for s in paused] == [sbx.sandbox_id]
        time.sleep(1)
        again = Sandbox.connect(sbx.sandbox_id)
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.RUNNING
        first = int(again.commands.run("cat /workspace/n").stdout)
        time.sleep(0.5)
        # The same counter goes on from its value, not from zero.
        assert int(again.commands.run("cat /workspace/n").stdout) > first
    finally:
        sbx.kill()


def test_a_sandbox_kept_by_its_metadata_is_stopped_by_kill_and_its_changes_reviewable(
    daemon, label: str
) -> None:
    sbx = Sandbox.create(metadata={"test": label, "warden.keep": "true"}, timeout=120)
    EXPIRED.append(sbx.sandbox_id)
    # The workspace, as natively: what a review shows (the home,
    # /home/user, is the sandbox's own and kept with it).
    sbx.files.write("/workspace/report.txt", "findings\n")
    assert sbx.kill() is True
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)
    with daemon.owner() as c:
        r = c.get(f"/v1/sandboxes/{sbx.sandbox_id}")
        assert r.json()["state"] == "stopped"
        changes = c.get(f"/v1/sandboxes/{sbx.sandbox_id}/changes").json()
        assert "report.txt" in str(changes), changes


def test_a_token_over_its_quota_gets_the_sdks_rate_limit_error(daemon, label: str) -> None:
    import os
    import subprocess

    from e2b import RateLimitException

    from conftest import _binary

    made = subprocess.run(
        [str(_binary()), "token", "create", f"quota-{label}", "--scope", "sandboxes:write",
         "--scope", "sandboxes:read", "--scope", "exec", "--max-sandboxes", "1"],
        env={**os.environ, "WARDEN_STATE_DIR": str(daemon.state)},
        capture_output=True, text=True, check=True,
    )
    key = made.stdout.strip()
    first = Sandbox.create(api_key=key, metadata={"test": label}, timeout=60)
    try:
        with pytest.raises(RateLimitException):
            Sandbox.create(api_key=key, metadata={"test": label}, timeout=60)
        # Listed to the token that made it (a token sees only its own).
        assert len(Sandbox.list(api_key=key, query=SandboxQuery(metadata={"test": label})).next_items()) == 1
    finally:
        first.kill()


def test_a_command_past_its_timeout_raises_the_sdks_timeout_error() -> None:
    from e2b import TimeoutException

    sbx = Sandbox.create(timeout=60)
    try:
        with pytest.raises(TimeoutException):
            sbx.commands.run("sleep 30", timeout=1)
    finally:
        sbx.kill()

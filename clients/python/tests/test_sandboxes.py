"""A sandbox's life through the client: made, found, looked at, its TTL
moved, stopped, started, removed (by the context manager too)."""

from __future__ import annotations

import time
from typing import Callable

import pytest

from conftest import Daemon
from warden_sandbox import NotFoundError, Sandbox, WardenConnectionError


def test_a_created_sandbox_runs_and_is_removed_by_kill(daemon: Daemon) -> None:
    sb = Sandbox.create()
    try:
        info = sb.info()
        assert info.id == sb.id
        assert info.running
        assert sb.id in daemon.sandbox_ids()
    finally:
        sb.kill()
        sb.close()
    assert sb.id not in daemon.sandbox_ids()


def test_the_context_manager_removes_the_sandbox_even_when_the_block_raises(daemon: Daemon) -> None:
    with pytest.raises(RuntimeError):
        with Sandbox.create() as sb:
            made = sb.id
            assert made in daemon.sandbox_ids()
            raise RuntimeError("the agent failed")
    assert made not in daemon.sandbox_ids()
    with pytest.raises(NotFoundError):
        Sandbox.connect(made).info()


def test_a_sandbox_is_made_with_its_name_labels_and_ttl() -> None:
    with Sandbox.create(name="named-one", labels={"team": "a"}, timeout=3600) as sb:
        assert sb.id == "named-one"
        info = sb.info()
        assert info.labels == {"team": "a"}
        assert info.ttl_deadline_ms is not None
        left = info.ttl_deadline_ms / 1000 - time.time()
        assert 3500 < left <= 3601


def test_list_finds_sandboxes_by_every_label_given_and_by_state(label: str) -> None:
    with Sandbox.create(labels={"suite": label, "role": "a"}) as a, Sandbox.create(
        labels={"suite": label, "role": "b"}
    ) as b:
        both = {i.id for i in Sandbox.list(label={"suite": label})}
        assert both == {a.id, b.id}
        only_a = [i.id for i in Sandbox.list(label={"suite": label, "role": "a"})]
        assert only_a == [a.id]
        assert [i.id for i in Sandbox.list(label=f"role=b") if i.labels.get("suite") == label] == [b.id]
        b.stop(grace=1)
        running = {i.id for i in Sandbox.list(state="running", label={"suite": label})}
        stopped = {i.id for i in Sandbox.list(state="stopped", label={"suite": label})}
        assert running == {a.id}
        assert stopped == {b.id}


def test_connect_takes_up_a_sandbox_made_elsewhere() -> None:
    with Sandbox.create() as made:
        with Sandbox.connect(made.id) as again:
            assert again.commands.run("echo $((6*7))").stdout == "42\n"
        # Leaving the second `with` removed it.
        with pytest.raises(NotFoundError):
            made.info()


def test_set_timeout_moves_the_ttl_and_the_sandbox_stops_at_it(wait_until: Callable[..., bool]) -> None:
    with Sandbox.create(timeout=3600) as sb:
        info = sb.set_timeout(120)
        assert info.ttl_deadline_ms is not None
        assert 100 < info.ttl_deadline_ms / 1000 - time.time() <= 121
        assert sb.set_timeout(None).ttl_deadline_ms is None
        sb.set_timeout(1)
        assert wait_until(lambda: not sb.is_running(), timeout=20), "the sandbox outlived its TTL"


def test_a_stopped_sandbox_starts_again_with_its_workspace() -> None:
    with Sandbox.create() as sb:
        sb.commands.run("echo kept > /workspace/f").check()
        assert sb.stop(grace=1).state == "stopped"
        assert sb.start().state == "running"
        assert sb.commands.run("cat /workspace/f").stdout == "kept\n"


def test_without_a_host_the_socket_in_the_state_directory_is_used(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WARDEN_HOST")
    monkeypatch.setenv("WARDEN_STATE_DIR", str(daemon.state))
    with Sandbox.create() as sb:
        assert sb.id in {i.id for i in Sandbox.list()}


def test_a_daemon_that_is_not_there_is_a_connection_error(tmp_path: object) -> None:
    with pytest.raises(WardenConnectionError) as e:
        Sandbox.list(host=f"unix://{tmp_path}/nothing.sock")
    assert "warden serve" in str(e.value)
    with pytest.raises(WardenConnectionError):
        Sandbox.list(host="ftp://example")

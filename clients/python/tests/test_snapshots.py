"""Snapshots and forks through the client: a sandbox made from a snapshot
has its files, a fork's sandboxes start from the parent's files and do
not see one another's, and a token sees only its own snapshots."""

from __future__ import annotations

import pytest

from conftest import Daemon
from warden_sandbox import AsyncSandbox, NotFoundError, Sandbox


def test_a_snapshot_makes_sandboxes_with_its_files(label: str) -> None:
    snap = f"snap-{label}".lower()
    with Sandbox.create() as sb:
        sb.files.write("made.txt", "before the snapshot\n")
        info = sb.create_snapshot(snap)
        assert info.name == snap and info.source == sb.id
        sb.files.write("made.txt", "after\n")
        assert snap in [s.name for s in Sandbox.list_snapshots()]
        with Sandbox.from_snapshot(snap) as copy:
            assert copy.files.read_text("made.txt") == "before the snapshot\n"
    Sandbox.delete_snapshot(snap)
    with pytest.raises(NotFoundError):
        Sandbox.from_snapshot(snap)


def test_forks_start_from_the_parents_files_and_keep_their_own() -> None:
    with Sandbox.create() as sb:
        sb.files.write("base.txt", "parent\n")
        forks = sb.fork(count=2)
        try:
            assert len(forks) == 2
            for i, f in enumerate(forks):
                assert f.files.read_text("base.txt") == "parent\n"
                f.files.write(f"own-{i}.txt", str(i))
            assert [e.name for e in forks[0].files.list() if e.name.startswith("own-")] == ["own-0.txt"]
            assert not [e.name for e in sb.files.list() if e.name.startswith("own-")]
        finally:
            for f in forks:
                f.kill()


def test_a_token_does_not_see_another_tokens_snapshot(daemon: Daemon, label: str) -> None:
    snap = f"mine-{label}".lower()
    alice = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    mallory = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    with Sandbox.create(host=daemon.tcp_host, token=alice) as sb:
        sb.files.write("secret.txt", "alice\n")
        sb.create_snapshot(snap)
        assert snap not in [s.name for s in Sandbox.list_snapshots(host=daemon.tcp_host, token=mallory)]
        with pytest.raises(NotFoundError):
            Sandbox.from_snapshot(snap, host=daemon.tcp_host, token=mallory)
        with pytest.raises(NotFoundError):
            Sandbox.delete_snapshot(snap, host=daemon.tcp_host, token=mallory)
        Sandbox.delete_snapshot(snap, host=daemon.tcp_host, token=alice)


def test_a_process_sandboxs_fork_says_its_memory_was_not_carried_and_why() -> None:
    with Sandbox.create() as sb:
        sb.files.write("base.txt", "parent\n")
        forks = sb.fork()
        try:
            # Still the list of forks it always was.
            assert isinstance(forks, list) and len(forks) == 1
            assert forks[0].files.read_text("base.txt") == "parent\n"
            # The process backend carries files, never processes: said,
            # with why.
            assert forks.memory is False
            assert forks.memory_why is not None and "CRIU" in forks.memory_why
        finally:
            for f in forks:
                f.kill()


def test_a_process_sandboxs_snapshot_says_it_holds_no_memory(label: str) -> None:
    snap = f"files-{label}".lower()
    with Sandbox.create() as sb:
        info = sb.create_snapshot(snap)
        try:
            assert info.memory is False
            listed = [s for s in Sandbox.list_snapshots() if s.name == snap]
            assert len(listed) == 1 and listed[0].memory is False
        finally:
            Sandbox.delete_snapshot(snap)


async def test_the_async_fork_says_as_much_as_the_sync_one() -> None:
    async with await AsyncSandbox.create() as sb:
        forks = await sb.fork(count=2)
        try:
            assert len(forks) == 2 and all(isinstance(f, AsyncSandbox) for f in forks)
            assert forks.memory is False
            assert forks.memory_why is not None and "CRIU" in forks.memory_why
        finally:
            for f in forks:
                await f.kill()

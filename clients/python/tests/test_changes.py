"""Changes and commit through the client: what the sandbox did, a
planted git hook flagged and a commit without acceptance refused with
nothing written, a commit of some paths landing exactly those; the
asyncio twin."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Callable

import pytest

from conftest import Daemon
from warden_sandbox import AsyncSandbox, ConflictError, Sandbox


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / "existing.txt").write_text("old\n")
    return ws


def test_a_flagged_hook_blocks_a_commit_until_accepted_and_paths_land_exactly(
    daemon: Daemon, tmp_path: Path
) -> None:
    ws = _workspace(tmp_path)
    with Sandbox.create(host=daemon.unix_host, workspace=ws) as sb:
        sb.commands.run(
            "cd /workspace && echo new > a.txt && echo bee > b.txt && echo changed > existing.txt"
            " && printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit"
        ).check()
        by_path = {c.path: c for c in sb.changes()}
        assert by_path["a.txt"].kind == "added" and not by_path["a.txt"].flagged
        assert by_path["existing.txt"].kind == "modified"
        hook = by_path[".git/hooks/pre-commit"]
        assert hook.flagged and hook.flags[0].rule == "git-hook"
        with pytest.raises(ConflictError) as e:
            sb.commit()
        assert e.value.code == "running"
        sb.stop()
        # A review is a listing with content (one without reviews nothing).
        sb.changes(content=True)
        with pytest.raises(ConflictError) as e:
            sb.commit()
        assert e.value.code == "flagged"
        assert [d["path"] for d in e.value.details] == [".git/hooks/pre-commit"]
        assert not (ws / "a.txt").exists() and (ws / "existing.txt").read_text() == "old\n"
        r = sb.commit(paths=["a.txt", "existing.txt"])
        assert sorted(r.applied) == ["a.txt", "existing.txt"]
        assert (ws / "a.txt").read_text() == "new\n"
        assert (ws / "existing.txt").read_text() == "changed\n"
        assert not (ws / "b.txt").exists() and not (ws / ".git/hooks/pre-commit").exists()
        assert sorted(c.path for c in sb.changes(content=True)) == [".git/hooks/pre-commit", "b.txt"]
        r = sb.commit(accept_flagged=True)
        assert sorted(r.applied) == [".git/hooks/pre-commit", "b.txt"]
        assert sb.changes() == []


async def test_the_async_twin_reviews_and_commits(daemon: Daemon, tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    async with await AsyncSandbox.create(host=daemon.unix_host, workspace=ws) as sb:
        await sb.commands.run("echo z > /workspace/z.txt")
        await sb.stop()
        assert [c.path for c in await sb.changes(content=True)] == ["z.txt"]
        r = await sb.commit()
        assert r.applied == ["z.txt"]
        assert (ws / "z.txt").read_text() == "z\n"


def test_ignored_changes_are_marked_and_committed_only_when_asked(
    daemon: Daemon, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".gitignore").write_text("*.log\n")
    with Sandbox.create(host=daemon.unix_host, workspace=ws) as sb:
        sb.commands.run("cd /workspace && echo kept > kept.txt && echo noise > build.log").check()
        sb.stop()
        by_path = {c.path: c for c in sb.changes(content=True)}
        assert by_path["build.log"].ignored and not by_path["kept.txt"].ignored
        r = sb.commit()
        assert r.applied == ["kept.txt"]
        assert not (ws / "build.log").exists()
        r = sb.commit(include_ignored=True)
        assert r.applied == ["build.log"]
        assert (ws / "build.log").read_text() == "noise\n"


def test_changes_of_a_sandbox_whose_supervisor_died_before_saving_say_they_are_lost(
    daemon: Daemon, tmp_path: Path, wait_until: Callable[..., bool]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    # A disk budget keeps the run's layer in memory until the supervisor
    # saves it at the end.
    with Sandbox.create(host=daemon.unix_host, workspace=ws, spec={"resources": {"disk": "64M"}}) as sb:
        sb.commands.run("echo x > /workspace/unsaved.txt").check()
        record = json.loads((daemon.state / "sandboxes" / sb.id / "supervisor.json").read_text())
        pid = int(record["pid"])
        os.kill(pid, signal.SIGKILL)

        def gone() -> bool:
            try:
                os.kill(pid, 0)
                return False
            except ProcessLookupError:
                return True

        assert wait_until(gone), "the supervisor did not die"
        changes = sb.changes()
        assert changes.lost is not None and "lost" in changes.lost, changes
        assert "unsaved.txt" not in [c.path for c in changes]
        # Nothing is copied off a state that is not the sandbox's whole.
        with pytest.raises(ConflictError) as e:
            sb.create_snapshot("of-a-lost-run")
        assert e.value.code == "conflict" and e.value.reason == "changes_lost", e.value
        assert "of-a-lost-run" not in [s.name for s in Sandbox.list_snapshots(host=daemon.unix_host)]


def test_changes_of_a_sandbox_that_saved_its_run_are_not_lost(daemon: Daemon, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with Sandbox.create(host=daemon.unix_host, workspace=ws, spec={"resources": {"disk": "64M"}}) as sb:
        sb.commands.run("echo x > /workspace/saved.txt").check()
        sb.stop()
        changes = sb.changes()
        assert changes.lost is None
        assert [c.path for c in changes] == ["saved.txt"]

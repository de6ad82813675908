"""What a snapshot or a fork carries of a sandbox's memory, through the
unmodified SDK: E2B's fork always restores memory, warden's carries a
process sandbox's files only, and each fork's logs (E2B's `logs`) say so
and why; a snapshot is held to the mode asked, never answered with less
(`mode="full"` of a process sandbox is refused with why, and nothing is
kept)."""

from __future__ import annotations

import httpx
import pytest
from e2b import Sandbox, SandboxException

from conftest import Daemon


def _log_lines(daemon: Daemon, api_key: str, sandbox_id: str) -> list[str]:
    with httpx.Client(base_url=daemon.url, headers={"X-API-Key": api_key}, timeout=30) as c:
        r = c.get(f"/sandboxes/{sandbox_id}/logs")
        assert r.status_code == 200, r.text
        return [e["message"] for e in r.json()["logEntries"]]


def test_a_process_sandboxs_fork_says_in_its_logs_that_its_memory_was_not_carried_and_why(
    daemon: Daemon, api_key: str, label: str
) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    forks: list = []
    try:
        sbx.files.write("seed.txt", "from the parent\n")
        forks = sbx.fork(count=1, timeout=60)
        assert len(forks) == 1 and isinstance(forks[0], Sandbox), forks
        assert forks[0].files.read("seed.txt") == "from the parent\n"
        said = [m for m in _log_lines(daemon, api_key, forks[0].sandbox_id) if "what it carries" in m]
        assert len(said) == 1, _log_lines(daemon, api_key, forks[0].sandbox_id)
        assert "its files only, not its memory" in said[0] and "CRIU" in said[0], said
        # The source's own log is not told it was copied with memory.
        assert not [m for m in _log_lines(daemon, api_key, sbx.sandbox_id) if "with its memory" in m]
    finally:
        for f in forks:
            if isinstance(f, Sandbox):
                f.kill()
        sbx.kill()


def test_a_full_snapshot_of_a_process_sandbox_is_refused_with_why_and_keeps_nothing(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=60)
    try:
        with pytest.raises(SandboxException) as e:
            sbx.create_snapshot(name=f"full-{label}", mode="full")
        assert "CRIU" in str(e.value) and 'mode="filesystem"' in str(e.value), e.value
        assert sbx.list_snapshots().next_items() == []
        # Without a mode: what the backend can keep, its files.
        snap = sbx.create_snapshot(name=f"files-{label}")
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    finally:
        sbx.kill()

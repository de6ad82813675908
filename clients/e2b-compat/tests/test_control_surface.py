"""The rest of E2B's control surface through the unmodified SDK, onto
warden's native operations: pause in both modes, connect resuming (and
rebooting), pause when the timeout ends, snapshots and sandboxes made
from them, fork, metrics, network updates, refresh and logs; each with the
failure the SDK raises where warden cannot do what is asked."""

from __future__ import annotations

import time
from typing import Callable

import httpx
import pytest
from e2b import (
    NotFoundException,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
)

from conftest import Daemon

# A counter in the background: its value, in /workspace/n, shows whether
# the processes of a sandbox went on from where they were.
# Each value written whole, then renamed into place: a sandbox frozen or
# stopped between a truncation and its write would leave an empty file.
COUNTER = (
    "python3 -c 'import os, time\ni = 0\nwhile True:\n    i += 1\n"
    "    open(\"/workspace/n.new\", \"w\").write(str(i))\n"
    "    os.replace(\"/workspace/n.new\", \"/workspace/n\"); time.sleep(0.05)' "
)


def count(sbx: Sandbox) -> int:
    return int(sbx.commands.run("cat /workspace/n 2>/dev/null || echo 0").stdout.strip() or 0)


def counting(sbx: Sandbox, wait_until: Callable[..., bool]) -> None:
    sbx.commands.run(COUNTER, background=True)
    assert wait_until(lambda: count(sbx) > 3)


def state(sbx: Sandbox) -> SandboxState:
    return Sandbox.get_info(sbx.sandbox_id).state


def test_a_sandbox_paused_is_not_running_and_connect_resumes_its_processes(
    label: str, wait_until: Callable[..., bool]
) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        counting(sbx, wait_until)
        assert sbx.pause() is True
        assert sbx.is_running() is False
        assert state(sbx) == SandboxState.PAUSED
        assert sbx.get_info().metadata == {"test": label}
        again = sbx.connect()
        assert again.is_running() is True
        first = count(again)
        assert wait_until(lambda: count(again) > first)
    finally:
        sbx.kill()


def test_a_sandbox_paused_to_its_files_keeps_them_and_starts_afresh_on_connect(
    label: str, wait_until: Callable[..., bool]
) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        sbx.files.write("kept.txt", "still here\n")
        counting(sbx, wait_until)
        assert sbx.pause(mode="filesystem") is True
        assert sbx.is_running() is False
        assert state(sbx) == SandboxState.PAUSED
        listed = Sandbox.list(query=SandboxQuery(metadata={"test": label})).next_items()
        assert [s.state for s in listed] == [SandboxState.PAUSED]
        # Paused already, in either mode: the SDK's False.
        assert sbx.pause() is False
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert state(sbx) == SandboxState.RUNNING
        assert again.files.read("kept.txt") == "still here\n"
        # Its processes did not survive: nothing counts any more.
        before = count(again)
        time.sleep(0.5)
        assert count(again) == before
    finally:
        sbx.kill()


def test_connect_with_reboot_starts_a_memory_paused_sandbox_afresh(
    label: str, wait_until: Callable[..., bool]
) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        counting(sbx, wait_until)
        assert sbx.pause() is True
        again = Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
        before = count(again)
        assert before > 3
        time.sleep(0.5)
        assert count(again) == before
    finally:
        sbx.kill()


def test_a_timeout_that_pauses_freezes_the_sandbox_and_connect_goes_on(
    label: str, wait_until: Callable[..., bool]
) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=4, lifecycle={"on_timeout": "pause"})
    try:
        # Its end is the timeout asked, not the TTL behind it.
        assert sbx.get_info().end_at.timestamp() < time.time() + 6
        counting(sbx, wait_until)
        assert wait_until(lambda: state(sbx) == SandboxState.PAUSED, timeout=30)
        assert sbx.is_running() is False
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        # The counter's process went on from its value (a fresh start
        # would have no counter at all).
        at_resume = count(again)
        assert at_resume > 3
        assert wait_until(lambda: count(again) > at_resume)
    finally:
        sbx.kill()


def test_a_timeout_that_pauses_to_files_keeps_them(label: str, wait_until: Callable[..., bool]) -> None:
    sbx = Sandbox.create(
        metadata={"test": label},
        timeout=3,
        lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}},
    )
    try:
        sbx.files.write("kept.txt", "on disk\n")
        assert wait_until(lambda: state(sbx) == SandboxState.PAUSED, timeout=30)
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert again.files.read("kept.txt") == "on disk\n"
    finally:
        sbx.kill()


def test_metadata_cannot_mark_a_sandbox_paused(label: str) -> None:
    with pytest.raises(SandboxException, match="e2b."):
        Sandbox.create(metadata={"test": label, "e2b.paused": "filesystem"})
    assert Sandbox.list(query=SandboxQuery(metadata={"test": label})).next_items() == []


def test_a_snapshot_makes_new_sandboxes_with_its_files_and_is_deleted(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    made = []
    try:
        sbx.files.write("state.txt", "prepared\n")
        snap = sbx.create_snapshot(name=f"snap-{label}")
        assert snap.snapshot_id == f"snap-{label}"
        # The source runs on.
        assert sbx.commands.run("echo on").stdout == "on\n"
        mine = [s.snapshot_id for s in sbx.list_snapshots().next_items()]
        assert mine == [snap.snapshot_id]
        assert snap.snapshot_id in [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
        child = Sandbox.create(template=snap.snapshot_id, metadata={"test": label, "from": "snap"}, timeout=60)
        made.append(child)
        assert child.files.read("state.txt") == "prepared\n"
        assert child.get_info().metadata == {"test": label, "from": "snap"}
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        with pytest.raises(SandboxException):
            Sandbox.create(template=snap.snapshot_id, timeout=60)
    finally:
        for s in made:
            s.kill()
        sbx.kill()


def test_a_memory_snapshot_is_refused_with_what_to_ask_instead(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=60)
    try:
        with pytest.raises(SandboxException, match="filesystem"):
            sbx.create_snapshot(mode="full")
        assert sbx.list_snapshots().next_items() == []
        # Named by warden when no name is given.
        snap = sbx.create_snapshot(mode="filesystem")
        assert snap.snapshot_id.startswith(sbx.sandbox_id)
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    finally:
        sbx.kill()


def test_a_snapshot_is_not_named_as_a_template(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=60)
    try:
        with pytest.raises(SandboxException, match="template"):
            sbx.create_snapshot(name="base")
    finally:
        sbx.kill()


def test_fork_makes_running_sandboxes_with_the_files_and_none_sees_another(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    forks = []
    try:
        sbx.files.write("seed.txt", "from the parent\n")
        forks = sbx.fork(count=2, timeout=60)
        assert len(forks) == 2
        assert all(isinstance(f, Sandbox) for f in forks), forks
        ids = {f.sandbox_id for f in forks}
        assert len(ids) == 2 and sbx.sandbox_id not in ids
        for f in forks:
            assert f.files.read("seed.txt") == "from the parent\n"
            assert f.get_info().metadata == {"test": label}
        forks[0].files.write("mine.txt", "only here\n")
        assert not forks[1].files.exists("mine.txt")
        assert not sbx.files.exists("mine.txt")
        assert sbx.is_running() is True
    finally:
        for f in forks:
            if isinstance(f, Sandbox):
                f.kill()
        sbx.kill()


def test_a_fork_past_warden_s_bound_is_refused_and_makes_nothing(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=60)
    try:
        with pytest.raises(SandboxException, match="1 to 16"):
            sbx.fork(count=17)
        assert [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"test": label})).next_items()] == [
            sbx.sandbox_id
        ]
    finally:
        sbx.kill()


def test_metrics_show_the_sandboxs_cpu_memory_and_disk(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        first = sbx.get_metrics()
        assert len(first) >= 1
        m = first[-1]
        # The default template sets no CPU quota: 0, never the host's cores.
        assert m.cpu_count == 0
        assert 0 < m.mem_used <= m.mem_total
        assert m.disk_total > 0
        sbx.commands.run("timeout 7 sh -c 'while :; do :; done' || true", timeout=30)
        later = Sandbox.get_metrics(sbx.sandbox_id)
        assert any(x.cpu_used_pct > 5 for x in later), [x.cpu_used_pct for x in later]
    finally:
        sbx.kill()


def test_update_network_replaces_the_clients_names_and_never_reaches_a_pinned_host(
    daemon: Daemon, label: str
) -> None:
    from test_network import CONNECT, Listener

    allowed, pinned = Listener(), Listener()
    name = f"e2bupd-{allowed.port}"
    (daemon.state.parent / "config" / "warden" / "profiles" / f"{name}.yaml").write_text(
        "egress:\n"
        f"  domains: [\"allowed.test:{allowed.port}\"]\n"
        "  hosts: {allowed.test: 127.0.0.1, denied.test: 127.0.0.1}\n"
    )
    sbx = Sandbox.create(template=name, metadata={"test": label}, timeout=120)

    def listed() -> list:
        with daemon.owner() as c:
            r = c.patch(f"/v1/sandboxes/{sbx.sandbox_id}/egress", json={"allow": [], "remove": []})
            r.raise_for_status()
            return list(r.json()["allow"])

    try:
        sbx.update_network({"allow_out": [f"denied.test:{pinned.port}", "api.example.com"]})
        now = listed()
        assert f"denied.test:{pinned.port}" in now and "api.example.com" in now
        sbx.files.write("c.py", CONNECT)
        r = sbx.commands.run(f"python3 c.py denied.test {pinned.port}", timeout=60)
        assert pinned.arrivals == 0, r
        sbx.update_network({"allow_out": ["api.example.com"]})
        now = listed()
        assert f"denied.test:{pinned.port}" not in now and "api.example.com" in now
        # The template's name is the template's: it stays, and is reached.
        assert any(e.startswith("allowed.test") for e in now), now
        ok = sbx.commands.run(f"python3 c.py allowed.test {allowed.port}", timeout=60)
        assert "connected" in ok.stdout and allowed.arrivals == 1, ok
        with pytest.raises(SandboxException, match="by name"):
            sbx.update_network({"allow_out": ["10.0.0.1"]})
        assert listed() == now
        sbx.update_network({})
        assert "api.example.com" not in listed()
    finally:
        sbx.kill()


def test_update_network_of_a_sandbox_without_egress_says_how_to_make_one(label: str) -> None:
    # The shipped `python` profile has no network (the default template,
    # `base`, has an egress proxy and can be changed).
    sbx = Sandbox.create(template="python", metadata={"test": label}, timeout=60)
    try:
        with pytest.raises(SandboxException, match="allow_out"):
            sbx.update_network({"allow_out": ["api.example.com"]})
    finally:
        sbx.kill()


def test_refresh_and_logs_answer_on_the_control_api(daemon: Daemon, api_key: str, label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=30)
    try:
        sbx.commands.run("echo logged")
        with httpx.Client(base_url=daemon.url, headers={"X-API-Key": api_key}, timeout=30) as c:
            r = c.post(f"/sandboxes/{sbx.sandbox_id}/refreshes", json={"duration": 600})
            assert r.status_code == 204, r.text
            assert sbx.get_info().end_at.timestamp() > time.time() + 500
            logs = c.get(f"/sandboxes/{sbx.sandbox_id}/logs").json()
            assert logs["logs"] and len(logs["logs"]) == len(logs["logEntries"])
            assert any("exec" in e["fields"]["kind"] for e in logs["logEntries"]), logs
            v2 = c.get(f"/v2/sandboxes/{sbx.sandbox_id}/logs", params={"direction": "backward", "limit": 2}).json()
            assert len(v2["logs"]) == 2
            # No host path reaches a token holder.
            assert str(daemon.state) not in str(logs)
    finally:
        sbx.kill()


def test_every_new_call_on_a_killed_sandbox_is_not_found(label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=60)
    sbx.kill()
    for call in (
        lambda: sbx.get_metrics(),
        lambda: sbx.create_snapshot(),
        lambda: sbx.fork(count=1),
        lambda: sbx.update_network({}),
        lambda: sbx.pause(),
        lambda: Sandbox.connect(sbx.sandbox_id),
    ):
        with pytest.raises(NotFoundException):
            call()


def test_the_sandboxs_addresses_point_at_warden_and_nowhere_else(daemon: Daemon, label: str) -> None:
    sbx = Sandbox.create(metadata={"test": label}, timeout=60)
    try:
        # Every sandbox call goes to E2B_SANDBOX_URL; no traffic token is
        # handed out, as no port is served under a domain.
        assert sbx.envd_api_url == daemon.url
        assert sbx.traffic_access_token is None
    finally:
        sbx.kill()

"""`get_metrics`' `disk_total` is the sandbox's own disk budget (what it
may write: its template's `resources.disk`, or the default, half its
memory limit), never the size of the host's file system, and its
`cpu_count` the sandbox's own CPU limit, never the host's cores: both the
daemon owner's to know."""

from __future__ import annotations

import os

from e2b import Sandbox

from conftest import Daemon


def host_disk(path: str) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def test_metrics_report_the_sandboxs_disk_budget_never_the_hosts_disk(
    daemon: Daemon, label: str
) -> None:
    name = f"e2bdisk-{label}"
    (daemon.state.parent / "config" / "warden" / "profiles" / f"{name}.yaml").write_text(
        "resources:\n  memory: 512M\n  disk: 300M\n"
    )
    host = host_disk(str(daemon.state))
    budgeted = Sandbox.create(template=name, metadata={"test": label}, timeout=120)
    default = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        m = budgeted.get_metrics()[-1]
        assert m.disk_total == 300 << 20, m
        assert m.mem_total == 512 << 20, m
        assert m.disk_total != host
        # The default template's budget: half its memory limit (less on a
        # host with little free space).
        d = default.get_metrics()[-1]
        assert 0 < d.disk_total <= d.mem_total // 2, d
        assert d.disk_total != host
    finally:
        budgeted.kill()
        default.kill()


def test_metrics_report_the_sandboxs_cpu_limit_never_the_hosts_cores(
    daemon: Daemon, label: str
) -> None:
    name = f"e2bcpu-{label}"
    (daemon.state.parent / "config" / "warden" / "profiles" / f"{name}.yaml").write_text(
        "resources:\n  cpus: 0.5\n"
    )
    limited = Sandbox.create(template=name, metadata={"test": label}, timeout=120)
    default = Sandbox.create(metadata={"test": label}, timeout=120)
    try:
        # Half a core is a quota on one core.
        assert limited.get_metrics()[-1].cpu_count == 1
        # No quota of its own: said as 0, where the host's count (at least
        # one core) would tell a caller what the owner's machine has.
        assert default.get_metrics()[-1].cpu_count == 0
    finally:
        limited.kill()
        default.kill()

"""`get_metrics`' `disk_total` is the sandbox's own disk budget (what it
may write: its template's `resources.disk`, or the default, half its
memory limit), never the size of the host's file system, which is the
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

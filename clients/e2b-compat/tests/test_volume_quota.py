"""A volume's bytes count against its token's disk quota, as its
sandboxes' disk budgets and its snapshots do: they outlive the sandboxes
that wrote them. Run on a daemon of its own whose `quotas: {disk}` holds
one sandbox's default disk budget and a little more."""

from __future__ import annotations

from typing import Iterator

import pytest
from e2b import Sandbox, Volume
from e2b.exceptions import RateLimitException

from conftest import Daemon
from test_bounds import _as, _key, _start

SPARE_MB = 32


def test_a_volumes_bytes_count_against_its_tokens_disk_quota(
    daemon: Daemon, tmp_path_factory: pytest.TempPathFactory, label: str
) -> None:
    # The disk budget a sandbox gets by default on this host.
    probe = Sandbox.create(metadata={"test": label}, timeout=60)
    try:
        budget_mb = probe.get_metrics()[-1].disk_total // (1 << 20)
    finally:
        probe.kill()
    assert budget_mb > 0
    base = tmp_path_factory.mktemp("warden-e2b-volquota")
    started: Iterator[Daemon] = _start(
        base, f"  idle_seconds: 600\nquotas:\n  disk: {budget_mb + SPARE_MB}M\n"
    )
    d = next(started)
    try:
        _as(d, _key(d))
        vol = Volume.create("filled")
        first = Sandbox.create(timeout=120, volume_mounts={"/mnt/data": vol})
        try:
            # Within the quota while the volume is empty.
            first.commands.run(f"head -c {2 * SPARE_MB}M /dev/zero > /mnt/data/big")
        finally:
            first.kill()
        # The sandbox is gone; what it wrote in the volume is not.
        with pytest.raises(RateLimitException, match="volumes"):
            Sandbox.create(timeout=60)
        assert Volume.destroy(vol.volume_id) is True
        Sandbox.create(timeout=60).kill()
    finally:
        started.close()

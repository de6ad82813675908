"""A volume's bytes count against its token's disk quota, as its
sandboxes' disk budgets and its snapshots do: they outlive the sandboxes
that wrote them. Run on a daemon of its own whose `quotas: {disk}` holds
one sandbox's disk budget and a little more. The sandboxes' budget is
their template's (`resources.disk`), never the default, which follows
the host's free space (half of it at most) and so moves with what this
test and others write meanwhile."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from e2b import Sandbox, Volume
from e2b.exceptions import RateLimitException

from conftest import Daemon, serve
from test_bounds import _as, _key

BUDGET_MB = 96
SIZED = "sized"


def sized_daemon(base: Path, spare_mb: int) -> Iterator[Daemon]:
    """A daemon of its own whose `SIZED` template has a disk budget of
    BUDGET_MB and whose tokens may hold `spare_mb` more than one of it."""
    return serve(
        base,
        f"sessions:\n  idle_seconds: 600\nquotas:\n  disk: {BUDGET_MB + spare_mb}M\n",
        profiles={f"{SIZED}.yaml": f"resources:\n  memory: 512M\n  disk: {BUDGET_MB}M\n"},
    )


def test_a_volumes_bytes_count_against_its_tokens_disk_quota(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    spare_mb = 32
    started = sized_daemon(tmp_path_factory.mktemp("warden-e2b-volquota"), spare_mb)
    d = next(started)
    try:
        _as(d, _key(d))
        vol = Volume.create("filled")
        first = Sandbox.create(template=SIZED, timeout=120, volume_mounts={"/mnt/data": vol})
        try:
            assert first.get_metrics()[-1].disk_total == BUDGET_MB << 20
            # Within the quota while the volume is empty.
            first.commands.run(f"head -c {2 * spare_mb}M /dev/zero > /mnt/data/big")
        finally:
            first.kill()
        # The sandbox is gone; what it wrote in the volume is not.
        with pytest.raises(RateLimitException, match="volumes"):
            Sandbox.create(template=SIZED, timeout=60)
        assert Volume.destroy(vol.volume_id) is True
        Sandbox.create(template=SIZED, timeout=60).kill()
    finally:
        started.close()

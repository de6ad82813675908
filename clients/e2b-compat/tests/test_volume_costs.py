"""What a volume costs the host is counted as the host pays for it, through
the unmodified SDK: every entry takes at least a block and its name, so
empty files, directories and long names (free in a sandbox's tmpfs) never
grow a writable volume past the sandbox's disk limit when it stops, and
count against a token's disk quota once they are there."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from e2b import Sandbox, Volume
from e2b.exceptions import RateLimitException

from conftest import Daemon, point_sdk
from test_bounds import _key
from test_volume_quota import SIZED, sized_daemon
from test_volumes_declared import DISK_MB, LISTED, _create, declared, host, keys  # noqa: F401

BLOCK = 4096


def _data(d: Daemon, vol: Volume) -> Path:
    """The host directory of `vol`'s files (the daemon's own state)."""
    return d.state / "e2b" / "volumes" / vol.volume_id / "data"


def _host_cost(d: Path) -> tuple[int, int]:
    """What the tree at `d` costs the host, priced as warden prices it
    (`fsutil::entry_cost`: each entry's blocks or size in whole blocks, at
    least one block, plus its name's directory entry), and its entries."""
    total = entries = 0
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            st = os.lstat(Path(root) / name)
            whole = -(-st.st_size // BLOCK) * BLOCK
            total += max(st.st_blocks * 512, whole, BLOCK) + ((len(name.encode()) + 11) & ~3)
            entries += 1
    return total, entries


def test_empty_files_with_long_names_never_grow_a_writable_volume_past_the_disk_limit(
    declared: Daemon, keys: dict, host: dict  # noqa: F811
) -> None:
    point_sdk(declared, keys[LISTED])
    before, _ = _host_cost(host["scratch"])
    sub = f"f-{uuid.uuid4().hex[:6]}"
    sbx = _create(keys[LISTED], volume_mounts={"/mnt/scratch": "scratch"})
    try:
        # The review's reproduction, larger: 30,000 empty files with
        # 240-character names, then 500 directories, until the tmpfs says no.
        made = sbx.commands.run(
            "python3 -c \"\nimport os\nos.mkdir('/mnt/scratch/%s')\nn = 0\n"
            "try:\n    for i in range(30000):\n"
            "        open('/mnt/scratch/%s/' + '0' * 240 + str(i), 'w').close(); n += 1\n"
            "    for i in range(500):\n        os.mkdir('/mnt/scratch/d%%d' %% i); n += 1\n"
            "except OSError as e:\n    print(e)\nprint(n)\n\"" % (sub, sub)
        ).stdout
    finally:
        sbx.kill()
    after, entries = _host_cost(host["scratch"])
    limit = DISK_MB << 20
    assert after - before <= limit, (
        f"{entries} entries made the volume cost {after - before} bytes past a "
        f"{DISK_MB} MiB limit; the sandbox said {made!r}"
    )
    assert entries * BLOCK <= before + limit


def test_a_volume_of_empty_files_counts_against_its_tokens_disk_quota(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    spare_mb = 32
    base = tmp_path_factory.mktemp("warden-e2b-emptyquota")
    started = sized_daemon(base, spare_mb)
    d = next(started)
    try:
        point_sdk(d, _key(d))
        vol = Volume.create("empties")
        data = _data(d, vol)
        # Twice the spare quota in inodes and names, and not a byte of data.
        for i in range(2 * spare_mb * (1 << 20) // BLOCK):
            (data / f"{'e' * 200}{i}").touch()
        with pytest.raises(RateLimitException, match="volumes"):
            Sandbox.create(template=SIZED, timeout=60)
        assert Volume.destroy(vol.volume_id) is True
        Sandbox.create(template=SIZED, timeout=60).kill()
    finally:
        started.close()

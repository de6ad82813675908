"""Attacks on a volume's host side through the unmodified SDK: a chain of
directories deeper than any stack in a volume, then its delete (the
daemon answers and stays up); the delete of a volume a running sandbox
mounts (refused, the volume kept); bytes hidden below a path longer than
PATH_MAX (still counted against the token's disk quota); what a
half-finished delete leaves (swept, and counted until then); and mount
paths with control characters or oversized names (refused, nothing
made)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from e2b import Sandbox, SandboxException, Volume
from e2b.exceptions import RateLimitException, VolumeException

from conftest import Daemon
from test_bounds import _as, _key
from test_volume_quota import SIZED, sized_daemon


def _data(d: Daemon, vol: Volume) -> Path:
    """The host directory of `vol`'s files (the daemon's own state)."""
    return d.state / "e2b" / "volumes" / vol.volume_id / "data"


def _chain(top: Path, name: str, levels: int) -> int:
    """`levels` nested directories `name` below `top`, made as a sandbox
    makes them (each beneath the last descriptor); the deepest one's fd."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir(name, dir_fd=fd)
        nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    return fd


def test_deleting_a_volume_holding_a_chain_deeper_than_any_stack_leaves_the_daemon_up(
    daemon: Daemon,
) -> None:
    vol = Volume.create(f"deep-{uuid.uuid4().hex[:6]}")
    # What a sandbox's writes leave in the volume when it stops.
    os.close(_chain(_data(daemon, vol), "d", 30_000))
    assert Volume.destroy(vol.volume_id) is True
    assert daemon.process.poll() is None, "the daemon died deleting the volume"
    assert daemon.sandboxes() is not None
    assert not (daemon.state / "e2b" / "volumes" / vol.volume_id).exists()
    assert not list((daemon.state / "e2b" / "volumes").glob(f".{vol.volume_id}.*"))


def test_a_volume_a_running_sandbox_mounts_is_not_deleted_until_it_stops(label: str) -> None:
    vol = Volume.create(f"busy-{uuid.uuid4().hex[:6]}")
    sbx = Sandbox.create(metadata={"test": label}, timeout=120, volume_mounts={"/mnt/v": vol})
    try:
        with pytest.raises(VolumeException, match="running sandbox"):
            Volume.destroy(vol.volume_id)
        assert vol.volume_id in [v.volume_id for v in Volume.list()]
        sbx.commands.run("echo kept > /mnt/v/note")
    finally:
        sbx.kill()
    assert Volume.destroy(vol.volume_id) is True


def test_a_half_deleted_volume_is_swept_at_the_next_volume_call(daemon: Daemon) -> None:
    left = daemon.state / "e2b" / "volumes" / ".vol-0123456789abcdef.deleted"
    (left / "data").mkdir(parents=True)
    os.close(_chain(left / "data", "d", 3_000))
    (left / "meta.json").write_text(
        json.dumps({"id": "vol-0123456789abcdef", "name": "x", "token": None, "created_ms": 0})
    )
    vol = Volume.create(f"sweep-{uuid.uuid4().hex[:6]}")
    try:
        assert not left.exists(), "a half-deleted volume was left on the disk"
    finally:
        Volume.destroy(vol.volume_id)


def test_bytes_below_a_path_longer_than_path_max_still_count_against_the_disk_quota(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = tmp_path_factory.mktemp("warden-e2b-deepquota")
    started = sized_daemon(base, 32)
    d = next(started)
    try:
        _as(d, _key(d))
        vol = Volume.create("hidden")
        # 20 levels of 250 characters (about 5,000 bytes of path), and a
        # file far past the quota at the bottom.
        deep = _chain(_data(d, vol), "a" * 250, 20)
        big = os.open("big", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=deep)
        os.ftruncate(big, 2 << 30)
        os.close(big)
        os.close(deep)
        with pytest.raises(RateLimitException, match="volumes"):
            Sandbox.create(template=SIZED, timeout=60)
        assert Volume.destroy(vol.volume_id) is True
        Sandbox.create(template=SIZED, timeout=60).kill()
    finally:
        started.close()


@pytest.mark.parametrize(
    "path",
    ["/mnt/a\u0000b", "/mnt/\u001b[31mred\u0007", "/mnt/" + "n" * 256, "/mnt" + "/abcdefgh" * 460],
    ids=["nul", "escape", "long-name", "long-path"],
)
def test_a_mount_path_with_a_control_character_or_an_oversized_name_is_refused_and_nothing_is_made(
    daemon: Daemon, label: str, path: str
) -> None:
    vol = Volume.create(f"p-{uuid.uuid4().hex[:6]}")
    before = sorted(s["id"] for s in daemon.sandboxes())
    try:
        with pytest.raises(SandboxException, match="volumeMounts"):
            Sandbox.create(metadata={"test": label}, timeout=60, volume_mounts={path: vol})
        assert sorted(s["id"] for s in daemon.sandboxes()) == before
    finally:
        Volume.destroy(vol.volume_id)

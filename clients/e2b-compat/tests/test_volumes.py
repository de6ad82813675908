"""`volume_mounts` mounts the caller's own volumes (made with
`Volume.create`, kept by the daemon) at the paths it names: what one
sandbox writes there the next one that mounts the volume reads, after the
first is killed. A volume is named, never a host path; another token's
volume cannot be mounted (it is not found); a mount point over what warden
assembles (`/`, `/proc`, `/etc`, `/workspace`, the home) or written with
`..` is refused with the SDK's own exception, and nothing is made."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from e2b import Sandbox, SandboxException, Volume, VolumeException

from conftest import Daemon

SCOPES = ("sandboxes:read", "sandboxes:write", "exec", "files")


def _volume() -> Volume:
    return Volume.create(f"v-{uuid.uuid4().hex[:8]}")


def test_what_a_sandbox_writes_in_a_volume_the_next_sandbox_reads_after_the_first_is_killed(
    label: str,
) -> None:
    vol = _volume()
    try:
        first = Sandbox.create(metadata={"test": label}, timeout=120, volume_mounts={"/mnt/data": vol})
        try:
            first.commands.run("echo kept > /mnt/data/note && mkdir -p /mnt/data/d && echo x > /mnt/data/d/y")
        finally:
            first.kill()
        second = Sandbox.create(
            metadata={"test": label}, timeout=120, volume_mounts={"/home/user/data": vol.name}
        )
        try:
            assert second.commands.run("cat /home/user/data/note").stdout == "kept\n"
            assert second.commands.run("cat /home/user/data/d/y").stdout == "x\n"
        finally:
            second.kill()
    finally:
        Volume.destroy(vol.volume_id)


def test_another_tokens_volume_cannot_be_mounted_and_nothing_is_made(
    daemon: Daemon, label: str
) -> None:
    vol = _volume()
    other = daemon.token(*SCOPES)
    before = sorted(s["id"] for s in daemon.sandboxes())
    try:
        for named in (vol.name, vol.volume_id):
            with pytest.raises(SandboxException, match="no volume"):
                Sandbox.create(
                    api_key=other,
                    metadata={"test": label},
                    timeout=60,
                    volume_mounts={"/mnt/data": named},
                )
        assert sorted(s["id"] for s in daemon.sandboxes()) == before
    finally:
        Volume.destroy(vol.volume_id)


@pytest.mark.parametrize(
    "path",
    ["/", "/proc", "/proc/self", "/etc", "/dev", "/sys", "/tmp", "/workspace", "/home/user",
     "/home", "/mnt/../etc", "/mnt/./data", "/mnt//data", "mnt/data", "/usr/local/x"],
)
def test_a_mount_point_over_what_warden_assembles_is_refused_and_makes_nothing(
    daemon: Daemon, label: str, path: str
) -> None:
    vol = _volume()
    before = sorted(s["id"] for s in daemon.sandboxes())
    try:
        with pytest.raises(SandboxException, match="volumeMounts"):
            Sandbox.create(metadata={"test": label}, timeout=60, volume_mounts={path: vol})
        assert sorted(s["id"] for s in daemon.sandboxes()) == before
    finally:
        Volume.destroy(vol.volume_id)


@pytest.mark.parametrize("named", ["/etc", "../../etc", "no-such-volume"])
def test_a_volume_named_by_a_path_or_unknown_is_refused(daemon: Daemon, label: str, named: str) -> None:
    before = sorted(s["id"] for s in daemon.sandboxes())
    with pytest.raises(SandboxException, match="no volume"):
        Sandbox.create(metadata={"test": label}, timeout=60, volume_mounts={"/mnt/data": named})
    assert sorted(s["id"] for s in daemon.sandboxes()) == before


def test_deleting_a_volume_never_follows_a_link_a_sandbox_planted_in_it(
    tmp_path: Path, label: str
) -> None:
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "keep").write_text("host data")
    vol = _volume()
    sbx = Sandbox.create(metadata={"test": label}, timeout=120, volume_mounts={"/mnt/data": vol})
    try:
        sbx.commands.run(
            f"ln -s {planted} /mnt/data/dir-link && ln -s {planted}/keep /mnt/data/file-link"
        )
    finally:
        sbx.kill()
    assert Volume.destroy(vol.volume_id) is True
    assert (planted / "keep").read_text() == "host data"


def test_a_volume_a_running_sandbox_mounts_is_not_deleted_until_it_stops(
    daemon: Daemon, label: str
) -> None:
    vol = _volume()
    sbx = Sandbox.create(metadata={"test": label}, timeout=120, volume_mounts={"/mnt/data": vol})
    try:
        sbx.commands.run("echo x > /mnt/data/f")
        # Its writes are merged into the volume when it stops: refused
        # (409, the SDK's VolumeException) while it runs, and nothing goes.
        with pytest.raises(VolumeException, match="running sandbox"):
            Volume.destroy(vol.volume_id)
        assert (daemon.state / "e2b" / "volumes" / vol.volume_id / "data").is_dir()
        assert sbx.commands.run("cat /mnt/data/f").stdout == "x\n"
    finally:
        sbx.kill()
    assert Volume.destroy(vol.volume_id) is True
    leftovers = [n for n in os.listdir(daemon.state / "e2b" / "volumes") if vol.volume_id in n]
    assert leftovers == []

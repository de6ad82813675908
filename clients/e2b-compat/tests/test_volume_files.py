"""The files API reaches into a mounted volume as the sandbox's commands
see it: `files.write` under the mount point is what `cat` reads there, what
a command writes there `files.read` and `files.list` see, and what the
files API wrote is in the volume for the next sandbox after the first is
killed. Within the volume only: a link planted in it, or `..`, leads
nowhere else."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from e2b import Sandbox, Volume
from e2b.exceptions import InvalidArgumentException, SandboxException

from conftest import Daemon


def test_the_files_api_reads_and_writes_a_volume_as_the_commands_see_it(
    daemon: Daemon, label: str
) -> None:
    vol = Volume.create(f"f-{uuid.uuid4().hex[:8]}")
    try:
        sbx = Sandbox.create(metadata={"test": label}, timeout=120, volume_mounts={"/mnt/data": vol})
        try:
            sbx.files.write("/mnt/data/from-api.txt", "written by the files API\n")
            assert sbx.commands.run("cat /mnt/data/from-api.txt").stdout == "written by the files API\n"
            sbx.commands.run("mkdir -p /mnt/data/d && echo from-command > /mnt/data/d/c.txt")
            assert sbx.files.read("/mnt/data/d/c.txt") == "from-command\n"
            names = {e.name for e in sbx.files.list("/mnt/data")}
            assert {"from-api.txt", "d"} <= names
            assert sbx.files.exists("/mnt/data/d/c.txt")
            sbx.files.make_dir("/mnt/data/made")
            assert sbx.commands.run("test -d /mnt/data/made && echo yes").stdout == "yes\n"
            sbx.files.rename("/mnt/data/made", "/mnt/data/renamed")
            sbx.files.remove("/mnt/data/renamed")
            assert sbx.commands.run("ls /mnt/data").stdout.split() == ["d", "from-api.txt"]
        finally:
            sbx.kill()
        second = Sandbox.create(metadata={"test": label}, timeout=120, volume_mounts={"/home/user/v": vol})
        try:
            assert second.files.read("/home/user/v/from-api.txt") == "written by the files API\n"
            assert second.files.read("v/d/c.txt") == "from-command\n"
        finally:
            second.kill()
    finally:
        Volume.destroy(vol.volume_id)


def test_the_files_api_leaves_a_volume_through_no_link_and_no_dot_dot(
    daemon: Daemon, label: str, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host secret")
    vol = Volume.create(f"l-{uuid.uuid4().hex[:8]}")
    try:
        sbx = Sandbox.create(metadata={"test": label}, timeout=120, volume_mounts={"/mnt/data": vol})
        try:
            sbx.commands.run(f"ln -s {tmp_path} /mnt/data/out && ln -s /etc /mnt/data/etc")
            for path in ("/mnt/data/out/host-secret", "/mnt/data/etc/hostname", "/mnt/data/../../etc/hostname"):
                with pytest.raises((InvalidArgumentException, SandboxException)):
                    sbx.files.read(path)
            with pytest.raises((InvalidArgumentException, SandboxException)):
                sbx.files.write("/mnt/data/out/planted", "x")
            # A path beside the volume is not opened for it.
            with pytest.raises((InvalidArgumentException, SandboxException)):
                sbx.files.read("/mnt/other")
        finally:
            sbx.kill()
        assert not (tmp_path / "planted").exists()
        assert secret.read_text() == "host secret"
    finally:
        Volume.destroy(vol.volume_id)

"""A VM sandbox's fork through the client carries its memory, and the
answer says so: a `--rootfs` VM (the owner names the root tree) with a
counter running is forked; `forks.memory` is True with no reason, the
fork's counter goes on from at least the parent's value, and a snapshot
of it says it keeps the memory.

Boots a VM and restores it (slow under emulation): run only when
``WARDEN_TEST_VM=1`` (with ``WARDEN_VM_DIR`` where the guest kernel is, as
the CI script installs it), as the VM tests of the command are run on
request."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from warden_sandbox import Sandbox

pytestmark = pytest.mark.skipif(
    os.environ.get("WARDEN_TEST_VM") != "1", reason="boots a VM (slow under emulation): set WARDEN_TEST_VM=1"
)

COUNTER = "cd /; i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done"


def _busybox_tree(base: Path) -> Path:
    busybox = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p)), None)
    if busybox is None or not (shutil.which("mkfs.ext4") or shutil.which("mkfs.erofs")):
        pytest.skip("a static busybox and mkfs.ext4 (or mkfs.erofs) are needed for a guest root tree")
    root = base / "rootfs"
    for d in ("usr/bin", "etc", "proc", "dev", "tmp"):
        (root / d).mkdir(parents=True)
    shutil.copy(busybox, root / "usr/bin/busybox")
    (root / "bin").symlink_to("usr/bin")
    (root / "etc/os-release").write_text("NAME=warden-test-rootfs\n")
    for name in ("sh", "sleep", "cat"):
        (root / "usr/bin" / name).symlink_to("busybox")
    return root


def _count(sb: Sandbox) -> int:
    out = sb.commands.run("cat /tmp/n 2>/dev/null || echo 0").stdout.strip()
    return int(out or 0)


def test_a_vm_fork_says_it_carried_the_memory_and_its_counter_goes_on(tmp_path: Path, label: str) -> None:
    tree = _busybox_tree(tmp_path)
    spec = {"isolation": "vm", "filesystem": {"rootfs": str(tree)}}
    with Sandbox.create(spec=spec, timeout=600) as sb:
        sb.commands.run(COUNTER, background=True)
        deadline = time.monotonic() + 60
        while _count(sb) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        at_fork = _count(sb)
        assert at_fork >= 3
        forks = sb.fork()
        try:
            assert forks.memory is True and forks.memory_why is None, forks
            assert _count(forks[0]) >= at_fork
        finally:
            for f in forks:
                f.kill()
        snap = f"vm-{label}".lower()
        info = sb.create_snapshot(snap)
        try:
            assert info.memory is True
        finally:
            Sandbox.delete_snapshot(snap)

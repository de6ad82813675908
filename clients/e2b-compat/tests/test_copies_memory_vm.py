"""A VM sandbox's snapshot and fork through the unmodified SDK, with
memory (the VM is paused to disk once, its memory copied): a snapshot
asked files-only (`mode="filesystem"`) is refused rather than keep the
guest's memory the caller asked to drop, one asked `mode="full"` is
taken, and a fork's logs say it carries the memory.

Boots a VM (slow under emulation): run only when ``WARDEN_TEST_VM=1``
(with ``WARDEN_VM_DIR`` where the guest kernel is, as the CI script
installs it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from e2b import Sandbox, SandboxException

from conftest import Daemon, point_sdk, serve

pytestmark = pytest.mark.skipif(
    os.environ.get("WARDEN_TEST_VM") != "1", reason="boots a VM (slow under emulation): set WARDEN_TEST_VM=1"
)


def _busybox_tree(base: Path) -> Path:
    busybox = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p)), None)
    if busybox is None or not (shutil.which("mkfs.ext4") or shutil.which("mkfs.erofs")):
        pytest.skip("a static busybox and mkfs.ext4 (or mkfs.erofs) are needed for a guest root tree")
    root = base / "rootfs"
    for d in ("usr/bin", "etc", "proc", "dev", "tmp", "home/user"):
        (root / d).mkdir(parents=True)
    shutil.copy(busybox, root / "usr/bin/busybox")
    (root / "bin").symlink_to("usr/bin")
    (root / "etc/os-release").write_text("NAME=warden-test-rootfs\n")
    for name in ("sh", "sleep", "cat", "echo"):
        (root / "usr/bin" / name).symlink_to("busybox")
    return root


@pytest.fixture(scope="module")
def vm_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    base = tmp_path_factory.mktemp("warden-e2b-vm")
    tree = _busybox_tree(base)
    profile = f"isolation: vm\nfilesystem:\n  rootfs: {tree}\nresources:\n  memory: 256M\n"
    yield from serve(base, "", profiles={"vmroot.yaml": profile}, listen=True)


def test_a_vm_sandboxs_snapshot_is_held_to_its_mode_and_its_fork_says_it_carries_the_memory(
    vm_daemon: Daemon,
) -> None:
    key = vm_daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    point_sdk(vm_daemon, key)
    # The door's creates give a sandbox a home of its own, which a root
    # tree brings itself: the token makes the VM natively, with the
    # owner's profile, and reaches it through the door by its id.
    native = vm_daemon.native  # type: ignore[attr-defined]
    with httpx.Client(base_url=native, headers={"authorization": f"Bearer {key}"}, timeout=120) as c:
        r = c.post("/v1/sandboxes", json={"name": "vmsrc", "profile": "vmroot"})
        assert r.status_code == 201, r.text
    forks: list = []
    try:
        with pytest.raises(SandboxException, match="files-only"):
            Sandbox.create_snapshot("vmsrc", name="files-only", mode="filesystem")
        assert Sandbox.list_snapshots().next_items() == []
        snap = Sandbox.create_snapshot("vmsrc", name="with-memory", mode="full")
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        forks = Sandbox.fork("vmsrc", count=1, timeout=120)
        assert len(forks) == 1 and isinstance(forks[0], Sandbox), forks
        with httpx.Client(base_url=vm_daemon.url, headers={"X-API-Key": key}, timeout=30) as c:
            entries = c.get(f"/sandboxes/{forks[0].sandbox_id}/logs").json()["logEntries"]
        said = [e["message"] for e in entries if "what it carries" in e["message"]]
        assert len(said) == 1 and "its files and its memory" in said[0], said
    finally:
        for f in forks:
            if isinstance(f, Sandbox):
                f.kill()
        Sandbox.kill("vmsrc")

"""`volume_mounts` is refused, with the SDK's own exception and a message
saying what to do instead, and makes no sandbox: warden has no volumes an
E2B client may name yet (a sandbox's files come through its template, a
profile of the daemon's owner). Whatever the client names (a volume's
name, a host path, `..`, a mount point over /proc, /etc or the
workspace) is never mounted."""

from __future__ import annotations

import pytest
from e2b import Sandbox, SandboxException

from conftest import Daemon


@pytest.mark.parametrize(
    "mounts",
    [
        {"/mnt/data": "shared"},
        {"/mnt/data": "/etc"},
        {"/mnt/data": "../../etc"},
        {"/proc": "shared"},
        {"/etc": "shared"},
        {"/workspace": "shared"},
    ],
)
def test_volume_mounts_are_refused_and_make_nothing(daemon: Daemon, label: str, mounts: dict) -> None:
    before = sorted(s["id"] for s in daemon.sandboxes())
    with pytest.raises(SandboxException, match="volumeMounts.*template"):
        Sandbox.create(metadata={"test": label}, timeout=60, volume_mounts=mounts)
    assert sorted(s["id"] for s in daemon.sandboxes()) == before

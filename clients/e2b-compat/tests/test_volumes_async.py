"""The async client's volumes (`AsyncVolume`) and `AsyncSandbox.create`'s
`volume_mounts`: made, listed, found, mounted, written (by a command and
by the files API, within the sandbox's disk limit), read by the next
sandbox once the first is killed, and deleted; another name is not found."""

from __future__ import annotations

import uuid

import pytest
from e2b import AsyncSandbox, AsyncVolume, SandboxException


@pytest.mark.asyncio
async def test_the_async_client_makes_mounts_and_deletes_a_volume(label: str) -> None:
    name = f"av-{uuid.uuid4().hex[:8]}"
    vol = await AsyncVolume.create(name)
    try:
        assert name in {v.name for v in await AsyncVolume.list()}
        assert (await AsyncVolume.get_info(vol.volume_id)).name == name
        first = await AsyncSandbox.create(
            metadata={"test": label}, timeout=120, volume_mounts={"/mnt/data": vol}
        )
        try:
            await first.commands.run("echo from-command > /mnt/data/c")
            await first.files.write("/mnt/data/a", "from-api\n")
        finally:
            await first.kill()
        second = await AsyncSandbox.create(
            metadata={"test": label}, timeout=120, volume_mounts={"/mnt/data": name}
        )
        try:
            assert (await second.files.read("/mnt/data/c")) == "from-command\n"
            assert (await second.commands.run("cat /mnt/data/a")).stdout == "from-api\n"
        finally:
            await second.kill()
        with pytest.raises(SandboxException, match="no volume"):
            await AsyncSandbox.create(timeout=60, volume_mounts={"/mnt/data": "no-such-volume"})
    finally:
        assert await AsyncVolume.destroy(vol.volume_id) is True
    assert await AsyncVolume.destroy(vol.volume_id) is False

"""The async client over the same control surface: pause and connect,
snapshots, fork, metrics, network updates, set_timeout and the failure
paths, with the unmodified SDK's AsyncSandbox."""

from __future__ import annotations

import asyncio
import time

import pytest
from e2b import AsyncSandbox, NotFoundException, SandboxException, SandboxState


@pytest.mark.asyncio
async def test_the_async_client_pauses_connects_and_sees_the_state() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.write("a.txt", "kept")
        assert await sbx.pause() is True
        assert await sbx.beta_pause() is False
        assert await sbx.is_running() is False
        assert (await AsyncSandbox.get_info(sbx.sandbox_id)).state == SandboxState.PAUSED
        again = await AsyncSandbox.connect(sbx.sandbox_id, timeout=60)
        assert await again.is_running() is True
        assert await again.files.read("a.txt") == "kept"
        assert await again.pause(mode="filesystem") is True
        assert (await sbx.get_info()).state == SandboxState.PAUSED
        await sbx.connect()
        assert await sbx.files.read("a.txt") == "kept"
        await sbx.set_timeout(90)
        assert (await sbx.get_info()).end_at.timestamp() > time.time() + 60
        assert sbx.traffic_access_token is None
        assert sbx.envd_api_url.startswith("http://127.0.0.1:")
        page = await AsyncSandbox.list().next_items()
        assert sbx.sandbox_id in [s.sandbox_id for s in page]
    finally:
        await sbx.kill()


@pytest.mark.asyncio
async def test_the_async_client_snapshots_forks_and_reads_metrics() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    made = []
    try:
        await sbx.files.write("seed.txt", "seed")
        snap = await sbx.create_snapshot(name=f"async-{sbx.sandbox_id}")
        listed = await sbx.list_snapshots().next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
        child = await AsyncSandbox.create(template=snap.snapshot_id, timeout=60)
        made.append(child)
        assert await child.files.read("seed.txt") == "seed"
        forks = await sbx.fork(count=2, timeout=60)
        made.extend(f for f in forks if isinstance(f, AsyncSandbox))
        assert len(made) == 3
        for f in forks:
            assert await f.files.read("seed.txt") == "seed"
        metrics = await sbx.get_metrics()
        assert metrics and metrics[-1].mem_used > 0
        with pytest.raises(SandboxException, match="filesystem"):
            await sbx.create_snapshot(mode="full")
        assert await AsyncSandbox.delete_snapshot(snap.snapshot_id) is True
        assert await AsyncSandbox.delete_snapshot(snap.snapshot_id) is False
    finally:
        await asyncio.gather(*(m.kill() for m in made))
        await sbx.kill()


@pytest.mark.asyncio
async def test_the_async_client_updates_the_network_and_is_refused_an_address() -> None:
    sbx = await AsyncSandbox.create(timeout=60, network={"allow_out": ["api.example.com"]})
    try:
        await sbx.update_network({"allow_out": ["pypi.org"]})
        with pytest.raises(SandboxException, match="by name"):
            await sbx.update_network({"allow_out": ["192.0.2.1"]})
    finally:
        await sbx.kill()
    with pytest.raises(NotFoundException):
        await sbx.get_metrics()
    with pytest.raises(NotFoundException):
        await sbx.fork(count=1)

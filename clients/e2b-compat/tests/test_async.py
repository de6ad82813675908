"""The async client for a few of the same."""

from __future__ import annotations

import pytest
from e2b import AsyncSandbox, CommandExitException


@pytest.mark.asyncio
async def test_the_async_client_creates_runs_writes_and_kills() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        r = await sbx.commands.run("echo async")
        assert r.stdout == "async\n"
        with pytest.raises(CommandExitException):
            await sbx.commands.run("exit 4")
        await sbx.files.write("a.txt", "from async")
        assert await sbx.files.read("a.txt") == "from async"
        h = await sbx.commands.run("sleep 1; echo late", background=True)
        assert (await h.wait()).stdout == "late\n"
    finally:
        assert await sbx.kill() is True


@pytest.mark.asyncio
async def test_the_async_watch_streams_changes_of_a_tree() -> None:
    import asyncio

    from e2b import FilesystemEventType

    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.make_dir("w/deep")
        seen = []
        h = await sbx.files.watch_dir("w", on_event=lambda e: seen.append((e.name, e.type)), recursive=True)
        await sbx.files.write("w/deep/f.txt", "x")
        for _ in range(50):
            if ("deep/f.txt", FilesystemEventType.CREATE) in seen:
                break
            await asyncio.sleep(0.1)
        await h.stop()
        assert ("deep/f.txt", FilesystemEventType.CREATE) in seen, seen
    finally:
        await sbx.kill()

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

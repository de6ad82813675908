"""Pause and resume through the client, synchronous and asyncio: a paused
sandbox's background counter stands still and goes on from its value
once resumed, and a command into a paused sandbox is refused with the
code ``paused``."""

from __future__ import annotations

import time

import pytest

from warden_sandbox import AsyncSandbox, ConflictError, NotFoundError, Sandbox

COUNTER = (
    "python3 -c \"import os, time\n"
    "i = 0\n"
    "while True:\n"
    "    i += 1\n"
    "    open('/workspace/c.tmp', 'w').write(str(i)); os.replace('/workspace/c.tmp', '/workspace/count')\n"
    "    time.sleep(0.05)\n\""
)


def _count(sb: Sandbox) -> int:
    try:
        text = sb.files.read_text("count")
    except NotFoundError:
        return 0
    return int(text) if text.strip() else 0


def test_a_paused_sandbox_stands_still_and_goes_on_from_where_it_was(wait_until) -> None:
    with Sandbox.create() as sb:
        sb.commands.run(COUNTER, background=True)
        assert wait_until(lambda: _count(sb) > 3)
        info = sb.pause()
        assert info.state == "paused" and info.paused and not info.running
        with pytest.raises(ConflictError) as refused:
            sb.commands.run("true")
        assert refused.value.code == "paused"
        assert "resume" in refused.value.message
        with pytest.raises(ConflictError):
            sb.files.read("count")
        assert sb.info().paused
        time.sleep(1)
        info = sb.resume()
        assert info.running
        at_resume = _count(sb)
        assert wait_until(lambda: _count(sb) > at_resume)
        with pytest.raises(ConflictError):
            sb.resume()


async def test_the_asyncio_client_pauses_and_resumes_too() -> None:
    async with await AsyncSandbox.create() as sb:
        assert (await sb.pause()).paused
        with pytest.raises(ConflictError) as refused:
            await sb.commands.run("true")
        assert refused.value.code == "paused"
        assert (await sb.resume()).running
        r = await sb.commands.run("echo back")
        assert r.stdout == "back\n"

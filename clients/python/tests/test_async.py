"""The asyncio twin does what the synchronous client does: the same
daemon, the same answers, coroutines and async iterators."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest

from conftest import Daemon
from warden_sandbox import (
    AsyncSandbox,
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
)


async def test_a_sandbox_is_made_used_and_removed_at_the_end_of_the_block(daemon: Daemon, label: str) -> None:
    async with await AsyncSandbox.create(labels={"suite": label}, timeout=600) as sb:
        made = sb.id
        info = await sb.info()
        assert info.running and info.labels == {"suite": label}
        assert [i.id for i in await AsyncSandbox.list(label=f"suite={label}")] == [made]
        r = await sb.commands.run("echo $X; exit 2", env={"X": "async"})
        assert (r.exit_code, r.stdout) == (2, "async\n")
        assert (await sb.set_timeout(60)).ttl_deadline_ms is not None
    assert made not in daemon.sandbox_ids()
    with pytest.raises(NotFoundError):
        await (await AsyncSandbox.connect(made)).info()


async def test_streamed_output_reaches_sync_and_async_callbacks_as_it_comes() -> None:
    async with await AsyncSandbox.create() as sb:
        out: List[str] = []
        err: List[str] = []
        t0 = time.monotonic()
        first_at: List[float] = []

        async def on_err(text: str) -> None:
            await asyncio.sleep(0)
            err.append(text)

        def on_out(text: str) -> None:
            if not first_at:
                first_at.append(time.monotonic() - t0)
            out.append(text)

        r = await sb.commands.run("echo a; sleep 1.5; echo b; echo c >&2", on_stdout=on_out, on_stderr=on_err)
        end = time.monotonic() - t0
        assert "".join(out) == "a\nb\n" and "".join(err) == "c\n"
        assert end - first_at[0] > 1.0
        assert r.stdout == "a\nb\n" and r.exit_code == 0


async def test_a_background_command_takes_stdin_is_taken_up_again_and_killed() -> None:
    async with await AsyncSandbox.create() as sb:
        h = await sb.commands.run("cat", background=True)
        await h.send_stdin("to cat\n")
        await h.close_stdin()
        r = await h.wait()
        assert (r.exit_code, r.stdout) == (0, "to cat\n")
        again = await sb.commands.connect(h.id)
        assert (await again.wait()).stdout == "to cat\n"

        sleeper = await sb.commands.run("echo up; sleep 300", background=True)
        async for chunk in sleeper:
            assert chunk.text == "up\n"
            break
        await sleeper.kill()
        r = await sleeper.wait()
        assert (r.exit_code, r.signal) == (137, 9)


async def test_events_are_an_async_iterator() -> None:
    async with await AsyncSandbox.create() as sb:
        await sb.commands.run(["echo", "seen"])
        # The supervisor's audit writer appends the end a moment after the
        # command's answer: look again for a while, not forever.
        for _ in range(100):
            kinds = [e["event"] async for e in sb.events(follow=False)]
            if "exec_exited" in kinds:
                break
            await asyncio.sleep(0.05)
        assert kinds[:3] == ["workspace", "created", "started"]
        assert "exec_exited" in kinds


async def test_the_async_twin_raises_the_same_errors(daemon: Daemon) -> None:
    with pytest.raises(InvalidRequestError) as e:
        await AsyncSandbox.create(spec={"resources": {"memory": "lots"}})
    assert e.value.field == "/spec/resources/memory"
    with pytest.raises(AuthenticationError):
        await AsyncSandbox.list(host=daemon.tcp_host)
    reader = daemon.token("sandboxes:read")
    with pytest.raises(PermissionDeniedError):
        await AsyncSandbox.create(host=daemon.tcp_host, token=reader)

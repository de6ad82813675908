"""`commands.stream_input` and `pty.stream_input` through the unmodified
SDK (envd's client-streaming StreamInput): each piece reaches the command
as the caller's iterable yields it, not when the stream ends, and a
stream for a process that does not exist, or another sandbox's, moves
nothing."""

from __future__ import annotations

import time
from typing import Iterator, List

import pytest
from e2b import AsyncSandbox, CommandExitException, NotFoundException, PtySize, Sandbox


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    s = Sandbox.create(timeout=300)
    try:
        yield s
    finally:
        s.kill()


def read_when(sbx: Sandbox, path: str, want: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    got = ""
    while time.monotonic() < deadline:
        if sbx.files.exists(path):
            got = sbx.files.read(path)
            if got == want:
                break
        time.sleep(0.05)
    return got


def test_each_piece_reaches_the_command_as_it_is_yielded(sbx: Sandbox) -> None:
    h = sbx.commands.run("cat > /home/user/streamed.txt", background=True, stdin=True)
    seen: List[str] = []

    def pieces() -> Iterator[object]:
        yield "one\n"
        # The stream is still open: the first piece is there already.
        seen.append(read_when(sbx, "streamed.txt", "one\n"))
        yield b"two\n"
        seen.append(read_when(sbx, "streamed.txt", "one\ntwo\n"))
        yield "\u00e9\n"

    sbx.commands.stream_input(h.pid, pieces())
    assert seen == ["one\n", "one\ntwo\n"]
    sbx.commands.close_stdin(h.pid)
    assert h.wait().exit_code == 0
    assert sbx.files.read("streamed.txt") == "one\ntwo\n\u00e9\n"


def test_a_terminal_takes_streamed_keystrokes(sbx: Sandbox) -> None:
    out: List[bytes] = []
    t = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.stream_input(t.pid, [b"echo $((6", b"*7))\n", b"exit 4\n"])
    with pytest.raises(CommandExitException) as e:
        t.wait(on_pty=lambda data: out.append(bytes(data)))
    assert e.value.exit_code == 4
    assert "42" in b"".join(out).decode(errors="replace")


def test_a_stream_for_no_such_process_is_refused(sbx: Sandbox) -> None:
    with pytest.raises(NotFoundException):
        sbx.commands.stream_input(999999, ["nothing\n"])


def test_a_stream_names_no_process_of_another_sandbox() -> None:
    # A fresh A that has run nothing: the module's sandbox may hold a
    # command of its own under the same pid (pids are each sandbox's).
    mine = Sandbox.create(timeout=120)
    other = Sandbox.create(timeout=120)
    try:
        h = other.commands.run("cat > /home/user/other.txt", background=True, stdin=True)
        # The pid is B's; sent to A's sandbox, it names nothing there.
        with pytest.raises(NotFoundException):
            mine.commands.stream_input(h.pid, ["crossed\n"])
        other.commands.close_stdin(h.pid)
        h.wait()
        assert other.files.read("other.txt") == ""
    finally:
        other.kill()
        mine.kill()


@pytest.mark.asyncio
async def test_the_async_client_streams_input_too() -> None:
    s = await AsyncSandbox.create(timeout=120)
    try:
        h = await s.commands.run("cat > /home/user/a.txt", background=True, stdin=True)

        stream = s.commands.stream_input(h.pid)
        await stream.send("a\n")
        await stream.send(b"b\n")
        await stream.close()
        await s.commands.close_stdin(h.pid)
        await h.wait()
        assert await s.files.read("a.txt") == "a\nb\n"
    finally:
        await s.kill()

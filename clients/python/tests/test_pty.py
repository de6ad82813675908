"""Terminal sessions through the client: a shell on a real terminal in
the sandbox, typed into, resized, its exit status; over TCP a token
without ``exec`` is refused before anything starts; the asyncio twin."""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterator, List

import pytest

from conftest import Daemon
from warden_sandbox import AsyncSandbox, ConflictError, PermissionDeniedError, Sandbox


@pytest.fixture(scope="module")
def sb(daemon: Daemon) -> Iterator[Sandbox]:
    with Sandbox.create(host=daemon.unix_host) as s:
        yield s


class Screen:
    """What the terminal showed, collected from ``on_data``."""

    def __init__(self) -> None:
        self.data = b""
        self.lock = threading.Lock()

    def __call__(self, chunk: bytes) -> None:
        with self.lock:
            self.data += chunk

    def text(self) -> str:
        with self.lock:
            return self.data.decode(errors="replace")

    def wait_for(self, needle: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert time.monotonic() < deadline, f"{needle!r} never showed; the screen: {self.text()!r}"
            time.sleep(0.02)


def test_a_shell_on_a_terminal_is_typed_into_resized_and_gives_its_exit_status(sb: Sandbox) -> None:
    screen = Screen()
    term = sb.pty.create(rows=24, cols=80, on_data=screen, cmd=["sh"])
    assert term.pid is not None and term.pid > 1
    term.send_input("echo h''i; tty\n")
    screen.wait_for("hi\r\n")
    screen.wait_for("/dev/pts/")
    term.send_input("stty size\n")
    screen.wait_for("24 80")
    term.resize(50, 150)
    term.send_input("stty size\n")
    screen.wait_for("50 150")
    term.send_input("exit 4\n")
    assert term.wait(timeout=20) == 4
    assert term.exit_code == 4


def test_kill_ends_the_process_and_wait_says_how(sb: Sandbox) -> None:
    screen = Screen()
    term = sb.pty.create(on_data=screen, cmd="echo ready; sleep 600")
    screen.wait_for("ready")
    term.kill()
    assert term.wait(timeout=20) == 137


def test_a_program_that_is_not_there_is_an_error(sb: Sandbox) -> None:
    from warden_sandbox import WardenError

    with pytest.raises(WardenError) as e:
        sb.pty.create(cmd=["/no/such/program"])
    assert e.value.code == "not_found"


def test_a_token_without_exec_is_refused_and_one_with_it_works(
    daemon: Daemon, sb: Sandbox, wait_until: Callable[..., bool]
) -> None:
    without = Sandbox.connect(sb.id, host=daemon.tcp_host, token=daemon.token("sandboxes:read", "files"))
    with pytest.raises(PermissionDeniedError):
        without.pty.create(cmd="touch /workspace/pty-refused")
    assert sb.commands.run("test -e /workspace/pty-refused").exit_code == 1
    mine = Sandbox.connect(sb.id, host=daemon.tcp_host, token=daemon.token("exec", sandbox=sb.id))
    term = mine.pty.create(cmd="exit 0")
    assert term.wait(timeout=20) == 0


def test_a_stopped_sandbox_is_a_conflict(daemon: Daemon) -> None:
    with Sandbox.create(host=daemon.unix_host, start=False) as idle:
        with pytest.raises(ConflictError):
            idle.pty.create()


async def test_the_async_twin_relays_the_same_terminal(daemon: Daemon) -> None:
    got: List[bytes] = []

    async def on_data(chunk: bytes) -> None:
        got.append(chunk)

    async with await AsyncSandbox.create(host=daemon.unix_host) as sb:
        term = await sb.pty.create(rows=10, cols=40, on_data=on_data, cmd=["sh"])
        await term.send_input("stty size; exit 6\n")
        assert await term.wait(timeout=20) == 6
        assert "10 40" in b"".join(got).decode(errors="replace")

"""A daemon socket whose path is longer than a Unix socket's address holds
(107 bytes: a deep temporary directory, a long home): the client reaches
it through its directory's descriptor, as the daemon binds it, with the
sync pool, the async pool and a terminal's websocket alike; a name that
cannot fit even so is refused with what to do, never a bare OS error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import Daemon
from warden_sandbox import AsyncSandbox, Sandbox, WardenConnectionError, close


def _long_dir(base: Path) -> Path:
    d = base / ("d" * 60) / ("e" * 60)
    d.mkdir(parents=True)
    return d


def _linked(daemon: Daemon, directory: Path, name: str = "daemon.sock") -> str:
    """A socket path of `directory` that is the daemon's own socket."""
    link = directory / name
    link.symlink_to(daemon.socket)
    return str(link)


def test_a_socket_path_longer_than_an_address_is_reached_through_its_directory(
    daemon: Daemon, tmp_path: Path, label: str
) -> None:
    path = _linked(daemon, _long_dir(tmp_path))
    assert len(os.fsencode(path)) > 107
    host = f"unix://{path}"
    with Sandbox.create(host=host, labels={"suite": label}) as sb:
        assert sb.commands.run("echo reached").stdout == "reached\n"
        assert [i.id for i in Sandbox.list(host=host, label=f"suite={label}")] == [sb.id]
        term = sb.pty.create(cmd="exit 3")
        try:
            assert term.wait(30) == 3
        finally:
            term.close()
    close()


async def test_the_async_client_reaches_a_long_socket_path_too(daemon: Daemon, tmp_path: Path) -> None:
    path = _linked(daemon, _long_dir(tmp_path))
    async with await AsyncSandbox.create(host=f"unix://{path}") as sb:
        r = await sb.commands.run("echo async")
        assert r.stdout == "async\n"


def test_a_socket_name_too_long_even_through_its_directory_says_so_and_what_to_do(
    daemon: Daemon, tmp_path: Path
) -> None:
    path = _linked(daemon, tmp_path, "s" * 120)
    with pytest.raises(WardenConnectionError) as e:
        Sandbox.list(host=f"unix://{path}")
    assert e.value.code == "socket_path_too_long"
    message = str(e.value)
    assert "more than a Unix socket's address holds (107)" in message
    assert "warden serve --listen" in message

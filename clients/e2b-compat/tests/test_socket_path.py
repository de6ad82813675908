"""A daemon whose state directory is deep enough that its socket's path is
longer than a Unix socket's address holds (107 bytes): the daemon serves
under it (it binds through its directory's descriptor), the owner's
client of the tests reaches it the same way, and the unmodified SDK, which
speaks to the E2B listener over TCP, is not affected."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
from e2b import Sandbox

from conftest import Daemon, point_sdk, serve


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    base = tmp_path_factory.mktemp("warden-e2b-deep") / ("d" * 60) / ("e" * 60)
    base.mkdir(parents=True)
    yield from serve(base, "")


def test_a_daemon_under_a_long_state_path_is_reached_by_its_owner_and_by_the_sdk(deep: Daemon) -> None:
    assert len(os.fsencode(deep.socket)) > 107, deep.socket
    key = deep.token("sandboxes:read", "sandboxes:write", "exec", "files")
    point_sdk(deep, key)
    sbx = Sandbox.create(timeout=60)
    try:
        assert sbx.commands.run("echo deep").stdout == "deep\n"
        assert sbx.sandbox_id in [s["id"] for s in deep.sandboxes()]
    finally:
        sbx.kill()


def test_a_socket_name_that_cannot_fit_even_through_its_directory_says_so(tmp_path: Path) -> None:
    from conftest import socket_address

    with pytest.raises(RuntimeError, match="longer than a Unix socket's address holds"):
        socket_address(str(tmp_path / ("s" * 120)))
    assert socket_address(str(tmp_path / "short.sock")) == (str(tmp_path / "short.sock"), None)

"""The workspace's files through the client: bytes of every value both
ways, listings, directories, moves and removals, in the sync and asyncio
forms; a path that leaves the workspace is refused and changes nothing."""

from __future__ import annotations

import asyncio
import os
from typing import Iterator

import pytest

from conftest import Daemon
from warden_sandbox import AsyncSandbox, BadRequestError, ConflictError, NotFoundError, Sandbox


@pytest.fixture(scope="module")
def sb(daemon: Daemon) -> Iterator[Sandbox]:
    with Sandbox.create(host=daemon.unix_host) as s:
        yield s


def test_bytes_of_every_value_go_in_and_come_back_unchanged(sb: Sandbox) -> None:
    data = bytes(range(256)) * 4096 + os.urandom(12345)
    sb.files.write("blob.bin", data, mode=0o600)
    assert sb.files.read("blob.bin") == data
    # The sandbox sees the same bytes.
    r = sb.commands.run("sha256sum /workspace/blob.bin")
    import hashlib

    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    sb.files.write("/workspace/note.txt", "héllo\n")
    assert sb.files.read_text("note.txt") == "héllo\n"


def test_directories_listings_moves_and_removals(sb: Sandbox) -> None:
    sb.files.make_dir("d/e/f")
    sb.files.write("d/e/f/x.txt", "x")
    names = {e.name: e for e in sb.files.list("d/e/f")}
    assert names["x.txt"].kind == "file" and names["x.txt"].size == 1
    sb.files.move("d/e/f/x.txt", "d/y.txt")
    assert sb.files.read_text("d/y.txt") == "x"
    with pytest.raises(NotFoundError):
        sb.files.read("d/e/f/x.txt")
    with pytest.raises(ConflictError):
        sb.files.remove("d")  # not empty
    sb.files.remove("d", recursive=True)
    assert "d" not in {e.name for e in sb.files.list()}


def test_a_path_that_leaves_the_workspace_is_refused(sb: Sandbox) -> None:
    for path in ["../escape.txt", "/etc/passwd", "a/../../escape.txt"]:
        with pytest.raises(BadRequestError):
            sb.files.write(path, "no")
        with pytest.raises(BadRequestError):
            sb.files.read(path)
    assert "escape.txt" not in {e.name for e in sb.files.list()}


def test_the_asyncio_client_reads_and_writes_the_same(daemon: Daemon) -> None:
    async def go() -> None:
        async with await AsyncSandbox.create(host=daemon.unix_host) as s:
            await s.files.write("a.txt", b"\x00\xffasync")
            assert await s.files.read("a.txt") == b"\x00\xffasync"
            await s.files.make_dir("dir")
            await s.files.move("a.txt", "dir/b.txt")
            assert [e.name for e in await s.files.list("dir")] == ["b.txt"]
            await s.files.remove("dir", recursive=True)

    asyncio.run(go())

"""Files through the unmodified E2B SDK: write, read, list, exists, info,
make_dir, rename, remove, several files at once, a binary upload and
download, and a watch."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from e2b import FileType, FilesystemEventType, NotFoundException, Sandbox


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    s = Sandbox.create(timeout=300)
    try:
        yield s
    finally:
        s.kill()


def test_a_file_written_is_read_back_and_seen_by_commands(sbx: Sandbox) -> None:
    info = sbx.files.write("/home/user/notes/a.txt", "hello\n")
    assert info.path == "/home/user/notes/a.txt"
    assert sbx.files.read("notes/a.txt") == "hello\n"
    assert sbx.commands.run("cat /home/user/notes/a.txt").stdout == "hello\n"
    sbx.commands.run("echo made > made.txt")
    assert sbx.files.read("/home/user/made.txt") == "made\n"
    # The workspace is where it is natively, for files and commands alike.
    sbx.files.write("/workspace/ws.txt", "ws\n")
    assert sbx.commands.run("cat /workspace/ws.txt").stdout == "ws\n"


def test_a_binary_file_goes_up_and_comes_down_byte_for_byte(sbx: Sandbox) -> None:
    data = bytes(range(256)) * 4096
    sbx.files.write("bin/blob", data)
    assert bytes(sbx.files.read("bin/blob", format="bytes")) == data
    assert sbx.commands.run("wc -c < bin/blob").stdout.strip() == str(len(data))


def test_several_files_are_written_at_once(sbx: Sandbox) -> None:
    big = bytes(range(251)) * 20000  # about 5 MB, streamed part by part
    written = sbx.files.write_files(
        [{"path": "multi/one", "data": "1"}, {"path": "multi/two", "data": big}]
    )
    assert bytes(sbx.files.read("multi/two", format="bytes")) == big
    assert sorted(w.path for w in written) == ["/home/user/multi/one", "/home/user/multi/two"]
    assert sorted(e.name for e in sbx.files.list("multi")) == ["one", "two"]


def test_directories_are_made_listed_renamed_and_removed(sbx: Sandbox) -> None:
    assert sbx.files.make_dir("tree/a/b") is True
    assert sbx.files.make_dir("tree/a/b") is False
    sbx.files.write("tree/a/f.txt", "x")
    names = {e.path: e.type for e in sbx.files.list("tree", depth=3)}
    assert names == {
        "/home/user/tree/a": FileType.DIR,
        "/home/user/tree/a/b": FileType.DIR,
        "/home/user/tree/a/f.txt": FileType.FILE,
    }
    info = sbx.files.get_info("tree/a/f.txt")
    assert info.size == 1 and info.type == FileType.FILE
    moved = sbx.files.rename("tree/a/f.txt", "tree/g.txt")
    assert moved.path == "/home/user/tree/g.txt"
    assert sbx.files.exists("tree/g.txt")
    assert not sbx.files.exists("tree/a/f.txt")
    sbx.files.remove("tree")
    assert not sbx.files.exists("tree")
    with pytest.raises(NotFoundException):
        sbx.files.read("tree/g.txt")


def test_a_path_outside_the_sandboxs_own_places_is_refused_and_nothing_is_read(sbx: Sandbox) -> None:
    # The workspace, the home and /tmp: not the host's system directories
    # the sandbox is shown.
    for path in ["/etc/hostname", "/etc/shadow", "/usr/bin/env"]:
        with pytest.raises(Exception):
            sbx.files.read(path)
    with pytest.raises(Exception):
        sbx.files.read("../../etc/passwd")
    with pytest.raises(Exception):
        sbx.files.read("/home/user/../../etc/passwd")


def test_a_watch_reports_what_changed_in_the_directory(sbx: Sandbox) -> None:
    sbx.files.make_dir("watched")
    w = sbx.files.watch_dir("watched")
    try:
        sbx.files.write("watched/new.txt", "1")
        sbx.commands.run("echo more >> watched/new.txt; rm watched/new.txt")
        seen = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            seen += [(e.name, e.type) for e in w.get_new_events()]
            if ("new.txt", FilesystemEventType.REMOVE) in seen:
                break
            time.sleep(0.2)
        names = {n for n, _ in seen}
        assert "new.txt" in names, seen
        types = {t for n, t in seen if n == "new.txt"}
        assert FilesystemEventType.WRITE in types, seen
        assert FilesystemEventType.REMOVE in types, seen
    finally:
        w.stop()


def test_watches_left_open_are_released_when_their_sandbox_is_killed() -> None:
    # The daemon keeps at most 32 watches; 3 x 12 left open would exhaust
    # them if a killed sandbox's watchers were kept.
    for _ in range(3):
        s = Sandbox.create(timeout=60)
        try:
            for _ in range(12):
                s.files.watch_dir(".")
        finally:
            s.kill()

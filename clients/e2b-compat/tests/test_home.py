"""E2B code that uses `/home/user` and files outside the workspace runs
unchanged: the sandbox's user is `user`, its home `/home/user` (where
commands start and relative paths are, for files and commands alike), and
the files API reaches what the sandbox's processes see (`/tmp`, the home,
the workspace), through the sandbox's own init, beneath the sandbox's own
root: a link planted by sandbox code is never followed, `..` is refused,
and another token's sandbox is out of reach."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import pytest
from e2b import Sandbox

from conftest import Daemon


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    s = Sandbox.create(timeout=300)
    try:
        yield s
    finally:
        s.kill()


def test_a_script_written_in_the_home_runs_from_the_same_path(sbx: Sandbox) -> None:
    info = sbx.files.write("/home/user/x.py", "print('ran from home')\n")
    assert info.path == "/home/user/x.py"
    assert sbx.commands.run("python3 /home/user/x.py").stdout == "ran from home\n"
    # Relative paths and ~ are the home, for both.
    sbx.files.write("rel.txt", "relative\n")
    assert sbx.commands.run("cat rel.txt ~/rel.txt").stdout == "relative\nrelative\n"
    assert sbx.files.read("~/rel.txt") == "relative\n"


def test_a_file_in_tmp_is_written_read_back_and_seen_by_commands(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/x", "in tmp\n")
    assert sbx.files.read("/tmp/x") == "in tmp\n"
    assert sbx.commands.run("cat /tmp/x").stdout == "in tmp\n"
    sbx.commands.run("echo from a command > /tmp/y")
    assert sbx.files.read("/tmp/y") == "from a command\n"
    assert "x" in [e.name for e in sbx.files.list("/tmp")]
    assert sbx.files.exists("/tmp/x")
    sbx.files.remove("/tmp/x")
    assert not sbx.files.exists("/tmp/x")


def test_home_working_directory_and_user_are_e2bs(sbx: Sandbox) -> None:
    r = sbx.commands.run("echo $HOME; pwd; whoami; echo $USER; id -un")
    assert r.stdout == "/home/user\n/home/user\nuser\nuser\nuser\n"
    assert sbx.commands.run("whoami", user="root").stdout == "user\n"


def test_what_the_sandbox_may_not_write_is_refused_and_nothing_changes(sbx: Sandbox) -> None:
    with pytest.raises(Exception):
        sbx.files.write("/usr/bin/planted", "x")
    assert sbx.commands.run("test -e /usr/bin/planted && echo yes || echo no").stdout == "no\n"
    # The host's system directories the sandbox is shown are not the
    # files API's to read either: only the sandbox's own places are.
    with pytest.raises(Exception):
        sbx.files.read("/etc/hostname")
    for bad in ["/proc/1/environ", "/proc/self/mem", "/dev/tty", "/sys/kernel/notes"]:
        with pytest.raises(Exception):
            sbx.files.read(bad)


def test_a_link_planted_by_sandbox_code_is_never_followed(
    sbx: Sandbox, daemon: Daemon, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("the host's\n")
    secret.chmod(0o644)
    tmp_path.chmod(0o755)
    sbx.commands.run(
        f"ln -s {secret} /tmp/secret; ln -s {tmp_path} /home/user/hostdir; "
        f"ln -s {daemon.state} /tmp/state; ln -s /etc/shadow /home/user/shadow; "
        "ln -s / /tmp/root"
    )
    for path in [
        "/tmp/secret",
        "/home/user/hostdir/host-secret",
        "/tmp/state/warden.db",
        "/home/user/shadow",
        "shadow",
        "/tmp/root/etc/hostname",
    ]:
        try:
            got = sbx.files.read(path)
        except Exception:
            continue
        pytest.fail(f"{path} was read through a link: {got!r}")
    for path in ["/home/user/hostdir", "/tmp/state", "/tmp/root"]:
        with pytest.raises(Exception):
            sbx.files.list(path)
        with pytest.raises(Exception):
            sbx.files.watch_dir(path)
    for path in ["/home/user/hostdir/planted", "/tmp/state/planted", "/tmp/secret"]:
        with pytest.raises(Exception):
            sbx.files.write(path, "planted\n")
    assert secret.read_text() == "the host's\n"
    assert not (tmp_path / "planted").exists()
    assert not (daemon.state / "planted").exists()
    # The links themselves are still there, links: nothing was written
    # through them or over them.
    assert sbx.commands.run("test -L /tmp/secret && test -L /tmp/state && echo links").stdout == "links\n"


def test_dot_dot_never_leaves_the_sandboxs_root(sbx: Sandbox) -> None:
    for bad in ["/tmp/../../etc/passwd", "../../../etc/passwd", "/home/user/../../../proc/1/environ"]:
        with pytest.raises(Exception):
            sbx.files.read(bad)
    with pytest.raises(Exception):
        sbx.files.write("/tmp/../../escape", "x")
    assert sbx.commands.run("test -e /escape && echo yes || echo no").stdout == "no\n"


def test_another_tokens_sandbox_is_out_of_reach_for_tmp_too(daemon: Daemon) -> None:
    scopes = ("sandboxes:read", "sandboxes:write", "exec", "files")
    owner_key, other_key = daemon.token(*scopes), daemon.token(*scopes)
    s = Sandbox.create(timeout=120, api_key=owner_key)
    try:
        s.files.write("/tmp/owners.txt", "the owner's\n")
        headers = {"E2b-Sandbox-Id": s.sandbox_id, "X-Access-Token": other_key}
        with httpx.Client(base_url=daemon.url, headers=headers, timeout=30) as c:
            # 502: E2B's answer for a sandbox not found, as the door answers
            # another token's.
            r = c.get("/files", params={"path": "/tmp/owners.txt", "username": "user"})
            assert r.status_code in (401, 403, 404, 502) and "the owner's" not in r.text, r.text
            r = c.post(
                "/files",
                params={"path": "/tmp/owners.txt", "username": "user"},
                content=b"overwritten",
                headers={"Content-Type": "application/octet-stream"},
            )
            assert r.status_code in (401, 403, 404, 502), r.text
        assert s.files.read("/tmp/owners.txt") == "the owner's\n"
    finally:
        s.kill()

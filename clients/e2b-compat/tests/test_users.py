"""`user=` through the unmodified SDK. A warden sandbox maps one identity
into its user namespace, and every process in it runs as that one: E2B
code may call it "user" or "root" (the two users of E2B's images), and
either gets the same identity, with no capability and the same seccomp
filter; another name is refused before anything runs, as envd refuses a
user its image lacks."""

from __future__ import annotations

import os
from typing import Iterator

import httpx
import pytest
from e2b import InvalidArgumentException, Sandbox


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    s = Sandbox.create(timeout=300)
    try:
        yield s
    finally:
        s.kill()


def test_user_and_root_are_the_sandboxs_one_identity(sbx: Sandbox) -> None:
    seen = {
        sbx.commands.run("id -u; id -g; whoami").stdout,
        sbx.commands.run("id -u; id -g; whoami", user="user").stdout,
        sbx.commands.run("id -u; id -g; whoami", user="root").stdout,
    }
    assert len(seen) == 1, seen
    uid = seen.pop().split()[0]
    if os.geteuid() == 0:
        # A daemon run as root: UID 0 of the sandbox's own user namespace
        # (nobody on the host), as README says.
        assert uid == "0"
    else:
        assert uid == str(os.geteuid())


def test_root_gets_no_capability_and_the_same_filter(sbx: Sandbox) -> None:
    status = sbx.commands.run("grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status", user="root")
    fields = dict(line.split(":\t") for line in status.stdout.splitlines())
    assert fields["CapEff"] == "0000000000000000"
    assert fields["CapBnd"] == "0000000000000000"
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"
    # What uid 0 on the host could do, it cannot.
    r = sbx.commands.run("cat /proc/1/environ >/dev/null 2>&1; echo $?; mount -t tmpfs x /mnt 2>&1; echo $?", user="root")
    assert r.stdout.splitlines()[-1] != "0"


def test_files_as_root_or_user_are_the_same_files(sbx: Sandbox) -> None:
    sbx.files.write("as-root.txt", "r\n", user="root")
    assert sbx.files.read("as-root.txt", user="user") == "r\n"
    owner = sbx.commands.run("stat -c %u as-root.txt").stdout.strip()
    assert owner == sbx.commands.run("id -u").stdout.strip()
    url = sbx.upload_url("signed-root.txt", user="root")
    assert "username=root" in url
    assert httpx.post(url, content=b"s\n", timeout=30).status_code == 200
    assert httpx.get(sbx.download_url("signed-root.txt", user="root"), timeout=30).content == b"s\n"


def test_a_user_the_sandbox_lacks_is_refused_and_nothing_runs(sbx: Sandbox) -> None:
    with pytest.raises(InvalidArgumentException) as e:
        sbx.commands.run("touch /workspace/ran-as-postgres", user="postgres")
    assert "one identity" in str(e.value)
    with pytest.raises(InvalidArgumentException):
        sbx.files.write("written-as-postgres", "x", user="postgres")
    assert not sbx.files.exists("ran-as-postgres")
    assert not sbx.files.exists("written-as-postgres")

"""`Sandbox.git` runs git through the door's commands, so it works where
commands do: a repository made in the home, a file added and committed,
its status and branches read, and a remote's clone, push and pull against
a bare repository inside the sandbox, with the sync and async clients. (A
remote on the network is reached through the sandbox's egress like any
other program's: its name must be allowed.)"""

from __future__ import annotations

import shutil

import pytest
from e2b import AsyncSandbox, Sandbox

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed on this host")


def test_git_makes_a_repository_commits_and_reads_its_state() -> None:
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.git.init("repo", initial_branch="main")
        sbx.files.write("repo/a.txt", "one\n")
        assert not sbx.git.status("repo").is_clean
        sbx.git.add("repo", all=True)
        sbx.git.commit("repo", "first", author_name="Agent", author_email="agent@example.com")
        assert sbx.git.status("repo").is_clean
        sbx.git.create_branch("repo", "work")
        branches = sbx.git.branches("repo")
        assert branches.current_branch == "work"
        assert {"main", "work"} <= set(branches.branches)
        log = sbx.commands.run("git -C repo log --format=%an:%s").stdout
        assert log == "Agent:first\n"
        # The repository is in the home, where E2B code looks for it.
        assert sbx.files.exists("/home/user/repo/.git")
    finally:
        sbx.kill()


def test_git_clones_pushes_and_pulls_through_a_local_bare_repository() -> None:
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.commands.run("git init --bare -b main /tmp/origin.git")
        sbx.git.init("repo", initial_branch="main")
        sbx.files.write("repo/a.txt", "one\n")
        sbx.git.add("repo", all=True)
        sbx.git.commit("repo", "first", author_name="Agent", author_email="agent@example.com")
        sbx.git.remote_add("repo", "origin", "/tmp/origin.git")
        sbx.git.push("repo", remote="origin", branch="main")
        sbx.git.clone("/tmp/origin.git", path="copy")
        assert sbx.files.read("copy/a.txt") == "one\n"
        sbx.files.write("repo/b.txt", "two\n")
        sbx.git.add("repo", all=True)
        sbx.git.commit("repo", "second", author_name="Agent", author_email="agent@example.com")
        sbx.git.push("repo", remote="origin", branch="main")
        sbx.git.pull("copy", remote="origin", branch="main")
        assert sbx.files.read("/home/user/copy/b.txt") == "two\n"
    finally:
        sbx.kill()


@pytest.mark.asyncio
async def test_the_async_client_runs_git_too() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.git.init("repo", initial_branch="main")
        await sbx.files.write("repo/b.txt", "two\n")
        await sbx.git.add("repo", all=True)
        await sbx.git.commit("repo", "second", author_name="Agent", author_email="agent@example.com")
        assert (await sbx.git.status("repo")).is_clean
    finally:
        await sbx.kill()

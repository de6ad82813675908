"""Commands through the unmodified E2B SDK: output, exit codes, the SDK's
error for a failing command, environment and working directory, a
background command connected to later, standard input, kill, a terminal."""

from __future__ import annotations

from typing import Iterator, List

import pytest
from e2b import CommandExitException, PtySize, Sandbox


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    s = Sandbox.create(envs={"SANDBOX_WIDE": "everywhere"}, timeout=300)
    try:
        yield s
    finally:
        s.kill()


def test_output_and_exit_code_come_back_as_the_command_wrote_them(sbx: Sandbox) -> None:
    r = sbx.commands.run("echo out; echo err >&2; printf 'no newline'")
    assert r.exit_code == 0
    assert r.stdout == "out\nno newline"
    assert r.stderr == "err\n"


def test_a_failing_command_raises_the_sdks_command_exit_error(sbx: Sandbox) -> None:
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo bad >&2; exit 7")
    assert e.value.exit_code == 7
    assert e.value.stderr == "bad\n"


def test_environment_and_working_directory_reach_the_command(sbx: Sandbox) -> None:
    r = sbx.commands.run("echo $SANDBOX_WIDE $MINE; pwd", envs={"MINE": "here"})
    assert r.stdout == "everywhere here\n/home/user\n"
    sbx.files.make_dir("sub")
    assert sbx.commands.run("pwd", cwd="/home/user/sub").stdout == "/home/user/sub\n"
    assert sbx.commands.run("pwd", cwd="sub").stdout == "/home/user/sub\n"


def test_a_background_command_is_connected_to_later_and_fed_its_stdin(sbx: Sandbox) -> None:
    h = sbx.commands.run("read line; echo got $line", background=True, stdin=True)
    assert h.pid in [p.pid for p in sbx.commands.list()]
    h.disconnect()
    again = sbx.commands.connect(h.pid)
    sbx.commands.send_stdin(h.pid, "hello\n")
    r = again.wait()
    assert r.stdout == "got hello\n"
    assert h.pid not in [p.pid for p in sbx.commands.list()]


def test_closing_stdin_ends_a_command_that_reads_to_the_end(sbx: Sandbox) -> None:
    h = sbx.commands.run("wc -c", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "12345")
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout.strip() == "5"


def test_a_killed_command_ends_and_is_gone(sbx: Sandbox) -> None:
    h = sbx.commands.run("sleep 300", background=True)
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()
    assert sbx.commands.kill(h.pid) is False


def test_a_terminal_runs_a_shell_that_answers_its_input(sbx: Sandbox) -> None:
    out: List[bytes] = []
    t = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.resize(t.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(t.pid, b"echo $((6*7)); stty size; exit 3\n")
    with pytest.raises(CommandExitException) as e:
        t.wait(on_pty=lambda data: out.append(bytes(data)))
    assert e.value.exit_code == 3
    text = b"".join(out).decode(errors="replace")
    assert "42" in text
    assert "30 100" in text

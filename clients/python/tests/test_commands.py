"""Commands through the client: run whole, streamed to callbacks, in the
background; standard input, signals, timeouts, exact bytes; output taken
up again after a lost connection."""

from __future__ import annotations

import time
from typing import Iterator, List

import pytest

from conftest import Daemon
from cutting_proxy import CuttingProxy
from warden_sandbox import (
    CommandExitError,
    ConflictError,
    NotFoundError,
    Sandbox,
)


@pytest.fixture(scope="module")
def sb(daemon: Daemon) -> Iterator[Sandbox]:
    with Sandbox.create(host=daemon.unix_host) as s:
        yield s


def test_a_string_runs_through_the_shell_and_a_list_as_argv(sb: Sandbox) -> None:
    r = sb.commands.run("echo $((2+3)) | tr 5 6")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "6\n", "")
    r = sb.commands.run(["echo", "$((2+3))", "a b"])
    assert r.stdout == "$((2+3)) a b\n"


def test_a_non_zero_exit_is_a_result_unless_check_is_asked(sb: Sandbox) -> None:
    r = sb.commands.run("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
    with pytest.raises(CommandExitError) as e:
        sb.commands.run("echo nope >&2; exit 4", check=True)
    assert e.value.exit_code == 4
    assert e.value.result.stderr == "nope\n"


def test_env_and_cwd_reach_the_command(sb: Sandbox) -> None:
    sb.commands.run("mkdir -p /workspace/sub").check()
    r = sb.commands.run("echo $GREETING; pwd", env={"GREETING": "hello there"}, cwd="/workspace/sub")
    assert r.stdout == "hello there\n/workspace/sub\n"


def test_stdin_text_and_bytes_that_are_not_utf8_arrive_exactly(sb: Sandbox) -> None:
    assert sb.commands.run("cat", stdin="line one\n").stdout == "line one\n"
    raw = bytes(range(256))
    r = sb.commands.run("od -An -v -tx1 | tr -d ' \\n'", stdin=raw)
    assert r.stdout == raw.hex()


def test_output_that_is_not_utf8_is_kept_as_its_exact_bytes(sb: Sandbox) -> None:
    r = sb.commands.run("printf 'a\\377\\376b'")
    assert r.stdout_bytes == b"a\xff\xfeb"
    assert r.stdout == "a\ufffd\ufffdb"
    streamed = sb.commands.run("printf 'a\\377\\376b'", on_stdout=lambda _t: None)
    assert streamed.stdout_bytes == b"a\xff\xfeb"


def test_a_timeout_kills_the_command_with_status_124(sb: Sandbox) -> None:
    t0 = time.monotonic()
    r = sb.commands.run("echo before; sleep 30", timeout=1)
    assert time.monotonic() - t0 < 15
    assert (r.exit_code, r.timed_out, r.stdout) == (124, True, "before\n")


def test_callbacks_get_output_while_the_command_still_runs(sb: Sandbox) -> None:
    seen: List[tuple] = []
    t0 = time.monotonic()
    r = sb.commands.run(
        "echo first; sleep 2; echo second; echo warn >&2",
        on_stdout=lambda t: seen.append(("out", t, time.monotonic() - t0)),
        on_stderr=lambda t: seen.append(("err", t, time.monotonic() - t0)),
    )
    end = time.monotonic() - t0
    assert "".join(t for k, t, _ in seen if k == "out") == "first\nsecond\n"
    assert "".join(t for k, t, _ in seen if k == "err") == "warn\n"
    first_at = next(at for k, t, at in seen if k == "out" and "first" in t)
    assert end - first_at > 1.5, f"'first' arrived at {first_at:.2f}s, the command ended at {end:.2f}s"
    assert (r.exit_code, r.stdout, r.stderr) == (0, "first\nsecond\n", "warn\n")


def test_a_background_command_is_waited_for_and_its_handle_knows_its_id(sb: Sandbox) -> None:
    h = sb.commands.run("sleep 0.5; echo done; exit 7", background=True)
    assert h.id.startswith("ex-")
    assert h.exit_code is None
    assert any(c.id == h.id for c in sb.commands.list())
    r = h.wait()
    assert (r.exit_code, r.stdout, h.exit_code) == (7, "done\n", 7)


def test_a_background_command_is_killed(sb: Sandbox) -> None:
    h = sb.commands.run("echo up; sleep 300", background=True)
    chunks = iter(h)
    assert next(chunks).text == "up\n"
    h.kill()
    r = h.wait()
    assert (r.exit_code, r.signal) == (137, 9)
    assert r.stdout == "up\n"


def test_a_background_command_gets_stdin_until_it_is_closed(sb: Sandbox) -> None:
    h = sb.commands.run("cat; echo eof", background=True)
    h.send_stdin("one\n")
    h.send_stdin(b"two\n")
    time.sleep(0.3)
    assert h.info().running, "cat ended before its standard input was closed"
    h.close_stdin()
    r = h.wait()
    assert r.stdout == "one\ntwo\neof\n"
    with pytest.raises(ConflictError):
        h.send_stdin("late")


def test_a_command_is_taken_up_again_from_any_offset(sb: Sandbox) -> None:
    h = sb.commands.run("echo one; sleep 1; echo two", background=True)
    # Another client, later, reads all of it...
    assert sb.commands.connect(h.id).wait().stdout == "one\ntwo\n"
    # ... or only what it has not seen yet.
    rest = sb.commands.connect(h.id, stdout_offset=len("one\n")).wait()
    assert (rest.stdout, rest.exit_code) == ("two\n", 0)
    # And the first handle still reads everything.
    assert h.wait().stdout == "one\ntwo\n"


def test_a_stream_cut_mid_command_is_taken_up_without_loss_or_repetition(daemon: Daemon, sb: Sandbox) -> None:
    # A token the owner made for this sandbox: the owner's sandboxes are
    # reached by no other token but an admin one.
    token = daemon.token("exec", "sandboxes:read", sandbox=sb.id)
    proxy = CuttingProxy(daemon.tcp, marker=b"chunk-1")
    try:
        far = Sandbox.connect(sb.id, host=f"http://{proxy.address}", token=token)
        seen: List[str] = []
        r = far.commands.run(
            "for i in 1 2 3 4; do echo chunk-$i; sleep 0.3; done",
            on_stdout=seen.append,
        )
        assert proxy.cuts == 1, "the proxy never cut the stream: the test proves nothing"
        assert proxy.connections >= 2
        assert "".join(seen) == "chunk-1\nchunk-2\nchunk-3\nchunk-4\n"
        assert r.stdout == "chunk-1\nchunk-2\nchunk-3\nchunk-4\n"
        assert r.exit_code == 0
        far.close()
    finally:
        proxy.close()


def test_an_unknown_command_is_not_found(sb: Sandbox) -> None:
    with pytest.raises(NotFoundError):
        sb.commands.connect("ex-0000000000000000")


def test_output_past_the_sandbox_budget_is_dropped_and_counted(daemon: Daemon) -> None:
    # A 64 MiB disk limit: a 16 MiB output budget for all its commands.
    with Sandbox.create(host=daemon.unix_host, spec={"resources": {"disk": "64M"}}) as s:
        r = s.commands.run("head -c 40M /dev/zero; echo end", timeout=300)
        assert r.exit_code == 0
        assert r.output_cut and r.stdout_dropped > 0
        assert len(r.stdout_bytes) + r.stdout_dropped == 40 * 1024 * 1024 + 4
        info = next(c for c in s.commands.list() if c.id == r.id)
        assert (info.output_cut, info.stdout_dropped) == (True, r.stdout_dropped)
        # The budget is the sandbox's: a later command's output is kept, the
        # ended command's given up for it and counted as that command's.
        later = s.commands.run("echo later")
        assert (later.stdout, later.stdout_dropped, later.output_cut) == ("later\n", 0, False)
        first = next(c for c in s.commands.list() if c.id == r.id)
        assert first.output_cut and first.stdout_dropped == 40 * 1024 * 1024 + 4

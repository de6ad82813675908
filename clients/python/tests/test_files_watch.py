"""Watching the workspace through the client: changes made inside the
sandbox arrive (callback and iterator forms, and the asyncio twin); a
path through a planted link is refused."""

from __future__ import annotations

import threading
import time
from typing import Iterator, List

import pytest

from conftest import Daemon
from warden_sandbox import (
    AsyncSandbox,
    BadRequestError,
    BusyError,
    FileEvent,
    QuotaExceededError,
    Sandbox,
)
from warden_sandbox._errors import error_from_response


@pytest.fixture(scope="module")
def sb(daemon: Daemon) -> Iterator[Sandbox]:
    with Sandbox.create(host=daemon.unix_host) as s:
        yield s


def _wait(events: List[FileEvent], lock: threading.Lock, type_: str, path: str) -> FileEvent:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with lock:
            for e in events:
                if e.type == type_ and e.path == path:
                    return e
        time.sleep(0.02)
    raise AssertionError(f"no {type_} {path}; came: {events}")


def test_changes_inside_reach_the_callback_as_they_happen(sb: Sandbox) -> None:
    sb.commands.run("mkdir -p /workspace/w").check()
    got: List[FileEvent] = []
    lock = threading.Lock()

    def on_event(e: FileEvent) -> None:
        with lock:
            got.append(e)

    w = sb.files.watch("w", on_event=on_event, recursive=True)
    try:
        sb.commands.run("echo a > /workspace/w/f && echo b >> /workspace/w/f").check()
        assert _wait(got, lock, "created", "w/f").kind == "file"
        _wait(got, lock, "modified", "w/f")
        # The new directory's own watch is in place once its creation is
        # reported; a file moved into it before that is reported as
        # created there and removed where it was (what inotify allows).
        sb.commands.run("mkdir /workspace/w/d").check()
        _wait(got, lock, "created", "w/d")
        sb.commands.run("mv /workspace/w/f /workspace/w/d/g").check()
        moved = _wait(got, lock, "moved", "w/d/g")
        assert moved.from_ == "w/f"
        sb.commands.run("rm /workspace/w/d/g").check()
        _wait(got, lock, "removed", "w/d/g")
        # A rename out of the watched tree has no second half inside it:
        # it is a removal, reported once its pair did not come.
        sb.commands.run("echo c > /workspace/w/h && mv /workspace/w/h /workspace/away").check()
        _wait(got, lock, "removed", "w/h")
    finally:
        w.close()


def test_the_iterator_form_yields_the_same_changes(sb: Sandbox) -> None:
    with sb.files.watch("/workspace") as w:
        sb.commands.run("echo x > /workspace/iter-file").check()
        for e in w:
            if e.path == "iter-file":
                assert e.type == "created"
                break


def test_a_path_through_a_link_or_out_of_the_workspace_is_refused(sb: Sandbox) -> None:
    sb.commands.run("ln -sfn /etc /workspace/to-etc").check()
    for p in ["to-etc", "..", "/etc"]:
        with pytest.raises(BadRequestError):
            sb.files.watch(p)


async def test_the_async_twin_watches_too(daemon: Daemon) -> None:
    async with await AsyncSandbox.create(host=daemon.unix_host) as sb:
        w = await sb.files.watch(recursive=True)
        try:
            await sb.commands.run("echo y > /workspace/async-file")
            async for e in w:
                if e.path == "async-file":
                    assert e.type == "created"
                    break
        finally:
            await w.close()


#: The most files watches one token holds at once (the daemon's bound).
WATCHES_PER_TOKEN = 12


def test_a_tokens_watch_past_its_bound_is_busy_not_a_quota(daemon: Daemon, sb: Sandbox) -> None:
    # Before, the daemon answered the watch bound 429 `quota`, which the
    # client raised as QuotaExceededError: a token's quota, that only
    # removing something passes; closing a watch passes this one.
    as_token = Sandbox.connect(
        sb.id, host=daemon.tcp_host, token=daemon.token("files", "sandboxes:read", sandbox=sb.id)
    )
    held = []
    try:
        for _ in range(WATCHES_PER_TOKEN):
            held.append(as_token.files.watch(""))
        with pytest.raises(BusyError) as e:
            as_token.files.watch("")
        err = e.value
        assert not isinstance(err, QuotaExceededError)
        assert (err.status, err.code) == (429, "too_many_watches")
        assert err.details["bound"] == "per_token", err.details
        assert err.retry_after is None
        held.pop().close()
        deadline = time.monotonic() + 5
        while True:
            try:
                held.append(as_token.files.watch(""))
                break
            except BusyError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        for w in held:
            w.close()
        as_token.close()


def test_the_daemons_watch_bound_for_all_tokens_is_busy_with_its_retry_after() -> None:
    body = (
        b'{"code":"too_many_watches","message":"24 files watches are open",'
        b'"details":{"bound":"per_daemon","limit":24}}'
    )
    err = error_from_response(429, body, {"retry-after": "1"})
    assert isinstance(err, BusyError) and not isinstance(err, QuotaExceededError)
    assert (err.code, err.details["bound"], err.retry_after) == ("too_many_watches", "per_daemon", 1.0)

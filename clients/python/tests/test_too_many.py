"""The daemon's 429s arrive as two kinds a program treats differently, both
``TooManyRequestsError`` (and ``WardenError``): ``QuotaExceededError``
(``quota``: stays so until something of the token's is removed, no
``retry_after``) and ``BusyError`` (``too_many_sessions``: a bound on
long-lived answers; ``retry_after`` from the daemon's ``Retry-After``
when the bound passes by itself: a sandbox's supervisor serving all it
may, the daemon's bound for all tokens together). Each carries its code,
its reason and the bound; nothing is started by a refused request.

Run against a daemon of its own: its supervisors serve 4 connections
(``WARDEN_TEST_SUPERVISOR_CONNECTIONS``, a debug build's test switch, as
the command-line tests use it) so four running commands fill one, and its
ledger holds 3 sessions per token and 3 for all tokens together."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Iterator, List

import httpx
import pytest

from conftest import Daemon, _binary, serve
from warden_sandbox import (
    BusyError,
    QuotaExceededError,
    Sandbox,
    TooManyRequestsError,
    WardenError,
)
from warden_sandbox._errors import error_from_response, retry_after_of

#: The supervisor's bound in this daemon.
BOUND = 4


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    base = tmp_path_factory.mktemp("warden-small")
    conf = base / "daemon.yaml"
    conf.write_text("sessions:\n  per_token: 3\n  per_daemon: 3\n")
    yield from serve(
        base,
        ["--config", str(conf)],
        {"WARDEN_TEST_SUPERVISOR_CONNECTIONS": str(BOUND)},
        strict=False,
    )


def _marks(sb: Sandbox) -> List[str]:
    """The marker files the commands of these tests left in the sandbox."""
    out = sb.commands.run("ls /workspace").stdout.split()
    return sorted(n for n in out if n.startswith("ran-"))


def test_a_token_over_its_quota_gets_quota_exceeded_without_a_wait(small: Daemon) -> None:
    made = subprocess.run(
        [str(_binary()), "token", "create", "quota-one", "--scope", "sandboxes:write",
         "--scope", "sandboxes:read", "--max-sandboxes", "1"],
        env={
            **{k: v for k, v in os.environ.items() if k not in ("WARDEN_HOST", "WARDEN_TOKEN")},
            "WARDEN_STATE_DIR": str(small.state),
        },
        capture_output=True, text=True,
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    first = Sandbox.create(host=small.tcp_host, token=token)
    try:
        before = small.sandbox_ids()
        with pytest.raises(QuotaExceededError) as e:
            Sandbox.create(host=small.tcp_host, token=token)
        err = e.value
        assert isinstance(err, TooManyRequestsError) and isinstance(err, WardenError)
        assert not isinstance(err, BusyError)
        assert (err.status, err.code, err.retry_after) == (429, "quota", None)
        assert small.sandbox_ids() == before
    finally:
        first.kill()


def test_a_full_supervisor_is_busy_with_the_daemons_retry_after_and_starts_nothing(
    small: Daemon,
) -> None:
    # The owner's calls are held back by no ledger: the supervisor's own
    # bound is what refuses the fifth.
    sb = Sandbox.create(host=small.unix_host)
    try:
        held = [sb.commands.run("sleep 60", background=True) for _ in range(BOUND)]
        with pytest.raises(BusyError) as e:
            sb.commands.run("touch /workspace/ran-past-the-bound")
        err = e.value
        assert isinstance(err, TooManyRequestsError) and not isinstance(err, QuotaExceededError)
        assert (err.status, err.code, err.reason) == (429, "too_many_sessions", "busy")
        assert err.details["bound"] == "per_sandbox", err.details
        assert err.retry_after == 1.0
        for h in held:
            h.kill()
        # The wait it was told: a place comes back once a command ends.
        deadline = time.monotonic() + 30
        while True:
            try:
                assert sb.commands.run("touch /workspace/ran-after").exit_code == 0
                break
            except BusyError as again:
                if time.monotonic() > deadline:
                    raise
                time.sleep(again.retry_after or 1.0)
        assert _marks(sb) == ["ran-after"]
    finally:
        sb.kill()


def test_the_daemons_bound_for_all_tokens_says_when_to_retry_and_a_tokens_own_does_not(
    small: Daemon,
) -> None:
    sb = Sandbox.create(host=small.unix_host)
    try:
        a = Sandbox.connect(sb.id, host=small.tcp_host, token=small.token("exec", sandbox=sb.id))
        b = Sandbox.connect(sb.id, host=small.tcp_host, token=small.token("exec", sandbox=sb.id))
        held = [a.commands.run("sleep 60", background=True) for _ in range(3)]
        # Token a holds its 3: its own bound, which waiting does not pass.
        with pytest.raises(BusyError) as own:
            a.commands.run("touch /workspace/ran-a")
        assert own.value.details["bound"] == "per_token", own.value.details
        assert own.value.retry_after is None
        # Token b holds none, but the daemon's 3 are taken by a's: it
        # passes by itself, and the answer says when to ask again.
        with pytest.raises(BusyError) as full:
            b.commands.run("touch /workspace/ran-b")
        assert full.value.details["bound"] == "per_daemon", full.value.details
        assert full.value.retry_after == 1.0
        assert _marks(sb) == []
        for h in held:
            h.kill()
        a.close()
        b.close()
    finally:
        sb.kill()


def test_a_retry_after_is_read_as_seconds_or_a_date_and_a_wild_one_is_dropped() -> None:
    h = httpx.Headers
    assert retry_after_of(h({"Retry-After": "7"})) == 7.0
    assert retry_after_of(h({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0
    assert retry_after_of(h({"Retry-After": "soon"})) is None
    assert retry_after_of(h({"Retry-After": "-3"})) is None
    assert retry_after_of(h({"Retry-After": str(10**12)})) is None
    assert retry_after_of(h({})) is None
    # A 429 of a code this client does not know is still one.
    other = error_from_response(429, b'{"code": "newer", "message": "m"}', h({"Retry-After": "2"}))
    assert type(other) is TooManyRequestsError and other.retry_after == 2.0

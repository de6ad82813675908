"""What one token may hold open through the E2B door: every long-lived
answer (a relay to a sandbox's port, HTTP or WebSocket; a process's
stream, started, connected or fed; a directory watch) takes a place from
the daemon's one ledger of long-lived answers, so a token that opens them
without end is refused at its bound (429, or the SDK's
RateLimitException) while the owner and other tokens are still answered;
a relay that carries nothing is closed after the daemon's idle timeout;
and a log request on a large audit log answers a bounded page at once.

These tests run their own daemon, with small bounds in its configuration
(`sessions: {per_token, per_daemon, idle_seconds}`), so that a bound is
reached in a few requests and an idle relay closes in seconds."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple
from urllib.parse import urlparse

import httpx
import pytest
from e2b import PtySize, Sandbox
from e2b.exceptions import RateLimitException

from conftest import Daemon, point_sdk, serve

PER_TOKEN = 6
IDLE_SECONDS = 3
PORT = 8010

# A service that answers any request with 101 and then echoes what it
# gets, one thread per connection: enough for the door to relay it as a
# WebSocket and for a test to see bytes go through.
ECHO = r"""
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", PORT)); s.listen(64)
def serve(c):
    req = b""
    while b"\r\n\r\n" not in req:
        d = c.recv(4096)
        if not d: return
        req += d
    if b"upgrade: websocket" in req.lower():
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        while True:
            d = c.recv(4096)
            if not d: return
            c.sendall(d)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
    c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
""".replace("PORT", str(PORT))


def _start(base: Path, sessions: str) -> Iterator[Daemon]:
    """A daemon of its own whose configuration holds `sessions`."""
    yield from serve(base, f"sessions:\n{sessions}")


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon whose tokens hold at most PER_TOKEN long-lived answers."""
    base = tmp_path_factory.mktemp("warden-e2b-bounds")
    yield from _start(base, f"  per_token: {PER_TOKEN}\n  per_daemon: 64\n")


@pytest.fixture(scope="module")
def hasty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon whose relays close after IDLE_SECONDS of silence."""
    base = tmp_path_factory.mktemp("warden-e2b-idle")
    yield from _start(base, f"  idle_seconds: {IDLE_SECONDS}\n")


_as = point_sdk


def _key(d: Daemon) -> str:
    return d.token("sandboxes:read", "sandboxes:write", "exec", "files")


def _serving(d: Daemon, key: str) -> Sandbox:
    """A sandbox of `key`'s with the echo service on PORT."""
    _as(d, key)
    sbx = Sandbox.create(timeout=300)
    sbx.files.write("echo.py", ECHO)
    sbx.commands.run("python3 echo.py", background=True).disconnect()
    for _ in range(100):
        probe = sbx.commands.run(
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {PORT}), 1)\" && echo up || true"
        )
        if "up" in probe.stdout:
            return sbx
        time.sleep(0.1)
    raise AssertionError("the echo service did not listen")


def _door(d: Daemon) -> Tuple[str, int]:
    u = urlparse(d.url)
    return u.hostname or "127.0.0.1", u.port or 80


def _read_head(s: socket.socket) -> bytes:
    """What `s` gives up to the end of an answer's head (and any bytes
    behind it in the same reads)."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return head


def _start_head(d: Daemon, sbx: Sandbox) -> str:
    """The head of the door's answer to a process Start sent as the SDK
    sends it (a Connect stream of one message), lower-cased."""
    host, port = _door(d)
    message = json.dumps({"process": {"cmd": "/bin/true"}}).encode()
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(
        (
            f"POST /process.Process/Start HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"E2b-Sandbox-Id: {sbx.sandbox_id}\r\nX-Access-Token: {sbx._envd_access_token}\r\n"
            "Content-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
    )
    head = _read_head(s)
    s.close()
    return head.split(b"\r\n\r\n", 1)[0].decode(errors="replace").lower()


def _relay(d: Daemon, sbx: Sandbox) -> Tuple[int, socket.socket, bytes]:
    """A WebSocket handshake relayed to PORT of `sbx`: the status and the
    connection (held open when 101), and the body of a refusal."""
    host, port = _door(d)
    s = socket.create_connection((host, port), timeout=10)
    name = f"{PORT}-{sbx.sandbox_id}.localhost:{port}"
    s.sendall(
        (
            f"GET /ws HTTP/1.1\r\nHost: {name}\r\nX-Access-Token: {sbx._envd_access_token}\r\n"
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        ).encode()
    )
    head = _read_head(s)
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    body = head.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in head else b""
    if status != 101:
        # The rest of a refusal's body, if any: as many bytes as its
        # Content-Length says, read as they come (the door keeps the
        # connection open, so waiting for its end would wait out the
        # timeout on every refusal).
        fields = head.split(b"\r\n\r\n", 1)[0].lower() + b"\r\n"
        length = re.search(rb"\r\ncontent-length:\s*(\d+)\r\n", fields)
        want = int(length.group(1)) if length else None
        s.settimeout(2)
        try:
            while want is None or len(body) < want:
                if want is None and body.rstrip().endswith(b"}"):
                    break
                chunk = s.recv(4096)
                if not chunk:
                    break
                body += chunk
        except socket.timeout:
            pass
    return status, s, body


def _closed(s: socket.socket, within: float) -> bool:
    """Whether `s` is closed by the other side within `within` seconds."""
    s.settimeout(within)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
    except socket.timeout:
        return False
    except OSError:
        return True


def test_a_token_opening_40_relays_is_refused_at_its_bound_while_the_owner_and_another_token_are_answered(
    bounded: Daemon,
) -> None:
    crowd = _key(bounded)
    sbx = _serving(bounded, crowd)
    other = _key(bounded)
    held: List[socket.socket] = []
    try:
        statuses = []
        refusal: Optional[bytes] = None
        for _ in range(40):
            status, s, body = _relay(bounded, sbx)
            statuses.append(status)
            if status == 101:
                held.append(s)
            else:
                refusal = refusal or body
                s.close()
        # The echo service holds one of the token's places while it runs.
        relays = PER_TOKEN - 1
        assert statuses.count(101) == relays, statuses
        assert statuses[relays:] == [429] * (40 - relays), statuses
        assert refusal is not None
        assert f"{PER_TOKEN} per token" in json.loads(refusal)["message"], refusal
        # A relayed plain request is refused as well: the same ledger.
        host = f"{PORT}-{sbx.sandbox_id}.localhost:{_door(bounded)[1]}"
        r = httpx.get(
            f"{bounded.url}/", headers={"Host": host, "X-Access-Token": sbx._envd_access_token}
        )
        assert r.status_code == 429, r.text
        # The owner lists at once; another token makes and runs at once.
        t = time.monotonic()
        with bounded.owner() as c:
            assert c.get("/v1/sandboxes").status_code == 200
        assert time.monotonic() - t < 2
        _as(bounded, other)
        mine = Sandbox.create(timeout=120)
        try:
            assert mine.commands.run("echo fine").stdout == "fine\n"
        finally:
            mine.kill()
        # A place comes back when a relay ends.
        held.pop().close()
        deadline = time.monotonic() + 5
        while True:
            status, s, _ = _relay(bounded, sbx)
            if status == 101 or time.monotonic() > deadline:
                break
            s.close()
            time.sleep(0.1)
        assert status == 101
        held.append(s)
    finally:
        for s in held:
            s.close()
        _as(bounded, crowd)
        sbx.kill()


def test_process_streams_and_watches_take_their_places_from_the_same_ledger(
    bounded: Daemon,
) -> None:
    key = _key(bounded)
    sbx = _serving(bounded, key)
    handles = []
    held: List[socket.socket] = []
    try:
        # Background commands hold their places while they run (the echo
        # service one already).
        for _ in range(PER_TOKEN - 4):
            handles.append(sbx.commands.run("sleep 600", background=True))
        # A terminal holds its place while it runs, read or not.
        pty = sbx.pty.create(PtySize(rows=24, cols=80))
        pty.disconnect()
        status, s, _ = _relay(bounded, sbx)
        assert status == 101
        held.append(s)
        sbx.files.make_dir("watched")
        watch = sbx.files.watch_dir("watched")
        # The bound is reached: the next stream of any kind is refused.
        with pytest.raises(RateLimitException):
            sbx.commands.run("echo refused")
        # Refused before its body is read, the answer says its connection
        # closes: a client that kept it for its next call would have that
        # call fail ("connection closed before message completed").
        head = _start_head(bounded, sbx)
        assert "connection: close" in head, head
        with pytest.raises(RateLimitException):
            sbx.files.watch_dir("watched")
        status, s, _ = _relay(bounded, sbx)
        assert status == 429
        s.close()
        # A stream whose client leaves keeps its place while its process
        # runs (the process holds the daemon's threads and a connection
        # to the supervisor, read or not): no place comes back.
        handles[-1].disconnect()
        with pytest.raises(RateLimitException):
            sbx.commands.run("echo still refused")
        # A process that ends gives back its place.
        handles.pop().kill()
        deadline = time.monotonic() + 5
        while True:
            try:
                assert sbx.commands.run("echo again").stdout == "again\n"
                break
            except RateLimitException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        watch.stop()
        # A terminal's place comes back when its process ends.
        sbx.pty.kill(pty.pid)
        handles.append(sbx.commands.run("sleep 600", background=True))
    finally:
        for h in handles:
            try:
                h.kill()
            except Exception:
                pass
        for s in held:
            s.close()
        sbx.kill()


def test_an_idle_relay_is_closed_after_the_daemons_timeout_and_a_busy_one_is_not(
    hasty: Daemon,
) -> None:
    key = _key(hasty)
    sbx = _serving(hasty, key)
    try:
        status, idle, _ = _relay(hasty, sbx)
        assert status == 101
        status, busy, _ = _relay(hasty, sbx)
        assert status == 101
        idle.sendall(b"hello")
        idle.settimeout(5)
        assert idle.recv(5) == b"hello"
        # The busy one speaks every second, past the timeout.
        busy.settimeout(5)
        for _ in range(IDLE_SECONDS + 3):
            busy.sendall(b"x")
            assert busy.recv(1) == b"x"
            time.sleep(1)
        assert _closed(idle, 3), "the idle relay was still open"
        busy.sendall(b"y")
        assert busy.recv(1) == b"y", "the busy relay was closed"
        busy.close()
    finally:
        sbx.kill()


def _big_log(d: Daemon, sid: str, mib: int) -> int:
    """Append copies of the sandbox's first event to its audit log until
    it holds about `mib` MiB; the number of lines appended."""
    log = d.state / "sandboxes" / sid / "audit.jsonl"
    first = json.loads(log.read_text().splitlines()[0])
    base = first["ts_ms"]
    # The event serialized once around a stand-in for its stamp, which
    # each line fills in (a million json.dumps calls took most of the
    # test's time).
    first["ts_ms"] = -7_654_321_987
    head, tail = json.dumps(first).split(str(first["ts_ms"]))
    n = 0
    with open(log, "a") as f:
        written = 0
        while written < mib << 20:
            text = "".join(f"{head}{base + i}{tail}\n" for i in range(n, n + 10000))
            f.write(text)
            written += len(text)
            n += 10000
    return n


def test_a_log_request_on_a_large_audit_log_returns_a_bounded_page_quickly(
    bounded: Daemon,
) -> None:
    key = _key(bounded)
    _as(bounded, key)
    sbx = Sandbox.create(timeout=300)
    log = bounded.state / "sandboxes" / sbx.sandbox_id / "audit.jsonl"
    size = log.stat().st_size
    try:
        n = _big_log(bounded, sbx.sandbox_id, 200)
        assert n > 100_000
        headers = {"X-API-Key": key}
        with httpx.Client(base_url=bounded.url, headers=headers, timeout=60) as c:
            for path, params in [
                (f"/v2/sandboxes/{sbx.sandbox_id}/logs", {"limit": 5}),
                (f"/v2/sandboxes/{sbx.sandbox_id}/logs", {"limit": 5, "direction": "backward"}),
                (f"/sandboxes/{sbx.sandbox_id}/logs", {"limit": 100000}),
            ]:
                t = time.monotonic()
                r = c.get(path, params=params)
                took = time.monotonic() - t
                assert r.status_code == 200, r.text
                assert 0 < len(r.json()["logs"]) <= 1000, (path, params)
                assert took < 3, f"{path} {params} took {took:.1f} s"
            # Backward from the end: the newest first.
            r = c.get(
                f"/v2/sandboxes/{sbx.sandbox_id}/logs", params={"limit": 2, "direction": "backward"}
            )
            stamps = [e["timestamp"] for e in r.json()["logs"]]
            assert stamps == sorted(stamps, reverse=True), stamps
    finally:
        # The copies go before the kill (a kill over a large log is the
        # next test's).
        os.truncate(log, size)
        sbx.kill()


def _denials(d: Daemon, sid: str) -> int:
    (me,) = [s for s in d.sandboxes() if sid in (s.get("id"), s.get("name"))]
    return int(me["denied_connections"])


def test_a_sandbox_with_a_large_audit_log_is_listed_and_killed_quickly_with_its_denials_counted(
    bounded: Daemon,
) -> None:
    key = _key(bounded)
    _as(bounded, key)
    sbx = Sandbox.create(timeout=300)
    log = bounded.state / "sandboxes" / sbx.sandbox_id / "audit.jsonl"
    killed = False
    try:
        before = _denials(bounded, sbx.sandbox_id)
        n = _big_log(bounded, sbx.sandbox_id, 200)
        assert n > 100_000
        # One denied connection after the copies: the count reads past them.
        denied = {
            "ts_ms": 1,
            "sandbox": sbx.sandbox_id,
            "event": "connection",
            "protocol": "dns",
            "name": "denied.test",
            "port": 53,
            "original_destination": None,
            "allowed": False,
            "rule": None,
            "detail": "",
            "bytes_out": 0,
            "bytes_in": 0,
            "duration_ms": 0,
        }
        with open(log, "a") as f:
            f.write(json.dumps(denied) + "\n")
        # The first look parsed every line: 18 s of a debug build (the
        # kill looks the sandbox up first); now about 0.3 s.
        t = time.monotonic()
        assert _denials(bounded, sbx.sandbox_id) == before + 1
        took = time.monotonic() - t
        assert took < 3, f"the list took {took:.1f} s over a 200 MiB log"
        with open(log, "a") as f:
            f.write(json.dumps(denied) + "\n")
        t = time.monotonic()
        assert _denials(bounded, sbx.sandbox_id) == before + 2
        took = time.monotonic() - t
        assert took < 2, f"a second list took {took:.1f} s: it read the log again"
        t = time.monotonic()
        sbx.kill()
        killed = True
        took = time.monotonic() - t
        assert took < 3, f"the kill took {took:.1f} s over a 200 MiB log"
    finally:
        if not killed:
            sbx.kill()


#: The most files watches one token holds at once (the daemon's bound).
WATCHES_PER_TOKEN = 12


def test_a_tokens_watch_past_its_bound_is_the_sdks_rate_limit_naming_too_many_watches(
    daemon: Daemon, label: str
) -> None:
    # Before, the bound was named `quota` (a token's quota, that only
    # removing something passes), and the envd call's message lost even
    # that: the SDK's RateLimitException said nothing of which bound.
    key = _key(daemon)
    pointed = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")}
    _as(daemon, key)
    sbx = Sandbox.create(metadata={"test": label}, timeout=120)
    watches = []
    try:
        sbx.files.make_dir("watched")
        for _ in range(WATCHES_PER_TOKEN):
            watches.append(sbx.files.watch_dir("watched"))
        with pytest.raises(RateLimitException, match="too_many_watches"):
            sbx.files.watch_dir("watched")
        # Closing one passes it.
        watches.pop().stop()
        deadline = time.monotonic() + 5
        while True:
            try:
                watches.append(sbx.files.watch_dir("watched"))
                break
            except RateLimitException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        for w in watches:
            try:
                w.stop()
            except Exception:
                pass
        sbx.kill()
        for k, v in pointed.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

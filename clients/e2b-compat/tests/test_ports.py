"""A sandbox's ports through the door: `get_host(port)` names an address
the daemon routes to that port inside the sandbox, for HTTP and
WebSocket, only for a caller with access to the sandbox, and nothing new
listens on the host for it. The sandbox domain create answers never
resolves outside this machine, so an SDK left without `E2B_SANDBOX_URL`
fails closed instead of sending its commands and token to E2B's public
host."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
from typing import Iterator, Set, Tuple
from urllib.parse import urlparse

import httpx
import pytest
from e2b import AsyncSandbox, Sandbox

PORT = 8000
WS_PORT = 8001

# A WebSocket server with the standard library only: one handshake, then
# every text frame it gets is sent back upper-cased.
WS_SERVER = r"""
import base64, hashlib, socket, struct, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", PORT)); s.listen(8)
def serve(c):
    req = b""
    while b"\r\n\r\n" not in req:
        req += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in req.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    while True:
        h = c.recv(2)
        if len(h) < 2: return
        n = h[1] & 127
        if n == 126: n = struct.unpack(">H", c.recv(2))[0]
        mask = c.recv(4); data = b""
        while len(data) < n: data += c.recv(n - len(data))
        text = bytes(b ^ mask[i % 4] for i, b in enumerate(data)).upper()
        c.sendall(bytes([0x81, len(text)]) + text)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
""".replace("PORT", str(WS_PORT))


def _listening() -> Set[Tuple[str, int]]:
    """The host's listening TCP sockets (its own network namespace)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A":
                addr, port = f[1].rsplit(":", 1)
                out.add((addr, int(port, 16)))
    return out


def _wait_listening(sbx: Sandbox, port: int) -> None:
    for _ in range(100):
        probe = sbx.commands.run(
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 1)\" && echo up || true"
        )
        if "up" in probe.stdout:
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on {port} inside the sandbox")


@pytest.fixture(scope="module")
def served() -> Iterator[Sandbox]:
    before = _listening()
    s = Sandbox.create(timeout=300)
    try:
        s.files.write("site/index.html", "hello from inside\n")
        s.commands.run(
            f"cd /home/user/site && python3 -m http.server {PORT} --bind 127.0.0.1",
            background=True,
        )
        s.files.write("ws.py", WS_SERVER)
        s.commands.run("python3 /home/user/ws.py", background=True)
        _wait_listening(s, PORT)
        _wait_listening(s, WS_PORT)
        s._host_listeners_before = before  # type: ignore[attr-defined]
        yield s
    finally:
        s.kill()


def _door(daemon) -> Tuple[str, int]:
    u = urlparse(daemon.url)
    return u.hostname or "127.0.0.1", u.port or 80


def test_the_sandbox_domain_never_resolves_outside_this_machine(served: Sandbox, daemon) -> None:
    _, port = _door(daemon)
    assert served.sandbox_domain == f"localhost:{port}"
    host = served.get_host(PORT)
    assert host == f"{PORT}-{served.sandbox_id}.localhost:{port}"
    # Without E2B_SANDBOX_URL the SDK's envd address is HTTPS to a
    # .localhost name: never E2B's host, and no certificate exists for it.
    cfg = served.connection_config
    saved = cfg._sandbox_url
    try:
        cfg._sandbox_url = None
        url = urlparse(cfg.get_sandbox_url(served.sandbox_id, served.sandbox_domain))
        assert url.scheme == "https"
        assert (url.hostname or "").endswith(".localhost")
        assert "e2b" not in (url.hostname or "").split(".")[-1]
    finally:
        cfg._sandbox_url = saved


def test_an_sdk_without_the_sandbox_url_fails_closed(daemon) -> None:
    saved = os.environ.pop("E2B_SANDBOX_URL")
    try:
        sbx = Sandbox.create(timeout=60)
        try:
            with pytest.raises(Exception):
                sbx.commands.run("echo never", request_timeout=10)
        finally:
            os.environ["E2B_SANDBOX_URL"] = saved
            sbx.kill()
    finally:
        os.environ["E2B_SANDBOX_URL"] = saved


def test_get_host_reaches_an_http_server_inside_the_sandbox(served: Sandbox, daemon) -> None:
    host = served.get_host(PORT)
    token = served._envd_access_token
    # By name, as get_host answers it (the door resolves nothing: the name
    # is sent to the door as the Host header).
    r = httpx.get(
        f"{daemon.url}/index.html",
        headers={"Host": host, "X-Access-Token": token},
    )
    assert r.status_code == 200, r.text
    assert r.text == "hello from inside\n"
    # By E2B's headers, as the SDKs send them with E2B_SANDBOX_URL set.
    r = httpx.get(
        f"{daemon.url}/index.html",
        headers={
            "E2b-Sandbox-Id": served.sandbox_id,
            "E2b-Sandbox-Port": str(PORT),
            "X-Access-Token": token,
        },
    )
    assert r.status_code == 200, r.text
    assert r.text == "hello from inside\n"


def test_curl_reaches_the_address_get_host_answers_as_written(served: Sandbox) -> None:
    # curl resolves a .localhost name to loopback itself (RFC 6761).
    r = subprocess.run(
        [
            "curl", "-sS", "--max-time", "10",
            "-H", f"X-Access-Token: {served._envd_access_token}",
            f"http://{served.get_host(PORT)}/index.html",
        ],
        capture_output=True,
        text=True,
    )
    assert r.stdout == "hello from inside\n", r.stderr


def test_get_host_reaches_a_websocket_server_inside_the_sandbox(served: Sandbox, daemon) -> None:
    host, port = _door(daemon)
    key = base64.b64encode(os.urandom(16)).decode()
    with socket.create_connection((host, port), timeout=10) as c:
        c.sendall(
            (
                "GET /chat HTTP/1.1\r\n"
                f"Host: {served.get_host(WS_PORT)}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"X-Access-Token: {served._envd_access_token}\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = c.recv(4096)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head
        text = b"hello websocket"
        mask = os.urandom(4)
        c.sendall(bytes([0x81, 0x80 | len(text)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(text)))
        got = b""
        while len(got) < 2 + len(text):
            chunk = c.recv(4096)
            assert chunk, got
            got += chunk
        assert got[2:] == b"HELLO WEBSOCKET"


def test_a_port_is_refused_to_a_caller_without_access(served: Sandbox, daemon) -> None:
    host = served.get_host(PORT)
    # No credential at all.
    r = httpx.get(f"{daemon.url}/index.html", headers={"Host": host})
    assert r.status_code == 401, r.text
    assert "hello from inside" not in r.text
    # A token of the daemon that did not make this sandbox.
    stranger = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    r = httpx.get(f"{daemon.url}/index.html", headers={"Host": host, "X-Access-Token": stranger})
    assert r.status_code in (404, 502), r.text
    assert "hello from inside" not in r.text
    # A token that made it but may not run commands in it.
    reader = daemon.token("sandboxes:read", "sandboxes:write")
    own = Sandbox.create(timeout=60, api_key=reader)
    try:
        r = httpx.get(
            f"{daemon.url}/",
            headers={"Host": own.get_host(PORT), "X-Access-Token": own._envd_access_token},
        )
        assert r.status_code == 403, r.text
    finally:
        own.kill()
    # Another sandbox's access token.
    other = Sandbox.create(timeout=60)
    try:
        r = httpx.get(
            f"{daemon.url}/index.html",
            headers={"Host": host, "X-Access-Token": other._envd_access_token},
        )
        assert r.status_code == 401, r.text
    finally:
        other.kill()


def test_a_port_with_nothing_listening_is_told_as_such(served: Sandbox, daemon) -> None:
    r = httpx.get(
        f"{daemon.url}/",
        headers={"Host": served.get_host(9), "X-Access-Token": served._envd_access_token},
    )
    assert r.status_code == 502, r.text
    assert "nothing listens on port 9" in r.text


def test_nothing_new_listens_on_the_host_for_a_sandbox_port(served: Sandbox, daemon) -> None:
    httpx.get(
        f"{daemon.url}/index.html",
        headers={"Host": served.get_host(PORT), "X-Access-Token": served._envd_access_token},
    )
    new = _listening() - served._host_listeners_before  # type: ignore[attr-defined]
    ports = {p for _, p in new}
    assert PORT not in ports and WS_PORT not in ports, new


@pytest.mark.asyncio
async def test_the_async_client_answers_the_same_host_and_it_is_routed(daemon) -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.write("a/index.html", "async inside\n")
        await sbx.commands.run(
            f"cd /home/user/a && python3 -m http.server {PORT} --bind 127.0.0.1", background=True
        )
        _, port = _door(daemon)
        host = sbx.get_host(PORT)
        assert host == f"{PORT}-{sbx.sandbox_id}.localhost:{port}"
        async with httpx.AsyncClient() as c:
            for _ in range(100):
                r = await c.get(
                    f"{daemon.url}/index.html",
                    headers={"Host": host, "X-Access-Token": sbx._envd_access_token},
                )
                if r.status_code == 200:
                    break
                import asyncio

                await asyncio.sleep(0.1)
        assert r.text == "async inside\n", r.text
    finally:
        await sbx.kill()

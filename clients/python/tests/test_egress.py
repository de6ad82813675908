"""A sandbox's allowlist changed live, and ask-mode questions answered,
through the client (sync and async), against listeners on the host's
loopback that record every connection that reaches them."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Callable, List

import pytest

from conftest import Daemon
from warden_sandbox import (
    AsyncClient,
    AsyncSandbox,
    BadRequestError,
    Client,
    ConflictError,
    PermissionDeniedError,
    Sandbox,
)

# Python in the sandbox: resolve NAME, connect to PORT with a TLS
# ClientHello for it, wait a second for an answer.
CONNECT = r"""import socket, ssl, sys
name, port = sys.argv[1], int(sys.argv[2])
try:
    ip = socket.gethostbyname(name); print('resolved', flush=True)
except OSError:
    ip = '198.18.0.1'; print('nxdomain', flush=True)
ctx = ssl.create_default_context(); i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
t = ctx.wrap_bio(i, o, server_hostname=name)
try: t.do_handshake()
except ssl.SSLWantReadError: pass
s = socket.create_connection((ip, port), timeout=150); s.sendall(o.read())
s.settimeout(1)
try: s.recv(10)
except OSError: pass
print('done', flush=True)
"""


class Listener:
    """A server on 127.0.0.1 that counts the connections reaching it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.arrivals = 0
        self.held: List[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.arrivals += 1
            self.held.append(conn)


def connect_argv(name: str, port: int) -> List[str]:
    return ["python3", "-c", CONNECT, name, str(port)]


def test_a_name_allowed_live_is_reached_and_a_removed_one_is_not(wait_until: Callable[..., bool]) -> None:
    up = Listener()
    entry = f"live.test:{up.port}"
    spec = {"egress": {"domains": ["other.test"], "hosts": {"live.test": "127.0.0.1"}}}
    with Sandbox.create(spec=spec) as sb:
        assert "nxdomain" in sb.commands.run(connect_argv("live.test", up.port)).stdout
        assert up.arrivals == 0
        with pytest.raises(BadRequestError) as bad:
            sb.egress.allow([entry, "exa mple.test"])
        assert bad.value.field == "/allow/1"
        assert sb.egress.list() == ["other.test"]
        assert sb.egress.allow([entry]) == ["other.test", entry]
        assert "resolved" in sb.commands.run(connect_argv("live.test", up.port)).stdout
        assert wait_until(lambda: up.arrivals == 1, 5)
        assert sb.egress.remove([entry]) == ["other.test"]
        with pytest.raises(BadRequestError) as bad:
            sb.egress.remove([entry])
        assert bad.value.field == "/remove/0"
        assert "nxdomain" in sb.commands.run(connect_argv("live.test", up.port)).stdout
        assert up.arrivals == 1
        with pytest.raises(TypeError):
            sb.egress.allow(entry)  # type: ignore[arg-type]


def test_questions_are_listed_and_answered_once(daemon: Daemon, wait_until: Callable[..., bool]) -> None:
    up = Listener()
    spec = {"egress": {"ask": True, "hosts": {"asked.test": "127.0.0.1"}}}
    with Sandbox.create(spec=spec) as sb, Client() as client:
        h = sb.commands.run(connect_argv("asked.test", up.port), background=True)
        assert wait_until(lambda: len(client.approvals.list(sandbox=sb.id)) == 1, 10)
        (q,) = client.approvals.list(sandbox=sb.id)
        assert (q.sandbox, q.name, q.port, q.protocol) == (sb.id, "asked.test", up.port, "tls")
        assert q in client.approvals.list()
        client.approvals.answer(q, "allow_once")
        assert wait_until(lambda: up.arrivals == 1, 5)
        with pytest.raises(ConflictError):
            client.approvals.answer(q.id, "deny")
        h.wait()
        # allow_always: unasked from then on.
        h = sb.commands.run(connect_argv("asked.test", up.port), background=True)
        assert wait_until(lambda: len(client.approvals.list(sandbox=sb.id)) == 1, 10)
        client.approvals.answer(client.approvals.list(sandbox=sb.id)[0].id, "allow_always")
        h.wait()
        assert sb.egress.list() == [f"asked.test:{up.port}"]
        sb.commands.run(connect_argv("asked.test", up.port))
        assert wait_until(lambda: up.arrivals == 3, 5)
        with pytest.raises(ValueError):
            client.approvals.answer(q.id, "maybe")
    # A token without the approvals scope is refused.
    t = daemon.token("sandboxes:read", "sandboxes:write", "exec", "files")
    with Client(host=daemon.tcp_host, token=t) as client, pytest.raises(PermissionDeniedError):
        client.approvals.list()


async def test_the_async_client_changes_egress_and_answers_questions() -> None:
    up = Listener()
    spec = {"egress": {"ask": True, "domains": ["other.test"], "hosts": {"asked.test": "127.0.0.1"}}}
    async with await AsyncSandbox.create(spec=spec) as sb, AsyncClient() as client:
        entry = f"asked.test:{up.port}"
        assert await sb.egress.allow([entry]) == ["other.test", entry]
        assert await sb.egress.remove([entry]) == ["other.test"]
        assert await sb.egress.list() == ["other.test"]
        h = await sb.commands.run(connect_argv("asked.test", up.port), background=True)
        for _ in range(100):
            pending = await client.approvals.list(sandbox=sb.id)
            if pending:
                break
            await asyncio.sleep(0.1)
        assert [p.name for p in pending] == ["asked.test"]
        await client.approvals.answer(pending[0], "deny")
        await h.wait()
        assert up.arrivals == 0
        with pytest.raises(ConflictError):
            await client.approvals.answer(pending[0], "allow_once")

"""The client's connections: every sandbox of a process reaches its daemon
over one pool (per event loop for asyncio), seen from a socket in front of
the daemon's that counts what connects to it; and no TLS context (with its
CA bundle, the cost that made a create through the client four times
slower than the daemon) is made for a socket or plain HTTP."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import threading
from pathlib import Path
from typing import Iterator, List

import pytest

import warden_sandbox
from conftest import Daemon
from warden_sandbox import AsyncSandbox, Sandbox


class CountingSocket:
    """A Unix socket that forwards to the daemon's and counts the
    connections it accepts."""

    def __init__(self, path: str, upstream: str) -> None:
        self.path = path
        self.upstream = upstream
        self.accepted = 0
        self._open: List[socket.socket] = []
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind(path)
        self._listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def host(self) -> str:
        return f"unix://{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX)
            up.connect(self.upstream)
            self.accepted += 1
            self._open += [client, up]
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._listener.close()
        for s in self._open:
            s.close()


@pytest.fixture
def counting(daemon: Daemon, tmp_path: Path) -> Iterator[CountingSocket]:
    c = CountingSocket(str(tmp_path / "front.sock"), daemon.socket)
    try:
        yield c
    finally:
        warden_sandbox.close()
        c.close()


def test_sandboxes_of_one_daemon_share_one_connection(counting: CountingSocket, label: str) -> None:
    made = [Sandbox.create(host=counting.host, labels={"suite": label}, timeout=600) for _ in range(3)]
    try:
        for sb in made:
            assert sb.commands.run(["echo", sb.id]).stdout == f"{sb.id}\n"
        assert sorted(i.id for i in Sandbox.list(label=f"suite={label}", host=counting.host)) == sorted(
            sb.id for sb in made
        )
    finally:
        for sb in made:
            sb.kill()
            sb.close()
    assert counting.accepted == 1, f"{counting.accepted} connections for 3 sandboxes made, used and removed one after another"


def test_threads_share_the_pool_and_each_gets_its_own_answers(counting: CountingSocket) -> None:
    with Sandbox.create(host=counting.host, timeout=600) as a, Sandbox.create(host=counting.host, timeout=600) as b:
        wrong: List[str] = []

        def work(sb: Sandbox, n: int) -> None:
            for i in range(5):
                out = sb.commands.run(["echo", f"{sb.id}-{n}-{i}"]).stdout
                if out != f"{sb.id}-{n}-{i}\n":
                    wrong.append(out)

        threads = [threading.Thread(target=work, args=(sb, n)) for n, sb in enumerate([a, b] * 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wrong == []
    # At most one connection per request in flight at once.
    assert 1 <= counting.accepted <= len(threads) + 1


async def test_async_sandboxes_on_one_loop_share_its_pool(counting: CountingSocket) -> None:
    a = await AsyncSandbox.create(host=counting.host, timeout=600)
    b = await AsyncSandbox.create(host=counting.host, timeout=600)
    try:
        assert a._http.client is b._http.client
        assert (await a.commands.run("echo a")).stdout == "a\n"
        assert (await b.commands.run("echo b")).stdout == "b\n"
    finally:
        await a.kill()
        await b.kill()
        await warden_sandbox.aclose()
    assert counting.accepted == 1


def test_a_loops_pool_is_closed_when_asyncio_run_ends(counting: CountingSocket) -> None:
    async def use() -> object:
        async with await AsyncSandbox.create(host=counting.host, timeout=600) as sb:
            assert (await sb.commands.run("true")).exit_code == 0
            return sb._http.client

    first = asyncio.run(use())
    second = asyncio.run(use())
    assert first is not second, "a pool outlived its event loop"
    assert first.is_closed and second.is_closed  # type: ignore[attr-defined]


@pytest.fixture
def tls_contexts(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """Every TLS context made with a CA bundle from now on, by whom."""
    made: List[str] = []
    real_default = ssl.create_default_context
    real_load = ssl.SSLContext.load_verify_locations

    def create_default_context(*a: object, **kw: object) -> ssl.SSLContext:
        made.append("ssl.create_default_context")
        return real_default(*a, **kw)  # type: ignore[arg-type]

    def load_verify_locations(self: ssl.SSLContext, *a: object, **kw: object) -> None:
        made.append("SSLContext.load_verify_locations")
        real_load(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl, "create_default_context", create_default_context)
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", load_verify_locations)
    # Pools made by earlier tests would hide what a first request costs.
    warden_sandbox.close()
    return made


def test_no_tls_context_is_made_for_the_socket_or_plain_http(daemon: Daemon, tls_contexts: List[str]) -> None:
    token = daemon.token("sandboxes:write", "sandboxes:read", "exec")
    tls_contexts.clear()  # the set-up's own httpx client, made for the token
    for host, tok in ((daemon.unix_host, None), (daemon.tcp_host, token)):
        with Sandbox.create(host=host, token=tok, timeout=600) as sb:
            assert sb.commands.run("true").exit_code == 0

    async def use_async() -> None:
        for host, tok in ((daemon.unix_host, None), (daemon.tcp_host, token)):
            async with await AsyncSandbox.create(host=host, token=tok, timeout=600) as sb:
                assert (await sb.commands.run("true")).exit_code == 0

    asyncio.run(use_async())
    assert tls_contexts == []


def test_an_https_host_still_gets_a_verifying_tls_context_once(tls_contexts: List[str]) -> None:
    # Nothing listens there: only the making of the pool is seen.
    with pytest.raises(warden_sandbox.WardenConnectionError):
        Sandbox.list(host="https://127.0.0.1:9", token="t")
    assert "SSLContext.load_verify_locations" in tls_contexts, tls_contexts
    made = len(tls_contexts)
    with pytest.raises(warden_sandbox.WardenConnectionError):
        Sandbox.list(host="https://127.0.0.1:9", token="t")
    assert len(tls_contexts) == made, "a second request made a second TLS context"


def test_a_forked_child_starts_without_its_parents_connections() -> None:
    from warden_sandbox import _pool

    Sandbox.list()
    assert _pool._sync
    pid = os.fork()
    if pid == 0:  # the child: it must not write into the parent's connection
        code = 1
        try:
            code = 2 if _pool._sync else 0
            Sandbox.list()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    Sandbox.list()  # and the parent's still serves the parent

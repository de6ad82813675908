"""Terminal sessions (``GET /v1/sandboxes/{id}/pty``, a WebSocket): an
interactive process on a terminal inside the sandbox. :class:`Pty` and
:class:`PtyHandle` over ``websockets``' threaded client,
:class:`AsyncPty` and :class:`AsyncPtyHandle` over its asyncio client.

Binary frames are the terminal's bytes both ways; text frames are JSON
control messages (``resize``, ``signal``; ``started``, ``exit``,
``error`` from the daemon)."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Union
from urllib.parse import urlsplit

from websockets.asyncio import client as aws
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync import client as sws

from . import _pool
from ._core import Endpoint
from ._errors import WardenConnectionError, WardenError, error_from_response

if TYPE_CHECKING:
    from ._async import AsyncSandbox
    from ._sync import Sandbox

DataCallback = Callable[[bytes], Any]
AsyncDataCallback = Callable[[bytes], Union[Any, Awaitable[Any]]]

#: The HTTP status a problem's code stands for, when it comes in the session.
_STATUS = {
    "bad_request": 400,
    "forbidden": 403,
    "not_found": 422,
    "not_executable": 422,
    "conflict": 409,
    "quota": 429,
    "too_many_sessions": 429,
    "internal": 500,
}


def _url(ep: Endpoint, sandbox_id: str) -> str:
    base = urlsplit(ep.base_url)
    scheme = "wss" if base.scheme == "https" else "ws"
    return f"{scheme}://{base.netloc}/v1/sandboxes/{sandbox_id}/pty"


def _start_message(
    cmd: str | list[str] | None,
    rows: int,
    cols: int,
    envs: Mapping[str, str] | None,
    cwd: str | None,
) -> str:
    m: dict[str, Any] = {"type": "start", "rows": rows, "cols": cols}
    if isinstance(cmd, str):
        m["shell"] = cmd
    elif cmd is not None:
        m["argv"] = list(cmd)
    if envs:
        m["env"] = dict(envs)
    if cwd is not None:
        m["cwd"] = cwd
    return json.dumps(m)


def _problem(m: Mapping[str, Any]) -> WardenError:
    code = str(m.get("code") or "error")
    body = json.dumps({"code": code, "message": m.get("message", "")}).encode()
    return error_from_response(_STATUS.get(code, 400), body)


def _refused(e: InvalidStatus) -> WardenError:
    return error_from_response(e.response.status_code, e.response.body or b"", e.response.headers)


class _State:
    """What a session said: its PID, its end, its error."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.error: WardenError | None = None

    def take(self, text: str) -> str:
        """Record a control message; its type."""
        try:
            m = json.loads(text)
        except ValueError:
            return ""
        kind = str(m.get("type", ""))
        if kind == "started":
            self.pid = int(m["pid"])
        elif kind == "exit":
            self.exit_code = int(m["exit_status"])
            self.signal = m.get("signal")
        elif kind == "error":
            self.error = _problem(m)
        return kind

    def result(self) -> int:
        if self.exit_code is not None:
            return self.exit_code
        if self.error is not None:
            raise self.error
        raise WardenConnectionError(
            "the terminal session ended without the process's exit status", code="unreachable"
        )


def _input(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


class PtyHandle:
    """A process on a terminal in a sandbox. Its output goes to
    ``on_data`` (from a thread of its own) as it comes."""

    def __init__(self, ws: sws.ClientConnection, state: _State, on_data: DataCallback | None) -> None:
        self._ws = ws
        self._state = state
        self._on_data = on_data
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"PtyHandle(pid={self.pid!r}, exit_code={self.exit_code!r})"

    @property
    def pid(self) -> int | None:
        """The process's PID inside the sandbox."""
        return self._state.pid

    @property
    def exit_code(self) -> int | None:
        """Its exit status once it ended (128+N for signal N), else None."""
        return self._state.exit_code

    def _read(self) -> None:
        try:
            for m in self._ws:
                if isinstance(m, bytes):
                    if self._on_data is not None:
                        self._on_data(m)
                else:
                    self._state.take(m)
        except ConnectionClosed:
            pass

    def send_input(self, data: str | bytes) -> None:
        """Type ``data`` into the terminal."""
        self._ws.send(_input(data))

    def resize(self, rows: int, cols: int) -> None:
        """Give the terminal a new size (the process gets SIGWINCH)."""
        self._ws.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    def signal(self, signal: int | str) -> None:
        """Send a signal (a number, or a name such as ``"SIGINT"``)."""
        self._ws.send(json.dumps({"type": "signal", "signal": signal}))

    def kill(self) -> None:
        """SIGKILL the process; :meth:`wait` then returns 137."""
        self.signal("SIGKILL")

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to end; its exit status."""
        self._reader.join(timeout)
        if self._reader.is_alive():
            raise TimeoutError(f"the terminal's process still runs after {timeout}s")
        return self._state.result()

    def close(self) -> None:
        """Close the session; a process still running is killed."""
        self._ws.close()
        self._reader.join(10)


class Pty:
    """``sandbox.pty``: start processes on terminals."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def create(
        self,
        rows: int = 24,
        cols: int = 80,
        on_data: DataCallback | None = None,
        cmd: str | list[str] | None = None,
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60,
    ) -> PtyHandle:
        """Start ``cmd`` (a command line for ``sh -c``, or an argv; by
        default the sandbox's command, else ``sh``) on a terminal of
        ``rows`` by ``cols``; ``on_data`` gets its output bytes."""
        ep = self._sb._http.ep
        url = _url(ep, self._sb.id)
        try:
            if ep.socket:
                opening = sws.unix_connect(
                    _pool.socket_address(ep.socket), url, additional_headers=ep.headers(), open_timeout=timeout
                )
            else:
                opening = sws.connect(url, additional_headers=ep.headers(), open_timeout=timeout)
            # Entered as a context manager (what websockets asks for from
            # version 17 on, and what every version takes); the handle
            # closes it.
            ws = opening.__enter__()
        except InvalidStatus as e:
            raise _refused(e) from None
        except OSError as e:
            raise WardenConnectionError(
                f"cannot reach warden's daemon at {ep.where}: {e}", code="unreachable"
            ) from e
        state = _State()
        try:
            ws.send(_start_message(cmd, rows, cols, envs, cwd))
            while state.pid is None:
                m = ws.recv(timeout)
                if isinstance(m, str) and state.take(m) == "error" and state.error:
                    raise state.error
        except (ConnectionClosed, TimeoutError):
            ws.close()
            raise WardenConnectionError(
                "the terminal session closed before its process started", code="unreachable"
            ) from None
        except BaseException:
            ws.close()
            raise
        return PtyHandle(ws, state, on_data)


async def _give(cb: AsyncDataCallback | None, data: bytes) -> None:
    if cb is None:
        return
    r = cb(data)
    if inspect.isawaitable(r):
        await r


class AsyncPtyHandle:
    """The asynchronous twin of :class:`PtyHandle` (``on_data`` may be a
    coroutine function)."""

    def __init__(self, ws: aws.ClientConnection, state: _State, on_data: AsyncDataCallback | None) -> None:
        self._ws = ws
        self._state = state
        self._on_data = on_data
        self._reader = asyncio.ensure_future(self._read())

    def __repr__(self) -> str:
        return f"AsyncPtyHandle(pid={self.pid!r}, exit_code={self.exit_code!r})"

    @property
    def pid(self) -> int | None:
        return self._state.pid

    @property
    def exit_code(self) -> int | None:
        return self._state.exit_code

    async def _read(self) -> None:
        try:
            async for m in self._ws:
                if isinstance(m, bytes):
                    await _give(self._on_data, m)
                else:
                    self._state.take(m)
        except ConnectionClosed:
            pass

    async def send_input(self, data: str | bytes) -> None:
        await self._ws.send(_input(data))

    async def resize(self, rows: int, cols: int) -> None:
        await self._ws.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    async def signal(self, signal: int | str) -> None:
        await self._ws.send(json.dumps({"type": "signal", "signal": signal}))

    async def kill(self) -> None:
        await self.signal("SIGKILL")

    async def wait(self, timeout: float | None = None) -> int:
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"the terminal's process still runs after {timeout}s") from None
        return self._state.result()

    async def close(self) -> None:
        await self._ws.close()
        await asyncio.wait_for(self._reader, 10)


class AsyncPty:
    """``sandbox.pty`` of an :class:`~warden_sandbox.AsyncSandbox`."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def create(
        self,
        rows: int = 24,
        cols: int = 80,
        on_data: AsyncDataCallback | None = None,
        cmd: str | list[str] | None = None,
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60,
    ) -> AsyncPtyHandle:
        ep = self._sb._http.ep
        url = _url(ep, self._sb.id)
        try:
            if ep.socket:
                ws = await aws.unix_connect(
                    _pool.socket_address(ep.socket), url, additional_headers=ep.headers(), open_timeout=timeout
                )
            else:
                ws = await aws.connect(url, additional_headers=ep.headers(), open_timeout=timeout)
        except InvalidStatus as e:
            raise _refused(e) from None
        except OSError as e:
            raise WardenConnectionError(
                f"cannot reach warden's daemon at {ep.where}: {e}", code="unreachable"
            ) from e
        state = _State()
        try:
            await ws.send(_start_message(cmd, rows, cols, envs, cwd))
            while state.pid is None:
                m = await asyncio.wait_for(ws.recv(), timeout)
                if isinstance(m, str) and state.take(m) == "error" and state.error:
                    raise state.error
        except (ConnectionClosed, asyncio.TimeoutError):
            await ws.close()
            raise WardenConnectionError(
                "the terminal session closed before its process started", code="unreachable"
            ) from None
        except BaseException:
            await ws.close()
            raise
        return AsyncPtyHandle(ws, state, on_data)

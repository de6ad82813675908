"""Files of a sandbox's workspace: read, write, list, make directories,
move and remove (``GET|PUT|DELETE .../files``, ``.../files/list``,
``.../files/mkdir``, ``.../files/move``), and ``watch`` (the changes in a
directory as they happen, ``GET .../files/watch``); sync and asyncio."""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator, Union

import httpx

from . import _core
from ._errors import error_from_response

if TYPE_CHECKING:
    from ._async import AsyncSandbox
    from ._sync import Sandbox


@dataclass(frozen=True)
class FileEvent:
    """One change in the workspace."""

    #: ``created``, ``modified``, ``removed``, ``moved``; ``overflow`` when
    #: the host lost some (list again), ``gone`` when the watched
    #: directory itself went (the watch ends).
    type: str
    #: Relative to the workspace (for ``moved``: where it is now).
    path: str
    #: ``file`` or ``dir`` (None for ``modified`` and the others).
    kind: str | None = None
    #: For ``moved``: where it was.
    from_: str | None = None

    @staticmethod
    def of(v: dict[str, Any]) -> FileEvent:
        return FileEvent(
            type=str(v.get("type", "")),
            path=str(v.get("path", "")),
            kind=v.get("kind"),
            from_=v.get("from"),
        )


@dataclass(frozen=True)
class FileEntry:
    """An entry of a directory listing (``sb.files.list``)."""

    name: str
    #: Relative to the workspace.
    path: str
    #: ``file``, ``dir``, ``symlink`` or ``other``.
    kind: str
    size: int
    mode: int
    modified_ms: int

    @staticmethod
    def of(v: dict[str, Any]) -> FileEntry:
        return FileEntry(
            name=str(v.get("name", "")),
            path=str(v.get("path", "")),
            kind=str(v.get("kind", "")),
            size=int(v.get("size", 0)),
            mode=int(v.get("mode", 0)),
            modified_ms=int(v.get("modified_ms", 0)),
        )


def _content(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def _checked(http: Any, r: httpx.Response) -> httpx.Response:
    if r.status_code >= 400:
        raise error_from_response(r.status_code, r.content, r.headers)
    return r


EventCallback = Callable[[FileEvent], Any]
AsyncEventCallback = Callable[[FileEvent], Union[Any, Awaitable[Any]]]


def _shutdown(response: httpx.Response) -> None:
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _params(path: str, recursive: bool) -> dict[str, str]:
    return {"path": path, "recursive": "true" if recursive else "false"}


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    parser = _core.SseParser()
    for line in lines:
        ev = parser.feed(line)
        if ev is None:
            continue
        try:
            v = json.loads(ev[1])
        except ValueError:
            continue
        if isinstance(v, dict):
            yield v


class FileWatch:
    """The changes in a watched directory: iterate over it (each a
    :class:`FileEvent`), or give ``on_event`` to :meth:`Files.watch`;
    :meth:`close` ends it. Every change after :meth:`Files.watch`
    returned is reported."""

    def __init__(self, cm: Any, response: httpx.Response) -> None:
        self._cm = cm
        self._response = response
        self._events = _events(response.iter_lines())
        self._thread: threading.Thread | None = None
        # Up to `ready`: from here on nothing is missed.
        for v in self._events:
            if v.get("type") == "ready":
                break

    def __iter__(self) -> Iterator[FileEvent]:
        try:
            for v in self._events:
                e = FileEvent.of(v)
                yield e
                if e.type == "gone":
                    return
        except (httpx.TransportError, httpx.StreamClosed, RuntimeError):
            return

    def _feed(self, on_event: EventCallback) -> None:
        self._thread = threading.Thread(target=self._deliver, args=(on_event,), daemon=True)
        self._thread.start()

    def _deliver(self, on_event: EventCallback) -> None:
        for e in self:
            on_event(e)

    def close(self) -> None:
        # A thread blocked reading the stream is woken only by shutting
        # the connection down (closing it from here would not).
        _shutdown(self._response)
        try:
            self._cm.__exit__(None, None, None)
        except (httpx.TransportError, RuntimeError):
            pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def __enter__(self) -> FileWatch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Files:
    """``sandbox.files``: paths are relative to the workspace, or under
    ``/workspace``; one that leaves it raises ``BadRequestError``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _call(self, method: str, *parts: str, **kw: Any) -> httpx.Response:
        http = self._sb._http
        try:
            r = http.client.request(method, _core.sandbox_path(self._sb.id, *parts), headers=http.headers, **kw)
        except httpx.TransportError as e:
            raise _core.connection_error(http.ep, e) from e
        return _checked(http, r)

    def read(self, path: str) -> bytes:
        """The file's bytes."""
        return self._call("GET", "files", params={"path": path}).content

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        """Create or replace the file at once (its directory must exist)."""
        self._call(
            "PUT",
            "files",
            params={"path": path, "mode": format(mode, "04o")},
            content=_content(data),
        )

    def list(self, path: str = "") -> list[FileEntry]:
        """The entries of directory ``path`` (the workspace by default)."""
        v = self._call("GET", "files", "list", params={"path": path}).json()
        return [FileEntry.of(e) for e in v.get("entries", [])]

    def make_dir(self, path: str) -> None:
        """Make the directory, and its missing parents."""
        self._call("POST", "files", "mkdir", json={"path": path})

    def move(self, from_: str, to: str) -> None:
        self._call("POST", "files", "move", json={"from": from_, "to": to})

    def remove(self, path: str, recursive: bool = False) -> None:
        """Remove a file, an empty directory, or with ``recursive`` a tree."""
        self._call(
            "DELETE",
            "files",
            params={"path": path, "recursive": "true" if recursive else "false"},
        )

    def watch(
        self,
        path: str = "",
        on_event: EventCallback | None = None,
        recursive: bool = False,
    ) -> FileWatch:
        """Watch directory ``path`` (relative to the workspace, or under
        ``/workspace``; the workspace by default), its subdirectories too
        with ``recursive``. With ``on_event`` each change is handed to it
        from a thread of its own; otherwise iterate over the result."""
        http = self._sb._http
        cm = http.client.stream(
            "GET",
            _core.sandbox_path(self._sb.id, "files", "watch"),
            params=_params(path, recursive),
            headers={**http.headers, "accept": "text/event-stream"},
            timeout=httpx.Timeout(_core.DEFAULT_TIMEOUT, read=None),
        )
        try:
            r = cm.__enter__()
        except httpx.TransportError as e:
            raise _core.connection_error(http.ep, e) from e
        if r.status_code >= 400:
            body = r.read()
            cm.__exit__(None, None, None)
            raise error_from_response(r.status_code, body, r.headers)
        w = FileWatch(cm, r)
        if on_event is not None:
            w._feed(on_event)
        return w


class AsyncFileWatch:
    """The asynchronous twin of :class:`FileWatch` (``async for``)."""

    def __init__(self, cm: Any, response: httpx.Response) -> None:
        self._cm = cm
        self._response = response
        self._task: asyncio.Task[None] | None = None
        self._lines = response.aiter_lines()
        self._parser = _core.SseParser()

    async def _next(self) -> dict[str, Any] | None:
        async for line in self._lines:
            ev = self._parser.feed(line)
            if ev is None:
                continue
            try:
                v = json.loads(ev[1])
            except ValueError:
                continue
            if isinstance(v, dict):
                return v
        return None

    async def _ready(self) -> None:
        while True:
            v = await self._next()
            if v is None or v.get("type") == "ready":
                return

    async def __aiter__(self) -> AsyncIterator[FileEvent]:
        try:
            while True:
                v = await self._next()
                if v is None:
                    return
                e = FileEvent.of(v)
                yield e
                if e.type == "gone":
                    return
        except (httpx.TransportError, httpx.StreamClosed, RuntimeError):
            return

    async def _deliver(self, on_event: AsyncEventCallback) -> None:
        async for e in self:
            r = on_event(e)
            if inspect.isawaitable(r):
                await r

    async def close(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        try:
            await self._cm.__aexit__(None, None, None)
        except (httpx.TransportError, RuntimeError):
            pass

    async def __aenter__(self) -> AsyncFileWatch:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncFiles:
    """``sandbox.files`` of an :class:`~warden_sandbox.AsyncSandbox`."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox

    async def _call(self, method: str, *parts: str, **kw: Any) -> httpx.Response:
        http = self._sb._http
        try:
            r = await http.client.request(method, _core.sandbox_path(self._sb.id, *parts), headers=http.headers, **kw)
        except httpx.TransportError as e:
            raise _core.connection_error(http.ep, e) from e
        return _checked(http, r)

    async def read(self, path: str) -> bytes:
        return (await self._call("GET", "files", params={"path": path})).content

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def write(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        await self._call(
            "PUT",
            "files",
            params={"path": path, "mode": format(mode, "04o")},
            content=_content(data),
        )

    async def list(self, path: str = "") -> list[FileEntry]:
        v = (await self._call("GET", "files", "list", params={"path": path})).json()
        return [FileEntry.of(e) for e in v.get("entries", [])]

    async def make_dir(self, path: str) -> None:
        await self._call("POST", "files", "mkdir", json={"path": path})

    async def move(self, from_: str, to: str) -> None:
        await self._call("POST", "files", "move", json={"from": from_, "to": to})

    async def remove(self, path: str, recursive: bool = False) -> None:
        await self._call(
            "DELETE",
            "files",
            params={"path": path, "recursive": "true" if recursive else "false"},
        )

    async def watch(
        self,
        path: str = "",
        on_event: AsyncEventCallback | None = None,
        recursive: bool = False,
    ) -> AsyncFileWatch:
        http = self._sb._http
        cm = http.client.stream(
            "GET",
            _core.sandbox_path(self._sb.id, "files", "watch"),
            params=_params(path, recursive),
            headers={**http.headers, "accept": "text/event-stream"},
            timeout=httpx.Timeout(_core.DEFAULT_TIMEOUT, read=None),
        )
        try:
            r = await cm.__aenter__()
        except httpx.TransportError as e:
            raise _core.connection_error(http.ep, e) from e
        if r.status_code >= 400:
            body = await r.aread()
            await cm.__aexit__(None, None, None)
            raise error_from_response(r.status_code, body, r.headers)
        w = AsyncFileWatch(cm, r)
        await w._ready()
        if on_event is not None:
            w._task = asyncio.ensure_future(w._deliver(on_event))
        return w

"""The connection pools every sandbox, command and client of a process
shares: one ``httpx.Client`` per daemon, and one ``httpx.AsyncClient`` per
daemon and asyncio event loop, each made on first use. What is one
caller's (its token) goes with each request, never into a pool.

A pool over the Unix socket or plain ``http://`` is made without a TLS
context: httpx loads the whole CA bundle for every transport it makes
unless given a context (about 24 ms here, three times what a warm create
costs the daemon), and a socket never speaks TLS. ``https://`` gets
httpx's own context, once per pool.

Sync pools are closed at interpreter exit or by :func:`close`; an event
loop's pools when :func:`asyncio.run` (any ``asyncio.Runner``) shuts the
loop down, or by :func:`aclose` on it. A forked child starts with no
pools: the parent's connections stay the parent's.

A socket whose path is longer than a Unix socket's address holds (107
bytes: a deep temporary or home directory) is reached through its
directory's descriptor (:func:`socket_address`)."""

from __future__ import annotations

import asyncio
import atexit
import http.cookiejar
import os
import ssl
import threading
from typing import Any, AsyncIterator, Dict, Tuple

import httpx

from . import _core
from ._core import Endpoint
from ._errors import WardenConnectionError

Key = Tuple[str, str]

_lock = threading.Lock()
_sync: Dict[Key, httpx.Client] = {}
_async: Dict[Tuple[asyncio.AbstractEventLoop, Key], Tuple[httpx.AsyncClient, AsyncIterator[None]]] = {}
_no_tls: ssl.SSLContext | None = None


#: The bytes of a path a Unix socket's address holds (``sun_path``, 108
#: with its NUL).
SUN_PATH_MAX = 107

#: Directories of sockets whose paths do not fit an address, opened once
#: (``O_PATH``) and kept for the life of the process: a pool's address
#: names the descriptor, which must never be closed under it (its number
#: could then be another directory's).
_dirs: Dict[str, int] = {}
_dirs_lock = threading.Lock()


def _too_long(path: str, why: str) -> WardenConnectionError:
    return WardenConnectionError(
        f"the daemon's socket {path} is {len(os.fsencode(path))} bytes long, more than a Unix "
        f"socket's address holds ({SUN_PATH_MAX}), and {why}: give the daemon a shorter state "
        "directory (WARDEN_STATE_DIR), point WARDEN_HOST at a shorter symbolic link to the "
        "socket's directory (unix:///LINK/daemon.sock), or reach the daemon over TCP "
        "(`warden serve --listen 127.0.0.1:PORT`, WARDEN_HOST=http://127.0.0.1:PORT)",
        code="socket_path_too_long",
    )


def _same_dir(fd: int, directory: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(directory)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def socket_address(path: str) -> str:
    """The address to connect to for the daemon's socket at ``path``:
    ``path`` itself when it fits a Unix socket's address; else
    ``/proc/self/fd/N/NAME``, through a descriptor of its directory opened
    here, which the kernel resolves through the directory it names (as
    the daemon binds it under a long state directory). A name that fits
    neither way is refused with what to do instead."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        return path
    directory, name = os.path.split(path)
    if not os.path.isdir("/proc/self/fd"):
        raise _too_long(path, "this process has no /proc to reach it through its directory")
    with _dirs_lock:
        fd = _dirs.get(directory)
        if fd is None or not _same_dir(fd, directory):
            try:
                fd = os.open(directory or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as e:
                raise _too_long(path, f"its directory cannot be opened ({e.strerror})") from e
            _dirs[directory] = fd
    short = f"/proc/self/fd/{fd}/{name}"
    if len(os.fsencode(short)) > SUN_PATH_MAX:
        raise _too_long(path, f"its name alone ({name!r}) does not fit either")
    return short


def _key(ep: Endpoint) -> Key:
    return ("unix", ep.socket) if ep.socket else ("url", ep.base_url)


def _verify(ep: Endpoint) -> Any:
    """httpx's ``verify`` for ``ep``'s transport. For a socket or plain
    HTTP, a bare context made once per process and never used: given a
    context, httpx loads no CA bundle."""
    global _no_tls
    if ep.socket is None and ep.base_url.startswith("https://"):
        return True
    if _no_tls is None:
        _no_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return _no_tls


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """A pool serves every token of its process: a cookie one answer set
    (the dashboard's login does) must not go out with another's request."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


def _options(ep: Endpoint) -> Dict[str, Any]:
    return {
        "base_url": ep.base_url,
        "timeout": httpx.Timeout(_core.DEFAULT_TIMEOUT),
        "trust_env": False,
        "cookies": http.cookiejar.CookieJar(policy=_NoCookies()),
    }


def sync_client(ep: Endpoint) -> httpx.Client:
    """The process's pool for ``ep``'s daemon (safe to use from any thread)."""
    key = _key(ep)
    with _lock:
        c = _sync.get(key)
        if c is None or c.is_closed:
            uds = socket_address(ep.socket) if ep.socket else None
            transport = httpx.HTTPTransport(uds=uds, verify=_verify(ep))
            c = _sync[key] = httpx.Client(transport=transport, **_options(ep))
        return c


async def _closes_with_loop(client: httpx.AsyncClient) -> AsyncIterator[None]:
    """Waits at its ``yield`` for as long as its loop runs: a loop's
    shutdown (``loop.shutdown_asyncgens()``, which ``asyncio.run`` calls
    before it closes the loop) closes it, and with it the pool, while the
    loop its connections belong to still runs."""
    try:
        yield
    finally:
        await client.aclose()


def async_client(ep: Endpoint) -> httpx.AsyncClient:
    """The pool for ``ep``'s daemon on the running event loop. A loop's
    connections cannot serve another loop, so each has its own."""
    loop = asyncio.get_running_loop()
    key = (loop, _key(ep))
    with _lock:
        for k in [k for k in _async if k[0].is_closed()]:
            del _async[k]  # a loop closed without shutting down: its sockets go with it
        found = _async.get(key)
        if found is not None and not found[0].is_closed:
            return found[0]
        uds = socket_address(ep.socket) if ep.socket else None
        transport = httpx.AsyncHTTPTransport(uds=uds, verify=_verify(ep))
        c = httpx.AsyncClient(transport=transport, **_options(ep))
        keeper = _closes_with_loop(c)
        # Taking the first step registers the generator with the running
        # loop (its first-iteration hook) and leaves it at its yield; no
        # await is needed, as it awaits nothing before.
        step = keeper.__anext__()
        try:
            step.send(None)
        except StopIteration:
            pass
        _async[key] = (c, keeper)
        return c


def close() -> None:
    """Close this process's synchronous connection pools (a later request
    opens a new one). Sandboxes stay as they are on the daemon."""
    with _lock:
        clients = list(_sync.values())
        _sync.clear()
    for c in clients:
        c.close()


async def aclose() -> None:
    """Close the running event loop's connection pools."""
    loop = asyncio.get_running_loop()
    with _lock:
        mine = [(k, v) for k, v in _async.items() if k[0] is loop]
        for k, _ in mine:
            del _async[k]
    for _, (_, keeper) in mine:
        await keeper.aclose()  # type: ignore[attr-defined]  # closes its pool


def _forget_in_child() -> None:
    global _lock, _sync, _async
    _lock = threading.Lock()
    _sync, _async = {}, {}


atexit.register(close)
os.register_at_fork(after_in_child=_forget_in_child)

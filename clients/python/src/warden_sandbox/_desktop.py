"""A desktop sandbox's screen, mouse, keyboard and browser, and how a
browser-automation client reaches its Chromium (``cdp_url()``, proxied by
the daemon with the caller's token; ``vnc_url()`` for the screen's stream)
(``sb.desktop``), shaped like the desktop SDKs: ``screenshot()`` gives PNG
bytes, ``left_click(x, y)``, ``write(text)``, ``press(keys)``,
``open(url)`` drive it. The sandbox must have been made with the
``desktop`` profile. Looking needs the ``desktop:view`` scope, touching
``desktop:control``; a point off the screen, an unknown action or keys
that are not key names are an :class:`InvalidRequestError` and nothing is
done."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union
from urllib.parse import quote, urlsplit

import httpx

from . import _core
from ._core import Endpoint
from ._errors import WardenError

if TYPE_CHECKING:  # pragma: no cover
    from ._async import AsyncSandbox
    from ._sync import Sandbox

Keys = Union[str, List[str]]


def _base(ep: Endpoint, sandbox_id: str) -> str:
    return f"/v1/sandboxes/{quote(sandbox_id, safe='')}/desktop"


def _cdp_url(ep: Endpoint, sandbox_id: str) -> str:
    if ep.socket:
        raise WardenError(
            "a browser-automation client connects over TCP: reach the daemon at "
            "http://HOST:PORT (`warden serve --listen`) with a token that has desktop:control"
        )
    return ep.base_url.rstrip("/") + _base(ep, sandbox_id) + "/cdp"


def _vnc_url(ep: Endpoint, sandbox_id: str, view_only: bool) -> str:
    base = urlsplit(ep.base_url)
    scheme = "wss" if base.scheme == "https" else "ws"
    query = "?view_only=true" if view_only else ""
    return f"{scheme}://{base.netloc}{_base(ep, sandbox_id)}/vnc{query}"


def _headers(ep: Endpoint) -> Dict[str, str]:
    return {"authorization": f"Bearer {ep.token}"} if ep.token else {}

#: A screenshot, an action: the program runs in the sandbox.
_TIMEOUT = httpx.Timeout(60.0)


@dataclass
class DesktopInfo:
    """A desktop sandbox's screen: where tools and people reach it, whether
    it is up, and what this token may do with it."""

    display: str
    width: int
    height: int
    #: The VNC stream (a WebSocket path of the daemon).
    vnc: str
    #: The browser's DevTools endpoint (a WebSocket path of the daemon).
    cdp: str
    #: The dashboard's page for people to watch and take over.
    stream_url: str
    running: bool
    #: Its programs (X server, window manager, browser, ...) and their state.
    services: List[Dict[str, Any]] = field(default_factory=list)
    #: Its VNC server answers: the screen can be watched now.
    screen: bool = False
    #: Its browser's DevTools answer (``cdp_url()``).
    devtools: bool = False
    #: This token may drive it (``desktop:control``); otherwise it only
    #: watches.
    control: bool = False

    @property
    def up(self) -> bool:
        """The screen and the browser both answer."""
        return self.screen and self.devtools

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "DesktopInfo":
        return cls(
            display=str(d["display"]),
            width=int(d["width"]),
            height=int(d["height"]),
            vnc=str(d["vnc"]),
            cdp=str(d["cdp"]),
            stream_url=str(d["stream_url"]),
            running=bool(d.get("running", False)),
            services=list(d.get("services") or []),
            screen=bool(d.get("screen", False)),
            devtools=bool(d.get("devtools", False)),
            control=bool(d.get("control", False)),
        )


def _not_up(sandbox_id: str, timeout: float, info: "DesktopInfo") -> str:
    programs = ", ".join(
        f"{s.get('name')}: {s.get('state')}" + (f" ({s['last_exit']})" if s.get("last_exit") else "")
        for s in info.services
    )
    return (
        f"the desktop of sandbox {sandbox_id} was not up within {timeout:g}s "
        f"(screen {info.screen}, devtools {info.devtools}; {programs or 'no programs reported'})"
    )


def _point(x: Optional[int], y: Optional[int]) -> Dict[str, Any]:
    if (x is None) != (y is None):
        raise ValueError("give both x and y, or neither (to click where the pointer is)")
    return {} if x is None else {"x": int(x), "y": int(y)}  # type: ignore[arg-type]


def _scroll(dx: int, dy: int, direction: Optional[str], amount: Optional[int]) -> Dict[str, Any]:
    if direction is not None:
        body: Dict[str, Any] = {"direction": direction}
        if amount is not None:
            body["amount"] = int(amount)
        return body
    return {"dx": int(dx), "dy": int(dy)}


class Desktop:
    """A desktop sandbox's screen and input (``sb.desktop``)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, *rest: str) -> str:
        return _core.sandbox_path(self._sb.id, "desktop", *rest)

    def _act(self, action: str, body: Dict[str, Any]) -> None:
        self._sb._http.request("POST", self._path(action), json=body, timeout=_TIMEOUT)

    def info(self) -> DesktopInfo:
        """The screen's size, where its stream and debugger are, whether
        they answer yet, and whether this token may drive them."""
        return DesktopInfo.from_json(self._sb._http.json("GET", self._path()))

    def wait_until_up(self, timeout: float = 90.0) -> DesktopInfo:
        """Wait until the screen and the browser answer (a desktop's
        programs start with its sandbox); a :class:`WardenError` after
        ``timeout`` seconds, with the programs' last state."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.info()
            if info.up:
                return info
            if time.monotonic() > deadline:
                raise WardenError(_not_up(self._sb.id, timeout, info))
            time.sleep(0.25)

    def screenshot(self) -> bytes:
        """The screen now, as PNG bytes."""
        return self._sb._http.request("GET", self._path("screenshot"), timeout=_TIMEOUT).content

    def move_mouse(self, x: int, y: int) -> None:
        self._act("move_mouse", _point(x, y))

    def left_click(self, x: Optional[int] = None, y: Optional[int] = None) -> None:
        """Click at (x, y), or where the pointer is."""
        self._act("left_click", _point(x, y))

    def right_click(self, x: Optional[int] = None, y: Optional[int] = None) -> None:
        self._act("right_click", _point(x, y))

    def double_click(self, x: Optional[int] = None, y: Optional[int] = None) -> None:
        self._act("double_click", _point(x, y))

    def scroll(
        self, dx: int = 0, dy: int = 0, *, direction: Optional[str] = None, amount: Optional[int] = None
    ) -> None:
        """Scroll by steps (``dy`` > 0 down, ``dx`` > 0 right), or
        ``direction="down", amount=3``."""
        self._act("scroll", _scroll(dx, dy, direction, amount))

    def write(self, text: str) -> None:
        """Type ``text`` where the keyboard's focus is."""
        self._act("write", {"text": text})

    def press(self, keys: Keys) -> None:
        """Press keys as xdotool names them: ``"Return"``, ``"ctrl+l"``,
        or a list of them in turn."""
        self._act("press", {"keys": keys})

    def open(self, url: str) -> None:
        """Open an http(s) URL in the browser (a new tab). What it may load
        is the sandbox's egress allowlist's to say."""
        self._act("open", {"url": url})

    def cdp_url(self) -> str:
        """The DevTools endpoint for ``connect_over_cdp`` (an ``http://``
        URL of the daemon; its ``/json/version`` answers a
        ``webSocketDebuggerUrl`` on the daemon too). Needs the daemon over
        TCP and a token with ``desktop:control``."""
        return _cdp_url(self._sb._http.ep, self._sb.id)

    def cdp_headers(self) -> Dict[str, str]:
        """The headers to send with every DevTools request (the token)."""
        return _headers(self._sb._http.ep)

    def vnc_url(self, view_only: bool = False) -> str:
        """The screen's WebSocket (RFB in binary frames, for noVNC and
        the like); send :meth:`cdp_headers` with it. Without
        ``desktop:control`` the daemon passes no input, whatever is asked."""
        return _vnc_url(self._sb._http.ep, self._sb.id, view_only)


class AsyncDesktop:
    """As :class:`Desktop`, with coroutines (``sb.desktop``)."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    def _path(self, *rest: str) -> str:
        return _core.sandbox_path(self._sb.id, "desktop", *rest)

    async def _act(self, action: str, body: Dict[str, Any]) -> None:
        await self._sb._http.request("POST", self._path(action), json=body, timeout=_TIMEOUT)

    async def info(self) -> DesktopInfo:
        return DesktopInfo.from_json(await self._sb._http.json("GET", self._path()))

    async def wait_until_up(self, timeout: float = 90.0) -> DesktopInfo:
        deadline = time.monotonic() + timeout
        while True:
            info = await self.info()
            if info.up:
                return info
            if time.monotonic() > deadline:
                raise WardenError(_not_up(self._sb.id, timeout, info))
            await asyncio.sleep(0.25)

    async def screenshot(self) -> bytes:
        r = await self._sb._http.request("GET", self._path("screenshot"), timeout=_TIMEOUT)
        return r.content

    async def move_mouse(self, x: int, y: int) -> None:
        await self._act("move_mouse", _point(x, y))

    async def left_click(self, x: Optional[int] = None, y: Optional[int] = None) -> None:
        await self._act("left_click", _point(x, y))

    async def right_click(self, x: Optional[int] = None, y: Optional[int] = None) -> None:
        await self._act("right_click", _point(x, y))

    async def double_click(self, x: Optional[int] = None, y: Optional[int] = None) -> None:
        await self._act("double_click", _point(x, y))

    async def scroll(
        self, dx: int = 0, dy: int = 0, *, direction: Optional[str] = None, amount: Optional[int] = None
    ) -> None:
        await self._act("scroll", _scroll(dx, dy, direction, amount))

    async def write(self, text: str) -> None:
        await self._act("write", {"text": text})

    async def press(self, keys: Keys) -> None:
        await self._act("press", {"keys": keys})

    async def open(self, url: str) -> None:
        await self._act("open", {"url": url})

    def cdp_url(self) -> str:
        return _cdp_url(self._sb._http.ep, self._sb.id)

    def cdp_headers(self) -> Dict[str, str]:
        return _headers(self._sb._http.ep)

    def vnc_url(self, view_only: bool = False) -> str:
        return _vnc_url(self._sb._http.ep, self._sb.id, view_only)

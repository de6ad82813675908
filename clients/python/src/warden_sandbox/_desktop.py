"""A desktop sandbox's screen and browser (``/v1/sandboxes/{id}/desktop/...``):
what it serves, and how a browser-automation client reaches its Chromium.

DevTools are proxied by the daemon (``.../desktop/cdp``) with the caller's
token, to the browser on the sandbox's own loopback; nothing of the sandbox
listens on the host. Playwright::

    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(
            sb.desktop.cdp_url(), headers=sb.desktop.cdp_headers()
        )
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict
from urllib.parse import quote, urlsplit

from ._core import Endpoint
from ._errors import WardenError

if TYPE_CHECKING:
    from ._async import AsyncSandbox
    from ._sync import Sandbox


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


class Desktop:
    """``sandbox.desktop``: a desktop sandbox's screen and browser."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def status(self) -> Dict[str, Any]:
        """What the sandbox serves (``screen``, ``devtools``) and whether
        this token may drive it (``control``)."""
        return dict(self._sb._http.json("GET", _base(self._sb._http.ep, self._sb.id) + "/status"))

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
    """``sandbox.desktop`` of an :class:`~warden_sandbox.AsyncSandbox`."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    async def status(self) -> Dict[str, Any]:
        return dict(await self._sb._http.json("GET", _base(self._sb._http.ep, self._sb.id) + "/status"))

    def cdp_url(self) -> str:
        return _cdp_url(self._sb._http.ep, self._sb.id)

    def cdp_headers(self) -> Dict[str, str]:
        return _headers(self._sb._http.ep)

    def vnc_url(self, view_only: bool = False) -> str:
        return _vnc_url(self._sb._http.ep, self._sb.id, view_only)

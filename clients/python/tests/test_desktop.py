"""A desktop sandbox's browser driven by Playwright over the daemon's CDP
proxy (``sandbox.desktop.cdp_url()``): a page the test serves, reached
through an allowed name, is read from the DOM; a denied name does not
load; a token without ``desktop:control`` gets no DevTools."""

from __future__ import annotations

import http.server
import threading
from typing import Iterator, Tuple

import pytest

import desktop
from warden_sandbox import PermissionDeniedError, Sandbox, WardenError

PAGE = b"<!doctype html><title>t</title><p id=value>forty-two</p><script>document.getElementById('value').dataset.ready='yes'</script>"


@pytest.fixture
def page_server() -> Iterator[int]:
    """A web page on the host's loopback, for the sandbox's browser to load
    through its egress proxy."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()


@pytest.fixture
def browser_sandbox(daemon, page_server: int, label: str) -> Iterator[Tuple[str, int]]:
    why = desktop.missing(browser=True)
    if why:
        pytest.skip(f"the host lacks {why} for a test desktop")
    name = f"desk-{label}"
    spec = {
        "egress": {
            "domains": [f"page.test:{page_server}"],
            "allow_http": True,
            "hosts": {"page.test": "127.0.0.1", "denied.test": "127.0.0.1"},
        }
    }
    with daemon.owner() as owner:
        desktop.start(owner, name, spec, browser=True)
        try:
            yield name, page_server
        finally:
            owner.delete(f"/v1/sandboxes/{name}", params={"force": "true"})


def test_playwright_reads_the_dom_of_a_page_over_the_daemons_cdp_proxy(daemon, browser_sandbox) -> None:
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (its client only)")
    name, port = browser_sandbox
    token = daemon.token("desktop:view", "desktop:control", sandbox=name)
    sb = Sandbox.connect(name, host=daemon.tcp_host, token=token)
    url = sb.desktop.cdp_url()
    assert url == f"{daemon.tcp_host}/v1/sandboxes/{name}/desktop/cdp"
    assert sb.desktop.status()["devtools"] is True
    with playwright.sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(url, headers=sb.desktop.cdp_headers())
        try:
            context = browser.contexts[0] if browser.contexts else browser.new_context()
            page = context.new_page()
            r = page.goto(f"http://page.test:{port}/", timeout=30000)
            assert r is not None and r.status == 200, page.content()
            page.wait_for_selector("#value[data-ready=yes]", timeout=15000)
            assert page.text_content("#value") == "forty-two"
            # A name the sandbox may not reach does not load (the same
            # server, under a name its profile does not allow).
            try:
                denied = page.goto(f"http://denied.test:{port}/", timeout=15000)
                assert denied is None or denied.status != 200
            except playwright.Error:
                pass
            assert "forty-two" not in page.content()
        finally:
            browser.close()


def test_devtools_need_desktop_control_and_tcp(daemon, browser_sandbox) -> None:
    name, _ = browser_sandbox
    viewer = Sandbox.connect(name, host=daemon.tcp_host, token=daemon.token("desktop:view"))
    assert viewer.desktop.status()["control"] is False
    with pytest.raises(PermissionDeniedError):
        viewer._http.json("GET", f"/v1/sandboxes/{name}/desktop/cdp/json/version")
    owner = Sandbox.connect(name, host=daemon.unix_host)
    with pytest.raises(WardenError, match="over TCP"):
        owner.desktop.cdp_url()

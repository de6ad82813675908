"""A desktop sandbox's browser driven by Playwright over the daemon's CDP
proxy (``sandbox.desktop.cdp_url()``): the sandbox is made from the shipped
``desktop`` profile, as a person makes one; a page the test serves,
reached through an allowed name, is read from the DOM; a denied name does
not load (its own listener sees nothing); a token without
``desktop:control`` gets no DevTools. One desktop serves the module."""

from __future__ import annotations

from typing import Iterator, Tuple

import pytest

import desktop
from warden_sandbox import PermissionDeniedError, Sandbox, WardenError

PAGE = b"<!doctype html><title>t</title><p id=value>forty-two</p><script>document.getElementById('value').dataset.ready='yes'</script>"
DENIED = b"<!doctype html><title>denied</title><p id=value>must-not-load</p>"

pytestmark = pytest.mark.skipif(bool(desktop.missing()), reason=desktop.missing() or "")


@pytest.fixture(scope="module")
def servers() -> Iterator[Tuple[desktop.Recorder, desktop.Recorder]]:
    """The allowed page and the denied one, each on the host's loopback
    with its own record of what reached it."""
    yield from desktop.recorders(PAGE, DENIED)


@pytest.fixture(scope="module")
def desk(daemon, servers) -> Iterator[Sandbox]:  # type: ignore[no-untyped-def]
    page, denied = servers
    spec = {
        "egress": {
            "domains": [f"page.test:{page.port}"],
            "allow_http": True,
            "hosts": {"page.test": "127.0.0.1", "denied.test": "127.0.0.1"},
        }
    }
    sb = desktop.start(daemon.unix_host, spec)
    try:
        yield sb
    finally:
        sb.kill()
        sb.close()


def test_playwright_reads_the_dom_of_a_page_over_the_daemons_cdp_proxy(daemon, desk, servers) -> None:  # type: ignore[no-untyped-def]
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (its client only)")
    page_server, denied_server = servers
    # desktop:control alone: it grants desktop:view.
    token = daemon.token("desktop:control", sandbox=desk.id)
    sb = Sandbox.connect(desk.id, host=daemon.tcp_host, token=token)
    url = sb.desktop.cdp_url()
    assert url == f"{daemon.tcp_host}/v1/sandboxes/{desk.id}/desktop/cdp"
    info = sb.desktop.info()
    assert info.devtools and info.control, info
    with playwright.sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(url, headers=sb.desktop.cdp_headers())
        try:
            context = browser.contexts[0] if browser.contexts else browser.new_context()
            page = context.new_page()
            r = page.goto(f"http://page.test:{page_server.port}/", timeout=30000)
            assert r is not None and r.status == 200, page.content()
            page.wait_for_selector("#value[data-ready=yes]", timeout=15000)
            assert page.text_content("#value") == "forty-two"
            assert page_server.arrivals, "the page was read without reaching its server"
            # A name the sandbox may not reach does not load, and its
            # server never hears of it.
            try:
                denied = page.goto(f"http://denied.test:{denied_server.port}/", timeout=15000)
                assert denied is None or denied.status != 200
            except playwright.Error:
                pass
            assert "must-not-load" not in page.content()
            assert denied_server.arrivals == [], "a denied name reached its server"
        finally:
            browser.close()


def test_devtools_need_desktop_control_and_tcp(daemon, desk) -> None:  # type: ignore[no-untyped-def]
    viewer = Sandbox.connect(desk.id, host=daemon.tcp_host, token=daemon.token("desktop:view", sandbox=desk.id))
    info = viewer.desktop.info()
    assert info.screen and not info.control, info
    with pytest.raises(PermissionDeniedError):
        viewer._http.json("GET", f"/v1/sandboxes/{desk.id}/desktop/cdp/json/version")
    owner = Sandbox.connect(desk.id, host=daemon.unix_host)
    with pytest.raises(WardenError, match="over TCP"):
        owner.desktop.cdp_url()

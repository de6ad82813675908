"""A desktop sandbox through the client, sync and async: its screen as PNG
bytes, the mouse, the keyboard and the browser driven, bad input refused
with the API's error (and nothing done), a view-only token that sees but
may not touch. One desktop sandbox serves the whole module; the tests are
skipped, with the reason, on a host without the desktop's programs."""

from __future__ import annotations

import asyncio
import struct
from typing import Iterator

import pytest

import desktop
from warden_sandbox import (
    AsyncSandbox,
    ConflictError,
    InvalidRequestError,
    PermissionDeniedError,
    Sandbox,
)

pytestmark = pytest.mark.skipif(bool(desktop.missing()), reason=desktop.missing() or "")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    assert data[12:16] == b"IHDR"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


@pytest.fixture(scope="module")
def page() -> Iterator[desktop.Recorder]:
    for (r,) in desktop.recorders(b"<html><body style='background:rgb(0,200,0)'>hello</body></html>"):
        yield r


@pytest.fixture(scope="module")
def desk(daemon, page: desktop.Recorder) -> Iterator[Sandbox]:  # type: ignore[no-untyped-def]
    spec = {
        "egress": {
            "domains": [f"page.test:{page.port}"],
            "allow_http": True,
            "hosts": {"page.test": "127.0.0.1"},
        }
    }
    sb = desktop.start(daemon.unix_host, spec)
    try:
        yield sb
    finally:
        sb.kill()
        sb.close()


def test_the_screen_comes_back_as_a_png_of_the_desktops_size(desk: Sandbox) -> None:
    shot = desk.desktop.screenshot()
    info = desk.desktop.info()
    assert png_size(shot) == (info.width, info.height) == (1280, 800)
    assert info.running and info.screen and info.devtools and info.control, info
    assert info.display == ":99"
    assert info.vnc == f"/v1/sandboxes/{desk.id}/desktop/vnc"
    assert info.cdp == f"/v1/sandboxes/{desk.id}/desktop/cdp"
    assert info.stream_url == f"/#/sandboxes/{desk.id}/desktop"
    assert any(s["name"] == "browser" for s in info.services)


def test_mouse_keyboard_and_browser_are_driven(desk: Sandbox, page: desktop.Recorder, wait_until) -> None:  # type: ignore[no-untyped-def]
    desk.desktop.move_mouse(100, 200)
    desk.desktop.left_click(640, 400)
    desk.desktop.left_click()
    desk.desktop.double_click(640, 400)
    desk.desktop.right_click(640, 400)
    desk.desktop.press("Escape")
    desk.desktop.scroll(dy=3)
    desk.desktop.scroll(direction="up", amount=2)
    desk.desktop.write("hello from the client")
    desk.desktop.press(["ctrl+a", "BackSpace"])
    before = len(page.arrivals)
    desk.desktop.open(f"http://page.test:{page.port}/from-python")
    assert wait_until(lambda: len(page.arrivals) > before, timeout=30), "the page was never requested"
    assert "/from-python" in page.arrivals


def test_bad_input_is_refused_and_nothing_is_done(desk: Sandbox) -> None:
    with pytest.raises(InvalidRequestError) as e:
        desk.desktop.left_click(5000, 10)
    assert "off the screen" in str(e.value)
    with pytest.raises(InvalidRequestError):
        desk.desktop.press("--clearmodifiers")
    with pytest.raises(InvalidRequestError):
        desk.desktop.open("file:///etc/passwd")
    with pytest.raises(ValueError):
        desk.desktop.left_click(5)


def test_a_view_only_token_sees_but_may_not_touch(daemon, desk: Sandbox) -> None:  # type: ignore[no-untyped-def]
    viewer = daemon.token("desktop:view", sandbox=desk.id)
    # Not as a context manager: its end would remove the sandbox.
    sb = Sandbox.connect(desk.id, host=daemon.tcp_host, token=viewer)
    try:
        assert png_size(sb.desktop.screenshot()) == (1280, 800)
        assert sb.desktop.info().control is False
        with pytest.raises(PermissionDeniedError) as e:
            sb.desktop.left_click(10, 10)
        assert "desktop:control" in str(e.value)
    finally:
        sb.close()


def test_a_control_token_sees_and_touches(daemon, desk: Sandbox) -> None:  # type: ignore[no-untyped-def]
    # desktop:control alone: it grants desktop:view.
    sb = Sandbox.connect(desk.id, host=daemon.tcp_host, token=daemon.token("desktop:control", sandbox=desk.id))
    try:
        assert png_size(sb.desktop.screenshot()) == (1280, 800)
        assert sb.desktop.info().control is True
        sb.desktop.move_mouse(10, 10)
    finally:
        sb.close()


def test_a_sandbox_without_a_desktop_says_so(daemon) -> None:  # type: ignore[no-untyped-def]
    with Sandbox.create(host=daemon.unix_host) as sb:
        with pytest.raises(ConflictError) as e:
            sb.desktop.screenshot()
        assert "desktop" in str(e.value)


def test_the_async_client_drives_the_same_desktop(daemon, desk: Sandbox) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        sb = await AsyncSandbox.connect(desk.id, host=daemon.unix_host)
        try:
            assert png_size(await sb.desktop.screenshot()) == (1280, 800)
            await sb.desktop.move_mouse(20, 20)
            await sb.desktop.press("Escape")
            info = await sb.desktop.info()
            assert info.running
            with pytest.raises(InvalidRequestError):
                await sb.desktop.move_mouse(-1, 0)
        finally:
            await sb.close()

    asyncio.run(go())

"""Desktop sandboxes for the tests: the one place that says how a test
gets one. It is what a person gets: a sandbox made through the client with
the shipped ``desktop`` profile (its supervisor starts the X server, window
manager, panel, VNC server and Chromium), waited for with
``sb.desktop.wait_until_up()`` (``GET .../desktop`` until its screen and
its browser answer). Nothing here starts a program of the desktop itself."""

from __future__ import annotations

import http.server
import shutil
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from warden_sandbox import Sandbox

#: The desktop's programs, as the runtime checks for them.
PROGRAMS = ["Xvfb", "dbus-daemon", "xfwm4", "xfce4-panel", "x11vnc", "chromium", "xdotool", "maim", "certutil"]

#: How long a desktop may take to come up (about 3 s on an idle machine).
UP_WITHIN = 120.0


def missing() -> Optional[str]:
    """Why a desktop cannot run on this host, if it cannot."""
    lacking = [p for p in PROGRAMS if shutil.which(p) is None]
    if lacking:
        return f"the host lacks the desktop's programs {lacking} (.ci/run installs them)"
    return None


def start(host: str, spec: Dict[str, Any]) -> Sandbox:
    """A sandbox from the ``desktop`` profile with ``spec`` merged over it,
    made through the daemon at ``host`` as the owner, its desktop up."""
    sb = Sandbox.create(profile="desktop", spec=spec, host=host)
    began = time.monotonic()
    try:
        sb.desktop.wait_until_up(timeout=UP_WITHIN)
    except BaseException:
        sb.kill()
        sb.close()
        raise
    print(f"the desktop of {sb.id} was up in {time.monotonic() - began:.1f}s")
    return sb


class Recorder:
    """An HTTP server on the host's loopback that serves ``body`` and
    writes down the path of every request that reaches it."""

    def __init__(self, body: bytes) -> None:
        self.arrivals: List[str] = []
        arrivals, page = self.arrivals, body

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                arrivals.append(self.path)
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *a: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def recorders(*bodies: bytes) -> Iterator[Tuple[Recorder, ...]]:
    """Recorders for a fixture, shut down after it."""
    rs = tuple(Recorder(b) for b in bodies)
    try:
        yield rs
    finally:
        for r in rs:
            r.close()

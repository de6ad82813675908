"""The documented DevTools flow (``sandbox.desktop.cdp_url()`` and
``cdp_headers()`` handed to Playwright's ``connect_over_cdp``) against a
sandbox whose code answers DevTools discovery itself: code in a desktop
can kill its Chromium and listen on its 127.0.0.1:9222. Its debugger URL
climbs out of ``.../desktop/cdp/`` to another sandbox's terminal. Before
(outside review 20, finding 2), the daemon kept that path, Playwright
normalised the dot segments and opened ``/v1/sandboxes/tgt/pty?shell=...``
with the client's token, and the command ran in ``tgt``. Now the daemon
refuses the URL (502 ``devtools_url_refused``): Playwright fails to
connect and nothing runs in the other sandbox. No desktop programs are
needed: a plain sandbox plays the desktop."""

from __future__ import annotations

import time

import pytest

from warden_sandbox import Sandbox

FAKE = r"""
import http.server, json, sys
url = sys.argv[1]
body = json.dumps({"Browser": "Chrome/140", "Protocol-Version": "1.3", "webSocketDebuggerUrl": url}).encode()
lst = json.dumps([{"id": "A1B2", "type": "page", "url": "about:blank", "webSocketDebuggerUrl": url}]).encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = lst if self.path.startswith("/json/list") else body
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", 9222), H).serve_forever()
"""


def test_a_bent_debugger_url_does_not_take_playwright_to_another_sandbox(daemon) -> None:  # type: ignore[no-untyped-def]
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (its client only)")
    # The client holds a token that reaches both sandboxes, as the
    # review's admin did.
    token = daemon.token("admin")
    with Sandbox.create(host=daemon.tcp_host, token=token, name="dk") as dk, Sandbox.create(
        host=daemon.tcp_host, token=token, name="tgt"
    ) as tgt:
        bent = "ws://127.0.0.1:9222/devtools/../../../../tgt/pty?shell=echo%20pwned%20%3E%20%2Fworkspace%2FPWNED"
        dk.files.write("/workspace/fake_cdp.py", FAKE)
        dk.commands.run(["python3", "/workspace/fake_cdp.py", bent], background=True)
        deadline = time.monotonic() + 30
        while dk.commands.run("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9222), 1)'").exit_code != 0:
            assert time.monotonic() < deadline, "the fake DevTools server did not start"
            time.sleep(0.2)
        with playwright.sync_playwright() as p:
            with pytest.raises(playwright.Error):
                browser = p.chromium.connect_over_cdp(dk.desktop.cdp_url(), headers=dk.desktop.cdp_headers(), timeout=15000)
                browser.close()
        time.sleep(1)
        left = tgt.commands.run("ls /workspace").stdout
        assert "PWNED" not in left, "the bent URL ran a command in the other sandbox"

"""A desktop in a sandbox for the tests: the one place that says how one
is made. Today an ordinary sandbox created through the daemon in which the
test starts Chromium with its DevTools on the sandbox's own 127.0.0.1:9222
(and, for the screen, Xvfb and x11vnc on 127.0.0.1:5900); with the
``desktop`` profile this becomes a create with that profile."""

from __future__ import annotations

import shutil
import time
from typing import Any, Dict, Optional

CHROMIUM = ["chromium", "chromium-browser"]


def missing(browser: bool = True, screen: bool = False) -> Optional[str]:
    """The package the host lacks for a test desktop, if any."""
    if browser and not any(shutil.which(c) for c in CHROMIUM):
        return "chromium"
    if screen:
        for b, pkg in [("Xvfb", "xvfb"), ("x11vnc", "x11vnc")]:
            if not shutil.which(b):
                return pkg
    return None


def start(owner: Any, name: str, spec: Dict[str, Any], browser: bool = True, screen: bool = False) -> None:
    """Create sandbox ``name`` (``owner``: an httpx client on the daemon's
    owner socket) with ``spec``, and start its desktop's services."""
    full = {"resources": {"memory": "2G", "pids": 512}, "filesystem": {"tmp_size": "512M"}}
    full.update(spec)
    r = owner.post("/v1/sandboxes", json={"name": name, "spec": full})
    assert r.status_code == 201, r.text

    def background(argv: list) -> None:
        r = owner.post(f"/v1/sandboxes/{name}/exec", json={"argv": argv, "background": True})
        assert r.status_code < 300, r.text

    if screen:
        background(["Xvfb", ":99", "-screen", "0", "1024x768x24", "-nolisten", "tcp", "-retro"])
        background(["sh", "-c", "sleep 1; x11vnc -display :99 -localhost -rfbport 5900 -forever -shared -nopw -quiet"])
    if browser:
        chromium = next(c for c in CHROMIUM if shutil.which(c))
        # Chromium's own sandbox needs namespaces that warden's seccomp
        # filter refuses: warden is the sandbox here.
        background([
            chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--user-data-dir=/tmp/chromium",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=9222", "about:blank",
        ])
    deadline = time.monotonic() + 60
    while True:
        st = owner.get(f"/v1/sandboxes/{name}/desktop/status").json()
        if (not browser or st.get("devtools")) and (not screen or st.get("screen")):
            return
        assert time.monotonic() < deadline, f"the desktop of {name} did not come up: {st}"
        time.sleep(0.2)

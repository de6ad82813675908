"""A sandbox created through the SDK with a network allowlist reaches only
the allowed name: two real listeners on the host's loopback, one per name
(pinned there by the owner's profile, the template), record every
connection that arrives."""

from __future__ import annotations

import socket
import threading
from typing import List

from e2b import Sandbox

# Resolve NAME, connect to PORT with a TLS ClientHello for it (the proxy
# decides by the name), wait a second for an answer.
CONNECT = r"""import socket, ssl, sys
name, port = sys.argv[1], int(sys.argv[2])
try:
    ip = socket.gethostbyname(name); print('resolved', flush=True)
except OSError:
    ip = '198.18.0.1'; print('nxdomain', flush=True)
ctx = ssl.create_default_context(); i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
t = ctx.wrap_bio(i, o, server_hostname=name)
try: t.do_handshake()
except ssl.SSLWantReadError: pass
try:
    s = socket.create_connection((ip, port), timeout=10); s.sendall(o.read())
    s.settimeout(1)
    try: s.recv(10)
    except OSError: pass
    print('connected', flush=True)
except OSError as e:
    print('refused', e, flush=True)
"""


class Listener:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.arrivals = 0
        self.held: List[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.arrivals += 1
            self.held.append(conn)


def test_an_allowlisted_name_is_reached_and_no_other_is() -> None:
    allowed, denied = Listener(), Listener()
    sbx = Sandbox.create(
        template="e2bnet",
        timeout=120,
        network={
            "allow_out": [f"allowed.test:{allowed.port}"],
            "deny_out": ["0.0.0.0/0"],
        },
    )
    try:
        sbx.files.write("c.py", CONNECT)
        ok = sbx.commands.run(f"python3 c.py allowed.test {allowed.port}", timeout=60)
        assert "connected" in ok.stdout, ok
        assert allowed.arrivals == 1
        for port in (denied.port, allowed.port):
            r = sbx.commands.run(f"python3 c.py denied.test {port}", timeout=60)
            assert "connected" not in r.stdout or denied.arrivals == 0, r
        assert denied.arrivals == 0
        assert allowed.arrivals == 1
    finally:
        sbx.kill()

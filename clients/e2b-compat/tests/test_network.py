"""A sandbox created through the SDK reaches only the allowed name: two
real listeners on the host's loopback, one per name (pinned there by the
owner's profile, the template), record every connection that arrives. A
name the client allows itself (allow_out) never uses the owner's pins."""

from __future__ import annotations

import socket
import threading
from typing import List

from e2b import Sandbox

from conftest import Daemon

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


def test_the_templates_name_is_reached_and_a_name_the_client_adds_never_uses_its_pin(
    daemon: Daemon,
) -> None:
    allowed, denied = Listener(), Listener()
    # The owner's template allows one name on one port and pins both names
    # to the host's loopback.
    name = f"e2bnet-{allowed.port}"
    (daemon.state.parent / "config" / "warden" / "profiles" / f"{name}.yaml").write_text(
        "egress:\n"
        f"  domains: [\"allowed.test:{allowed.port}\"]\n"
        "  hosts: {allowed.test: 127.0.0.1, denied.test: 127.0.0.1}\n"
    )
    # The client adds the other pinned name itself: a name an E2B client
    # gives reaches public addresses only, never the owner's pins (it could
    # otherwise reach any port of a pinned host).
    sbx = Sandbox.create(
        template=name,
        timeout=120,
        network={"allow_out": [f"denied.test:{denied.port}"]},
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

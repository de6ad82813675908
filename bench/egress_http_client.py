"""Client for bench/egress.sh's request mode: HTTPS/1.1 to bench.test on
one kept-alive connection.

    egress_http_client.py HOST PORT CA requests N   -> requests per second
    egress_http_client.py HOST PORT CA bytes N      -> MB/s of one download
"""
import http.client, ssl, sys, time

host, port, ca, what, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
ctx = ssl.create_default_context(cafile=ca)
ctx.set_alpn_protocols(["http/1.1"])

class Conn(http.client.HTTPSConnection):
    """Connects to HOST, and names bench.test in TLS and Host."""
    def connect(self):
        import socket
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = ctx.wrap_socket(sock, server_hostname="bench.test")

c = Conn("bench.test", port, context=ctx)
start = time.perf_counter()
if what == "requests":
    for _ in range(n):
        c.request("GET", "/r")
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or len(body) != 2:
            raise SystemExit(f"bad answer: {r.status} {body[:200]!r}")
    print(f"{n / (time.perf_counter() - start):.1f}")
else:
    c.request("GET", f"/bytes/{n}")
    r = c.getresponse()
    total = 0
    while True:
        d = r.read(1 << 20)
        if not d:
            break
        total += len(d)
    if r.status != 200 or total != n:
        raise SystemExit(f"short download: {r.status} {total} of {n} bytes")
    print(f"{n / 1e6 / (time.perf_counter() - start):.1f}")

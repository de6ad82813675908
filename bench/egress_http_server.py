"""HTTPS server for bench/egress.sh's request mode: HTTP/1.1 with
keep-alive on loopback. `GET /r` answers 2 bytes; `GET /bytes/N` answers N
bytes."""
import http.server, ssl, sys

port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
CHUNK = b"x" * (1 << 20)

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Small answers at once, not after the client's delayed ACK.
    disable_nagle_algorithm = True

    def do_GET(self):
        n = int(self.path.rsplit("/", 1)[1]) if self.path.startswith("/bytes/") else 2
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        while n > 0:
            k = min(n, len(CHUNK))
            self.wfile.write(CHUNK[:k])
            n -= k

    def log_message(self, *args):
        pass

ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
ctx.set_alpn_protocols(["http/1.1"])
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
srv.daemon_threads = True
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()

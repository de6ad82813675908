"""Server side of bench/egress.sh: a TLS server on loopback. On each
connection: the handshake, then a line `GO N` is answered with N bytes and
a close; a connection that says nothing after the handshake (the
connection-rate test) is just closed."""
import socket, ssl, sys, threading
port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
ctx.num_tickets = 0  # a ticket per connection would be bytes the rate test does not need
chunk = b"x" * (1 << 20)
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port)); l.listen(1024)
def serve(c):
    try:
        t = ctx.wrap_socket(c, server_side=True)
        line = t.recv(64)
        if line.startswith(b"GO "):
            left = int(line.split()[1])
            while left > 0:
                left -= t.send(chunk[:min(left, len(chunk))])
        t.close()
    except (OSError, ValueError):
        c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()

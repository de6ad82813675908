"""Server side of bench/egress.sh: on each connection, wait for a line, then
send SIZE bytes and close (connections that send nothing are just closed)."""
import socket, sys, threading
port, size = int(sys.argv[1]), int(sys.argv[2])
chunk = b"x" * (1 << 20)
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port)); l.listen(512)
def serve(c):
    try:
        if c.recv(16):
            left = size
            while left > 0:
                n = c.send(chunk[:min(left, len(chunk))]); left -= n
    except OSError:
        pass
    c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()

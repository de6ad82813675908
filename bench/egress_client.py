"""Client side of bench/egress.sh: TLS throughput and new TLS connections
per second to bench.test, straight (`direct HOST PORT`), through a CONNECT
proxy (`tunnel PROXYHOST PROXYPORT`), or through warden's transparent
proxy from inside a sandbox (`transparent`: the name is connected to as a
program would, and the proxy decides on the ClientHello's SNI).

    egress_client.py WAY [PROXYHOST PROXYPORT] PORT CA bytes N
    egress_client.py WAY [PROXYHOST PROXYPORT] PORT CA conns N CONCURRENCY

prints MB/s, or connections per second (each: connect, TLS handshake,
close)."""
import socket, ssl, sys, threading, time

NAME = "bench.test"

def opener(way, args):
    if way == "direct":
        host, rest = args[0], args[1:]
        port = int(rest[0])
        return (lambda: socket.create_connection((host, port))), rest
    if way == "transparent":
        port = int(args[0])
        return (lambda: socket.create_connection((NAME, port))), args
    proxy, rest = (args[0], int(args[1])), args[2:]
    port = int(rest[0])
    def tunnel():
        s = socket.create_connection(proxy)
        s.sendall(f"CONNECT {NAME}:{port} HTTP/1.1\r\nHost: {NAME}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            d = s.recv(4096)
            if not d:
                raise SystemExit(f"proxy closed: {head!r}")
            head += d
        if b" 200 " not in head.split(b"\r\n")[0]:
            raise SystemExit(f"proxy refused: {head!r}")
        return s
    return tunnel, rest

def main():
    way = sys.argv[1]
    connect, rest = opener(way, sys.argv[2:])
    ca, what, n = rest[1], rest[2], int(rest[3])
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["bench"])
    def tls():
        return ctx.wrap_socket(connect(), server_hostname=NAME)
    if what == "bytes":
        t = tls()
        t.sendall(f"GO {n}\n".encode())
        total, start = 0, time.perf_counter()
        buf = bytearray(1 << 20)
        while True:
            got = t.recv_into(buf)
            if not got:
                break
            total += got
        secs = time.perf_counter() - start
        if total != n:
            raise SystemExit(f"short download: {total} of {n} bytes")
        print(f"{total / secs / 1e6:.1f}")
    else:
        conc = int(rest[4])
        per = n // conc
        def worker():
            for _ in range(per):
                tls().close()
        start = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(conc)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(f"{per * conc / (time.perf_counter() - start):.0f}")

main()

"""Client side of bench/egress.sh: throughput and connection rate through a
CONNECT proxy (warden's or Squid's), or straight to the server."""
import socket, sys, threading, time

def tunnel(proxy, target):
    s = socket.create_connection(proxy)
    s.sendall(f"CONNECT {target[0]}:{target[1]} HTTP/1.1\r\nHost: {target[0]}:{target[1]}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(4096)
        if not d:
            raise SystemExit(f"proxy closed: {head!r}")
        head += d
    if b" 200 " not in head.split(b"\r\n")[0]:
        raise SystemExit(f"proxy refused: {head!r}")
    return s

def download(s):
    s.sendall(b"GO\n")
    total, start = 0, time.perf_counter()
    buf = bytearray(1 << 20)
    while True:
        n = s.recv_into(buf)
        if not n:
            break
        total += n
    return total, time.perf_counter() - start

def main():
    mode = sys.argv[1]
    if mode == "direct":
        host, port = sys.argv[2], int(sys.argv[3])
        total, secs = download(socket.create_connection((host, port)))
        print(f"{total / secs / 1e6:.1f}")
    elif mode == "tunnel":
        proxy = (sys.argv[2], int(sys.argv[3])); target = (sys.argv[4], int(sys.argv[5]))
        total, secs = download(tunnel(proxy, target))
        print(f"{total / secs / 1e6:.1f}")
    elif mode == "cps":
        proxy = (sys.argv[2], int(sys.argv[3])); target = (sys.argv[4], int(sys.argv[5]))
        n, conc = int(sys.argv[6]), int(sys.argv[7])
        per = n // conc
        def worker():
            for _ in range(per):
                s = tunnel(proxy, target); s.close()
        start = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(conc)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(f"{per * conc / (time.perf_counter() - start):.0f}")

main()

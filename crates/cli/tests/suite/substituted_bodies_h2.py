# Runs inside the sandbox: HTTP/2 connections to a secret's host whose
# bodies are substituted (--secret-in-body), so the proxy reads each body
# whole before it goes upstream. On each connection, stream 1 asks for
# /stall, which the upstream answers only once /release has been asked for
# (the session's one HTTP/1.1 upstream connection stays busy meanwhile);
# then several streams each POST a large body. A client of its own: literal
# HPACK, no Huffman; responses are told apart by their bodies.
# Usage: HOST PORT CONNECTIONS STREAMS MIB
import socket, ssl, struct, sys, threading, time

HOST, PORT = sys.argv[1], int(sys.argv[2])
CONNS, STREAMS, MIB = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
AUTH = HOST + ":" + str(PORT)


def hpack_int(v, prefix):
    top = (1 << prefix) - 1
    if v < top:
        return bytes([v])
    out = [top]
    v -= top
    while v >= 128:
        out.append((v & 127) | 128)
        v >>= 7
    out.append(v)
    return bytes(out)


def hpack(headers):
    out = b""
    for k, v in headers:
        k, v = k.encode(), v.encode()
        out += b"\x00" + hpack_int(len(k), 7) + k + hpack_int(len(v), 7) + v
    return out


class H2:
    def __init__(self):
        ctx = ssl.create_default_context(cafile="/run/warden/ca-bundle.crt")
        ctx.set_alpn_protocols(["h2"])
        self.s = ctx.wrap_socket(socket.create_connection((HOST, PORT)), server_hostname=HOST)
        assert self.s.selected_alpn_protocol() == "h2", self.s.selected_alpn_protocol()
        self.cv = threading.Condition()
        self.conn_win, self.init_win, self.max_frame = 65535, 65535, 16384
        self.stream_win, self.body, self.ended, self.closed = {}, {}, set(), False
        self.s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + self.frame(4, 0, 0, b""))
        # The server's first frame read here, before the reader's thread
        # starts: the TLS 1.3 session tickets ahead of it are then read, and
        # never while another thread writes (OpenSSL's objects are not
        # for two threads at once).
        self.one_frame()
        threading.Thread(target=self.reader, daemon=True).start()

    def frame(self, typ, flags, sid, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + struct.pack(">I", sid) + payload

    def send(self, data):
        with self.cv:
            self.s.sendall(data)

    def recvn(self, n):
        b = b""
        while len(b) < n:
            d = self.s.recv(n - len(b))
            if not d:
                raise EOFError
            b += d
        return b

    def reader(self):
        try:
            while True:
                self.one_frame()
        except Exception:
            with self.cv:
                self.closed = True
                self.cv.notify_all()

    def one_frame(self):
        h = self.recvn(9)
        ln, typ, fl = int.from_bytes(h[:3], "big"), h[3], h[4]
        sid = struct.unpack(">I", h[5:9])[0] & 0x7FFFFFFF
        p = self.recvn(ln) if ln else b""
        with self.cv:
            if typ == 4 and not fl & 1:
                for i in range(0, len(p), 6):
                    ident, val = struct.unpack(">HI", p[i : i + 6])
                    if ident == 4:
                        for k in self.stream_win:
                            self.stream_win[k] += val - self.init_win
                        self.init_win = val
                    if ident == 5:
                        self.max_frame = val
                self.s.sendall(self.frame(4, 1, 0, b""))
            elif typ == 8:
                inc = struct.unpack(">I", p)[0] & 0x7FFFFFFF
                if sid == 0:
                    self.conn_win += inc
                else:
                    self.stream_win[sid] = self.stream_win.get(sid, self.init_win) + inc
            elif typ == 6 and not fl & 1:
                self.s.sendall(self.frame(6, 1, 0, p))
            elif typ == 0:
                self.body[sid] = (self.body.get(sid, b"") + p)[:300]
                if fl & 1:
                    self.ended.add(sid)
            elif typ == 1:
                self.body.setdefault(sid, b"")
                if fl & 1:
                    self.ended.add(sid)
            elif typ == 3:
                self.ended.add(sid)
                self.body.setdefault(sid, b"")
            self.cv.notify_all()

    def headers(self, sid, hdrs, end):
        with self.cv:
            self.stream_win.setdefault(sid, self.init_win)
        self.send(self.frame(1, 4 | (1 if end else 0), sid, hpack(hdrs)))

    def data(self, sid, payload):
        # Sends until the whole body is out, or the stream was answered
        # (a refusal answers before the body has arrived).
        off = 0
        while off < len(payload):
            with self.cv:
                deadline = time.time() + 60
                while not (self.closed or sid in self.body) and min(self.conn_win, self.stream_win[sid]) <= 0:
                    if time.time() > deadline:
                        return off
                    self.cv.wait(1)
                if self.closed or sid in self.body:
                    return off
                n = min(self.conn_win, self.stream_win[sid], self.max_frame, len(payload) - off)
                self.conn_win -= n
                self.stream_win[sid] -= n
                last = off + n >= len(payload)
                self.s.sendall(self.frame(0, 1 if last else 0, sid, payload[off : off + n]))
            off += n
        return off

    def answer(self, sid, within):
        with self.cv:
            deadline = time.time() + within
            while not self.closed and sid not in self.ended and time.time() < deadline:
                self.cv.wait(1)
            if sid not in self.body:
                return "none"
            return self.body[sid].decode("latin1").replace("\n", " ").strip() or "reset"


BODY = b"a" * (MIB << 20)
conns = []


def one(i):
    c = H2()
    conns.append((i, c))
    c.headers(1, [(":method", "GET"), (":scheme", "https"), (":authority", AUTH), (":path", "/stall")], True)
    time.sleep(0.5)
    ts = []
    for k in range(STREAMS):
        sid = 3 + 2 * k
        path = "/upload/%d/%d" % (i, sid)
        c.headers(sid, [(":method", "POST"), (":scheme", "https"), (":authority", AUTH), (":path", path), ("content-length", str(len(BODY)))], False)
        t = threading.Thread(target=c.data, args=(sid, BODY))
        t.start()
        ts.append(t)
    for t in ts:
        t.join()


threads = [threading.Thread(target=one, args=(i,)) for i in range(CONNS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("sent", flush=True)
# Held a while with every body sent: the host samples the supervisor.
for _ in range(3):
    for _, c in conns:
        try:
            c.send(c.frame(6, 0, 0, b"12345678"))
        except Exception:
            pass
    time.sleep(1)
r = H2()
r.headers(1, [(":method", "GET"), (":scheme", "https"), (":authority", AUTH), (":path", "/release")], True)
print("release", r.answer(1, 30), flush=True)
for i, c in sorted(conns, key=lambda x: x[0]):
    for k in range(STREAMS):
        sid = 3 + 2 * k
        print("post /upload/%d/%d %s" % (i, sid, c.answer(sid, 60)), flush=True)
print("done", flush=True)

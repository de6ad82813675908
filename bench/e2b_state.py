"""A sandbox's state through the E2B door, with the unmodified SDK:
`pause()` then `connect()` (processes frozen in place and let go on; and
to its files, started afresh on connect), and `fork(count=4)` (the native
fork: four running sandboxes with the source's files), p50 and p99 over
RUNS rounds; the native API's pause and resume on the same daemon beside
them. Figures only: nothing here is a timed test.

    python bench/e2b_state.py SOCKET E2B_URL [RUNS]
"""
import http.client, json, os, socket, sys, time

sock, e2b_url = sys.argv[1:3]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 20


class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sock)


def owner(method, path, body=None):
    c = Unix("warden")
    c.request(method, path, json.dumps(body) if body is not None else None,
              {"content-type": "application/json"})
    r = c.getresponse()
    data = r.read()
    assert r.status < 300, (method, path, r.status, data)
    return json.loads(data) if data else None


token = owner("POST", "/v1/tokens", {"name": "bench-state", "scopes": ["admin"]})["token"]
os.environ.update(E2B_API_URL=e2b_url, E2B_SANDBOX_URL=e2b_url, E2B_API_KEY=token)
from e2b import Sandbox  # noqa: E402  (reads the environment above)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


rows = {}
sbx = Sandbox.create(timeout=3600)
sbx.commands.run("sleep 3600", background=True)
try:
    rows["pause() + connect(), memory kept"] = [
        timed(lambda: (sbx.pause(), Sandbox.connect(sbx.sandbox_id))) for _ in range(runs)
    ]
    rows["pause(mode=filesystem) + connect()"] = [
        timed(lambda: (sbx.pause(mode="filesystem"), Sandbox.connect(sbx.sandbox_id)))
        for _ in range(max(1, runs // 4))
    ]
    sid = sbx.sandbox_id
    rows["native pause + resume"] = [
        timed(lambda: (owner("POST", f"/v1/sandboxes/{sid}/pause"),
                       owner("POST", f"/v1/sandboxes/{sid}/resume")))
        for _ in range(runs)
    ]
    sbx.files.write("seed.bin", b"x" * (8 << 20))
    forks = []

    def fork4():
        made = sbx.fork(count=4, timeout=600)
        assert all(isinstance(f, Sandbox) for f in made), made
        forks.extend(made)

    rows["fork(count=4), 8 MiB of files"] = []
    for _ in range(max(1, runs // 4)):
        rows["fork(count=4), 8 MiB of files"].append(timed(fork4))
        for f in forks:
            f.kill()
        forks.clear()
finally:
    sbx.kill()

print(f"{'':<40} {'p50':>10} {'p99':>10}   runs")
for name, xs in rows.items():
    print(f"{name:<40} {pct(xs, .5):>8.1f}ms {pct(xs, .99):>8.1f}ms   {len(xs)}")

"""Load against `warden serve` on its Unix socket, from one long-lived
client with a kept-alive HTTP connection (as an SDK drives it):
create-to-first-command (cold, and warm from the daemon's pool of the
`bench` profile), a command's round trip, and the memory of idle
sandboxes. Prints one JSON object.

    python3 bench/daemon_client.py SOCKET [RUNS] [IDLE]
"""
import http.client, json, os, socket, sys, time

path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 300
idle = int(sys.argv[3]) if len(sys.argv) > 3 else 50


class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)


c = Conn("warden")


def call(method, url, body=None):
    c.request(method, url, body=json.dumps(body) if body is not None else None,
              headers={"content-type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status >= 300:
        raise SystemExit(f"{method} {url}: {r.status} {data!r}")
    return json.loads(data) if data else None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000


# Cold: create (started) then the first command.
cold = []
for i in range(min(runs, 60)):
    t = time.perf_counter()
    call("POST", "/v1/sandboxes", {"name": f"cold-{i}"})
    r = call("POST", f"/v1/sandboxes/cold-{i}/exec", {"argv": ["true"]})
    assert r["exit_status"] == 0, r
    cold.append(time.perf_counter() - t)
for i in range(min(runs, 60)):
    call("DELETE", f"/v1/sandboxes/cold-{i}?force=true")

# Warm: a create of the pooled profile, then the first command. Between
# two, the pool is given time to fill again; a create that found it empty
# (made cold) is counted apart.
state = os.path.dirname(path)
warm, misses, made = [], 0, []
for i in range(min(runs, 60)):
    before = set(os.listdir(f"{state}/sandboxes"))
    t = time.perf_counter()
    sb = call("POST", "/v1/sandboxes", {"profile": "bench"})
    r = call("POST", f"/v1/sandboxes/{sb['id']}/exec", {"argv": ["true"]})
    took = time.perf_counter() - t
    assert r["exit_status"] == 0, r
    made.append(sb["id"])
    if sb["id"] in before:
        warm.append(took)
    else:
        misses += 1
    time.sleep(0.15)
for sid in made:
    call("DELETE", f"/v1/sandboxes/{sid}?force=true")

# A command's round trip in a running sandbox.
call("POST", "/v1/sandboxes", {"name": "rt"})
for _ in range(20):
    call("POST", "/v1/sandboxes/rt/exec", {"argv": ["true"]})
rt = []
for _ in range(runs):
    t = time.perf_counter()
    call("POST", "/v1/sandboxes/rt/exec", {"argv": ["true"]})
    rt.append(time.perf_counter() - t)
call("DELETE", "/v1/sandboxes/rt?force=true")


def uss(pid):
    kb = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                kb += int(line.split()[1])
    return kb


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


# Idle sandboxes: what each holds alone (its supervisor's and init's unique
# pages), and what the daemon grew by.
daemon = int(sys.argv[4]) if len(sys.argv) > 4 else None
rss0 = uss(daemon) if daemon else 0
for i in range(idle):
    call("POST", "/v1/sandboxes", {"name": f"idle-{i}"})
per = []
for i in range(idle):
    with open(f"{state}/sandboxes/idle-{i}/supervisor.json") as f:
        sup = json.load(f)["pid"]
    per.append(uss(sup) + sum(uss(p) for p in children(sup)))
rss1 = uss(daemon) if daemon else 0
for i in range(idle):
    call("DELETE", f"/v1/sandboxes/idle-{i}?force=true")

print(json.dumps({
    "cold_p50_ms": pct(cold, .5), "cold_p99_ms": pct(cold, .99),
    "warm_p50_ms": pct(warm, .5) if warm else None,
    "warm_p99_ms": pct(warm, .99) if warm else None,
    "warm_misses": misses,
    "exec_p50_ms": pct(rt, .5), "exec_p99_ms": pct(rt, .99),
    "idle": idle,
    "per_sandbox_kib": sum(per) / len(per),
    "daemon_kib_per_sandbox": (rss1 - rss0) / idle,
}))

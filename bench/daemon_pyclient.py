"""bench/daemon_client.py's create and command figures again, through the
Python client users call (clients/python, `warden_sandbox`) instead of a
bare kept-alive socket: each sandbox made with `Sandbox.create`, as a
program would, over the same Unix socket. The difference between the two
is the client's own cost. Prints one JSON object.

    python bench/daemon_pyclient.py SOCKET [RUNS]
"""
import json, os, sys, time

from warden_sandbox import Sandbox

path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 300
host = f"unix://{path}"
state = os.path.dirname(path)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000


def first_command(**create):
    t = time.perf_counter()
    sb = Sandbox.create(host=host, **create)
    r = sb.commands.run(["true"])
    took = time.perf_counter() - t
    assert r.exit_code == 0, r
    return sb, took


# The first sandbox of a process pays for its connection; not counted.
sb, first = first_command(name="py-first")
sb.kill()

cold = []
for i in range(min(runs, 60)):
    sb, took = first_command(name=f"py-cold-{i}")
    cold.append(took)
    sb.kill()

# Warm, as bench/daemon_client.py does it: the pool given time to fill
# again, a create that found it empty counted apart.
warm, misses, made = [], 0, []
for _ in range(min(runs, 60)):
    before = set(os.listdir(f"{state}/sandboxes"))
    sb, took = first_command(profile="bench")
    made.append(sb)
    if sb.id in before:
        warm.append(took)
    else:
        misses += 1
    time.sleep(0.15)
for sb in made:
    sb.kill()

sb = Sandbox.create(name="py-rt", host=host)
for _ in range(20):
    sb.commands.run(["true"])
rt = []
for _ in range(runs):
    t = time.perf_counter()
    sb.commands.run(["true"])
    rt.append(time.perf_counter() - t)
sb.kill()

print(json.dumps({
    "first_ms": first * 1000,
    "cold_p50_ms": pct(cold, .5), "cold_p99_ms": pct(cold, .99),
    "warm_p50_ms": pct(warm, .5) if warm else None,
    "warm_p99_ms": pct(warm, .99) if warm else None,
    "warm_misses": misses,
    "exec_p50_ms": pct(rt, .5), "exec_p99_ms": pct(rt, .99),
}))

"""The E2B SDK and warden's native API, side by side on one daemon:
create-to-first-command and a command's round trip, p50 and p99; the
native API both bare (one kept-alive httpx client) and through warden's
own Python client (clients/python, `warden_sandbox`), as programs call it.

    python bench/e2b_client.py SOCKET E2B_URL NATIVE_URL [RUNS]
"""
import sys, time

import httpx

from e2b_common import pct, sdk_environment

sock, e2b_url, native_url = sys.argv[1:4]
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 200
creates = min(runs, 30)

token = sdk_environment(sock, e2b_url, "bench")
from e2b import Sandbox  # noqa: E402  (reads the environment above)
import warden_sandbox  # noqa: E402


ARGV = ["/bin/bash", "-l", "-c", "true"]
native = httpx.Client(base_url=native_url, headers={"authorization": f"Bearer {token}"}, timeout=60)


def native_exec(sid):
    r = native.post(f"/v1/sandboxes/{sid}/exec", json={"argv": ARGV})
    r.raise_for_status()
    assert r.json()["exit_status"] == 0


def client_create():
    return warden_sandbox.Sandbox.create(timeout=300, host=native_url, token=token)


def client_exec(sb):
    assert sb.commands.run(ARGV).exit_code == 0


rows = {}
# Create to first command.
sdk, nat, cli = [], [], []
for _ in range(creates):
    t = time.perf_counter()
    s = Sandbox.create(timeout=300)
    s.commands.run("true")
    sdk.append(time.perf_counter() - t)
    s.kill()
    t = time.perf_counter()
    r = native.post("/v1/sandboxes", json={"ttl_seconds": 300})
    r.raise_for_status()
    sid = r.json()["id"]
    native_exec(sid)
    nat.append(time.perf_counter() - t)
    native.delete(f"/v1/sandboxes/{sid}", params={"force": "true"})
    t = time.perf_counter()
    w = client_create()
    client_exec(w)
    cli.append(time.perf_counter() - t)
    w.kill()
rows["create to first command"] = (sdk, nat, cli)

# Round trip in a running sandbox.
s = Sandbox.create(timeout=600)
r = native.post("/v1/sandboxes", json={"ttl_seconds": 600})
r.raise_for_status()
sid = r.json()["id"]
w = client_create()
for _ in range(5):
    s.commands.run("true")
    native_exec(sid)
    client_exec(w)
sdk, nat, cli = [], [], []
for _ in range(runs):
    t = time.perf_counter()
    s.commands.run("true")
    sdk.append(time.perf_counter() - t)
    t = time.perf_counter()
    native_exec(sid)
    nat.append(time.perf_counter() - t)
    t = time.perf_counter()
    client_exec(w)
    cli.append(time.perf_counter() - t)
s.kill()
native.delete(f"/v1/sandboxes/{sid}", params={"force": "true"})
w.kill()
rows['commands.run("true") round trip'] = (sdk, nat, cli)

print(f"{'':<34} {'E2B SDK p50':>12} {'p99':>8} {'native p50':>12} {'p99':>8} {'Python client p50':>18} {'p99':>8}")
for name, cols in rows.items():
    print(f"{name:<34}" + "".join(f" {pct(x, .5):>{w}.1f}ms {pct(x, .99):>6.1f}ms" for x, w in zip(cols, (10, 10, 16))))

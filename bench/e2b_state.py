"""A sandbox's state through the E2B door, with the unmodified SDK:
`pause()` then `connect()` (processes frozen in place and let go on; and
to its files, started afresh on connect), and `fork(count=4)` (the native
fork: four running sandboxes with the source's files), p50 and p99 over
RUNS rounds; the native API's pause and resume on the same daemon beside
them. Figures only: nothing here is a timed test.

    python bench/e2b_state.py SOCKET E2B_URL [RUNS]
"""
import sys, time

from e2b_common import owner_call, pct, sdk_environment, timed

sock, e2b_url = sys.argv[1:3]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 20


def owner(method, path, body=None):
    return owner_call(sock, method, path, body)


sdk_environment(sock, e2b_url, "bench-state")
from e2b import Sandbox  # noqa: E402  (reads the environment above)


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

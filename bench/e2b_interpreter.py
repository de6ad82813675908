"""The code interpreter through the E2B door, with the unmodified
`e2b-code-interpreter` SDK: `run_code("1+1")` on a sandbox whose
interpreter is up (p50 and p99 over RUNS calls), and the first
`run_code` of a new sandbox (create, then the call that starts its
Jupyter server), over a few sandboxes. The packages are fetched from PyPI
once, before anything is timed. Figures only: nothing here is a timed
test.

    python bench/e2b_interpreter.py SOCKET E2B_URL [RUNS]
"""
import sys, time

from e2b_common import pct, sdk_environment, timed

sock, e2b_url = sys.argv[1:3]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 50


sdk_environment(sock, e2b_url, "bench-interpreter")
from e2b_code_interpreter import Sandbox  # noqa: E402  (reads the environment above)


def two(sbx):
    ex = sbx.run_code("1+1")
    assert ex.error is None and ex.text == "2", ex


# The packages fetched and checked once (not timed).
warm = Sandbox.create(timeout=3600)
try:
    two(warm)
    rows = {"run_code(\"1+1\"), interpreter up": [timed(lambda: two(warm)) for _ in range(runs)]}
finally:
    warm.kill()

cold = []
for _ in range(max(2, runs // 10)):
    made = []
    cold.append(timed(lambda: (made.append(Sandbox.create(timeout=600)), two(made[0]))))
    for s in made:
        s.kill()
rows["create + first run_code(\"1+1\")"] = cold

print(f"{'':<40} {'p50':>10} {'p99':>10}   runs")
for name, xs in rows.items():
    print(f"{name:<40} {pct(xs, .5):>8.1f}ms {pct(xs, .99):>8.1f}ms   {len(xs)}")

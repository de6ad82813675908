#!/usr/bin/env bash
# `warden serve` under load from one client on its Unix socket: a new
# sandbox to its first command (cold), a command's round trip in a running
# sandbox, and the memory each idle sandbox holds (its supervisor and init,
# unique pages) and adds to the daemon. Printed against the targets of the
# daemon's design (the best hosted service measured publicly takes 186 ms
# from create to first command). The create and command figures are
# measured again through the Python client (clients/python), beside the
# socket's: what a program using it sees.
#
#   bench/daemon.sh [RUNS] [IDLE]      (default 300 round trips, 50 idle sandboxes)
#   bench/daemon.sh 300 500            (the 500 idle sandboxes of the daemon's target)
#   WARDEN=target/debug/warden bench/daemon.sh    (a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-300}"
IDLE="${2:-50}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
if [ -z "${WARDEN:-}" ]; then build_warden; fi
WARDEN="$(realpath "$WARDEN")"
# The Python client, in a virtual environment kept under the target directory.
VENV="${CARGO_TARGET_DIR:-$PWD/target}/python-venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q -e clients/python

OUT="$(mktemp -d)"
export WARDEN_STATE_DIR="$OUT/state"
mkdir -p "$WARDEN_STATE_DIR"
# The warm figures come from a pool of a small profile of the bench's own.
export XDG_CONFIG_HOME="$OUT/config"
mkdir -p "$XDG_CONFIG_HOME/warden/profiles"
printf 'resources:\n  memory: 512M\n' > "$XDG_CONFIG_HOME/warden/profiles/bench.yaml"
"$WARDEN" serve --pool bench=4 2>"$OUT/serve.log" &
DAEMON=$!
cleanup() { kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$WARDEN_STATE_DIR/daemon.sock" ] && break; sleep 0.05; done

python3 bench/daemon_client.py "$WARDEN_STATE_DIR/daemon.sock" "$RUNS" "$IDLE" "$DAEMON" > "$OUT/r.json"
"$VENV/bin/python" bench/daemon_pyclient.py "$WARDEN_STATE_DIR/daemon.sock" "$RUNS" > "$OUT/py.json"
python3 - "$OUT/r.json" "$OUT/py.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
py = json.load(open(sys.argv[2]))
rows = [
    ("create to first command, cold p50", "cold_p50_ms", 30),
    ("create to first command, cold p99", "cold_p99_ms", None),
    ("create to first command, warm p50", "warm_p50_ms", 10),
    ("create to first command, warm p99", "warm_p99_ms", None),
    ("command round trip p50", "exec_p50_ms", 3),
    ("command round trip p99", "exec_p99_ms", None),
]
print(f"{'':<40} {'socket':>8}      {'':<22} {'Python client':>13}")
for name, key, target in rows:
    v, c = r[key] or 0, py[key] or 0
    t = f"target {target} ms: {v / target:.2f}x" if target else ""
    print(f"{name:<40} {v:>8.2f} ms   {t:<22} {c:>10.2f} ms   {c / v if v else 0:.2f}x the socket's")
for name, v, target in [
    (f"idle sandbox, each (of {r['idle']})", r["per_sandbox_kib"] / 1024, 3),
    ("daemon growth per sandbox", r["daemon_kib_per_sandbox"] / 1024, None),
]:
    t = f"target {target} MiB: {v / target:.2f}x" if target else ""
    print(f"{name:<40} {v:>8.2f} MiB  {t}")
print(f"creates that found the pool empty (made cold): {r['warm_misses']} at the socket, {py['warm_misses']} through the client")
print(f"the client's first sandbox in a new process (made cold, its connection opened): {py['first_ms']:.2f} ms to its first command")
print(f"against 186 ms create-to-first-command of the best hosted service: {186 / r['cold_p50_ms']:.1f}x faster")
PY

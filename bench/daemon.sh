#!/usr/bin/env bash
# `warden serve` under load from one client on its Unix socket: a new
# sandbox to its first command (cold), a command's round trip in a running
# sandbox, and the memory each idle sandbox holds (its supervisor and init,
# unique pages) and adds to the daemon. Printed against the targets of the
# daemon's design (the best hosted service measured publicly takes 186 ms
# from create to first command).
#
#   bench/daemon.sh [RUNS] [IDLE]      (default 300 round trips, 50 idle sandboxes)
#   bench/daemon.sh 300 500            (the 500 idle sandboxes of the daemon's target)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-300}"
IDLE="${2:-50}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
build_warden

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
python3 - "$OUT/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = [
    ("create to first command, cold p50", r["cold_p50_ms"], 30, "ms"),
    ("create to first command, cold p99", r["cold_p99_ms"], None, "ms"),
    ("create to first command, warm p50", r["warm_p50_ms"] or 0, 10, "ms"),
    ("create to first command, warm p99", r["warm_p99_ms"] or 0, None, "ms"),
    ("command round trip p50", r["exec_p50_ms"], 3, "ms"),
    ("command round trip p99", r["exec_p99_ms"], None, "ms"),
    (f"idle sandbox, each (of {r['idle']})", r["per_sandbox_kib"] / 1024, 3, "MiB"),
    ("daemon growth per sandbox", r["daemon_kib_per_sandbox"] / 1024, None, "MiB"),
]
for name, v, target, unit in rows:
    t = f"target {target} {unit}: {v / target:.2f}x" if target else ""
    print(f"{name:<40} {v:>8.2f} {unit:<4} {t}")
print(f"creates that found the pool empty (made cold): {r['warm_misses']}")
print(f"against 186 ms create-to-first-command of the best hosted service: {186 / r['cold_p50_ms']:.1f}x faster")
PY

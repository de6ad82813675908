#!/usr/bin/env bash
# A command in a sandbox that is already up, against a fresh sandbox:
# `warden exec NAME -- true` into a running sandbox, `warden run -- true`,
# and bubblewrap with equivalent isolation, side by side; then the memory an
# idle running sandbox holds (its supervisor and init, unique set size).
#
#   bench/exec.sh [RUNS]        (default 300 runs each)
#
# Needs hyperfine and bubblewrap (installed from the distribution's
# packages when missing and running as root).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-300}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
need bwrap bubblewrap
need hyperfine hyperfine

build_warden

bwrap_args
BWRAP+=(-- true)

OUT="$(mktemp -d)"
export WARDEN_STATE_DIR="$OUT/state"
cleanup() { "$WARDEN" stop bench >/dev/null 2>&1 || true; rm -rf "$OUT"; }
trap cleanup EXIT
"$WARDEN" create bench --start --no-audit-log >/dev/null

hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$OUT/r.json" \
    -n bwrap "${BWRAP[*]}" \
    -n "warden run" "$WARDEN run --no-tty --no-audit-log -- true" \
    -n "warden exec" "$WARDEN exec -T bench -- true" >/dev/null

# The round trip itself, from one process that keeps running (as the
# daemon or an SDK drives it), without a CLI process start per command.
PROTO="$(python3 bench/exec_client.py "$WARDEN_STATE_DIR/sandboxes/bench/control.sock" "$RUNS")"

# Memory of an idle running sandbox, as one more in a fleet: with a second
# sandbox up, the binary's text is shared, and what each holds alone is
# its unique set (Private_* of smaps).
"$WARDEN" create bench2 --start --no-audit-log >/dev/null
trap '"$WARDEN" stop bench2 >/dev/null 2>&1 || true; cleanup' EXIT
# Unique set size: the pages only this process holds (Private_* of smaps).
uss() { awk '/^Private_(Clean|Dirty):/ { kb += $2 } END { print kb }' "/proc/$1/smaps_rollup"; }
SUP="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$WARDEN_STATE_DIR/sandboxes/bench/supervisor.json")"
INIT="$(awk '{print $1}' "/proc/$SUP/task/$SUP/children" | head -1)"
SUP_KB="$(uss "$SUP")"; INIT_KB="$(uss "$INIT")"

python3 - "$OUT/r.json" "$SUP_KB" "$INIT_KB" "$PROTO" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
def pct(x, p):
    t = sorted(x["times"]); return t[min(len(t) - 1, int(len(t) * p))]
print(f"{'command':<14} {'p50':>9} {'p90':>9} {'mean':>9}")
for name in ("bwrap", "warden run", "warden exec"):
    x = r[name]
    print(f"{name:<14} {pct(x, .5)*1000:>7.2f}ms {pct(x, .9)*1000:>7.2f}ms {x['mean']*1000:>7.2f}ms")
e, b, w = (pct(r[n], .5) for n in ("warden exec", "bwrap", "warden run"))
print(f"exec/bwrap at p50: {e/b:.2f}   exec/run: {e/w:.2f}   run/bwrap: {w/b:.2f}")
p50, p90 = sys.argv[4].split()
print(f"{'exec protocol':<14} {float(p50):>7.2f}ms {float(p90):>7.2f}ms   (one client process, no CLI start)")
sup, init = int(sys.argv[2]), int(sys.argv[3])
print(f"idle running sandbox, unique memory: supervisor {sup/1024:.2f} MiB + init {init/1024:.2f} MiB = {(sup+init)/1024:.2f} MiB")
PY

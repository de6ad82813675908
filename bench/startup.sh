#!/usr/bin/env bash
# Start-up cost of a sandbox: `warden run -- true` against bubblewrap with
# equivalent isolation, and against plain `true`, side by side.
#
#   bench/startup.sh [RUNS]        (default 300 runs each)
#   WARDEN=PATH bench/startup.sh   (measures that binary instead of building one)
#   WARDEN_BASE=PATH bench/startup.sh
#                                  (also another build, e.g. the release
#                                  before, measured in the same run, after
#                                  the others: hyperfine does not interleave)
#   bench/startup.sh --phases [TRACED_RUNS] [UNTRACED_RUNS]
#                                  (the phase table: bench/phases.sh)
#
# Prints the median and mean of each, and the ratios warden/bwrap at the
# median: without egress, without the audit log, and with egress
# (--allow-domain, which starts the proxy and wires the sandbox's network). Needs hyperfine and bubblewrap (installed from the distribution's
# packages when missing and running as root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --phases ]; then
    shift
    exec bench/phases.sh "$@"
fi
RUNS="${1:-300}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
need bwrap bubblewrap
need hyperfine hyperfine

[ -n "${WARDEN:-}" ] || build_warden
BASE=()
if [ -n "${WARDEN_BASE:-}" ]; then
    BASE=(-n warden-base "$WARDEN_BASE run --no-tty -- true")
fi

bwrap_args
BWRAP+=(-- true)

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$OUT/r.json" \
    -n true "true" \
    -n bwrap "${BWRAP[*]}" \
    -n warden "$WARDEN run --no-tty -- true" \
    -n warden-no-audit "$WARDEN run --no-tty --no-audit-log -- true" \
    -n warden-egress "$WARDEN run --no-tty --allow-domain example.com -- true" \
    "${BASE[@]}" >/dev/null

python3 - "$OUT/r.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
print(f"{'command':<16} {'median':>10} {'mean':>10} {'stddev':>10}")
for name in ("true", "bwrap", "warden", "warden-no-audit", "warden-egress", "warden-base"):
    if name not in r:
        continue
    x = r[name]
    print(f"{name:<16} {x['median']*1000:>8.2f}ms {x['mean']*1000:>8.2f}ms {x['stddev']*1000:>8.2f}ms")
b = r['bwrap']['median']
print(f"warden/bwrap at the median: {r['warden']['median']/b:.2f}"
      f" (without the audit log: {r['warden-no-audit']['median']/b:.2f};"
      f" with egress: {r['warden-egress']['median']/b:.2f})")
if "warden-base" in r:
    print(f"WARDEN_BASE/bwrap at the median: {r['warden-base']['median']/b:.2f}")
PY

#!/usr/bin/env bash
# Where a sandbox's start-up goes, phase by phase: `warden run -- true`
# against bubblewrap with equivalent isolation (see bwrap_args in lib.sh).
#
#   bench/phases.sh [TRACED_RUNS] [UNTRACED_RUNS]   (default 15 and 200)
#
# Prints warden's own landmarks, untraced (ms after the spawn: the phase
# events WARDEN_LOG=trace prints, on the monotonic clock), the phase table
# (µs, medians of traced runs, from strace -f -ttt
# -T, with each phase's system calls), then the untraced wall time and page
# faults of warden, warden with egress (--allow-domain) and bwrap,
# interleaved. bench/phases.py says how each figure is made.
# `bench/startup.sh --phases` runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
TRACED="${1:-15}"
UNTRACED="${2:-200}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
need bwrap bubblewrap
need strace strace

[ -n "${WARDEN:-}" ] || build_warden   # WARDEN=PATH measures that binary instead
bwrap_args
BWRAP+=(-- true)

python3 bench/phases.py "$(python3 -c 'import json,sys; print(json.dumps({
    "traced_runs": int(sys.argv[1]), "untraced_runs": int(sys.argv[2]),
    "warden": [sys.argv[3], "run", "--no-tty", "--", "true"],
    "warden_egress": [sys.argv[3], "run", "--no-tty", "--allow-domain", "example.com", "--", "true"],
    "bwrap": sys.argv[4:]}))' "$TRACED" "$UNTRACED" "$WARDEN" "${BWRAP[@]}")"

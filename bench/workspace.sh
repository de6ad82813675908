#!/usr/bin/env bash
# Overlay workspaces on a large project: the start cost of `warden run
# --overlay` against a plain `warden run -w` on a workspace of 100,000 files
# (and of a command in a sandbox already running over that overlay),
# and `warden diff --stat` on 1,000 changed files out of those 100,000.
# Neither may scan or copy the unchanged files: both should stay within tens
# of milliseconds whatever the size of the project.
#
#   bench/workspace.sh [FILES] [CHANGED] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

FILES="${1:-100000}"
CHANGED="${2:-1000}"
RUNS="${3:-20}"
build_warden

work="$(mktemp -d /tmp/warden-bench-ws.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export WARDEN_STATE_DIR="$work/state"
proj="$work/project"
echo "bench: making a project of $FILES files..." >&2
python3 - "$proj" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 1000:03d}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i % 1000:03d}.txt"), "w") as f:
        f.write(f"line {i}\n")
PY

# median_ms CMD...: the median wall time of RUNS runs, in milliseconds.
median_ms() {
    local times=()
    for _ in $(seq "$RUNS"); do
        local t0 t1
        t0=$(date +%s%N)
        "$@" >/dev/null 2>&1
        t1=$(date +%s%N)
        times+=($(( (t1 - t0) / 1000 )))
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]/1000}'
}

"$WARDEN" create bench -w "$proj" --no-audit-log --start >/dev/null
trap '"$WARDEN" stop bench >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
plain=$(median_ms "$WARDEN" run --no-tty --no-audit-log -w "$proj" -- true)
overlay=$(median_ms "$WARDEN" run --no-tty --no-audit-log --overlay -w "$proj" -- true)
running=$(median_ms "$WARDEN" exec -T bench -- true)

# 1,000 changes: every d000..d009 file rewritten.
"$WARDEN" exec -T bench -- sh -c "
  n=0; for d in d*; do for f in \$d/*; do
    [ \$n -ge $CHANGED ] && exit 0; echo changed >> \$f; n=\$((n+1)); done; done" >/dev/null
changes=$("$WARDEN" diff bench --stat | tail -1)
stat=$(median_ms "$WARDEN" diff bench --stat)

printf '%-44s %8s ms\n' "warden run -w (plain bind), $FILES files" "$plain"
printf '%-44s %8s ms\n' "warden run --overlay, $FILES files" "$overlay"
printf '%-44s %8s ms\n' "warden exec (running, overlay), $FILES files" "$running"
printf '%-44s %8s ms   (%s)\n' "warden diff --stat, $CHANGED changed" "$stat" "$changes"
awk -v a="$overlay" -v b="$plain" 'BEGIN { printf "overlay start / plain start: %.2f\n", a / b }'

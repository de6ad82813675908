#!/usr/bin/env bash
# What an idle long-lived sandbox costs in memory: its supervisor (which
# holds the egress proxy, when it has one) and its init, each as unique set
# size (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup: what the
# process alone holds, freed when it ends), proportional (Pss) and resident
# (Rss) size, and its threads. Measured without egress and with
# (--allow-domain), a few seconds after start. Rss includes the pages of
# warden's binary the process touched, which every supervisor shares; Anon
# is the part of Rss that is not a file's (the process's heap, stacks and
# relocated data). An idle supervisor gives its code's pages back two
# seconds after its last request (crates/runtime/src/supervisor/idle.rs);
# the second table says what the next request then costs: `warden exec`
# into the idle sandbox and, right after, into the same sandbox again,
# with the supervisor's minor page faults during each.
#
#   bench/memory.sh [ROUNDS]    (default 10 rounds of the second table)
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=bench/lib.sh
. bench/lib.sh
[ -n "${WARDEN:-}" ] || build_warden   # WARDEN=PATH measures that binary instead
export WARDEN_STATE_DIR="${WARDEN_STATE_DIR:-$(mktemp -d)}"
NAMES=()
cleanup() {
    for n in "${NAMES[@]}"; do "$WARDEN" rm -f "$n" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

# kib PID FIELD: a field of the process's smaps_rollup, in KiB.
kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/smaps_rollup"; }

report() {
    local label="$1" pid="$2" uss
    uss=$(( $(kib "$pid" Private_Clean) + $(kib "$pid" Private_Dirty) ))
    printf '%-30s %8d %8d %8d %8d %7d\n' "$label" "$uss" "$(kib "$pid" Pss)" \
        "$(kib "$pid" Rss)" "$(kib "$pid" Anonymous)" \
        "$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")"
}

# Two sandboxes without egress and one with, up together, as on a host that
# runs several: the binary's text is then shared between their supervisors
# and counts in their Pss, not their unique set.
for variant in plain plain2 egress; do
    name="membench-$variant-$$"
    NAMES+=("$name")
    args=()
    [ "$variant" = egress ] && args=(--allow-domain example.com)
    "$WARDEN" create "$name" --start "${args[@]}" >/dev/null
done
sleep 5
printf '%-30s %8s %8s %8s %8s %7s\n' "process (idle)" "USS KiB" "PSS KiB" "RSS KiB" \
    "Anon KiB" threads
for variant in plain egress; do
    sup=$(pgrep -f -x "$WARDEN __supervise membench-$variant-$$" | head -1)
    init=$(pgrep -P "$sup" | head -1)
    report "supervisor ($variant)" "$sup"
    report "init ($variant)" "$init"
done

# The next request after idling, against one right after another: wall
# time of `warden exec -T NAME -- true` and the supervisor's minor faults
# (field 10 of /proc/PID/stat) during it; medians of ROUNDS.
ROUNDS="${1:-10}"
name="membench-plain-$$"
sup=$(pgrep -f -x "$WARDEN __supervise $name" | head -1)
minflt() { awk '{print $10}' "/proc/$1/stat"; }
one() {
    local f0 t0 t1
    f0=$(minflt "$sup"); t0=$(date +%s%N)
    "$WARDEN" exec -T "$name" -- true
    t1=$(date +%s%N)
    echo "$(( (t1 - t0) / 1000 )) $(( $(minflt "$sup") - f0 ))"
}
idle=() warm=()
for _ in $(seq "$ROUNDS"); do
    sleep 5
    idle+=("$(one)")
    warm+=("$(one)")
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
printf '%-30s %10s %18s\n' "warden exec -T NAME -- true" "wall µs" "supervisor faults"
row() {
    local label="$1"
    shift
    printf '%-30s %10s %18s\n' "$label" \
        "$(printf '%s\n' "$@" | cut -d' ' -f1 | median)" \
        "$(printf '%s\n' "$@" | cut -d' ' -f2 | median)"
}
row "after 5 s idle" "${idle[@]}"
row "right after another" "${warm[@]}"

#!/usr/bin/env bash
# Pause and resume of a running sandbox (the process backend: its cgroup
# frozen in place, memory kept): the latency of `warden pause NAME` and
# `warden resume NAME` end to end (the command's start, the supervisor's
# round trip, the freeze settling), p50 and p99, for an idle sandbox and
# for one with a busy loop and 32 more processes, whose freeze has to
# stop running tasks; then `warden fork NAME --count N` of a running
# sandbox with 64 MiB of changes in 200 files, for N = 1, 4 and 16 (the
# parent paused for the copy, each fork started). Printed beside the
# published figures of hosted services (E2B resumes in about 1 s, Blaxel
# in under 25 ms).
#
#   bench/pause.sh [RUNS]                      (default 100 pause/resume pairs each)
#   WARDEN=target/debug/warden bench/pause.sh  (a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-100}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
if [ -z "${WARDEN:-}" ]; then build_warden; fi
WARDEN="$(realpath "$WARDEN")"

OUT="$(mktemp -d)"
export WARDEN_STATE_DIR="$OUT/state"
cleanup() {
    for n in $("$WARDEN" ls 2>/dev/null | awk 'NR > 1 {print $1}'); do "$WARDEN" rm --force "$n" >/dev/null 2>&1 || true; done
    rm -rf "$OUT"
}
trap cleanup EXIT
"$WARDEN" create idle --start --no-audit-log >/dev/null
"$WARDEN" create busy --start --no-audit-log >/dev/null
"$WARDEN" exec -d busy -- sh -c 'for i in $(seq 32); do sleep 1000 & done; while :; do :; done' >/dev/null

python3 - "$WARDEN" "$RUNS" <<'PY'
import subprocess, sys, time

warden, runs = sys.argv[1], int(sys.argv[2])

def timed(*args):
    t0 = time.perf_counter()
    subprocess.run([warden, *args], check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - t0) * 1000

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]

time.sleep(0.5)
print(f"{'':<34} {'p50':>9} {'p99':>9}")
for name in ("idle", "busy"):
    pauses, resumes = [], []
    for _ in range(runs):
        pauses.append(timed("pause", name))
        resumes.append(timed("resume", name))
    for what, xs in (("pause", pauses), ("resume", resumes)):
        print(f"{what + ' (' + name + ' sandbox)':<34} {pct(xs, 50):>6.2f} ms {pct(xs, 99):>6.2f} ms")
print()
subprocess.run([warden, "create", "par", "--start", "--no-audit-log"], check=True, stdout=subprocess.DEVNULL)
subprocess.run([warden, "exec", "par", "--", "sh", "-c",
                "for i in $(seq 200); do head -c 335544 /dev/urandom > /workspace/f$i; done"], check=True)
for n in (1, 4, 16):
    t = timed("fork", "par", "--count", str(n))
    print(f"{'fork into ' + str(n) + ' (64 MiB of changes)':<34} {t:>6.0f} ms total, {t / n:>6.0f} ms a fork")
    out = subprocess.run([warden, "ls"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith("par-fork-"):
            subprocess.run([warden, "rm", "--force", name], stdout=subprocess.DEVNULL)
print()
print("published: E2B resume about 1 s; Blaxel resume under 25 ms (both VMs, memory restored)")
PY

#!/usr/bin/env bash
# Two builds of warden side by side, run by run: `warden run -- true` of
# WARDEN and of WARDEN_BASE alternated (each round runs both, in a random
# order), so that load from other work on the machine falls on both alike.
# On a shared machine only such interleaved comparisons mean anything;
# hyperfine (bench/startup.sh) runs one command's batch after the other's.
#
#   WARDEN=NEW WARDEN_BASE=OLD bench/startup_pair.sh [ROUNDS] [-- EXTRA RUN ARGS]
#
# Prints, for each build, the median and 90th percentile of the whole
# run's wall time and of the root's assembly inside the sandbox's init
# (the init's `init-root` to `init-root-built` phase events, read from
# separate runs with WARDEN_LOG=trace), and the median of the per-round
# ratios NEW/OLD.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-300}"
shift || true
[ "${1:-}" = -- ] && shift
: "${WARDEN:?WARDEN=path of the build to measure}"
: "${WARDEN_BASE:?WARDEN_BASE=path of the build to compare against}"

python3 - "$ROUNDS" "$WARDEN" "$WARDEN_BASE" "$@" <<'PY'
import os, random, re, statistics, subprocess, sys, time

rounds, new, base, extra = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
builds = {"new": new, "base": base}
argv = lambda b: [builds[b], "run", "--no-tty", *extra, "--", "true"]
null = os.open(os.devnull, os.O_RDWR)

def wall(b):
    t = time.perf_counter_ns()
    pid = os.posix_spawn(argv(b)[0], argv(b), os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)])
    _, status = os.waitpid(pid, 0)
    ns = time.perf_counter_ns() - t
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {argv(b)} failed")
    return ns / 1e6

PHASE = re.compile(r"phase=(init-root|init-root-built) monotonic_ns=(\d+)")
def root_phase(b):
    env = dict(os.environ, WARDEN_LOG="trace")
    err = subprocess.run(argv(b), env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, check=True).stderr
    seen = dict(PHASE.findall(err))
    return (int(seen["init-root-built"]) - int(seen["init-root"])) / 1e6

def interleave(measure, n):
    got = {"new": [], "base": []}
    for b in ("new", "base"):          # warm the page cache
        for _ in range(10):
            measure(b)
    for _ in range(n):
        order = ["new", "base"]
        random.shuffle(order)
        for b in order:
            got[b].append(measure(b))
    return got

def p90(xs):
    return sorted(xs)[int(0.9 * (len(xs) - 1))]

def report(title, got):
    print(title)
    for b in ("base", "new"):
        xs = got[b]
        print(f"  {b:<5} median {statistics.median(xs):8.3f} ms   p90 {p90(xs):8.3f} ms   ({builds[b]})")
    ratios = [n / o for n, o in zip(got["new"], got["base"])]
    diff = statistics.median(got["new"]) - statistics.median(got["base"])
    print(f"  new - base at the median {diff * 1000:+.0f} µs; median of the paired ratios new/base {statistics.median(ratios):.3f}")

print(f"load average before: {os.getloadavg()[0]:.2f}; {rounds} rounds, order shuffled in each")
report("warden run --no-tty -- true, wall time", interleave(wall, rounds))
report("the root's assembly in the init (init-root to init-root-built)", interleave(root_phase, rounds))
print(f"load average after: {os.getloadavg()[0]:.2f}")
PY

#!/usr/bin/env bash
# The microVM backend against the process backend and gVisor (runsc), side
# by side: boot-to-first-exec (`warden run -- true`, a fresh sandbox each
# time), the round trip of one exec into a running sandbox (`warden exec
# NAME -- true`), and the memory an idle sandbox holds on the host.
#
#   bench/vm.sh [RUNS]        (default: 5 boots, 30 execs)
#   bench/vm.sh fs [RUNS]     the workspace part only (default: 5 runs)
#   bench/vm.sh start [RUNS]  start to first command from the template
#                             snapshot against a cold boot, p50 and p99
#                             (default: 20 runs), then pause to disk and
#                             resume (the vm crate's test, which prints them)
#
# The workspace part: a workspace-heavy command (write 2000 small files,
# then read them all back) in a running VM sandbox whose workspace is
# shared over 9p (served by QEMU) and over virtio-fs (served by a
# virtiofsd), side by side; virtio-fs is skipped with a note where no
# virtiofsd is installed.
#
# WARDEN=path uses that binary instead of building the release one (e.g.
# target/debug/warden: slower, but no release build). Needs hyperfine,
# QEMU and a guest kernel (`warden vm kernel`); runsc is measured when the
# distribution's package installs, and skipped with a note otherwise.
#
# On this kind of build host /dev/kvm cannot boot a guest kernel, so the VM
# runs under software emulation: its figures are emulation's. On a host
# with working KVM a Firecracker-class VMM boots a guest in well under
# 150 ms; to see what warden gets there, run this script on that host
# (`warden doctor` must say "KVM boots the guest kernel").
set -euo pipefail
cd "$(dirname "$0")/.."
FS_ONLY=""
START_ONLY=""
if [ "${1:-}" = fs ]; then
    FS_ONLY=1
    shift
elif [ "${1:-}" = start ]; then
    START_ONLY=1
    shift
fi
BOOTS="${1:-5}"
if [ -n "$START_ONLY" ]; then BOOTS="${1:-20}"; fi
EXECS=$((BOOTS * 6))

# shellcheck source=bench/lib.sh
. bench/lib.sh
need hyperfine hyperfine
if [ -z "${WARDEN:-}" ]; then
    build_warden
fi
if ! "$WARDEN" vm kernel >/dev/null; then
    "$WARDEN" vm kernel || true
    echo "bench: the VM backend cannot start here (see above)" >&2
    exit 1
fi
RUNSC=""
if command -v runsc >/dev/null || { [ "$(id -u)" = 0 ] &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null 2>&1; }; then
    # gVisor's own "run this command in a sandbox" (needs root).
    if runsc --network=none do true >/dev/null 2>&1; then
        RUNSC="runsc --network=none do true"
    else
        echo "note: runsc is installed but \`runsc do true\` fails here; skipped" >&2
    fi
else
    echo "note: runsc (gVisor) is not available; skipped" >&2
fi

# The guest kernel (and the templates) stay where warden keeps them
# (`warden vm kernel`), whatever state directory the runs use.
if [ -z "${WARDEN_VM_DIR:-}" ] && [ -d /var/lib/warden/vm/kernel ] && [ "$(id -u)" = 0 ]; then
    export WARDEN_VM_DIR=/var/lib/warden/vm
fi
export WARDEN_STATE_DIR="${WARDEN_STATE_DIR:-$(mktemp -d)}"
OUT="$(mktemp -d)"
cleanup() {
    "$WARDEN" stop bench-vm >/dev/null 2>&1 || true
    "$WARDEN" stop bench-proc >/dev/null 2>&1 || true
    "$WARDEN" rm bench-vm >/dev/null 2>&1 || true
    "$WARDEN" rm bench-proc >/dev/null 2>&1 || true
    for fs in 9p virtiofs; do
        "$WARDEN" stop "bench-fs-$fs" >/dev/null 2>&1 || true
        "$WARDEN" rm "bench-fs-$fs" >/dev/null 2>&1 || true
    done
    rm -rf "$OUT"
}
trap cleanup EXIT

# The workspace over 9p and over virtio-fs: the same command in a running
# sandbox of each (booted once, so that only the file traffic counts).
FILES='cd /workspace && rm -rf b && mkdir b && i=0 && while [ $i -lt 2000 ]; do echo $i > b/$i; i=$((i + 1)); done && cat b/* | wc -l'
bench_fs() {
    local runs=() fs
    for fs in 9p virtiofs; do
        if [ "$fs" = virtiofs ] && [ -z "${WARDEN_VIRTIOFSD:-}" ] &&
            ! [ -x /usr/libexec/virtiofsd ] && ! [ -x /usr/lib/virtiofsd ] &&
            ! [ -x /usr/lib/qemu/virtiofsd ]; then
            echo "note: no virtiofsd installed; virtio-fs skipped" >&2
            continue
        fi
        WARDEN_VM_FS=$fs "$WARDEN" create --isolation vm "bench-fs-$fs" >/dev/null
        WARDEN_VM_FS=$fs "$WARDEN" start "bench-fs-$fs" >/dev/null
        runs+=(-n "$fs" "$WARDEN exec bench-fs-$fs -- sh -c '$FILES'")
    done
    hyperfine -N --warmup 1 --runs "$BOOTS" --export-json "$OUT/fs.json" "${runs[@]}" >/dev/null
    python3 - "$OUT/fs.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
print("workspace-heavy command (2000 small files written, then read), median:")
for name in ("9p", "virtiofs"):
    if name in r:
        print(f"  {name:<8} {r[name]['median'] * 1000:>10.1f} ms")
if len(r) == 2:
    print(f"  virtiofs/9p: {r['virtiofs']['median'] / r['9p']['median']:.2f}x")
PY
}
if [ -n "$FS_ONLY" ]; then
    bench_fs
    exit 0
fi

# `run --isolation vm -- true` restored from the template snapshot (made by
# the warm-up run when there is none) against a cold boot of the guest
# kernel (WARDEN_VM_TEMPLATE=off); percentiles from hyperfine's times.
bench_start() {
    local runs="${1:-20}" cold_runs
    cold_runs=$(( runs < 5 ? runs : 5 ))
    hyperfine -N --warmup 1 --runs "$runs" --export-json "$OUT/tmpl.json" \
        -n template "$WARDEN run --no-tty --no-audit-log --isolation vm -- true" >/dev/null
    WARDEN_VM_TEMPLATE=off hyperfine -N --runs "$cold_runs" --export-json "$OUT/cold.json" \
        -n cold "$WARDEN run --no-tty --no-audit-log --isolation vm -- true" >/dev/null
    python3 - "$OUT/tmpl.json" "$OUT/cold.json" <<'PY'
import json, sys
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] * 1000
print("start to first command, `run --isolation vm -- true`:")
for f in sys.argv[1:]:
    r = json.load(open(f))["results"][0]
    t = r["times"]
    print(f"  {r['command']:<9} p50 {pct(t, 50):>8.0f} ms   p99 {pct(t, 99):>8.0f} ms   ({len(t)} runs)")
PY
    # Pause to disk and resume: the vm crate's functions (the runtime's
    # pause verbs do not reach them yet), timed by its test.
    cargo test -q -p warden-vm --test all -- --ignored --nocapture \
        pause::a_vm_paused_to_disk 2>&1 | grep -E "paused to disk|skipped" || true
}
if [ -n "$START_ONLY" ]; then
    bench_start "$BOOTS"
    exit 0
fi

boot=(-n process "$WARDEN run --no-tty --no-audit-log -- true"
      -n vm "$WARDEN run --no-tty --no-audit-log --isolation vm -- true")
if [ -n "$RUNSC" ]; then boot+=(-n runsc "$RUNSC"); fi
hyperfine -N --warmup 1 --runs "$BOOTS" --export-json "$OUT/boot.json" "${boot[@]}" >/dev/null

"$WARDEN" create bench-proc >/dev/null
"$WARDEN" create --isolation vm bench-vm >/dev/null
"$WARDEN" start bench-proc >/dev/null
"$WARDEN" start bench-vm >/dev/null
hyperfine -N --warmup 2 --runs "$EXECS" --export-json "$OUT/exec.json" \
    -n process "$WARDEN exec bench-proc -- true" \
    -n vm "$WARDEN exec bench-vm -- true" >/dev/null

# Memory of an idle sandbox on the host: the VMM's (the guest's RAM it
# touched, QEMU itself), its keeper's (the fork that waits for it outside
# its PID namespace) and the supervisor's; for the process backend the
# supervisor's and the sandbox's init's. Proportional set sizes (PSS), so
# that the pages the keeper shares with the supervisor it was forked from
# are counted once.
pss() { awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
tree() { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
tree_kib() { for p in $(tree "$1"); do pss "$p"; done | awk '{ s += $1 } END { print s + 0 }'; }
sup() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' \
    "$WARDEN_STATE_DIR/sandboxes/$1/supervisor.json"; }
vm_kib=$(tree_kib "$(sup bench-vm)")
proc_kib=$(tree_kib "$(sup bench-proc)")

python3 - "$OUT/boot.json" "$OUT/exec.json" "$vm_kib" "$proc_kib" <<'PY'
import json, sys
boot = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
ex = {x["command"]: x for x in json.load(open(sys.argv[2]))["results"]}
ms = lambda x: x["median"] * 1000
print("boot to first exec (a fresh sandbox running `true`), median:")
for name in ("process", "vm", "runsc"):
    if name in boot:
        print(f"  {name:<8} {ms(boot[name]):>10.1f} ms")
print(f"  vm/process: {ms(boot['vm']) / ms(boot['process']):.1f}x"
      + (f", vm/runsc: {ms(boot['vm']) / ms(boot['runsc']):.1f}x" if "runsc" in boot else ""))
print("exec round trip into a running sandbox (`warden exec NAME -- true`), median:")
for name in ("process", "vm"):
    print(f"  {name:<8} {ms(ex[name]):>10.1f} ms")
print(f"  vm/process: {ms(ex['vm']) / ms(ex['process']):.1f}x")
vm_kib, proc_kib = int(sys.argv[3]), int(sys.argv[4])
print("host memory of an idle sandbox (PSS of the supervisor and all below it):")
print(f"  process  {proc_kib / 1024:>10.1f} MiB")
print(f"  vm       {vm_kib / 1024:>10.1f} MiB")
PY
bench_fs

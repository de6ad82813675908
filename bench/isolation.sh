#!/usr/bin/env bash
# The three isolation levels side by side: process, gVisor and microVM.
#
#   bench/isolation.sh [RUNS] [WORK_RUNS]   (default 10 and 3)
#
# For each level: the start of a sandbox (`warden run -- true`, end to end)
# and two syscall-heavy workloads in a workspace: `git status` over a tree
# of 20,000 files, and a build of a small C project (40 files, make -j1).
# Prints the median of each and the ratio to the process backend. A level
# this host cannot run is said and left out (gVisor needs runsc and root;
# the VM needs QEMU and a guest kernel: `warden doctor`). WARDEN=path uses
# that binary instead of building the release one; LEVELS="process gvisor"
# measures only those levels (the emulated VM's builds take minutes);
# WARMUP=0 skips the warm-up run of each command (default 1), for them.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-10}"
WORK_RUNS="${2:-3}"
WARMUP="${WARMUP:-1}"

# shellcheck source=bench/lib.sh
. bench/lib.sh
need hyperfine hyperfine
need gcc gcc
need make make
need git git
if [ -z "${WARDEN:-}" ]; then build_warden; fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"

# The tree for `git status`: 20,000 small files in 200 directories, committed.
mkdir -p "$WORK/tree"
python3 - "$WORK/tree" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(200):
    p = os.path.join(root, f"d{d:03}")
    os.makedirs(p, exist_ok=True)
    for f in range(100):
        with open(os.path.join(p, f"f{f:03}.txt"), "w") as fh:
            fh.write(f"{d} {f}\n")
PY
git -C "$WORK/tree" init -q
git -C "$WORK/tree" -c user.name=b -c user.email=b@b add -A
git -C "$WORK/tree" -c user.name=b -c user.email=b@b commit -qm tree

# The C project: 40 translation units and a Makefile.
mkdir -p "$WORK/cproj"
for i in $(seq 1 40); do
    cat >"$WORK/cproj/u$i.c" <<EOF
#include <stdio.h>
#include <string.h>
int u$i(int n) { char b[64]; snprintf(b, sizeof b, "%d", n * $i); return (int)strlen(b); }
EOF
done
{
    echo "#include <stdio.h>"
    for i in $(seq 1 40); do echo "int u$i(int);"; done
    echo "int main(void) { int s = 0;"
    for i in $(seq 1 40); do echo "s += u$i($i);"; done
    echo 'printf("%d\n", s); return 0; }'
} >"$WORK/cproj/main.c"
cat >"$WORK/cproj/Makefile" <<'EOF'
SRCS := $(wildcard *.c)
OBJS := $(SRCS:.c=.o)
prog: $(OBJS)
	$(CC) -o $@ $(OBJS)
%.o: %.c
	$(CC) -O1 -c $< -o $@
clean:
	rm -f $(OBJS) prog
EOF
chown -R "$(id -u):$(id -g)" "$WORK"

WANTED="${LEVELS:-process gvisor vm}"
LEVELS=()
for level in $WANTED; do
    if out=$("$WARDEN" run --no-tty --no-audit-log --isolation "$level" -- true 2>&1); then
        LEVELS+=("$level")
    else
        echo "bench: isolation $level cannot run here, left out: $(echo "$out" | tail -1)" >&2
    fi
done

ARGS=()
for level in "${LEVELS[@]}"; do
    RUN="$WARDEN run --no-tty --no-audit-log --isolation $level"
    ARGS+=(-n "start $level" "$RUN -- true")
done
hyperfine -N --warmup "$WARMUP" --runs "$RUNS" --export-json "$WORK/start.json" "${ARGS[@]}" >/dev/null

ARGS=()
for level in "${LEVELS[@]}"; do
    RUN="$WARDEN run --no-tty --no-audit-log --isolation $level"
    ARGS+=(-n "git $level" "$RUN -w $WORK/tree -- git status --porcelain")
    ARGS+=(-n "cc $level" "$RUN -w $WORK/cproj -- sh -c 'make -s clean && make -s -j1 prog'")
done
hyperfine -N --warmup "$WARMUP" --runs "$WORK_RUNS" --export-json "$WORK/work.json" "${ARGS[@]}" >/dev/null

python3 - "$WORK/start.json" "$WORK/work.json" "${LEVELS[@]}" <<'PY'
import json, sys
r = {}
for f in sys.argv[1:3]:
    for x in json.load(open(f))["results"]:
        r[x["command"]] = x["median"]
levels = sys.argv[3:]
print(f"{'':<28}" + "".join(f"{l:>18}" for l in levels))
for what, label in (("start", "start (run -- true)"),
                    ("git", "git status, 20k files"),
                    ("cc", "make, 40 C files")):
    base = r.get(f"{what} process")
    cells = []
    for l in levels:
        v = r[f"{what} {l}"]
        ratio = f" ({v / base:.1f}x)" if base and l != "process" else ""
        cells.append(f"{v * 1000:.0f} ms{ratio}")
    print(f"{label:<28}" + "".join(f"{c:>18}" for c in cells))
PY

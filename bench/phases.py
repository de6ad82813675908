#!/usr/bin/env python3
"""Phase table of a sandbox's start: `warden run -- true` against bubblewrap.

Used by bench/phases.sh, which says how to call it. Four kinds of figure,
each labelled with where it comes from:

- landmarks (ms from the spawn, median over untraced runs): warden's own
  phase events (`WARDEN_LOG=trace`, target `warden::phase`: the monotonic
  clock at each landmark, in the supervisor and in the sandbox's init),
  against the spawn and the exit seen by this script on the same clock.
  No tracer stops the process: these are the phases' real lengths, within
  the cost of writing one line to stderr per landmark (a few µs);
- phases (µs, median over the traced runs): `strace -f -ttt -T` of each run,
  cut at landmark system calls (the first call matching each landmark, in
  order; a phase is the time from the previous landmark to this one). strace
  stops the process at every system call, so traced phases are longer than
  untraced ones, by roughly 15-30 µs per system call: the per-phase system
  call counts say how much of a phase is that.
- untraced wall time (ms, median) and minor page faults (whole process tree,
  from getrusage(RUSAGE_CHILDREN)) of the same command run without strace.
- system calls per run (total, from the traces).
- instructions executed by the started process itself (not its children:
  the sandbox's init cannot write valgrind's output once its root is
  pivoted), from `valgrind --tool=cachegrind` (no hardware counters are
  needed), when valgrind is installed.
"""
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*?)(?:\s+<(\d+\.\d+)>)?$")

# (phase name: what happened since the previous landmark, role, regex). The
# role is S (the process started), I (its first child: the sandbox's init or
# bubblewrap's namespace child), C (any later process: the command). A regex
# starting with "end:" marks the end of the matching call (its time plus its
# duration). Landmarks that do not occur (a phase warden skips) count 0.
WARDEN = [
    ("exec (execve of the binary, mapping)", "S", r"end:execve\("),
    ("static-pie self-relocation, libc start", "S", r"mprotect\(.*PROT_READ\)"),
    ("Rust runtime start", "S", r"poll\(\[\{fd=0"),
    ("arguments, host facts, spec", "S", r"statx\(AT_FDCWD, \"/proc/self/ns/mnt\""),
    ("cgroup begun (plan, the v2 directory)", "S", r"openat\(AT_FDCWD, \"/proc/sys/user/max_inotify_instances"),
    ("per-user limits: host values read", "S", r"pipe2\("),
    ("pipes, signal mask, owner switch", "S", r"^clone3?\((child_stack=NULL, flags=CLONE_NEW|\{flags=)"),
    ("clone: 6 namespaces", "S", r"end:^clone3?\("),
    ("ID maps written", "S", r"write\(\d+, \"g\", 1\)"),
    ("init: per-user limits, hostname, lo up", "I", r"mount\(NULL, \"/\""),
    ("init: root build (mounts, pivot_root)", "I", r"end:umount2\(\"\.\""),
    ("init: joins the v1 cgroups (made meanwhile)", "I", r"end:write\(\d+, \"0\", 1\)"),
    ("wait for the supervisor's final message", "I", r"read\(\d+, \"\\1WARDEN"),
    ("fd clean-up, rlimits", "I", r"landlock_create_ruleset\(NULL"),
    ("Landlock", "I", r"end:landlock_restrict_self"),
    ("capabilities dropped", "I", r"seccomp\(SECCOMP_SET_MODE_FILTER"),
    ("seccomp load", "I", r"end:seccomp\("),
    ("command located, spawned (vfork)", "C", r"execve\("),
    ("command runs (true)", "C", r"exit_group\("),
    ("init reaps, reports, exits", "I", r"\+\+\+ exited"),
    ("supervisor: stats, cgroup rmdir, audit close", "S", r"exit_group\("),
    ("process exit", "S", r"\+\+\+ exited"),
]

BWRAP = [
    ("exec (execve of the binary, mapping)", "S", r"end:execve\("),
    ("ld.so: libraries, relocations, libc start", "S", r"prctl\(PR_CAPBSET_READ"),
    ("arguments, checks", "S", r"^clone\(child_stack=NULL, flags=CLONE_NEW"),
    ("clone: 7 namespaces", "S", r"end:^clone\("),
    ("ID maps, caps, lo up", "I", r"mount\(NULL, \"/\""),
    ("root build (mounts, pivot_root)", "I", r"end:umount2\(\"\.\""),
    ("command forked", "C", r"execve\("),
    ("command runs (true)", "C", r"exit_group\("),
    ("pid 1 reaps, exits", "I", r"\+\+\+ exited"),
    ("bwrap exits", "S", r"\+\+\+ exited"),
]


def parse(path):
    """Events (pid, t_start, t_end, text) in file order."""
    events = []
    pending = {}
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(raw.rstrip("\n"))
            if not m:
                continue
            pid, ts, text, dur = int(m[1]), float(m[2]), m[3], m[4]
            if "<unfinished ...>" in text:
                pending[pid] = (ts, text.replace("<unfinished ...>", ""))
                continue
            r = re.match(r"<\.\.\. (\w+) resumed>(.*)", text)
            if r and pid in pending:
                start, head = pending.pop(pid)
                text = head.rstrip() + " " + r[2]
                events.append((pid, start, ts + float(dur or 0), text))
                continue
            events.append((pid, ts, ts + float(dur or 0), text))
    return events


def roles(events):
    first = events[0][0]
    init = None
    for pid, *_ in events:
        if pid != first and init is None:
            init = pid
    return {p: ("S" if p == first else "I" if p == init else "C") for p, *_ in events}


def phases(events, marks):
    role = roles(events)
    t0 = events[0][1]
    prev = t0
    out, counts = [], []
    idx = 0
    for name, who, rx in marks:
        end = rx.startswith("end:")
        pat = re.compile(rx[4:] if end else rx)
        hit = None
        for j in range(idx, len(events)):
            pid, ts, te, text = events[j]
            if role[pid] == who and pat.search(text):
                hit = (j, te if end else ts)
                break
        if hit is None:
            out.append(0.0)
            counts.append(0)
            continue
        j, t = hit
        out.append(max(0.0, (t - prev) * 1e6))
        counts.append(sum(1 for e in events[idx:j + 1] if not e[3].startswith("+++")))
        prev = t
        idx = j + (0 if end else 0)
    return out, counts, len([e for e in events if not e[3].startswith("+++")])


def traced(cmd, marks, runs):
    per, cnt, totals = [], [], []
    with tempfile.TemporaryDirectory() as d:
        for i in range(runs):
            out = os.path.join(d, f"t{i}")
            subprocess.run(["strace", "-f", "-ttt", "-T", "-o", out] + cmd,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            ev = parse(out)
            p, c, total = phases(ev, marks)
            per.append(p)
            cnt.append(c)
            totals.append(total)
    med = [statistics.median(col) for col in zip(*per)]
    mcnt = [statistics.median(col) for col in zip(*cnt)]
    return med, mcnt, statistics.median(totals)


def untraced(cmds, runs):
    """Interleaved runs: {name: (median wall ms, median minor faults)}."""
    wall = {n: [] for n in cmds}
    faults = {n: [] for n in cmds}
    for _ in range(runs):
        for n, cmd in cmds.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
            t = time.perf_counter()
            subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            wall[n].append((time.perf_counter() - t) * 1e3)
            faults[n].append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before)
    return {n: (statistics.median(wall[n]), statistics.median(faults[n])) for n in cmds}


def landmarks(cmd, runs):
    """Untraced runs with warden's phase events: {landmark: median ms from
    the spawn}, in the order of their medians, and the exit as seen here."""
    env = dict(os.environ, WARDEN_LOG="trace")
    seen = {}
    mark = re.compile(r"phase=(\S+) monotonic_ns=(\d+)")
    for i in range(runs + 5):
        start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env, check=False).stderr
        end = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if i < 5:  # warm-up
            continue
        for m in mark.finditer(out.decode(errors="replace")):
            seen.setdefault(m[1], []).append((int(m[2]) - start) / 1e6)
        seen.setdefault("exit (seen by the caller)", []).append((end - start) / 1e6)
    med = {k: statistics.median(v) for k, v in seen.items()}
    return sorted(med.items(), key=lambda kv: kv[1])


def instructions(cmd):
    """Instructions the started process executed (cachegrind's Ir), or None."""
    try:
        out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                              "--cachegrind-out-file=/dev/null"] + cmd,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, check=False).stderr
    except FileNotFoundError:
        return None
    first = re.search(r"==(\d+)== Command:", out)
    if not first:
        return None
    m = re.search(rf"=={first[1]}== I\s+refs:\s+([\d,]+)", out)
    return int(m[1].replace(",", "")) if m else None


def main():
    spec = json.loads(sys.argv[1])
    runs = spec["traced_runs"]
    marks = landmarks(spec["warden"], spec["untraced_runs"])
    print(f"Landmarks, untraced, ms after the spawn (median of {spec['untraced_runs']} runs; "
          f"init-* are the sandbox's init, the rest the supervisor):\n")
    print("| landmark | ms | since the previous |\n|---|---|---|")
    prev = 0.0
    for name, ms in marks:
        print(f"| {name} | {ms:.2f} | {ms - prev:.2f} |")
        prev = ms
    print()
    w, wc, wt = traced(spec["warden"], WARDEN, runs)
    b, bc, bt = traced(spec["bwrap"], BWRAP, runs)
    print(f"Phases, µs, median of {runs} traced runs each (strace -f -ttt -T; "
          f"syscalls in the phase in brackets)\n")
    print(f"| warden phase | µs (syscalls) |\n|---|---|")
    for (name, *_), us, c in zip(WARDEN, w, wc):
        print(f"| {name} | {us:,.0f} ({c:.0f}) |")
    print(f"| **total traced** | **{sum(w):,.0f}** ({wt:.0f}) |\n")
    print(f"| bubblewrap phase | µs (syscalls) |\n|---|---|")
    for (name, *_), us, c in zip(BWRAP, b, bc):
        print(f"| {name} | {us:,.0f} ({c:.0f}) |")
    print(f"| **total traced** | **{sum(b):,.0f}** ({bt:.0f}) |\n")
    rows = [("warden --version", [spec["warden"][0], "--version"]),
             ("warden run -- true (supervisor)", spec["warden"]),
             ("bwrap --version", [spec["bwrap"][0], "--version"]),
             ("bwrap ... -- true (parent)", spec["bwrap"])]
    counted = [(n, instructions(c)) for n, c in rows]
    if all(v is not None for _, v in counted):
        print("Instructions (cachegrind Ir, the started process only):\n")
        print("| command | instructions |\n|---|---|")
        for n, v in counted:
            print(f"| {n} | {v:,} |")
        print()
    u = untraced({"bwrap": spec["bwrap"], "warden": spec["warden"],
                  **({"warden-egress": spec["warden_egress"]} if spec.get("warden_egress") else {})},
                 spec["untraced_runs"])
    print(f"Untraced, interleaved, median of {spec['untraced_runs']} runs each "
          f"(wall from perf_counter, minor faults of the whole tree from getrusage):\n")
    print("| command | wall ms | minor faults | /bwrap |\n|---|---|---|---|")
    for n, (ms, fl) in u.items():
        print(f"| {n} | {ms:.2f} | {fl:.0f} | {ms / u['bwrap'][0]:.2f} |")


if __name__ == "__main__":
    main()

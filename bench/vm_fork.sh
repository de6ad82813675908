#!/usr/bin/env bash
# Copies of one saved VM guest: one save (a pause to disk), then N copies
# restored from it, each with its own seed, hostname and clock
# (`warden_vm::pause::restore_copy`), for N = 1, 4 and 16 by default: how
# long the N restores take, and what each copy holds in the host's memory
# (PSS, from /proc/PID/smaps_rollup of its VMM). Each copy runs on a
# sparse copy of its own of the saved guest's RAM file (warden_vm::ram: no
# VMM holds a file another maps, QEMU 7.2 opening it read-write), so the
# copies no longer share the pages none of them wrote.
#
#   bench/vm_fork.sh [COUNTS]     (default: 1,4,16)
#
# Runs the vm crate's test, which prints the figures. Needs QEMU, a guest
# kernel (`warden vm kernel`), a static busybox and mkfs.ext4 or
# mkfs.erofs; each copy is a 512 MiB guest (16 copies want about 4 GB of
# RAM). Under software emulation (this kind of build host) the times are
# emulation's.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTS="${1:-1,4,16}"
WARDEN_VM_FORKS="$COUNTS" cargo test -q -p warden-vm --test all -- --ignored --nocapture \
    pause::copies_of_one_saved_vm 2>&1 | grep -E "^forks |skipped" || true

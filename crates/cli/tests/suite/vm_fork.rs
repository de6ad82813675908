//! A fork of a VM sandbox that carries its memory, through the real
//! command: a `--rootfs` VM running a counter is forked into two; each
//! fork's counter goes on from at least the parent's value at the fork,
//! each has its own hostname, the parent's workspace files, and sees
//! neither the parent's nor its sibling's new processes. A snapshot keeps
//! the memory too (a sandbox made from it goes on from the counter; one
//! whose memory was cut short is refused), and a VM that cannot be paused
//! to disk is forked with its files only, saying why.
//!
//! Boots a VM and restores it twice (slow under emulation): `#[ignore]`d,
//! run with `cargo test -p warden-cli --test all -- --ignored suite::vm_fork`.

use crate::common::vm::*;
use crate::common::*;
use std::path::Path;
use std::time::Duration;

/// Stops the sandboxes even when the test fails half-way.
struct Stopper<'a>(&'a Path, Vec<&'a str>);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        for name in &self.1 {
            let _ = vm_warden(self.0, &["stop", "--time", "1s", name], None);
        }
    }
}

/// A counter in the guest's `/tmp`, ten steps a second, started outside
/// the workspace (a process holding it would refuse the pause to disk).
const COUNTER: &str = "cd /; i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done";

/// The counter's value, read by a command in the sandbox (0 before its
/// first step).
fn count(state: &Path, name: &str) -> u64 {
    let o = vm_warden(state, &["exec", name, "--", "cat", "/tmp/n"], None);
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The command lines of every process the sandbox `name` sees.
fn processes(state: &Path, name: &str) -> String {
    let list = "cd /; for f in /proc/[0-9]*/cmdline; do cat $f; echo; done";
    ok(&vm_warden(
        state,
        &["exec", name, "--", "sh", "-c", list],
        None,
    ))
}

/// A `--rootfs` tree of busybox with the programs the test runs by name.
fn busybox_tree() -> Option<TempDir> {
    guest_busybox_tree(&["sh", "sleep", "cat", "hostname"])
}

/// Create and start the VM sandbox `src` on the root tree `tree`, with a
/// counter in the background, once it counts.
fn start_counting(s: &Path, tree: &TempDir) {
    ok(&vm_warden(
        s,
        &[
            "create",
            "--isolation",
            "vm",
            "--rootfs",
            tree.path().to_str().unwrap(),
            "src",
        ],
        None,
    ));
    ok(&vm_warden(s, &["start", "src"], None));
    ok(&vm_warden(
        s,
        &["exec", "-d", "src", "--", "sh", "-c", COUNTER],
        None,
    ));
    wait_until("the counter to count", Duration::from_secs(60), || {
        count(s, "src") > 0
    });
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_forked_with_its_memory_gives_forks_whose_counters_go_on_from_the_parents_with_their_own_hostnames_its_files_and_none_of_each_others_processes(
) {
    let state = TempDir::new("vm-fork");
    let s = state.path();
    let _stop = Stopper(s, vec!["src", "src-fork-1", "src-fork-2"]);
    if guest_release().is_none() {
        return;
    }
    let Some(tree) = busybox_tree() else {
        return;
    };
    start_counting(s, &tree);
    // Written after the counter started: the forks still have it.
    ok(&vm_warden(
        s,
        &[
            "exec",
            "src",
            "--",
            "sh",
            "-c",
            "echo parent > /workspace/parent.txt",
        ],
        None,
    ));
    let before = count(s, "src");

    let t = std::time::Instant::now();
    let o = vm_warden(s, &["fork", "src", "--count", "2"], None);
    let names = ok(&o);
    eprintln!(
        "fork into 2 with memory: {:?} end to end (pause to disk, 2 copies of the state, resume, 2 copies restored)",
        t.elapsed()
    );
    assert_eq!(names, "src-fork-1\nsrc-fork-2\n");
    assert!(
        stderr(&o).contains("memory: true"),
        "the fork did not carry the memory: {}",
        stderr(&o)
    );
    let forks = ["src-fork-1", "src-fork-2"];
    for f in forks {
        // Restored, not booted: the counter started in the parent runs
        // in the fork, from where the parent was.
        let at = count(s, f);
        assert!(
            at >= before,
            "{f}'s counter is {at}, the parent's was {before} before the fork"
        );
        wait_until(
            &format!("{f}'s counter to go on"),
            Duration::from_secs(30),
            || count(s, f) > at,
        );
        let o = ok(&vm_warden(
            s,
            &["exec", f, "--", "cat", "/workspace/parent.txt"],
            None,
        ));
        assert_eq!(o, "parent\n", "{f} lacks the parent's file");
    }
    // The parent goes on too.
    let after = count(s, "src");
    wait_until(
        "the parent's counter to go on after the fork",
        Duration::from_secs(30),
        || count(s, "src") > after,
    );

    let host = |n: &str| ok(&vm_warden(s, &["exec", n, "--", "hostname"], None));
    let names = [host("src"), host(forks[0]), host(forks[1])];
    assert_ne!(names[0], names[1], "a fork kept the parent's hostname");
    assert_ne!(names[0], names[2], "a fork kept the parent's hostname");
    assert_eq!(names[1].trim(), "src-fork-1");
    assert_eq!(names[2].trim(), "src-fork-2");

    // A process started in one of them is seen in no other.
    for (k, n) in ["src", forks[0], forks[1]].iter().enumerate() {
        let mark = format!("{}", 4242 + k);
        ok(&vm_warden(
            s,
            &[
                "exec",
                "-d",
                n,
                "--",
                "sh",
                "-c",
                &format!("cd /; exec sleep {mark}"),
            ],
            None,
        ));
    }
    for (k, n) in ["src", forks[0], forks[1]].iter().enumerate() {
        let seen = processes(s, n);
        for j in 0..3 {
            let mark = format!("sleep{}", 4242 + j);
            let has = seen.lines().any(|l| l.replace('\0', "") == mark);
            assert_eq!(
                has,
                j == k,
                "{n} sees {mark}: {has} (its processes: {seen:?})"
            );
        }
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_snapshot_keeps_its_memory_a_sandbox_made_from_it_goes_on_from_its_counter_and_one_with_its_memory_truncated_is_refused_before_anything_starts(
) {
    let state = TempDir::new("vm-snap-mem");
    let s = state.path();
    let _stop = Stopper(s, vec!["src", "fromsnap", "fromsnap2", "bad"]);
    if guest_release().is_none() {
        return;
    }
    let Some(tree) = busybox_tree() else {
        return;
    };
    start_counting(s, &tree);
    let before = count(s, "src");
    for snap in ["taken", "spoilt"] {
        let o = vm_warden(s, &["snapshots", "create", "src", snap], None);
        ok(&o);
        assert!(
            stderr(&o).contains("memory: true"),
            "the snapshot did not keep the memory: {}",
            stderr(&o)
        );
    }
    ok(&vm_warden(
        s,
        &["create", "fromsnap", "--from-snapshot", "taken", "--start"],
        None,
    ));
    let at = count(s, "fromsnap");
    assert!(
        at >= before,
        "the copy's counter is {at}, the source's was {before} before the snapshot"
    );
    wait_until(
        "the copy's counter to go on",
        Duration::from_secs(30),
        || count(s, "fromsnap") > at,
    );
    let host = ok(&vm_warden(s, &["exec", "fromsnap", "--", "hostname"], None));
    assert_eq!(host.trim(), "fromsnap");
    // A second sandbox from the same snapshot: the first one's restore
    // (which maps the snapshot's memory file, linked, not copied) left
    // the snapshot as its digest says it was.
    ok(&vm_warden(
        s,
        &["create", "fromsnap2", "--from-snapshot", "taken", "--start"],
        None,
    ));
    assert!(count(s, "fromsnap2") >= before);

    // Its memory file cut short: refused by the snapshot's digest before
    // a sandbox is made, let alone a guest restored.
    let state_file = s.join("warden/saved/owner/spoilt/memory/vm.vmstate");
    let len = std::fs::metadata(&state_file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&state_file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let o = vm_warden(
        s,
        &["create", "bad", "--from-snapshot", "spoilt", "--start"],
        None,
    );
    assert_ne!(code(&o), 0, "a sandbox was made from a damaged snapshot");
    assert!(stderr(&o).contains("spoilt"), "{}", stderr(&o));
    assert!(
        !sandbox_dir(s, "bad").exists(),
        "a sandbox was made from a damaged snapshot"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_without_a_root_image_is_forked_with_its_files_only_and_the_fork_says_why() {
    let state = TempDir::new("vm-fork-files");
    let s = state.path();
    let _stop = Stopper(s, vec!["plain", "plain-fork-1"]);
    if guest_release().is_none() {
        return;
    }
    ok(&vm_warden(
        s,
        &["create", "--isolation", "vm", "plain"],
        None,
    ));
    ok(&vm_warden(s, &["start", "plain"], None));
    let o = vm_warden(s, &["fork", "plain", "--count", "1"], None);
    assert_eq!(ok(&o), "plain-fork-1\n");
    let said = stderr(&o);
    assert!(
        said.contains("memory: false") && said.contains("/usr"),
        "the fork did not say why it carried no memory: {said}"
    );
    // The parent runs on, and the fork started (files only, booted).
    ok(&vm_warden(s, &["exec", "plain", "--", "true"], None));
    ok(&vm_warden(s, &["exec", "plain-fork-1", "--", "true"], None));
    assert!(
        !sandbox_dir(s, "plain-fork-1").join("vm-copy").exists(),
        "a fork that carried no memory has a saved state"
    );
}

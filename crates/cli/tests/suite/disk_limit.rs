//! `--disk`: a reviewable workspace's changes (the overlay's upper layer)
//! cannot spend more of the host's disk than the limit. Real attacks from
//! inside a sandbox (one big file, many small ones, a sparse file with a
//! huge apparent size whose holes are filled later, hard links, extended
//! attributes) must end in ENOSPC inside while the host carries on; a
//! named sandbox keeps its changes byte for byte (holes included) from one
//! start to the next; diff and commit work after the limit was hit; bad
//! values are refused and make nothing. Every limit here is a few MiB.

use crate::common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

const LIMIT: &str = "4M";
const LIMIT_BYTES: u64 = 4 << 20;

/// Bytes of disk the tree at `p` occupies (blocks, not apparent sizes;
/// each inode once, however many links it has).
fn allocated(p: &Path) -> u64 {
    fn walk(p: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> u64 {
        let mut total = 0;
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            if seen.insert((m.dev(), m.ino())) {
                total += m.blocks() * 512;
            }
            if m.is_dir() {
                total += walk(&e.path(), seen);
            }
        }
        total
    }
    walk(p, &mut Default::default())
}

/// The attacks, each in its own shell step; every step must report
/// ENOSPC ("No space left on device").
const ATTACKS: &[(&str, &str)] = &[
    ("one big file", "head -c 16M /dev/zero > big"),
    (
        "many small files",
        "i=0; while [ $i -lt 3000 ]; do head -c 100 /dev/urandom > f$i || exit 1; i=$((i+1)); done",
    ),
    (
        "holes of a huge sparse file filled later",
        "truncate -s 10G sparse && dd if=/dev/zero of=sparse bs=1M count=16 seek=1000 conv=notrunc",
    ),
    (
        "hard links of a growing file",
        "echo x > h && ln h h2 && ln h h3 && head -c 16M /dev/zero >> h2",
    ),
    (
        "extended attributes",
        "touch x && i=0; while [ $i -lt 2000 ]; do setfattr -n user.a$i -v $(head -c 3000 /dev/zero | tr '\\0' a) x || exit 1; i=$((i+1)); done",
    ),
];

/// Run one attack in a fresh `--overlay --disk 4M` run as `who` (None: the
/// test's own identity); returns its stderr (asserting ENOSPC) after
/// checking that the state's disk did not grow by more than the limit.
fn attack(who: Option<&Unprivileged>, state: &TempDir, ws: &TempDir, name: &str, script: &str) {
    let script = format!("{script}; echo step-status=$?");
    let out = match who {
        Some(w) => w
            .command(w.bin.to_str().unwrap())
            .args([
                "run",
                "--no-tty",
                "--no-audit-log",
                "--overlay",
                "--disk",
                LIMIT,
            ])
            .args(["-w", ws.str(), "--", "sh", "-c", &script])
            .env("XDG_STATE_HOME", state.path())
            .output()
            .unwrap(),
        None => Command::new(warden_bin())
            .args([
                "run",
                "--no-tty",
                "--no-audit-log",
                "--overlay",
                "--disk",
                LIMIT,
            ])
            .args(["-w", ws.str(), "--", "sh", "-c", &script])
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .output()
            .unwrap(),
    };
    let (o, e) = (stdout(&out), stderr(&out));
    if name == "extended attributes" && e.contains("not found") {
        skip("setfattr is not installed: the extended attribute attack is not run");
        return;
    }
    assert!(
        e.contains("No space left on device"),
        "{name}: no ENOSPC inside\nstdout: {o}\nstderr: {e}"
    );
    assert!(
        !o.contains("step-status=0"),
        "{name}: the attack went through\nstdout: {o}\nstderr: {e}"
    );
    // The host still writes to the same file system.
    let probe = state.path().join("host-probe");
    std::fs::write(&probe, vec![1u8; 1 << 20]).expect("the host can still write");
    std::fs::remove_file(&probe).unwrap();
    // What warden spent of the host's disk for this run (everything under
    // its state directory) is no more than the limit plus the file
    // system's own bookkeeping of a few blocks per entry. (The host's free
    // space as a whole is not compared: other writers share the disk.)
    let kept = allocated(state.path());
    assert!(
        kept <= LIMIT_BYTES + (2 << 20),
        "{name}: the layer kept {kept} bytes of disk, more than {LIMIT}"
    );
}

fn attacks_as(who: Option<&Unprivileged>) {
    for (name, script) in ATTACKS {
        let state = TempDir::new("disk-state");
        let ws = TempDir::new("disk-ws");
        std::fs::write(ws.path().join("kept.txt"), "kept\n").unwrap();
        if let Some(w) = who {
            w.own(state.path());
            w.own(ws.path());
            w.own(&ws.path().join("kept.txt"));
        }
        attack(who, &state, &ws, name, script);
    }
}

#[test]
fn writes_past_the_disk_limit_fail_with_enospc_as_root() {
    attacks_as(None);
}

#[test]
fn writes_past_the_disk_limit_fail_with_enospc_rootless() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    attacks_as(Some(&who));
}

/// A named sandbox hits its limit, is stopped and started again: its
/// changes come back byte for byte, a sparse file stays sparse, hard links
/// stay linked, a deletion stays deleted; diff and commit still work.
#[test]
fn a_named_sandbox_keeps_its_changes_across_stop_and_start_and_commits_after_the_limit() {
    let state = TempDir::new("disk-named");
    let ws = TempDir::new("disk-named-ws");
    std::fs::write(ws.path().join("gone.txt"), "to be deleted\n").unwrap();
    ok(&warden(
        state.path(),
        &["create", "dn", "-w", ws.str(), "--disk", LIMIT],
    ));
    let step = |script: &str| warden(state.path(), &["exec", "dn", "--", "sh", "-c", script]);
    let filled = step(
        "truncate -s 1G sparse && printf abc | dd of=sparse bs=1 seek=500000000 conv=notrunc 2>/dev/null \
         && echo hello > note && ln note note-link && rm gone.txt && head -c 1M /dev/urandom > rand \
         && sha256sum rand > rand.sum && head -c 16M /dev/zero > big; echo status=$?",
    );
    let out = stdout(&filled) + &stderr(&filled);
    assert!(out.contains("No space left on device"), "{out}");
    assert!(!out.contains("status=0"), "{out}");
    ok(&warden(state.path(), &["stop", "dn"]));
    let upper = sandbox_dir(state.path(), "dn").join("upper");
    let sparse = std::fs::metadata(upper.join("sparse")).unwrap();
    assert_eq!(sparse.len(), 1 << 30);
    assert!(
        sparse.blocks() * 512 < 1 << 20,
        "the sparse file was filled in: {} blocks",
        sparse.blocks()
    );
    assert!(!sandbox_dir(state.path(), "dn")
        .join("layer-unsaved")
        .exists());
    ok(&warden(state.path(), &["start", "dn"]));
    let back = ok(&step(
        "sha256sum -c rand.sum && stat -c '%s %b %h' sparse note-link && dd if=sparse bs=1 skip=500000000 count=3 2>/dev/null && echo && ls",
    ));
    assert!(back.contains("rand: OK"), "{back}");
    assert!(back.contains("1073741824 "), "{back}");
    assert!(back.contains(" 2\n"), "hard link lost: {back}");
    assert!(back.contains("abc"), "{back}");
    assert!(!back.contains("gone.txt"), "{back}");
    ok(&warden(state.path(), &["stop", "dn"]));
    let diff = ok(&warden(state.path(), &["diff", "dn"]));
    assert!(
        diff.contains("gone.txt") && diff.contains("sparse"),
        "{diff}"
    );
    ok(&warden(state.path(), &["commit", "dn", "note"]));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("note")).unwrap(),
        "hello\n"
    );
}

/// A supervisor killed while the layer is in memory: `ls` and `diff` say
/// that the run's changes are lost instead of silently showing less.
#[test]
fn a_killed_supervisor_is_reported_as_lost_changes() {
    let state = TempDir::new("disk-killed");
    let ws = TempDir::new("disk-killed-ws");
    ok(&warden(
        state.path(),
        &["create", "dk", "-w", ws.str(), "--disk", LIMIT],
    ));
    ok(&warden(
        state.path(),
        &["exec", "dk", "--", "sh", "-c", "echo x > lost"],
    ));
    let pid = supervisor_pid(state.path(), "dk");
    assert!(sandbox_dir(state.path(), "dk")
        .join("layer-unsaved")
        .exists());
    // SAFETY: kill with a valid signal on the supervisor this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_until(
        "the supervisor to die",
        std::time::Duration::from_secs(10),
        || !alive(pid),
    );
    let ls = warden(state.path(), &["ls"]);
    assert!(
        stderr(&ls).contains("without saving its changes"),
        "{}",
        stderr(&ls)
    );
    let diff = warden(state.path(), &["diff", "dk"]);
    assert!(
        stderr(&diff).contains("without saving its changes"),
        "{}",
        stderr(&diff)
    );
}

#[test]
fn bad_disk_values_are_refused_and_make_nothing() {
    let state = TempDir::new("disk-bad");
    let ws = TempDir::new("disk-bad-ws");
    for (value, says) in [
        ("0", "0 would make every write"),
        ("10XB", "--disk"),
        ("1000T", "more than the memory limit"),
        ("10XB", "not valid"),
    ] {
        let out = warden(
            state.path(),
            &[
                "run",
                "--no-tty",
                "--overlay",
                "--disk",
                value,
                "-w",
                ws.str(),
                "--",
                "true",
            ],
        );
        assert_ne!(code(&out), 0, "--disk {value} was accepted");
        assert!(
            stderr(&out).contains(says),
            "--disk {value}: {}",
            stderr(&out)
        );
        let made = std::fs::read_dir(state.path().join("warden/sandboxes"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(made, 0, "--disk {value} left a sandbox behind");
        assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0);
    }
}

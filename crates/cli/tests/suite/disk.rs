//! `--disk` bounds everything warden keeps on the host's disk on a
//! sandbox's behalf, not only a workspace overlay's layer: a named
//! sandbox's kept home (with or without an overlay workspace), the
//! package caches a profile shares, and a sandbox's snapshots. Each attack
//! is made from inside a real sandbox (or through the CLI, for snapshots)
//! and must end in ENOSPC inside or a clear refusal, with what warden
//! keeps on disk measured afterwards. Every limit here is a few MiB.
//!
//! A reviewable workspace's changes (the overlay's upper layer) cannot
//! spend more of the host's disk than the limit. Real attacks from
//! inside a sandbox (one big file, many small ones, a sparse file with a
//! huge apparent size whose holes are filled later, hard links, extended
//! attributes) must end in ENOSPC inside while the host carries on; a
//! named sandbox keeps its changes byte for byte (holes included) from one
//! start to the next; diff and commit work after the limit was hit; bad
//! values are refused and make nothing.

use crate::common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

const LIMIT: &str = "4M";
const LIMIT_BYTES: u64 = 4 << 20;
/// The file system's own bookkeeping: a few blocks per entry kept.
const SLACK: u64 = 2 << 20;

mod deep_home;

/// Bytes of disk the tree at `p` occupies (blocks, not apparent sizes;
/// each inode once, however many links it has).
fn allocated(p: &Path) -> u64 {
    fn walk(p: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> u64 {
        let mut total = 0;
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        for e in rd.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
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

/// Runs warden with the state under `state`, as `who` (None: the test's
/// own identity), with extra environment `env`.
struct Runner<'a> {
    who: Option<&'a Unprivileged>,
    state: &'a TempDir,
    env: Vec<(&'static str, &'static str)>,
}

impl Runner<'_> {
    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = match self.who {
            Some(w) => w.command(w.bin.to_str().unwrap()),
            None => {
                let mut c = Command::new(warden_bin());
                c.stdin(std::process::Stdio::null());
                c
            }
        };
        cmd.args(args)
            .env("WARDEN_STATE_DIR", self.state.path().join("warden"));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

fn fresh(who: Option<&Unprivileged>, tag: &str) -> (TempDir, TempDir) {
    let state = TempDir::new(&format!("{tag}-state"));
    let ws = TempDir::new(&format!("{tag}-ws"));
    std::fs::write(ws.path().join("kept.txt"), "kept\n").unwrap();
    if let Some(w) = who {
        w.own(state.path());
        w.own(ws.path());
        w.own(&ws.path().join("kept.txt"));
    }
    (state, ws)
}

/// The host can still write to the file system of `dir`.
fn host_carries_on(dir: &Path) {
    let probe = dir.join("host-probe");
    std::fs::write(&probe, vec![1u8; 1 << 20]).expect("the host can still write");
    std::fs::remove_file(&probe).unwrap();
}

/// Fill a named sandbox's home past `--disk` (one big file, then many
/// small ones); both end in ENOSPC inside, and what warden keeps of the
/// sandbox on disk after it stopped stays within the limit.
fn fill_the_home(who: Option<&Unprivileged>, env: Vec<(&'static str, &'static str)>, tag: &str) {
    let (state, ws) = fresh(who, tag);
    let w = Runner {
        who,
        state: &state,
        env,
    };
    ok(&w.run(&["create", "hf", "-w", ws.str(), "--disk", LIMIT]));
    for (name, script) in [
        ("one big file", "head -c 16M /dev/zero > \"$HOME/big\""),
        (
            "many small files",
            "i=0; while [ $i -lt 3000 ]; do head -c 3000 /dev/urandom > \"$HOME/f$i\" || exit 1; i=$((i+1)); done",
        ),
    ] {
        let out = w.run(&[
            "exec",
            "hf",
            "--",
            "sh",
            "-c",
            &format!("{script}; echo step-status=$?"),
        ]);
        let (o, e) = (stdout(&out), stderr(&out));
        assert!(
            e.contains("No space left on device"),
            "{tag}, {name}: no ENOSPC inside the home\nstdout: {o}\nstderr: {e}"
        );
        assert!(!o.contains("step-status=0"), "{tag}, {name}: {o}");
        host_carries_on(state.path());
        // Room is made again for the next step.
        ok(&w.run(&["exec", "hf", "--", "sh", "-c", "rm -f \"$HOME\"/big \"$HOME\"/f*"]));
    }
    let _ = w.run(&[
        "exec",
        "hf",
        "--",
        "sh",
        "-c",
        "head -c 16M /dev/zero > \"$HOME/big\"",
    ]);
    ok(&w.run(&["stop", "hf"]));
    let kept = allocated(state.path());
    assert!(
        kept <= LIMIT_BYTES + SLACK,
        "{tag}: warden kept {kept} bytes of disk for the sandbox, more than --disk {LIMIT}"
    );
}

/// Kill sandbox `name`'s supervisor while its layer is unsaved (as a
/// crash would), and wait until it is gone.
fn kill_supervisor_before_it_saves(state: &std::path::Path, name: &str) {
    let pid = supervisor_pid(state, name);
    assert!(sandbox_dir(state, name).join("layer-unsaved").exists());
    // SAFETY: kill with a valid signal on the supervisor this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_until(
        "the supervisor to die",
        std::time::Duration::from_secs(10),
        || !alive(pid),
    );
}

#[test]
fn a_named_sandboxs_home_cannot_take_more_than_its_disk_limit_as_root() {
    fill_the_home(None, Vec::new(), "home-root");
}

#[test]
fn a_named_sandboxs_home_cannot_take_more_than_its_disk_limit_rootless() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    fill_the_home(Some(&who), Vec::new(), "home-rootless");
}

/// A named sandbox that works on a copy of its workspace (no overlayfs):
/// its home is bounded all the same.
#[test]
fn a_named_sandbox_without_an_overlay_has_a_bounded_home_too() {
    fill_the_home(None, vec![("WARDEN_TEST_NO_OVERLAY", "1")], "home-copy");
}

/// The home comes back byte for byte across stop and start: content,
/// a sparse file's holes, hard links, modes, a symbolic link.
fn home_kept(who: Option<&Unprivileged>, tag: &str) {
    let (state, ws) = fresh(who, tag);
    let w = Runner {
        who,
        state: &state,
        env: Vec::new(),
    };
    ok(&w.run(&["create", "hk", "-w", ws.str(), "--disk", LIMIT]));
    ok(&w.run(&[
        "exec",
        "hk",
        "--",
        "sh",
        "-c",
        "cd && head -c 1M /dev/urandom > rand && sha256sum rand > rand.sum \
         && truncate -s 1G sparse && printf abc | dd of=sparse bs=1 seek=500000000 conv=notrunc 2>/dev/null \
         && echo note > note && ln note note-link && chmod 0640 note && ln -s rand rand-link \
         && mkdir -p .config/tool && echo x=1 > .config/tool/rc",
    ]));
    ok(&w.run(&["stop", "hk"]));
    assert!(!sandbox_dir(state.path(), "hk")
        .join("layer-unsaved")
        .exists());
    ok(&w.run(&["start", "hk"]));
    let back = ok(&w.run(&[
        "exec",
        "hk",
        "--",
        "sh",
        "-c",
        "cd && sha256sum -c rand.sum && stat -c '%n %s %h %a' sparse note-link \
         && dd if=sparse bs=1 skip=500000000 count=3 2>/dev/null && echo && readlink rand-link \
         && cat .config/tool/rc && du -k sparse",
    ]));
    assert!(back.contains("rand: OK"), "{tag}: {back}");
    assert!(back.contains("sparse 1073741824 1 "), "{tag}: {back}");
    assert!(back.contains("note-link 5 2 640"), "{tag}: {back}");
    assert!(back.contains("abc\nrand\nx=1\n"), "{tag}: {back}");
    let du: u64 = back
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|k| k.parse().ok())
        .unwrap();
    assert!(du < 1024, "{tag}: the sparse file was filled in: {du} KiB");
    ok(&w.run(&["stop", "hk"]));
}

#[test]
fn a_named_sandboxs_home_is_kept_byte_for_byte_across_stop_and_start_as_root() {
    home_kept(None, "kept-root");
}

#[test]
fn a_named_sandboxs_home_is_kept_byte_for_byte_across_stop_and_start_rootless() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    home_kept(Some(&who), "kept-rootless");
}

/// Killed while its home is in memory: `ls` says the last run's changes
/// are lost, even for a sandbox without an overlay.
#[test]
fn a_killed_supervisor_is_reported_for_the_home_without_an_overlay() {
    let (state, ws) = fresh(None, "home-killed");
    let w = Runner {
        who: None,
        state: &state,
        env: vec![("WARDEN_TEST_NO_OVERLAY", "1")],
    };
    ok(&w.run(&["create", "hd", "-w", ws.str(), "--disk", LIMIT]));
    ok(&w.run(&["exec", "hd", "--", "sh", "-c", "echo x > \"$HOME/lost\""]));
    kill_supervisor_before_it_saves(state.path(), "hd");
    let ls = w.run(&["ls"]);
    assert!(
        stderr(&ls).contains("without saving its changes"),
        "{}",
        stderr(&ls)
    );
}

/// A profile's cache is filled from inside: a write past `--disk` fails
/// with ENOSPC, and runs that each add less than the limit never make the
/// shared cache on disk larger than it; what the first run put in the
/// cache is there for the next.
fn fill_a_cache(who: Option<&Unprivileged>, tag: &str) {
    let (state, ws) = fresh(who, tag);
    let w = Runner {
        who,
        state: &state,
        env: Vec::new(),
    };
    let run = |script: &str| {
        w.run(&[
            "run",
            "--no-tty",
            "--no-audit-log",
            "--cache",
            "pip",
            "--disk",
            LIMIT,
            "-w",
            ws.str(),
            "--",
            "sh",
            "-c",
            &format!("{script}; echo step-status=$?"),
        ])
    };
    let cache = "$HOME/.cache/pip";
    let out = run(&format!("head -c 16M /dev/zero > {cache}/big"));
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(
        e.contains("No space left on device") && !o.contains("step-status=0"),
        "{tag}: no ENOSPC inside the cache\nstdout: {o}\nstderr: {e}"
    );
    host_carries_on(state.path());
    // What the sandbox made unreadable is merged all the same (an
    // unprivileged supervisor reads its disposable copy).
    let first = ok(&run(&format!(
        "rm -f {cache}/big; echo hello > {cache}/first && mkdir {cache}/locked \
         && echo s > {cache}/locked/f && chmod 000 {cache}/locked/f {cache}/locked"
    )));
    assert!(first.contains("step-status=0"), "{tag}: {first}");
    let second = ok(&run(&format!("cat {cache}/first; ls -ld {cache}/locked")));
    assert!(
        second.contains("hello") && second.contains("d---------"),
        "{tag}: the cache was not shared: {second}"
    );
    // Past the bound, what is not kept is said: on stderr and in the
    // events of the run that wrote it.
    let mut said = 0;
    for i in 0..4 {
        let out = run(&format!("head -c 3M /dev/urandom > {cache}/part{i}"));
        if stderr(&out).contains("CACHE FULL: 1 file written to the profile's caches was not kept")
        {
            said += 1;
        }
    }
    assert!(
        said >= 1,
        "{tag}: no run said that its cache writes were left out"
    );
    let kept = allocated(&state.path().join("warden/caches"));
    assert!(
        kept <= LIMIT_BYTES + SLACK,
        "{tag}: the profile's cache holds {kept} bytes of disk, more than --disk {LIMIT}"
    );
    host_carries_on(state.path());
}

#[test]
fn a_cache_cannot_take_more_than_the_disk_limit_as_root() {
    fill_a_cache(None, "cache-root");
}

#[test]
fn a_cache_cannot_take_more_than_the_disk_limit_rootless() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    fill_a_cache(Some(&who), "cache-rootless");
}

/// Snapshots are bounded in number: past the most a sandbox may keep,
/// `warden snapshot` refuses, says what to remove, and makes nothing;
/// removing one makes room.
#[test]
fn snapshots_past_the_bound_are_refused_with_what_to_remove() {
    let (state, ws) = fresh(None, "snapshots");
    let w = Runner {
        who: None,
        state: &state,
        env: Vec::new(),
    };
    ok(&w.run(&["create", "sn", "-w", ws.str(), "--disk", LIMIT]));
    ok(&w.run(&[
        "exec",
        "sn",
        "--",
        "sh",
        "-c",
        "head -c 3M /dev/urandom > data",
    ]));
    ok(&w.run(&["stop", "sn"]));
    let mut made = 0;
    let mut refused = None;
    for i in 0..40 {
        let out = w.run(&["snapshot", "sn", &format!("s{i}")]);
        if code(&out) == 0 {
            made += 1;
        } else {
            refused = Some(stderr(&out));
            break;
        }
    }
    let said = refused.unwrap_or_else(|| panic!("{made} snapshots were all made"));
    assert!(
        said.contains("--delete") && said.contains("snapshots"),
        "{said}"
    );
    assert!(
        !sandbox_dir(state.path(), "sn")
            .join(format!("snapshots/s{made}"))
            .exists(),
        "the refused snapshot left something behind"
    );
    let kept = allocated(&sandbox_dir(state.path(), "sn").join("snapshots"));
    assert!(
        kept <= (made as u64) * (LIMIT_BYTES + SLACK / 16),
        "{kept} bytes for {made} snapshots"
    );
    ok(&w.run(&["snapshot", "sn", "--delete", "s0"]));
    ok(&w.run(&["snapshot", "sn", "again"]));
    let list = ok(&w.run(&["snapshot", "sn", "--list"]));
    assert!(list.contains("again") && !list.contains("s0 "), "{list}");
}

/// A named sandbox's kept home is copied back into memory (a tmpfs) when
/// it starts; that copy counts against the sandbox's memory limit like
/// everything the sandbox holds. Were it charged elsewhere (on a v1 memory
/// hierarchy, pages stay charged where their writer was when it wrote
/// them), a sandbox could save its limit's worth of files in one run and
/// use its whole limit on top of them in the next.
#[test]
fn a_restored_home_counts_against_the_sandboxs_memory_limit() {
    let (state, ws) = fresh(None, "restore-charge");
    let w = Runner {
        who: None,
        state: &state,
        env: Vec::new(),
    };
    ok(&w.run(&[
        "create",
        "rc",
        "-w",
        ws.str(),
        "--disk",
        "200M",
        "--memory",
        "256M",
    ]));
    // 160 MiB kept in the home (under the limit while written).
    ok(&w.run(&[
        "exec",
        "rc",
        "--",
        "sh",
        "-c",
        "cd && head -c 160M /dev/zero > big && sync",
    ]));
    ok(&w.run(&["stop", "rc"]));
    ok(&w.run(&["start", "rc"]));
    // 160 MiB restored + 150 MiB allocated and touched > 256 MiB.
    let hog = w.run(&[
        "exec",
        "rc",
        "--",
        "python3",
        "-c",
        "b = bytearray(150 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('kept all of it')",
    ]);
    let out = String::from_utf8_lossy(&hog.stdout);
    assert!(
        !out.contains("kept all of it"),
        "the restored home was not charged to the sandbox: {} {}",
        out,
        stderr(&hog)
    );
    // The home itself is still there, whole.
    let size = ok(&w.run(&["exec", "rc", "--", "sh", "-c", "stat -c %s ~/big"]));
    assert_eq!(size.trim(), (160u64 << 20).to_string());
    ok(&w.run(&["stop", "rc"]));
}

// --- A reviewable workspace's layer ------------------------------------------

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
    let args = [
        "run",
        "--no-tty",
        "--no-audit-log",
        "--overlay",
        "--disk",
        LIMIT,
        "-w",
        ws.str(),
        "--",
        "sh",
        "-c",
        &script,
    ];
    let out = match who {
        Some(w) => w
            .command(w.bin.to_str().unwrap())
            .args(args)
            .env("XDG_STATE_HOME", state.path())
            .output()
            .unwrap(),
        None => Command::new(warden_bin())
            .args(args)
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
    kill_supervisor_before_it_saves(state.path(), "dk");
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

//! The whole cycle as an unprivileged user: this is how most people run
//! warden, and where the overlay needs `userxattr` and where the kernel's
//! mode-000 `work/work` directory cannot be removed by privilege.

use crate::common::{build_lower, is_root, session, skip, tree, Mount, TempDir, CHANGES};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use warden_workspace::{CommitOptions, CreateOptions, Decision, DiffOptions, Layout, Store};

const USER: &str = "warden-test";

/// Create, run through an overlay, diff, commit, snapshot and remove.
fn cycle(base: &Path) {
    let real = base.join("real");
    std::fs::create_dir_all(&real).expect("mkdir real");
    build_lower(&real);
    let store = Store::open(base.join("state")).expect("open store");
    let sb = store
        .create(
            "mine",
            &CreateOptions {
                workspace: real.clone(),
                profile: None,
                layout: Layout::Overlay,
                runs_on_host: Vec::new(),
            },
        )
        .expect("create");
    let view = base.join("view");
    session(&sb, Mount::UserNs, CHANGES, Some(&view)).expect("overlay session as this user");
    let changes = sb.diff(&DiffOptions::default()).expect("diff");
    assert_eq!(changes.len(), 21, "{changes:#?}");
    let guard = sb.lock().expect("lock");
    guard
        .snapshot(Some("before"))
        .expect("snapshot (whiteouts copied unprivileged)");
    guard
        .commit(&CommitOptions::default(), &mut |_| Decision::Apply)
        .expect("commit");
    assert_eq!(tree(&real), tree(&view));
    guard.restore("before").expect("restore");
    drop(guard);
    // The restored layer mounts again (and the kernel remakes work/work).
    session(&sb, Mount::UserNs, "true", None).expect("session after restore");
    let mode = std::fs::symlink_metadata(sb.work().join("work"))
        .map(|m| m.permissions().mode() & 0o777)
        .expect("work/work exists");
    assert_eq!(mode, 0, "the kernel leaves work/work at mode 000");
    store.remove("mine").expect("remove as the owner");
    assert!(!sb.dir().exists());
}

#[test]
#[ignore = "helper: started as another user by the test below"]
fn helper_cycle_as_this_user() {
    let base = std::env::var_os("WARDEN_TEST_TMP").expect("WARDEN_TEST_TMP");
    cycle(&Path::new(&base).join("cycle"));
}

/// The sandbox's user made parts of its layer unreadable to itself (the
/// same user as warden, rootless): review, snapshot and commits still
/// work, and every mode comes out as the sandbox left it.
fn unreadable(base: &Path) {
    use std::fs;
    let real = base.join("real");
    fs::create_dir_all(&real).expect("mkdir real");
    fs::write(real.join("ok.txt"), "one\n").expect("write");
    let store = Store::open(base.join("state")).expect("open store");
    let sb = store
        .create("shut", &CreateOptions::new(&real))
        .expect("create");
    let up = sb.upper();
    fs::write(up.join("ok.txt"), "two\n").expect("write");
    fs::create_dir(up.join("secret")).expect("mkdir");
    fs::write(up.join("secret/f"), "hidden\n").expect("write");
    fs::write(up.join("locked.txt"), "locked\n").expect("write");
    fs::create_dir(up.join("half")).expect("mkdir");
    fs::write(up.join("half/g"), "g\n").expect("write");
    let chmod =
        |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).expect("chmod");
    chmod(&up.join("secret"), 0o000);
    chmod(&up.join("locked.txt"), 0o000);
    chmod(&up.join("half"), 0o600);
    let mode = |p: &Path| fs::symlink_metadata(p).expect("lstat").permissions().mode() & 0o7777;

    let changes = sb
        .diff(&DiffOptions::default())
        .expect("diff of an unreadable layer");
    let of = |p: &str| {
        changes
            .iter()
            .find(|c| c.path == Path::new(p))
            .and_then(|c| c.new.as_ref())
            .map(|n| n.mode)
    };
    assert_eq!(of("secret"), Some(0o000), "{changes:#?}");
    assert_eq!(of("secret/f"), Some(0o644));
    assert_eq!(of("locked.txt"), Some(0o000));
    assert_eq!(of("half"), Some(0o600));
    assert_eq!(of("half/g"), Some(0o644));
    assert_eq!(
        mode(&up.join("secret")),
        0o000,
        "the layer's modes are given back"
    );
    let guard = sb.lock().expect("lock");
    guard
        .snapshot(Some("s"))
        .expect("snapshot of an unreadable layer");
    assert_eq!(mode(&sb.dir().join("snapshots/s/upper/secret")), 0o000);
    guard
        .commit(
            &CommitOptions {
                paths: vec!["ok.txt".into()],
                ..CommitOptions::default()
            },
            &mut |_| Decision::Apply,
        )
        .expect("partial commit beside an unreadable directory");
    assert_eq!(
        fs::read_to_string(real.join("ok.txt")).expect("read"),
        "two\n"
    );
    guard
        .commit(&CommitOptions::default(), &mut |_| Decision::Apply)
        .expect("commit of unreadable entries");
    assert_eq!(mode(&real.join("secret")), 0o000);
    assert_eq!(mode(&real.join("locked.txt")), 0o000);
    assert_eq!(mode(&real.join("half")), 0o600);
    chmod(&real.join("secret"), 0o700);
    assert_eq!(
        fs::read_to_string(real.join("secret/f")).expect("read"),
        "hidden\n"
    );
    chmod(&real.join("half"), 0o700);
    chmod(&real.join("locked.txt"), 0o600);
    drop(guard);
    store.remove("shut").expect("remove");
}

#[test]
#[ignore = "helper: started as another user by the test below"]
fn helper_unreadable_as_this_user() {
    let base = std::env::var_os("WARDEN_TEST_TMP").expect("WARDEN_TEST_TMP");
    unreadable(&Path::new(&base).join("unreadable"));
}

/// A rootless sandbox swaps entries of its layer that warden must open
/// (mode 000, and a setuid mode with group and world bits) for links to
/// the owner's own files (`renameat2(RENAME_EXCHANGE)`), again and again,
/// while reviews open and close the layer: the owner's files keep their
/// modes.
fn racing_links(base: &Path) {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    use std::fs;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let real = base.join("real");
    fs::create_dir_all(&real).expect("mkdir real");
    let owner = base.join("owner");
    fs::create_dir_all(owner.join("dir")).expect("mkdir owner");
    fs::write(owner.join("file"), "the owner's\n").expect("write");
    let chmod =
        |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).expect("chmod");
    chmod(&owner.join("dir"), 0o500);
    chmod(&owner.join("file"), 0o200);
    let mode = |p: &Path| fs::symlink_metadata(p).expect("lstat").permissions().mode() & 0o7777;
    let store = Store::open(base.join("state")).expect("open store");
    let sb = store
        .create("race", &CreateOptions::new(&real))
        .expect("create");
    let up = sb.upper();
    fs::create_dir(up.join("d")).expect("mkdir");
    fs::write(up.join("f"), "f\n").expect("write");
    chmod(&up.join("d"), 0o000);
    chmod(&up.join("f"), 0o6077);
    std::os::unix::fs::symlink(owner.join("dir"), up.join("ld")).expect("link");
    std::os::unix::fs::symlink(owner.join("file"), up.join("lf")).expect("link");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (up, stop) = (up.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (a, b) in [("d", "ld"), ("f", "lf")] {
                    let _ = renameat_with(CWD, up.join(a), CWD, up.join(b), RenameFlags::EXCHANGE);
                }
                n += 1;
            }
            n
        })
    };
    for _ in 0..300 {
        // A review may meet a link where it saw a directory and refuse;
        // what matters is what it changed.
        let _ = sb.diff(&DiffOptions::default());
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    assert!(swaps > 0, "the links were never swapped in");
    assert_eq!(
        mode(&owner.join("dir")),
        0o500,
        "the owner's directory was opened up"
    );
    assert_eq!(
        mode(&owner.join("file")),
        0o200,
        "the owner's file was changed"
    );
    chmod(&owner.join("dir"), 0o700);
    store.remove("race").expect("remove");
}

#[test]
#[ignore = "helper: started as another user by the test below"]
fn helper_racing_links_as_this_user() {
    let base = std::env::var_os("WARDEN_TEST_TMP").expect("WARDEN_TEST_TMP");
    racing_links(&Path::new(&base).join("racing"));
}

#[test]
fn a_rootless_layer_racing_links_into_a_review_never_changes_the_modes_of_the_owners_files() {
    as_user("helper_racing_links_as_this_user", racing_links);
}

#[test]
fn an_unprivileged_user_can_create_run_diff_commit_snapshot_and_remove() {
    as_user("helper_cycle_as_this_user", cycle);
}

#[test]
fn directories_a_rootless_sandbox_made_unreadable_break_neither_diff_snapshot_nor_commit() {
    as_user("helper_unreadable_as_this_user", unreadable);
}

/// Run the helper test `helper` as the unprivileged `warden-test` user
/// (or `run` here when this is not root).
fn as_user(helper: &str, run: fn(&Path)) {
    if !is_root() {
        let dir = TempDir::new("unpriv");
        run(dir.path());
        return;
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, USER]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ])
            .status();
        if !matches!(made, Ok(s) if s.success()) {
            skip("no unprivileged user: cannot create `warden-test`");
            return;
        }
    }
    let (Some(uid), Some(gid)) = (id("-u"), id("-g")) else {
        skip("cannot read the IDs of `warden-test`");
        return;
    };
    // libtest names a test by its path without the crate's name.
    let module = module_path!();
    let helper_path = match module.split_once("::") {
        Some((_, rest)) => format!("{rest}::{helper}"),
        None => helper.to_string(),
    };
    let dir = TempDir::new("unpriv");
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown");
    let bin = dir.join("tests-bin");
    std::fs::copy(std::env::current_exe().expect("current exe"), &bin).expect("copy test binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // setpriv (util-linux) also clears root's supplementary groups.
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
            "--",
        ])
        .arg(&bin)
        .args(["--ignored", "--exact", &helper_path, "--nocapture"])
        .env("WARDEN_TEST_TMP", dir.path())
        .current_dir("/")
        .output()
        .expect("run helper");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains("skipped:") {
        eprintln!("{text}");
        return;
    }
    assert!(out.status.success(), "helper failed as {USER}:\n{text}");
    assert!(text.contains("1 passed"), "{text}");
}

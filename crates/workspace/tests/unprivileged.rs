//! The whole cycle as an unprivileged user: this is how most people run
//! warden, and where the overlay needs `userxattr` and where the kernel's
//! mode-000 `work/work` directory cannot be removed by privilege.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{build_lower, is_root, session, skip, tree, Mount, TempDir, CHANGES};
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

#[test]
fn an_unprivileged_user_can_create_run_diff_commit_snapshot_and_remove() {
    if !is_root() {
        let dir = TempDir::new("unpriv");
        cycle(dir.path());
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
        .args([
            "--ignored",
            "--exact",
            "helper_cycle_as_this_user",
            "--nocapture",
        ])
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

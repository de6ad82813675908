//! Every bind keeps its owner inside: as root, a repository bound with
//! `--ro` belongs to the same user inside as the workspace does, so the
//! real git works in it instead of refusing it as "dubious ownership"; a
//! root-only file of a bind stays unreadable all the same.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// A small git repository at `dir`, all of it given to `uid:gid`.
fn repository(dir: &Path, owner: Option<(u32, u32)>) -> bool {
    std::fs::write(dir.join("README"), "hello\n").unwrap();
    let git = |args: &[&str]| git_in(dir, args);
    if !(git(&["init", "-q"]) && git(&["add", "."]) && git(&["commit", "-qm", "init"])) {
        return false;
    }
    if let Some((uid, gid)) = owner {
        let done = Command::new("chown")
            .args(["-R", &format!("{uid}:{gid}"), dir.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(done.success());
    }
    true
}

const GIT_STATUS: &str = r#"cd "$1" && test "$(stat -c %u .)" = "$(id -u)" && echo same-owner; git status --short --branch 2>&1; echo "git=$?""#;

#[test]
fn a_read_only_repository_is_owned_inside_by_its_owner_and_git_works_in_it() {
    if !is_root() {
        skip("the idmapped read-only binds are root mode's; rootless is covered below");
        return;
    }
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to own the workspace");
        return;
    };
    let ws = TempDir::new("ro-owner-ws");
    let repo = TempDir::new("ro-owner-repo");
    who.own(ws.path());
    if !repository(repo.path(), Some((who.uid, who.gid))) {
        skip("git is not available");
        return;
    }
    // A root-only file in the bind: it must stay unreadable.
    let secret = repo.path().join("root-only");
    std::fs::write(&secret, "planted\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run_sh(
        &["-w", ws.str(), "--ro", repo.str()],
        &format!(
            "set -- {}; {GIT_STATUS}; cat \"$1/root-only\" 2>/dev/null || echo unreadable",
            repo.str()
        ),
    );
    let s = stdout(&out);
    assert!(out.status.success(), "{s}{}", stderr(&out));
    assert!(s.contains("same-owner"), "{s}");
    assert!(!s.contains("dubious ownership"), "{s}");
    assert!(s.contains("git=0") && s.contains("## "), "{s}");
    assert!(s.contains("unreadable") && !s.contains("planted"), "{s}");
    // Read-only all the same.
    let out = run_sh(
        &["-w", ws.str(), "--ro", repo.str()],
        &format!("echo x > {}/README 2>/dev/null || echo refused", repo.str()),
    );
    assert!(stdout(&out).contains("refused"), "{}", stdout(&out));
    assert_eq!(
        std::fs::read_to_string(repo.path().join("README")).unwrap(),
        "hello\n"
    );
}

#[test]
fn an_unprivileged_user_sees_its_own_read_only_repository_as_its_own() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let state = TempDir::new("ro-owner-u-state");
    let ws = TempDir::new("ro-owner-u-ws");
    let repo = TempDir::new("ro-owner-u-repo");
    for p in [state.path(), ws.path()] {
        who.own(p);
    }
    let owner = is_root().then_some((who.uid, who.gid));
    if !repository(repo.path(), owner) {
        skip("git is not available");
        return;
    }
    let out = who
        .command(who.bin.to_str().unwrap())
        .args(["run", "--no-tty", "-w", ws.str(), "--ro", repo.str()])
        .args(["--", "sh", "-c", GIT_STATUS, "sh", repo.str()])
        .env("XDG_STATE_HOME", state.path())
        .output()
        .unwrap();
    let s = ok(&out);
    assert!(s.contains("same-owner") && s.contains("git=0"), "{s}");
}

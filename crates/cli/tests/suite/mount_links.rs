//! A sandbox's start never makes a mount point through a link that the
//! sandbox (in its kept home) or an image (in its root) planted: while the
//! root is assembled the host's root is visible at `/oldroot`, and a
//! followed link would create a directory or file on the host where the
//! attacker picks. Each test plants such a link and checks that the host
//! path stays absent; as root (the assembler is nobody on the host) and as
//! an unprivileged owner (the assembler is the owner).

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// A host directory anyone may write to, where a followed link would land.
fn planted_target(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// The kept home's `.cache` renamed and replaced by a link to the host
/// directory `target` (through `/oldroot`), as the review's reproduction.
fn plant_in_home(target: &Path) -> String {
    format!(
        "mkdir -p ~/.cache && mv ~/.cache ~/.c0 && ln -s /oldroot{} ~/.cache && ls -la ~/",
        target.display()
    )
}

#[test]
fn a_link_planted_in_a_kept_home_never_makes_a_cache_mount_point_on_the_host() {
    let state = TempDir::new("links-home-state");
    let ws = TempDir::new("links-home-ws");
    let target = planted_target("links-home-target");
    ok(&warden(
        state.path(),
        &["create", "lk", "-w", ws.str(), "--cache", "pip"],
    ));
    ok(&warden(
        state.path(),
        &[
            "exec",
            "lk",
            "--no-tty",
            "--",
            "sh",
            "-c",
            &plant_in_home(target.path()),
        ],
    ));
    ok(&warden(state.path(), &["stop", "lk"]));
    // The next start mounts the pip cache at ~/.cache/pip: through the
    // link it would be <target>/pip on the host.
    let again = warden(state.path(), &["exec", "lk", "--no-tty", "--", "true"]);
    assert!(
        !target.path().join("pip").exists(),
        "the start created a directory on the host through the planted link"
    );
    // Refused, not run with the link followed or skipped, and told why
    // (before, the supervisor died of the closed pipe to its failed
    // sandbox and left only an empty log to read).
    assert!(!again.status.success(), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("link") && !stderr(&again).contains("supervisor.log"),
        "{}",
        stderr(&again)
    );
    let _ = warden(state.path(), &["rm", "-f", "lk"]);
}

#[test]
fn a_link_planted_in_a_kept_home_never_reaches_the_owners_files_rootless() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let state = TempDir::new("links-unpriv-state");
    let ws = TempDir::new("links-unpriv-ws");
    let target = planted_target("links-unpriv-target");
    for p in [state.path(), ws.path(), target.path()] {
        who.own(p);
    }
    let run = |args: &[&str]| who.warden_state_home(state.path(), args);
    ok(&run(&["create", "lu", "-w", ws.str(), "--cache", "pip"]));
    ok(&run(&[
        "exec",
        "lu",
        "--no-tty",
        "--",
        "sh",
        "-c",
        &plant_in_home(target.path()),
    ]));
    ok(&run(&["stop", "lu"]));
    let again = run(&["exec", "lu", "--no-tty", "--", "true"]);
    assert!(
        !target.path().join("pip").exists(),
        "the start created a directory in the owner's tree through the planted link"
    );
    assert!(!again.status.success(), "{}", stderr(&again));
    let _ = run(&["rm", "-f", "lu"]);
}

#[test]
fn an_images_resolv_conf_link_into_the_old_root_creates_nothing_on_the_host() {
    let Some(root) = busybox_rootfs() else {
        return;
    };
    if !egress_available() {
        return;
    }
    let name = unique("links-resolv");
    let host_file = Path::new("/tmp").join(&name);
    std::os::unix::fs::symlink(
        format!("../../../../../oldroot/tmp/{name}"),
        root.path().join("etc/resolv.conf"),
    )
    .unwrap();
    let out = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--rootfs",
            root.str(),
            "--allow-domain",
            "example.com",
        ])
        .args([
            "--env",
            "PATH=/bin",
            "--",
            "/bin/busybox",
            "cat",
            "/etc/resolv.conf",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !host_file.exists(),
        "the start created {} on the host through the image's link",
        host_file.display()
    );
    // The link names a place inside the image's own root (its `..` stops
    // there, as in the sandbox): warden's resolver is put there, or, where
    // the tree cannot take the directories (root mode, an image owned by
    // the host's root), the start is refused; never the host's file.
    if out.status.success() {
        assert!(stdout(&out).contains("nameserver"), "{}", stdout(&out));
    } else {
        assert!(
            stderr(&out).contains(&format!("/oldroot/tmp/{name}")),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn an_images_linked_proc_or_tmp_is_refused_not_followed() {
    let Some(root) = busybox_rootfs() else {
        return;
    };
    let target = planted_target("links-tmp-target");
    std::fs::remove_dir(root.path().join("tmp")).unwrap();
    std::os::unix::fs::symlink(
        format!("/oldroot{}", target.path().display()),
        root.path().join("tmp"),
    )
    .unwrap();
    std::fs::write(target.path().join("planted"), "host").unwrap();
    let out = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--rootfs",
            root.str(),
            "--env",
            "PATH=/bin",
        ])
        .args(["--", "/bin/busybox", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_dir(target.path()).unwrap().count(),
        1,
        "the host directory was changed"
    );
}

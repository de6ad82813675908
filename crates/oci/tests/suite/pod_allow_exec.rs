//! The exec allowlist under `warden-oci`: the node owner's profile may
//! set it (`process.allow_exec`), a pod's author may set it with the
//! `warden.dev/allow-exec` annotation where the node gave none, and may
//! only narrow the node profile's: a program more is refused before
//! anything runs, naming the annotation.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;

fn ready() -> bool {
    if !can_run() {
        return false;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: warden-oci's containers here are root's");
        return false;
    }
    true
}

/// A lab whose node catalogue holds `execlist` (only `sh`), with a planted
/// program `/bin/evil` in the container's root that says when it runs.
fn node() -> Lab {
    let lab = Lab::new();
    let dir = lab.path("config/warden/profiles");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("execlist.yaml"), "process:\n  allow_exec: [sh]\n").unwrap();
    let evil = lab.path("rootfs/bin/evil");
    std::fs::write(&evil, "#!/bin/sh\necho evil ran\n").unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    lab
}

fn run(lab: &Lab, id: &str, annotations: serde_json::Value) -> Output {
    let mut c = config(&["sh", "-c", "echo started; /bin/evil; echo status=$?"]);
    c["annotations"] = annotations;
    let b = lab.bundle(id, c);
    lab.oci(&["run", "--bundle", b.to_str().unwrap(), id])
}

#[test]
fn the_node_profiles_exec_allowlist_holds_in_a_pod_and_a_pod_may_add_one_of_its_own() {
    if !ready() {
        return;
    }
    let lab = node();
    // Without an allowlist the planted program runs: it is a program.
    let o = run(&lab, "open", serde_json::json!({}));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("evil ran"), "{}", text(&o.stdout));

    for (id, annotations) in [
        (
            "by-profile",
            serde_json::json!({"warden.dev/profile": "execlist"}),
        ),
        ("by-pod", serde_json::json!({"warden.dev/allow-exec": "sh"})),
        (
            "by-both",
            serde_json::json!({"warden.dev/profile": "execlist", "warden.dev/allow-exec": "sh"}),
        ),
    ] {
        let o = run(&lab, id, annotations);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{id}: {}", text(&o.stderr));
        assert!(out.contains("started"), "{id}: {out}");
        assert!(
            !out.contains("evil ran"),
            "{id}: the refused program ran: {out}"
        );
        assert!(out.contains("status=126"), "{id}: {out}");
    }
}

#[test]
fn a_pod_cannot_add_a_program_to_the_node_profiles_exec_allowlist() {
    if !ready() {
        return;
    }
    let lab = node();
    let o = run(
        &lab,
        "loosen",
        serde_json::json!({"warden.dev/profile": "execlist", "warden.dev/allow-exec": "sh,/bin/evil"}),
    );
    let err = text(&o.stderr);
    assert!(
        !o.status.success(),
        "a pod widened the node's allowlist: {err}"
    );
    assert!(!text(&o.stdout).contains("started"), "{}", text(&o.stdout));
    assert!(
        err.contains("warden.dev/allow-exec"),
        "the refusal does not name the annotation: {err}"
    );
    assert!(lab.left().is_empty(), "left {:?}", lab.left());
}

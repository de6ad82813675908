//! What a sandbox changed on a copy lands on the host's original with no
//! more than the rule for lent files gives the original. In a layer (a
//! workspace's, a volume's, a cache's) the sandbox changes a copy: its
//! first touch copies the file up, and the copy is born in the run, so the
//! live rule lets it widen the copy (`chmod 600` then `chmod 644`). The
//! commit and the merge land the original: a group or other bit the host's
//! file or directory did not give, and the rule would not give it, is left
//! out there; entries the sandbox made land as it made them.

use crate::common::*;
use std::path::Path;

/// A host tree of root's: a private file, a private directory holding a
/// file only it protects, and a readable file.
fn plant(dir: &Path) {
    set_mode(dir, 0o755);
    std::fs::write(dir.join("secret"), "root's secret\n").unwrap();
    set_mode(&dir.join("secret"), 0o600);
    std::fs::create_dir(dir.join("private")).unwrap();
    set_mode(&dir.join("private"), 0o700);
    std::fs::write(dir.join("private/x"), "kept by its directory\n").unwrap();
    set_mode(&dir.join("private/x"), 0o644);
    std::fs::write(dir.join("public"), "anyone's\n").unwrap();
    set_mode(&dir.join("public"), 0o644);
}

/// Widen each planted entry on its copy (the direct change is refused
/// first, as the live rule says), and make a file of the sandbox's own.
const WIDEN: &str = r#"cd "$1" || exit 9
chmod 644 secret 2>/dev/null && echo direct-widened
chmod 600 secret && chmod 644 secret && echo copy-widened
chmod 700 private && chmod 755 private && echo dir-widened
chmod 755 public && echo public-executable
echo mine > own && chmod 644 own
true"#;

#[test]
fn a_volumes_merge_never_gives_a_host_file_a_bit_its_sandbox_could_only_give_its_copy() {
    if !is_root() {
        skip("the owner swap that makes root's files the sandbox's own needs root");
        return;
    }
    let state = TempDir::new("landing-vol-state");
    let vol = TempDir::new("landing-vol");
    plant(vol.path());
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--disk",
            "64M",
            "--volume",
            &format!("{}:/mnt/v", vol.path().display()),
            "--",
            "sh",
            "-c",
            WIDEN,
            "sh",
            "/mnt/v",
        ],
    );
    let said = stdout(&out);
    assert!(out.status.success(), "{said}{}", stderr(&out));
    assert!(!said.contains("direct-widened"), "{said}");
    // The copy was the sandbox's to widen; the original is not.
    assert!(said.contains("copy-widened"), "{said}");
    assert_eq!(mode(&vol.path().join("secret")), 0o600);
    assert_eq!(mode(&vol.path().join("private")), 0o700);
    // Execute where the class reads, and the sandbox's own file, land.
    assert_eq!(mode(&vol.path().join("public")), 0o755);
    assert_eq!(mode(&vol.path().join("own")), 0o644);
    assert_eq!(
        std::fs::read_to_string(vol.path().join("own")).unwrap(),
        "mine\n"
    );
}

#[test]
fn a_commit_never_gives_a_host_file_a_bit_its_sandbox_could_only_give_its_copy() {
    if !is_root() {
        skip("the owner swap that makes root's files the sandbox's own needs root");
        return;
    }
    let state = TempDir::new("landing-ws-state");
    let proj = TempDir::new("landing-ws");
    plant(proj.path());
    ok(&warden(state.path(), &["create", "k", "-w", proj.str()]));
    let out = warden(
        state.path(),
        &[
            "exec",
            "k",
            "--no-tty",
            "--",
            "sh",
            "-c",
            WIDEN,
            "sh",
            "/workspace",
        ],
    );
    let said = ok(&out);
    assert!(said.contains("copy-widened"), "{said}");
    ok(&warden(state.path(), &["stop", "k"]));
    // The review says so, for the file and the directory.
    let json: serde_json::Value =
        serde_json::from_str(&ok(&warden(state.path(), &["diff", "k", "--json"]))).unwrap();
    let flagged = |path: &str| {
        json.as_array().unwrap().iter().any(|c| {
            c["path"] == path
                && c["flags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["rule"] == "widens-access")
        })
    };
    assert!(flagged("secret"), "{json}");
    assert!(flagged("private"), "{json}");
    assert!(!flagged("public") && !flagged("own"), "{json}");
    // Accepted or not, it lands without the bits.
    ok(&warden(state.path(), &["commit", "k", "--accept-flagged"]));
    assert_eq!(mode(&proj.path().join("secret")), 0o600);
    assert_eq!(mode(&proj.path().join("private")), 0o700);
    assert_eq!(mode(&proj.path().join("public")), 0o755);
    assert_eq!(mode(&proj.path().join("own")), 0o644);
}

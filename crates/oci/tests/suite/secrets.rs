//! A pod's author names a secret file by annotation
//! (`warden.dev/secret.T: file:PATH@HOST`): the runtime answers the same
//! for every name it will not use, so the answer (which reaches the pod's
//! events) tells nothing about the node's paths, and names neither them
//! nor the node's secrets directory. Where a secret may be sent is the
//! operator's choice (`NAME.hosts` beside it), never the pod author's.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Output;

const MARKER: &str = "NODE-ONLY-MARKER-7c1e";

/// `warden-oci --root ROOT ARGS` with the node's secrets directory `dir`.
/// Output through files: a created container holds its stdio.
fn oci_with(lab: &Lab, dir: &Path, args: &[&str]) -> Output {
    lab.oci_env(&[("WARDEN_OCI_SECRETS_DIR", dir)], args)
}

/// Create container `id` whose only annotation is `warden.dev/secret.T=value`.
fn create(lab: &Lab, dir: &Path, id: &str, value: &str) -> Output {
    let mut c = config(&["true"]);
    c["annotations"] = serde_json::json!({ "warden.dev/secret.T": value });
    let b = lab.bundle(id, c);
    oci_with(lab, dir, &["create", "--bundle", b.to_str().unwrap(), id])
}

#[test]
fn a_secret_file_annotation_is_answered_alike_for_every_node_path_it_cannot_use() {
    if !can_run() {
        return;
    }
    let lab = Lab::new();
    let secrets = lab.path("secrets");
    std::fs::create_dir_all(secrets.join("sub")).unwrap();
    std::fs::write(secrets.join("t"), "the-value").unwrap();
    std::fs::write(secrets.join("t.hosts"), "api.test").unwrap();
    // The node's own files, which a pod's author must learn nothing of.
    let node = lab.path("node");
    std::fs::create_dir_all(&node).unwrap();
    let host_file = node.join("bashrc");
    std::fs::write(&host_file, format!("{MARKER}\n")).unwrap();
    std::os::unix::fs::symlink(&host_file, secrets.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../node/bashrc", secrets.join("rel-link")).unwrap();
    nix::unistd::mkfifo(
        &secrets.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let lab_dir = lab.dir.path().display().to_string();
    let inside_abs = format!("file:{}@api.test", secrets.join("t").display());
    let existing = format!("file:{}@api.test", host_file.display());
    let missing = format!("file:{}@api.test", node.join("missing").display());
    let dir_abs = format!("file:{}@api.test", node.display());
    let cases: Vec<(&str, &str, PathBuf)> = vec![
        ("existing", existing.as_str(), secrets.clone()),
        ("missing", missing.as_str(), secrets.clone()),
        ("a-directory", dir_abs.as_str(), secrets.clone()),
        ("inside-but-absolute", inside_abs.as_str(), secrets.clone()),
        ("abs-link", "file:abs-link@api.test", secrets.clone()),
        ("rel-link", "file:rel-link@api.test", secrets.clone()),
        ("no-such", "file:no-such@api.test", secrets.clone()),
        ("sub-dir", "file:sub@api.test", secrets.clone()),
        ("fifo", "file:fifo@api.test", secrets.clone()),
        (
            "no-directory",
            "file:t@api.test",
            lab.path("no-secrets-here"),
        ),
    ];
    let mut answers = std::collections::BTreeMap::new();
    for (id, value, dir) in &cases {
        let o = create(&lab, dir, id, value);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{id}: {value} was accepted");
        assert!(err.contains("warden.dev/secret.T"), "{id}: {err}");
        assert!(
            !err.contains(MARKER),
            "{id}: the node's file was read: {err}"
        );
        assert!(!err.contains(&lab_dir), "{id}: a node path is named: {err}");
        answers.insert(err.replace(id, "ID"), *id);
        assert!(lab.left().is_empty(), "{id} left {:?}", lab.left());
    }
    assert_eq!(
        answers.len(),
        1,
        "the answers differ, so they tell the node's paths apart: {answers:#?}"
    );

    // A file of the directory, by its relative name, towards a host its
    // operator declared for it (named, or all of them), is used.
    for (id, value) in [("good", "file:t@api.test"), ("all", "file:t")] {
        let o = create(&lab, &secrets, id, value);
        assert!(o.status.success(), "{value}: {}", text(&o.stderr));
        assert!(oci_with(&lab, &secrets, &["delete", "--force", id])
            .status
            .success());
    }
    assert!(lab.left().is_empty(), "{:?}", lab.left());
}

#[test]
fn a_secret_file_without_hosts_declared_by_the_operator_or_towards_another_host_is_refused() {
    if !can_run() {
        return;
    }
    let lab = Lab::new();
    let secrets = lab.path("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("t"), "the-value").unwrap();
    std::fs::write(secrets.join("t.hosts"), "api.test").unwrap();
    std::fs::write(secrets.join("bare"), "the-value").unwrap();
    let lab_dir = lab.dir.path().display().to_string();
    for (id, value) in [
        ("other-host", "file:t@evil.test"),
        ("one-more-host", "file:t@api.test,evil.test"),
        ("bare", "file:bare@api.test"),
        ("bare-all", "file:bare"),
        ("a-variable", "env:WARDEN_SECRET_T"),
    ] {
        let o = create(&lab, &secrets, id, value);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{id}: {value} was accepted");
        assert!(err.contains("warden.dev/secret.T"), "{id}: {err}");
        assert!(!err.contains(&lab_dir), "{id}: a node path is named: {err}");
        assert!(!err.contains("bare"), "{id}: the file is named: {err}");
        assert!(lab.left().is_empty(), "{id} left {:?}", lab.left());
    }
}

//! A VM sandbox's share refused at its launch (`share_link`: its path
//! goes through a symbolic link now) reaches each door with its reason
//! code and the bind it is about: `warden start` names the code, the
//! option and its entry, the flag and the path; the API's 422 carries
//! `reason` and the bind's JSON pointer (`/spec/filesystem/read_write/N`),
//! which the E2B door's resume of such a sandbox keeps as its
//! `error_code`. The launch checks its shares before it looks for a
//! kernel or starts a VMM, so no VM boots.
//! Through the real CLI and the real daemon over HTTP.

use crate::common::daemon::*;
use crate::common::vm::*;
use crate::common::*;
use std::path::{Path, PathBuf};

/// Two read-write binds under `top`; the second is swapped for a link to
/// a directory beside them once the sandbox is made ([`swap_for_link`]).
fn two_binds(top: &Path) -> (PathBuf, PathBuf) {
    let (first, second) = (top.join("first"), top.join("second"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    std::fs::create_dir_all(top.join("elsewhere")).unwrap();
    (first, second)
}

/// `bind` moved aside and a link to `elsewhere` beside it put at its
/// path: what earlier code with a hand on the parent could do.
fn swap_for_link(bind: &Path) {
    let parent = bind.parent().unwrap();
    std::fs::rename(bind, parent.join("moved-aside")).unwrap();
    std::os::unix::fs::symlink(parent.join("elsewhere"), bind).unwrap();
}

#[test]
fn warden_start_names_a_vm_share_become_a_link_by_its_code_its_flag_and_its_path() {
    let state = TempDir::new("vm-share-refusal-cli");
    let top = TempDir::new("vm-share-refusal-cli-top");
    let (first, second) = two_binds(top.path());
    let w = |args: &[&str]| vm_warden(state.path(), args, None);
    let made = w(&[
        "create",
        "--isolation",
        "vm",
        "--rw",
        first.to_str().unwrap(),
        "--rw",
        second.to_str().unwrap(),
        "v1",
        "--",
        "true",
    ]);
    assert!(made.status.success(), "{}", stderr(&made));
    swap_for_link(&second);
    let out = w(&["start", "v1"]);
    assert!(!out.status.success(), "started over a link");
    let err = stderr(&out);
    assert!(
        err.contains("refused (share_link, filesystem.read_write.1, --rw)"),
        "{err}"
    );
    assert!(err.contains(second.to_str().unwrap()), "{err}");
}

#[test]
fn the_apis_start_of_a_vm_sandbox_whose_share_became_a_link_answers_share_link_at_the_binds_pointer(
) {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("vm-share-refusal-api");
    let top = TempDir::new("vm-share-refusal-api-top");
    let (first, second) = two_binds(top.path());
    let made = vm_warden(
        state.path(),
        &[
            "create",
            "--isolation",
            "vm",
            "--ro",
            first.to_str().unwrap(),
            "--rw",
            second.to_str().unwrap(),
            "v2",
            "--",
            "true",
        ],
        None,
    );
    assert!(made.status.success(), "{}", stderr(&made));
    swap_for_link(&second);
    let d = Daemon::start_with(state.path(), true, &[], &[]);
    let (s, b) = call(&d, "POST", "/v1/sandboxes/v2/start", Some("{}"), None);
    assert_eq!(s, 422, "{b}");
    let p = json(&b);
    assert_eq!(p["reason"], "share_link", "{b}");
    assert_eq!(p["field"], "/spec/filesystem/read_write/0", "{b}");
}

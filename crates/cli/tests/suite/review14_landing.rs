//! A named sandbox's commit, diff and discard reach exactly the directory
//! the sandbox was created over (review 14, finding 2). Before, the
//! workspace was opened with `O_NOFOLLOW`, which covers only the last
//! component: a parent directory swapped for a symbolic link took the
//! commit's writes to the link's target (the review's swap_commit.sh:
//! "1 change(s) applied", the file landed in the victim directory) and
//! the diff printed the target's files (swap_diff.sh). Now the path is
//! opened through no link in any component, and the directory's identity
//! (device, inode), recorded at creation, must match: a workspace moved
//! away and another made at its path is refused too.

use crate::common::*;
use std::path::Path;

/// The sandbox's new file, which must land only in its own workspace.
const PLANT: &str = "echo planted > /workspace/planted";
/// And a change to a file the victim directory has too: the diff would
/// show the victim's content as the old side.
const PLANT_AND_CHANGE: &str =
    "echo planted > /workspace/planted && echo changed >> /workspace/notes";

/// A sandbox `name` over `land` whose layer ran `script` (`PLANT...`),
/// stopped and reviewed.
fn prepared(state: &Path, name: &str, land: &Path, script: &str) {
    std::fs::create_dir_all(land).unwrap();
    std::fs::write(land.join("notes"), "the project's notes\n").unwrap();
    ok(&warden(
        state,
        &["create", name, "-w", land.to_str().unwrap()],
    ));
    ok(&warden(
        state,
        &["exec", name, "--no-tty", "--", "sh", "-c", script],
    ));
    ok(&warden(state, &["stop", name]));
    ok(&warden(state, &["diff", name]));
}

/// A victim directory holding `land/notes` with a host secret.
fn victim(dir: &Path) {
    std::fs::create_dir_all(dir.join("land")).unwrap();
    std::fs::write(dir.join("land/notes"), "HOST-SECRET-14\n").unwrap();
}

fn swap_parent_for_link(proj: &Path, victim: &Path) {
    std::fs::rename(proj.join("w2"), proj.join("w2.old")).unwrap();
    std::os::unix::fs::symlink(victim, proj.join("w2")).unwrap();
}

#[test]
fn a_commit_through_a_parent_swapped_for_a_link_lands_nothing_and_says_why() {
    let state = TempDir::new("r14-commit-state");
    let proj = TempDir::new("r14-commit-proj");
    let elsewhere = TempDir::new("r14-commit-victim");
    victim(elsewhere.path());
    let land = proj.path().join("w2/land");
    prepared(state.path(), "swap14", &land, PLANT);
    swap_parent_for_link(proj.path(), elsewhere.path());
    let out = warden(state.path(), &["commit", "swap14", "--accept-flagged"]);
    assert!(
        !elsewhere.path().join("land/planted").exists(),
        "the commit landed the sandbox's file in the link's target"
    );
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("land/notes")).unwrap(),
        "HOST-SECRET-14\n"
    );
    assert!(!out.status.success(), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(said.contains("symbolic link"), "{said}");
    assert!(
        said.contains(&proj.path().join("w2").display().to_string()),
        "{said}"
    );
    // The changes are still there to commit once the path is the real one.
    std::fs::remove_file(proj.path().join("w2")).unwrap();
    std::fs::rename(proj.path().join("w2.old"), proj.path().join("w2")).unwrap();
    ok(&warden(
        state.path(),
        &["commit", "swap14", "--accept-flagged"],
    ));
    assert!(land.join("planted").exists());
}

#[test]
fn a_diff_through_a_parent_swapped_for_a_link_prints_no_host_file() {
    let state = TempDir::new("r14-diff-state");
    let proj = TempDir::new("r14-diff-proj");
    let elsewhere = TempDir::new("r14-diff-victim");
    victim(elsewhere.path());
    prepared(
        state.path(),
        "swapd14",
        &proj.path().join("w2/land"),
        PLANT_AND_CHANGE,
    );
    swap_parent_for_link(proj.path(), elsewhere.path());
    for args in [&["diff", "swapd14"][..], &["diff", "swapd14", "--json"][..]] {
        let out = warden(state.path(), args);
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!all.contains("HOST-SECRET-14"), "{all}");
        assert!(!out.status.success(), "{all}");
        assert!(stderr(&out).contains("symbolic link"), "{all}");
    }
}

#[test]
fn a_workspace_replaced_by_another_directory_at_its_path_is_refused_by_commit_diff_and_discard() {
    let state = TempDir::new("r14-moved-state");
    let proj = TempDir::new("r14-moved-proj");
    let land = proj.path().join("w2/land");
    prepared(state.path(), "moved14", &land, PLANT);
    // No link: the directory moved away, another made in its place.
    std::fs::rename(&land, proj.path().join("w2/land.old")).unwrap();
    victim(&proj.path().join("w2"));
    let out = warden(state.path(), &["commit", "moved14", "--accept-flagged"]);
    assert!(
        !land.join("planted").exists(),
        "the commit landed in another directory"
    );
    assert_eq!(
        std::fs::read_to_string(land.join("notes")).unwrap(),
        "HOST-SECRET-14\n"
    );
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("not the directory"),
        "{}",
        stderr(&out)
    );
    let out = warden(state.path(), &["diff", "moved14"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("not the directory"),
        "{}",
        stderr(&out)
    );
    let out = warden(state.path(), &["discard", "moved14", "notes"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    // Back in place, the same directory: everything works again.
    std::fs::rename(&land, proj.path().join("w2/land.other")).unwrap();
    std::fs::rename(proj.path().join("w2/land.old"), &land).unwrap();
    ok(&warden(
        state.path(),
        &["commit", "moved14", "--accept-flagged"],
    ));
    assert!(land.join("planted").exists());
}

#[test]
fn a_sandbox_recorded_without_its_workspaces_identity_learns_it_at_its_next_start() {
    let state = TempDir::new("r14-old-state");
    let proj = TempDir::new("r14-old-proj");
    ok(&warden(
        state.path(),
        &["create", "old14", "-w", proj.str()],
    ));
    let meta = state.path().join("warden/sandboxes/old14/meta.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    assert!(json["workspace_id"]["ino"].is_u64(), "{json}");
    json.as_object_mut().unwrap().remove("workspace_id");
    std::fs::write(&meta, json.to_string()).unwrap();
    ok(&warden(
        state.path(),
        &["exec", "old14", "--no-tty", "--", "true"],
    ));
    ok(&warden(state.path(), &["stop", "old14"]));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(proj.path()).unwrap();
    assert_eq!(
        json["workspace_id"]["ino"].as_u64(),
        Some(md.ino()),
        "{json}"
    );
    assert_eq!(
        json["workspace_id"]["dev"].as_u64(),
        Some(md.dev()),
        "{json}"
    );
}

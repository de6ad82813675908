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
//!
//! And the loose ends of that review: the diff (and a discard's reading
//! of the host's side) walks the very directory it checked, by its
//! descriptor, never the path opened again, so a directory renamed into
//! the path between the check and the walk is never read (a swapper
//! exchanges the workspace's parent with a victim's in a loop while the
//! real command diffs); and a workspace refused is a reason code at every
//! door: the command line says it (`refused (workspace_moved)`), the API
//! answers 409 with it as its code and reason (not a 500), and MCP's
//! tools say it.

use crate::common::daemon::{self, Daemon};
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
    assert!(said.contains("(workspace_link)"), "{said}");
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
        assert!(stderr(&out).contains("(workspace_link)"), "{all}");
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
    for args in [
        &["commit", "moved14", "--accept-flagged"][..],
        &["diff", "moved14"][..],
        &["discard", "moved14", "notes"][..],
    ] {
        let out = warden(state.path(), args);
        assert!(!out.status.success(), "{args:?}: {}", stdout(&out));
        let said = stderr(&out);
        assert!(said.contains("not the directory"), "{args:?}: {said}");
        assert!(said.contains("(workspace_moved)"), "{args:?}: {said}");
        assert!(!said.contains("HOST-SECRET-14"), "{args:?}: {said}");
    }
    assert!(!land.join("planted").exists());
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

/// The swapper: `a` and `b` (two directories) exchanged with
/// `renameat2(RENAME_EXCHANGE)` until the file `stop` exists.
const EXCHANGE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop = (p.encode() for p in sys.argv[1:4])
n = 0
while not os.path.exists(stop):
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        sys.exit('renameat2: errno %d' % ctypes.get_errno())
    n += 1
print(n)
"#;

/// Before, `warden diff` checked the workspace's identity and then
/// opened its path again for the walk, the content, the judging and the
/// ignore files: a directory renamed into the path between the check and
/// those opens was read in its place (the deterministic form of this race
/// is the workspace crate's unit test
/// `a_workspace_swapped_between_its_check_and_the_walk_is_never_what_diff_reads`,
/// which printed `-HOST-SECRET-RACE` as the old side of `notes` and hid
/// every change behind the victim's `.gitignore`). Now every read goes
/// through the descriptor that was checked. With the workspace's parent
/// and a victim directory exchanged in a loop, each diff either shows
/// the project's own file or is refused as a moved workspace; the
/// victim's file never appears.
#[test]
fn a_workspace_parent_exchanged_with_another_directory_while_diff_runs_never_shows_the_other_one() {
    if !Path::new("/usr/bin/python3").exists() {
        return skip("/usr/bin/python3 is not installed (the swapper needs it)");
    }
    let state = TempDir::new("r14-race-state");
    let proj = TempDir::new("r14-race-proj");
    let land = proj.path().join("w2/land");
    prepared(state.path(), "race14", &land, PLANT_AND_CHANGE);
    // The victim has the same shape: `land/notes`, with a host secret,
    // and a .gitignore that would hide every change.
    let other = proj.path().join("other");
    victim(&other);
    std::fs::write(other.join("land/.gitignore"), "*\n").unwrap();
    let stop = proj.path().join("stop");
    let swapper = std::process::Command::new("/usr/bin/python3")
        .args(["-c", EXCHANGE])
        .arg(proj.path().join("w2"))
        .arg(&other)
        .arg(&stop)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let outputs: Vec<(bool, String)> = (0..40)
        .map(|i| {
            // With --ignored: the victim's .gitignore would otherwise hide
            // the changes, and the other directory's content with them.
            let args: &[&str] = if i % 2 == 0 {
                &["diff", "race14", "--ignored"]
            } else {
                &["diff", "race14", "--json", "--ignored"]
            };
            let out = warden(state.path(), args);
            (
                out.status.success(),
                format!("{}{}", stdout(&out), stderr(&out)),
            )
        })
        .collect();
    std::fs::write(&stop, "").unwrap();
    let swapped = swapper.wait_with_output().unwrap();
    assert!(swapped.status.success(), "{swapped:?}");
    let exchanges: u64 = String::from_utf8_lossy(&swapped.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let shown = outputs.iter().filter(|(ok, _)| *ok).count();
    let refused = outputs.len() - shown;
    eprintln!("{shown} diffs shown, {refused} refused, {exchanges} exchanges");
    for (_, all) in &outputs {
        assert!(
            !all.contains("HOST-SECRET-14"),
            "a diff read the other directory: {all}"
        );
    }
    for (ok, all) in &outputs {
        if *ok {
            assert!(all.contains("the project's notes"), "{all}");
        } else {
            assert!(all.contains("(workspace_moved)"), "{all}");
        }
    }
    // The race ran: the path changed under the diffs (some were refused
    // at their check), and the ones that passed it read their own
    // directory whatever the path held meanwhile.
    assert!(exchanges > 1000, "{exchanges} exchanges");
    assert!(shown > 0 && refused > 0, "{shown} shown, {refused} refused");
}

/// Through a real daemon over real HTTP: a moved workspace was answered
/// with the generic 409 `conflict`, no reason code, and the library's
/// text with the workspace's host path in it (and a commit whose own
/// check failed, 500 `internal`); now the changes, the commit and a
/// discard each answer 409 with `workspace_moved` as the problem's code
/// and reason, a message naming no host path, and nothing lands anywhere.
#[test]
fn a_moved_workspace_is_a_409_with_its_reason_code_at_every_route_of_the_api() {
    if !daemon::curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("r14-api-state");
    let proj = TempDir::new("r14-api-proj");
    let land = proj.path().join("w2/land");
    std::fs::create_dir_all(&land).unwrap();
    std::fs::write(land.join("notes"), "the project's notes\n").unwrap();
    let d = Daemon::start(state.path(), false);
    let owner = |method: &str, path: &str, body: Option<&str>| {
        let (s, b) = daemon::call(&d, method, path, body, None);
        (
            s,
            serde_json::from_str(&b).unwrap_or(serde_json::Value::Null),
        )
    };
    let body = serde_json::json!({ "name": "api14", "workspace": land }).to_string();
    let (s, r) = owner("POST", "/v1/sandboxes", Some(&body));
    assert_eq!(s, 201, "{r}");
    let (s, r) = owner(
        "POST",
        "/v1/sandboxes/api14/exec",
        Some(&serde_json::json!({ "shell": PLANT_AND_CHANGE }).to_string()),
    );
    assert_eq!(s, 200, "{r}");
    let (s, r) = owner("POST", "/v1/sandboxes/api14/stop", Some("{}"));
    assert_eq!(s, 200, "{r}");
    let (s, r) = owner("GET", "/v1/sandboxes/api14/changes?content=true", None);
    assert_eq!(s, 200, "{r}");
    // Moved away; another directory at its path.
    std::fs::rename(&land, proj.path().join("w2/land.old")).unwrap();
    victim(&proj.path().join("w2"));
    let asks = [
        ("GET", "/v1/sandboxes/api14/changes?content=true", None),
        ("POST", "/v1/sandboxes/api14/commit", Some("{}")),
        (
            "POST",
            "/v1/sandboxes/api14/discard",
            Some(r#"{"paths":["notes"]}"#),
        ),
    ];
    for (method, path, body) in asks {
        let (s, r) = owner(method, path, body);
        assert_eq!(s, 409, "{method} {path}: {r}");
        assert_eq!(r["code"], "workspace_moved", "{method} {path}: {r}");
        assert_eq!(r["reason"], "workspace_moved", "{method} {path}: {r}");
        let message = r["message"].as_str().unwrap_or_default();
        assert!(message.contains("moved"), "{message}");
        assert!(!message.contains(proj.str()), "a host path: {message}");
        assert!(!r.to_string().contains("HOST-SECRET-14"), "{r}");
    }
    assert!(!land.join("planted").exists());
    assert_eq!(
        std::fs::read_to_string(land.join("notes")).unwrap(),
        "HOST-SECRET-14\n"
    );
    // Back in place: the review and the commit work again.
    std::fs::rename(&land, proj.path().join("w2/land.other")).unwrap();
    std::fs::rename(proj.path().join("w2/land.old"), &land).unwrap();
    let (s, r) = owner("GET", "/v1/sandboxes/api14/changes?content=true", None);
    assert_eq!(s, 200, "{r}");
    let (s, r) = owner(
        "POST",
        "/v1/sandboxes/api14/commit",
        Some(r#"{"accept_flagged":true}"#),
    );
    assert_eq!(s, 200, "{r}");
    assert!(land.join("planted").exists());
}

/// MCP's tools say the same: `get_changes` and `commit_changes` of a
/// session whose workspace was moved away (another directory made at its
/// path) are tool errors carrying `workspace_moved`, and nothing lands.
#[test]
fn a_moved_workspace_is_a_tool_error_with_its_reason_code_through_mcp() {
    use crate::common::mcp::{call, good, refused, runtime, stdio_client};
    let state = TempDir::new("r14-mcp-state");
    let proj = TempDir::new("r14-mcp-proj");
    let land = proj.path().join("land");
    std::fs::create_dir_all(&land).unwrap();
    std::fs::write(land.join("notes"), "the project's notes\n").unwrap();
    runtime().block_on(async {
        let c = stdio_client(state.path(), &["--workspace", land.to_str().unwrap()], &[]).await;
        good(
            &call(
                &c,
                "run_command",
                serde_json::json!({ "shell": PLANT_AND_CHANGE }),
            )
            .await,
        );
        let changes = good(&call(&c, "get_changes", serde_json::json!({})).await);
        assert!(changes.contains("planted"), "{changes}");
        std::fs::rename(&land, proj.path().join("land.old")).unwrap();
        victim(proj.path());
        for tool in ["get_changes", "commit_changes"] {
            let said = refused(&call(&c, tool, serde_json::json!({})).await);
            assert!(said.contains("workspace_moved"), "{tool}: {said}");
            assert!(!said.contains("HOST-SECRET-14"), "{tool}: {said}");
        }
        assert!(!land.join("planted").exists());
        let _ = c.cancel().await;
    });
}

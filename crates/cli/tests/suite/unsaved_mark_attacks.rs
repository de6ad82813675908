//! A sandbox whose layer is held in memory (`--disk`) leaves a
//! `layer-unsaved` mark naming its supervisor's PID and descriptor of the
//! layer; when the supervisor is killed before saving, the mark stays.
//! Once the kernel hands that PID to another sandbox's supervisor (every
//! supervisor holds its layer at the same descriptor number), a reader
//! trusting the PID alone would follow the mark into the other sandbox's
//! files. The situation is planted directly, as a recycled PID would make
//! it: the dead sandbox's mark is rewritten to name the PID and descriptor
//! of another live sandbox's real supervisor. `diff`, a snapshot, a fork
//! and the API's changes of the dead one must never show the other's
//! planted secret, and `ls` must not call the dead one running.

use crate::common::daemon::{self, Daemon};
use crate::common::*;
use std::path::Path;
use std::time::Duration;

const SECRET: &str = "victim-secret-7d1f";

/// Stops the named sandboxes when the test ends, however it ends.
struct Stop<'a>(&'a Path, &'a [&'a str]);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        for n in self.1 {
            let _ = warden(self.0, &["stop", n]);
        }
    }
}

/// Whether any file below `dir` holds the secret.
fn holds_secret(dir: &Path) -> Option<std::path::PathBuf> {
    let rd = std::fs::read_dir(dir).ok()?;
    for e in rd.flatten() {
        let p = e.path();
        let Ok(m) = p.symlink_metadata() else {
            continue;
        };
        if m.is_dir() {
            if let Some(found) = holds_secret(&p) {
                return Some(found);
            }
        } else if m.is_file()
            && std::fs::read(&p)
                .is_ok_and(|b| b.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()))
        {
            return Some(p);
        }
    }
    None
}

#[test]
fn a_dead_sandboxs_mark_never_leads_into_another_sandboxs_layer() {
    let dir = TempDir::new("unsaved-mark");
    let s = dir.path();
    let ws_a = s.join("ws-a");
    let ws_b = s.join("ws-b");
    std::fs::create_dir_all(&ws_a).unwrap();
    std::fs::create_dir_all(&ws_b).unwrap();
    let names = ["a1", "victim", "stolen-copy", "a1-fork-1"];
    let _stop = Stop(s, &names);

    ok(&warden(
        s,
        &["create", "a1", "-w", ws_a.to_str().unwrap(), "--disk", "8M"],
    ));
    ok(&warden(
        s,
        &["exec", "a1", "--", "sh", "-c", "echo mine > a1.txt"],
    ));
    ok(&warden(
        s,
        &[
            "create",
            "victim",
            "-w",
            ws_b.to_str().unwrap(),
            "--disk",
            "8M",
        ],
    ));
    ok(&warden(
        s,
        &[
            "exec",
            "victim",
            "--",
            "sh",
            "-c",
            &format!("echo {SECRET} > private.txt && echo 'machine x password {SECRET}' > \"$HOME/.netrc\""),
        ],
    ));

    // a1's supervisor dies before saving (an OOM kill, a crash).
    let a1 = sandbox_dir(s, "a1");
    let dead = supervisor_pid(s, "a1");
    let old_mark = std::fs::read_to_string(a1.join("layer-unsaved")).unwrap();
    // SAFETY: kill with a valid signal on the supervisor this test started.
    unsafe { libc::kill(dead, libc::SIGKILL) };
    wait_until("a1's supervisor to die", Duration::from_secs(10), || {
        !alive(dead)
    });
    assert!(a1.join("layer-unsaved").exists(), "the mark is kept");

    // Its PID goes to the victim's supervisor: the mark now names it, with
    // everything else a1's dead supervisor wrote.
    let victim_mark =
        std::fs::read_to_string(sandbox_dir(s, "victim").join("layer-unsaved")).unwrap();
    let victim_fields: Vec<&str> = victim_mark.split_whitespace().collect();
    let old: Vec<&str> = old_mark.split_whitespace().collect();
    let planted = format!(
        "{} {} {} {}\n",
        supervisor_pid(s, "victim"),
        victim_fields[1],
        old.get(2).copied().unwrap_or("1"),
        old.get(3).copied().unwrap_or("0"),
    );
    std::fs::write(a1.join("layer-unsaved"), planted).unwrap();

    let diff = warden(s, &["diff", "a1"]);
    let said = stdout(&diff) + &stderr(&diff);
    assert!(
        !said.contains("private.txt") && !said.contains(SECRET),
        "diff shows the victim's layer: {said}"
    );

    let snap = warden(s, &["snapshots", "create", "a1", "stolen"]);
    assert!(
        !snap.status.success() && stderr(&snap).contains("its unsaved changes are lost"),
        "a snapshot of a sandbox whose changes are lost: {}",
        stderr(&snap)
    );
    if warden(s, &["create", "stolen-copy", "--from-snapshot", "stolen"])
        .status
        .success()
    {
        assert_eq!(holds_secret(&sandbox_dir(s, "stolen-copy")), None);
    }
    assert_eq!(
        holds_secret(&s.join("warden/snapshots")),
        None,
        "a snapshot of a1 copied the victim's files"
    );
    let fork = warden(s, &["fork", "a1"]);
    assert!(
        !fork.status.success()
            && stderr(&fork).contains("its unsaved changes are lost")
            && stderr(&fork).contains("`warden start a1` and `warden stop a1` first"),
        "a fork of a sandbox whose changes are lost: {}",
        stderr(&fork)
    );
    assert_eq!(
        holds_secret(&sandbox_dir(s, "a1-fork-1")),
        None,
        "a fork of a1 copied the victim's files"
    );
    assert_eq!(holds_secret(&a1), None, "a1 holds the victim's files");

    let ls = ok(&warden(s, &["ls"]));
    let row = ls
        .lines()
        .find(|l| l.starts_with("a1 "))
        .unwrap_or_default()
        .to_string();
    assert!(
        !row.contains("running"),
        "a dead sandbox listed as running: {ls}"
    );
    let ls_json = ok(&warden(s, &["ls", "--json"]));
    let rows: serde_json::Value = serde_json::from_str(&ls_json).unwrap();
    let a1_row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "a1")
        .unwrap();
    assert_ne!(a1_row["state"], "running", "{a1_row}");

    api_never_shows_the_victim(s);
    // The victim's own layer is still its own to see.
    assert!(ok(&warden(s, &["diff", "victim"])).contains("private.txt"));
}

/// The API's changes, snapshot and fork of the dead `a1`, through a daemon
/// on the same state: none shows or copies the victim's files, the
/// changes say a1's last run's changes are lost, and the snapshot and
/// fork are refused (409, `changes_lost`) with nothing made.
fn api_never_shows_the_victim(s: &Path) {
    // The API's changes, through a daemon on the same state.
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        skip("curl is not installed: the API's changes are not checked");
        return;
    }
    let d = Daemon::start(s, false);
    let (status, body) = daemon::call(
        &d,
        "GET",
        "/v1/sandboxes/a1/changes?content=true",
        None,
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        !body.contains("private.txt") && !body.contains(SECRET),
        "the API's changes of a1 show the victim's layer ({status}): {body}"
    );
    // Before the refusal moved below the doors, the answer was the saved
    // layer's list alone, as if it were a1's state: it says they are lost.
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        answer["lost"]
            .as_str()
            .is_some_and(|why| why.contains("its unsaved changes are lost")),
        "the API's changes of a1 do not say its last run's changes are lost: {body}"
    );
    let entries = |dir: &str| -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = std::fs::read_dir(s.join(dir))
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let (snaps_before, sandboxes_before) =
        (entries("warden/snapshots"), entries("warden/sandboxes"));
    // The API's snapshot and fork copy through the runtime, which refuses
    // them (before: 201, a copy of the saved layer passed off as a1's
    // state); whatever they answer, no copy holds the victim's files.
    let (status, body) = daemon::call(
        &d,
        "POST",
        "/v1/sandboxes/a1/snapshots",
        Some(r#"{"name":"stolen-api"}"#),
        None,
    );
    assert_eq!(
        holds_secret(&s.join("warden/snapshots")),
        None,
        "the API's snapshot of a1 ({status}) copied the victim's files: {body}"
    );
    assert_eq!(status, 409, "the API's snapshot of a1: {body}");
    assert!(body.contains(r#""reason":"changes_lost""#), "{body}");
    assert_eq!(entries("warden/snapshots"), snaps_before, "{body}");
    let (_, list) = daemon::call(&d, "GET", "/v1/snapshots", None, None);
    assert!(!list.contains("stolen-api"), "{list}");
    let (status, body) = daemon::call(&d, "POST", "/v1/sandboxes/a1/fork", Some("{}"), None);
    assert_eq!(status, 409, "the API's fork of a1: {body}");
    assert!(body.contains(r#""reason":"changes_lost""#), "{body}");
    assert_eq!(entries("warden/sandboxes"), sandboxes_before, "{body}");
    for e in std::fs::read_dir(s.join("warden/sandboxes"))
        .unwrap()
        .flatten()
    {
        if e.file_name() != "victim" {
            assert_eq!(
                holds_secret(&e.path()),
                None,
                "the API's fork of a1 ({status}) copied the victim's files: {body}"
            );
        }
    }
}

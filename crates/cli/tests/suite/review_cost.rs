//! What a review of a sandbox's changes may cost the host: a sandbox that
//! rewrites a file as tens of thousands of short lines, each unlike the
//! last, made the line diff quadratic (Myers' O((N+M)·D), with D = N+M
//! when nothing matches): 80,000 lines held `warden diff` and the daemon's
//! `GET /changes?content=true` (the dashboard's and MCP's request) for
//! close to a minute of CPU, 40,000 for 13 s. Each diff now has a deadline
//! (a coarser diff past it), a request a total budget, and a file past
//! the line bound is shown "not diffed" with its line counts and why. The
//! sandbox writes the files itself; the real `warden diff` and the real
//! daemon are timed.

use crate::common::daemon::{self, Daemon};
use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longer than any bounded review takes on a loaded 2-core host, and far
/// shorter than the quadratic diffs took before (52 s of CPU for 80,000
/// lines, 19 s for 49,000, debug build).
const BOUND: Duration = Duration::from_secs(12);

/// The shell, inside the sandbox, that rewrites `file` as `n` distinct
/// short lines (`x0`, `x1`, ...).
fn lines(file: &str, n: u32) -> String {
    format!(
        "seq 0 {} | sed 's/^/x/' > /workspace/{file}",
        n.saturating_sub(1)
    )
}

/// `warden ARGS` with a cap on its wall time (killed past it): its output
/// and how long it took.
fn timed(state: &Path, args: &[&str], cap: Duration) -> (std::process::Output, Duration) {
    let start = Instant::now();
    let mut child = Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drained while it runs: a patch larger than a pipe must not stall it.
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut buf);
        buf
    });
    while child.try_wait().unwrap().is_none() && start.elapsed() < cap {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let waited = child.wait_with_output().unwrap();
    let took = start.elapsed();
    let stdout = reader.join().unwrap();
    (
        std::process::Output {
            status: waited.status,
            stdout,
            stderr: waited.stderr,
        },
        took,
    )
}

/// A stopped named sandbox `name` over a workspace holding a 2-line
/// `README.md`, after running `script` inside.
fn sandbox_that_wrote(dir: &TempDir, name: &str, script: &str) -> bool {
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# readme\nhello\n").unwrap();
    std::fs::write(ws.join("notes.txt"), "notes\n").unwrap();
    let created = warden(dir.path(), &["create", name, "-w", ws.to_str().unwrap()]);
    if !created.status.success() {
        skip(&format!(
            "cannot create a sandbox here: {}",
            stderr(&created)
        ));
        return false;
    }
    ok(&warden(
        dir.path(),
        &["exec", name, "--", "sh", "-c", script],
    ));
    ok(&warden(dir.path(), &["stop", name]));
    true
}

#[test]
fn eighty_thousand_lines_from_a_sandbox_cannot_hold_warden_diff_and_are_shown_not_diffed() {
    let dir = TempDir::new("rc-lines");
    if !sandbox_that_wrote(&dir, "q", &lines("README.md", 80_000)) {
        return;
    }
    let (o, took) = timed(dir.path(), &["diff", "q", "--stat"], BOUND * 5);
    assert!(
        took < BOUND,
        "warden diff --stat took {took:?} (bound {BOUND:?}): {}",
        stderr(&o)
    );
    let stat = ok(&o);
    assert!(stat.contains("README.md"), "{stat}");
    assert!(
        stat.contains("2 → 80000 lines") && stat.contains("not diffed"),
        "the stat says what was cut: {stat}"
    );

    let (o, took) = timed(dir.path(), &["diff", "q"], BOUND * 5);
    assert!(took < BOUND, "warden diff took {took:?}: {}", stderr(&o));
    let full = ok(&o);
    assert!(
        full.contains("not diffed") && full.contains("more than 50000 lines"),
        "the diff says what was cut and why: {full}"
    );
    // Nothing of the file's content is printed as a patch.
    assert!(
        !full.contains("+x79999"),
        "{}",
        &full[..full.len().min(400)]
    );

    let (o, took) = timed(dir.path(), &["diff", "q", "--json"], BOUND * 5);
    assert!(took < BOUND, "warden diff --json took {took:?}");
    let changes: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let readme = changes
        .as_array()
        .or_else(|| changes["changes"].as_array())
        .unwrap()
        .iter()
        .find(|c| c["path"] == "README.md")
        .cloned()
        .unwrap();
    let content = &readme["content"];
    assert_eq!(content["type"], "not_diffed", "{readme}");
    assert_eq!(content["reason"], "too_many_lines", "{readme}");
    assert_eq!(content["old_lines"], 2, "{readme}");
    assert_eq!(content["new_lines"], 80_000, "{readme}");
}

#[test]
fn a_quadratic_line_diff_below_the_line_bound_stops_at_its_deadline_and_says_it_is_coarse() {
    let dir = TempDir::new("rc-deadline");
    if !sandbox_that_wrote(&dir, "q", &lines("README.md", 49_000)) {
        return;
    }
    let (o, took) = timed(dir.path(), &["diff", "q"], BOUND * 5);
    assert!(
        took < BOUND,
        "warden diff took {took:?} (bound {BOUND:?}): {}",
        stderr(&o)
    );
    let full = ok(&o);
    // Still a whole diff: every line is there, as removed and added runs.
    assert!(full.contains("+x48999"), "{}", &full[..full.len().min(400)]);
    assert!(full.contains("-hello"), "{}", &full[..full.len().min(400)]);
    assert!(
        full.contains("coarse"),
        "the diff says it was cut short: {}",
        &full[..full.len().min(400)]
    );
}

#[test]
fn the_daemon_answers_changes_with_content_within_its_budget_and_says_what_was_cut() {
    if !daemon::curl_available() {
        skip("curl is not installed");
        return;
    }
    let dir = TempDir::new("rc-daemon");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# readme\nhello\n").unwrap();
    std::fs::write(ws.join("notes.txt"), "notes\n").unwrap();
    let d = Daemon::start(dir.path(), false);
    let call = |method: &str, path: &str, body: Option<&str>| {
        let (s, b) = daemon::call(&d, method, path, body, None);
        (
            s,
            serde_json::from_str(&b).unwrap_or(serde_json::Value::Null),
        )
    };
    let body = serde_json::json!({ "name": "q", "workspace": ws }).to_string();
    let (s, r) = call("POST", "/v1/sandboxes", Some(&body));
    assert_eq!(s, 201, "{r}");
    let script = format!(
        "{} && {}",
        lines("README.md", 80_000),
        lines("notes.txt", 49_000)
    );
    let body = serde_json::json!({ "shell": script }).to_string();
    let (s, r) = call("POST", "/v1/sandboxes/q/exec", Some(&body));
    assert_eq!((s, &r["exit_status"]), (200, &serde_json::json!(0)), "{r}");
    let (s, r) = call("POST", "/v1/sandboxes/q/stop", Some("{}"));
    assert_eq!(s, 200, "{r}");

    let start = Instant::now();
    let (s, r) = call("GET", "/v1/sandboxes/q/changes?content=true", None);
    let took = start.elapsed();
    assert_eq!(s, 200, "{r}");
    assert!(took < BOUND, "GET changes?content=true took {took:?}");
    let by = |p: &str| {
        r["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == p)
            .cloned()
            .unwrap_or_else(|| panic!("no change for {p}"))
    };
    let readme = by("README.md");
    assert_eq!(readme["content"]["type"], "not_diffed", "{readme}");
    assert_eq!(readme["content"]["reason"], "too_many_lines", "{readme}");
    assert_eq!(readme["content"]["new_lines"], 80_000, "{readme}");
    let notes = by("notes.txt");
    assert_eq!(notes["content"]["type"], "text", "{}", notes["kind"]);
    assert_eq!(notes["content"]["coarse"], true, "{}", notes["kind"]);
    assert_eq!(notes["content"]["added"], 49_000);
}

#[test]
fn mcps_get_changes_answers_within_the_budget_and_says_what_was_cut() {
    use crate::common::mcp::{call, good, runtime, stdio_client};
    let state = TempDir::new("rc-mcp");
    let ws = TempDir::new("rc-mcp-ws");
    std::fs::write(ws.path().join("README.md"), "# readme\nhello\n").unwrap();
    std::fs::write(ws.path().join("notes.txt"), "notes\n").unwrap();
    runtime().block_on(async {
        let c = stdio_client(state.path(), &["--workspace", ws.str()], &[]).await;
        let script = format!(
            "{} && {}",
            lines("README.md", 80_000),
            lines("notes.txt", 49_000)
        );
        let out = good(&call(&c, "run_command", serde_json::json!({ "shell": script })).await);
        assert!(out.contains("exit status 0"), "{out}");
        let start = Instant::now();
        let changes = good(&call(&c, "get_changes", serde_json::json!({})).await);
        let took = start.elapsed();
        assert!(took < BOUND, "get_changes took {took:?}");
        assert!(
            changes
                .contains("text not diffed, too many lines to diff: 2 lines before, 80000 after"),
            "{}",
            &changes[..changes.len().min(600)]
        );
        assert!(
            changes.contains("coarse diff"),
            "{}",
            &changes[..changes.len().min(600)]
        );
        let _ = c.cancel().await;
    });
}

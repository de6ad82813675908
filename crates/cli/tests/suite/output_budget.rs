//! A sandbox whose commands write without end: the daemon keeps each
//! command's output in files of the sandbox's state (so that a command
//! outlives the daemon and its output is kept), and those files are on the
//! host's disk. What they take must stay within the sandbox's output
//! budget (a quarter of its disk limit), the rest dropped and counted in
//! the API, and the command never held up by it. Each test runs the real
//! daemon and judges from the host (the files under its state directory).

use crate::common::daemon::*;
use crate::common::*;
use std::path::{Path, PathBuf};

/// The `execs` directories under `root`, and the bytes their files hold.
fn kept_bytes(root: &Path) -> u64 {
    fn walk(dir: &Path, in_execs: bool, total: &mut u64) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if m.is_dir() {
                walk(&e.path(), in_execs || e.file_name() == "execs", total);
            } else if in_execs && m.is_file() {
                // What the host's disk holds for it, holes not counted.
                use std::os::unix::fs::MetadataExt;
                *total += m.blocks() * 512;
            }
        }
    }
    let mut total = 0;
    walk(root, false, &mut total);
    total
}

fn sandboxes_dir(state: &Path) -> PathBuf {
    state.to_path_buf()
}

const MIB: u64 = 1 << 20;

/// Commands that write 600 MiB of output in a sandbox whose disk limit
/// is 64 MiB: its output budget is 16 MiB, so the host keeps at most that,
/// and the rest is dropped, counted in the exec's JSON (whole, streamed
/// and listed), while the commands run to their end. A later command's
/// output is kept: the ended command's is given up for it (the budget is
/// the sandbox's, not each command's), and counted as that command's.
#[test]
fn output_past_the_budget_is_dropped_counted_and_never_fills_the_hosts_disk() {
    let Some((state, d)) = on_socket("out-budget") else {
        return;
    };
    let (s, b) = json_call(
        &d,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"loud","spec":{"resources":{"disk":"64M"}}}"#,
    );
    assert_eq!(s, 201, "{b}");
    // Whole: waits for the end.
    let (s, b) = json_call(
        &d,
        "POST",
        "/v1/sandboxes/loud/exec",
        r#"{"shell":"head -c 400M /dev/zero; head -c 200M /dev/zero >&2; echo end","timeout_seconds":300}"#,
    );
    assert_eq!(s, 200, "{}", &b[..b.len().min(300)]);
    let r = json(&b);
    assert_eq!(r["exit_status"], 0, "the command did not run to its end");
    let kept = kept_bytes(&sandboxes_dir(state.path()));
    eprintln!(
        "kept {kept} bytes, dropped {} + {}",
        r["stdout_dropped"], r["stderr_dropped"]
    );
    assert!(
        kept <= 16 * MIB + 64 * 1024,
        "the host keeps {} MiB of a sandbox's output, its budget is 16 MiB",
        kept / MIB
    );
    let (out_dropped, err_dropped) = (
        r["stdout_dropped"].as_u64().unwrap(),
        r["stderr_dropped"].as_u64().unwrap(),
    );
    // Every byte is kept or counted as dropped ("end\n" included).
    assert_eq!(
        kept_len(state.path()) + out_dropped + err_dropped,
        600 * MIB + 4,
        "what was kept and dropped is not what the command wrote"
    );
    assert!(out_dropped > 0 && err_dropped > 0, "{b:.300}");
    let id = r["id"].as_str().unwrap().to_string();
    let (s, b) = json_call(&d, "GET", &format!("/v1/sandboxes/loud/execs/{id}"), "");
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["stdout_dropped"].as_u64(), Some(out_dropped));
    // A later command: its output is kept, the ended command's kept
    // output given up for it and counted as that command's.
    let (s, b) = json_call(
        &d,
        "POST",
        "/v1/sandboxes/loud/exec",
        r#"{"shell":"echo later","stream":true}"#,
    );
    assert_eq!(s, 200, "{b}");
    let exited = b
        .lines()
        .map(json)
        .find(|e| e["type"] == "exited")
        .unwrap_or_else(|| panic!("no end in the stream: {b}"));
    assert_eq!(exited["stdout_dropped"], 0, "{exited}");
    let text: String = b
        .lines()
        .map(json)
        .filter(|l| l["type"] == "stdout")
        .filter_map(|l| l["data"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, "later\n", "the later command's output: {b}");
    let (s, b) = json_call(&d, "GET", &format!("/v1/sandboxes/loud/execs/{id}"), "");
    assert_eq!(s, 200, "{b}");
    let first = json(&b);
    assert_eq!(
        first["stdout_dropped"].as_u64().unwrap() + first["stderr_dropped"].as_u64().unwrap(),
        600 * MIB + 4,
        "the first command's given-up output is not counted as its own: {b:.300}"
    );
    assert!(kept_bytes(state.path()) <= 16 * MIB + 64 * 1024);
}

/// The bytes (lengths) of the files in the `execs` directories.
fn kept_len(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![(root.to_path_buf(), false)];
    while let Some((dir, in_execs)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            let name = e.file_name();
            let name = name.to_string_lossy();
            if m.is_dir() {
                stack.push((e.path(), in_execs || name == "execs"));
            } else if in_execs
                && m.is_file()
                && (name.ends_with(".stdout") || name.ends_with(".stderr"))
            {
                total += m.len();
            }
        }
    }
    total
}

/// `warden run -d`: the command's output is kept as every detached
/// command's is, within the same budget.
#[test]
fn a_detached_runs_output_log_stays_within_the_budget() {
    let state = TempDir::new("out-budget-run");
    let work = TempDir::new("out-budget-run-ws");
    let out = warden(
        state.path(),
        &[
            "run",
            "-d",
            "--disk",
            "64M",
            "-w",
            work.path().to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "head -c 200M /dev/zero; echo end",
        ],
    );
    ok(&out);
    let name = stdout(&out).trim().to_string();
    // Kept under `run` where every detached command's output is.
    let log = sandbox_dir(state.path(), &name).join("execs/run.stdout");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut cut = serde_json::Value::Null;
    while std::time::Instant::now() < deadline {
        let note = log.with_file_name("run.cut");
        if let Ok(text) = std::fs::read_to_string(&note) {
            cut = json(&text);
            if cut["stdout_dropped"].as_u64().unwrap_or(0) + std::fs::metadata(&log).unwrap().len()
                >= 200 * MIB + 4
            {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let kept = std::fs::metadata(&log).unwrap().len();
    let _ = warden(state.path(), &["rm", "-f", &name]);
    assert!(
        kept <= 16 * MIB,
        "a detached run kept {} MiB of output, its budget is 16 MiB",
        kept / MIB
    );
    assert_eq!(
        kept + cut["stdout_dropped"].as_u64().unwrap_or(0),
        200 * MIB + 4,
        "{cut}"
    );
}

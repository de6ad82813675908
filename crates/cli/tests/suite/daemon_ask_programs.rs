//! Ask mode and the exec allowlist: a program the allowlist refuses is
//! asked about on the desk (`/v1/approvals`, protocol `exec`), once per
//! path; the owner's "always" puts it on the allowlist of the sandbox's
//! next start and the project's grants, a "deny" leaves no rule, and a
//! token holder may not widen the list. Over real HTTP against the built
//! daemon, each program run for real inside the sandbox.

use crate::common::daemon::*;
use crate::common::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// Run `script` with `sh -c` in `sandbox`; its exit status.
fn sh(d: &Daemon, sandbox: &str, script: &str) -> i64 {
    let body = serde_json::json!({"argv": ["sh", "-c", script], "background": true}).to_string();
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/{sandbox}/exec"),
        Some(&body),
        None,
    );
    assert_eq!(s, 202, "{b}");
    let id = json(&b)["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let (s, b) = call(
            d,
            "GET",
            &format!("/v1/sandboxes/{sandbox}/execs/{id}"),
            None,
            None,
        );
        assert_eq!(s, 200, "{b}");
        if let Some(status) = json(&b)["exit_status"].as_i64() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{script} did not end within 30 s");
}

/// Every program kept for later starts under the daemon's state
/// directory: a sandbox's `exec.json` (`added`) and a project's grants
/// (`grants/*.exec.json`, `allow_exec`).
fn granted_programs(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for f in entries.flatten() {
        let path = f.path();
        let name = f.file_name().to_string_lossy().into_owned();
        if path.is_dir() && !path.is_symlink() {
            out.extend(granted_programs(&path));
        } else if name == "exec.json" || name.ends_with(".exec.json") {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let list = v.get("added").or_else(|| v.get("allow_exec")).unwrap();
            for p in list.as_array().unwrap() {
                out.insert(p.as_str().unwrap().to_string());
            }
        }
    }
    out
}

#[test]
#[allow(clippy::too_many_lines)] // one sandbox's questions in order, then its next start
fn a_refused_program_is_asked_once_and_the_owners_always_lets_the_next_start_run_it() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return;
    }
    if landlock_abi() < 1 {
        return skip("this kernel has no Landlock: the exec allowlist is refused here");
    }
    if !Path::new("/usr/bin/id").exists() || !Path::new("/usr/bin/whoami").exists() {
        return skip("no /usr/bin/id or /usr/bin/whoami here");
    }
    let state = TempDir::new("api-ask-exec");
    let d = Daemon::start(state.path(), true);
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"progs","spec":{"egress":{"ask":true},"process":{"allow_exec":["sh"]}}}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    // A loop of refused execs of one program, and one of another: the
    // refusals stand in this run (126).
    let status = sh(
        &d,
        "progs",
        "for i in 1 2 3 4 5; do /usr/bin/id; done; /usr/bin/whoami",
    );
    assert_eq!(status, 126);
    let approvals = || -> Vec<serde_json::Value> {
        let (s, b) = call(&d, "GET", "/v1/approvals?sandbox=progs", None, None);
        assert_eq!(s, 200, "{b}");
        json(&b)["approvals"].as_array().unwrap().clone()
    };
    let mut asked = Vec::new();
    wait_until("two questions", Duration::from_secs(10), || {
        asked = approvals();
        asked.len() >= 2
    });
    // One question a program, not one an exec.
    std::thread::sleep(Duration::from_millis(300));
    asked = approvals();
    assert_eq!(asked.len(), 2, "{asked:?}");
    let id_of = |program: &str| -> String {
        let q = asked
            .iter()
            .find(|q| q["name"] == program)
            .unwrap_or_else(|| panic!("no question about {program}: {asked:?}"));
        assert_eq!(q["protocol"], "exec", "{q}");
        assert_eq!(q["port"], 0, "{q}");
        assert!(
            q["note"]
                .as_str()
                .unwrap()
                .contains("allow_once is answered as deny"),
            "{q}"
        );
        q["id"].as_str().unwrap().to_string()
    };
    let id_q = id_of("/usr/bin/id");
    let whoami_q = id_of("/usr/bin/whoami");
    // A token holder may answer, but not widen the owner's list.
    let approver = token(state.path(), "approver", &["admin"]);
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        &format!("/v1/approvals/{id_q}"),
        Some(r#"{"decision":"allow_always"}"#),
        Some(&approver),
    );
    assert_eq!(s, 409, "{b}");
    assert!(b.contains("only the sandbox's owner"), "{b}");
    // The owner's answers: always for id, deny for whoami.
    let owners = |id: &str, decision: &str| {
        call(
            &d,
            "POST",
            &format!("/v1/approvals/{id}"),
            Some(&format!(r#"{{"decision":"{decision}"}}"#)),
            None,
        )
    };
    let (s, b) = owners(&id_q, "allow_always");
    assert_eq!(s, 204, "{b}");
    let (s, b) = owners(&whoami_q, "deny");
    assert_eq!(s, 204, "{b}");
    let (s, b) = owners(&id_q, "deny");
    assert_eq!(s, 409, "{b}");
    assert!(approvals().is_empty());
    // The rule is saved for the sandbox's later starts; the denied
    // program has none.
    assert_eq!(
        granted_programs(state.path()),
        BTreeSet::from(["/usr/bin/id".to_string()])
    );
    // The running sandbox still refuses it, and asks no more about it.
    assert_eq!(sh(&d, "progs", "/usr/bin/id"), 126);
    // The next start runs the program answered "always"; the one denied
    // is still refused.
    let (s, b) = call(&d, "POST", "/v1/sandboxes/progs/stop", None, None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(&d, "POST", "/v1/sandboxes/progs/start", None, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(sh(&d, "progs", "/usr/bin/id >/dev/null"), 0);
    assert_eq!(sh(&d, "progs", "/usr/bin/whoami"), 126);
}

//! The daemon's own audit log against a token refused again and again: it
//! records a caller's refusals one by one up to a share a minute, counts
//! the rest, and so grows at a bounded rate whatever the caller sends.

use crate::common::daemon::{curl_available, over_tcp, Daemon};
use crate::common::*;
use std::process::Command;

#[test]
fn a_token_refused_a_thousand_times_leaves_a_bounded_number_of_lines_in_the_daemons_log() {
    let Some((state, d)) = over_tcp("denial-bound") else {
        return;
    };
    // A token that may not list sandboxes: every list is refused.
    let token = crate::common::daemon::api_token(&d, "loud", &["exec"], None);
    let log = state.path().join("warden/daemon-audit.jsonl");
    let lines = || {
        std::fs::read_to_string(&log)
            .map(|t| t.lines().filter(|l| l.contains("api_denied")).count())
            .unwrap_or(0)
    };
    let before = lines();
    let url = format!("http://{}/v1/sandboxes", d.tcp.as_ref().unwrap());
    let out = Command::new("curl")
        .args(["-s", "-w", "%{http_code}\n"])
        .args(["-H", &format!("authorization: Bearer {token}")])
        .args((0..1000).flat_map(|_| ["-o", "/dev/null", url.as_str()]))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.lines().filter(|l| *l == "403").count(), 1000, "{said}");
    let recorded = lines() - before;
    assert!(
        (1..=60).contains(&recorded),
        "{recorded} refusals recorded one by one of 1000 in well under a minute"
    );
    let verify = warden(
        &state.path().join("warden"),
        &["audit", "verify", log.to_str().unwrap()],
    );
    assert!(stdout(&verify).contains("intact"), "{}", stdout(&verify));
}

/// Calls with no valid credential (an unknown token, a malformed header,
/// a bad login, a bad E2B key) leave a trace: a guessing loop is seen in
/// the daemon's log, and bounded there like any caller's refusals.
#[test]
fn guessed_tokens_are_recorded_in_the_daemons_log_and_a_flood_of_them_stays_bounded() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("denial-unauth");
    let e2b_addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &e2b_addr], &[]);
    let log = state.path().join("warden/daemon-audit.jsonl");
    let unknown = || {
        std::fs::read_to_string(&log)
            .map(|t| {
                t.lines()
                    .filter(|l| l.contains("api_denied") && !l.contains("\"token\":\""))
                    .count()
            })
            .unwrap_or(0)
    };
    let tcp = d.tcp.clone().unwrap();
    let curl = |args: &[&str]| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let list = format!("http://{tcp}/v1/sandboxes");
    let bogus = "authorization: Bearer wdn_0000000000000000000000000000000000000000";
    assert_eq!(curl(&["-H", bogus, &list]), "401");
    let login = format!("http://{tcp}/login");
    assert_eq!(
        curl(&[
            "-H",
            "content-type: application/json",
            "-H",
            &format!("origin: http://{tcp}"),
            "-d",
            r#"{"token":"wdn_guess"}"#,
            &login
        ]),
        "401"
    );
    let e2b = format!("http://{e2b_addr}/sandboxes");
    assert_eq!(curl(&["-H", "x-api-key: wdn_guess", &e2b]), "401");
    assert_eq!(
        unknown(),
        3,
        "each refused credential is one line: {:?}",
        std::fs::read_to_string(&log)
    );
    let url = list.as_str();
    let out = Command::new("curl")
        .args(["-s", "-w", "%{http_code}\n", "-H", bogus])
        .args((0..500).flat_map(|_| ["-o", "/dev/null", url]))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.lines().filter(|l| *l == "401").count(), 500, "{said}");
    assert!(
        unknown() <= 60,
        "{} lines for guessed tokens within a minute",
        unknown()
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("wdn_0000"),
        "a guessed token is never written"
    );
}

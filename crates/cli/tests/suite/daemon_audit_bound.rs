//! The daemon's own audit log against a token refused again and again: it
//! records a caller's refusals one by one up to a share a minute, counts
//! the rest, and so grows at a bounded rate whatever the caller sends.

use crate::common::daemon::{curl_available, Daemon};
use crate::common::*;
use std::process::Command;

#[test]
fn a_token_refused_a_thousand_times_leaves_a_bounded_number_of_lines_in_the_daemons_log() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("denial-bound");
    let d = Daemon::start(state.path(), true);
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

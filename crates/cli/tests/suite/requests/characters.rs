//! What a request path may hold, through the real binary: a path with a
//! character no rule can name (a C1 control, raw or escaped) is refused
//! before anything goes upstream and is never put to the owner, so an
//! "always" can never write a grants file warden cannot read back; and
//! whatever a sandbox puts in a request line, `--json-events` and `warden
//! logs --json` hold no raw C1 control or direction override.

use super::ask::{create_named, warden_asking};
use super::{answer_next, asking_on, forge_for_raw_client, raw_gets, unasked};
use crate::common::*;
use std::time::Duration;

/// A path with a CSI (U+009B) and a right-to-left override (U+202E).
const HOSTILE: &str = "/x\u{9b}31m\u{202e}evil";

/// Characters that must never reach a terminal raw.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| {
            let n = u32::from(*c);
            (0x7f..=0x9f).contains(&n) || matches!(n, 0x2028..=0x202e | 0x2066..=0x2069)
        })
        .collect()
}

#[test]
fn a_path_with_a_c1_control_is_refused_before_the_owner_is_asked_and_the_grants_file_stays_readable(
) {
    let Some(forge) = forge_for_raw_client() else {
        return;
    };
    let state = TempDir::new("requests-c1-state");
    let ws = TempDir::new("requests-c1-ws");
    // On the terminal, or with nobody to ask.
    let args = |tty: bool, script: &str| {
        let mut lead = vec!["--ask", "-w", ws.str()];
        if !tty {
            lead.push("--no-tty");
        }
        forge.run_args(&lead, &["--ask-request", "GET forge.test:PORT/**"], script)
    };
    // The CSI raw, then escaped, then an ordinary path the owner is asked
    // about and answers "always".
    let script = raw_gets(&["/x\u{9b}31m", "/x%C2%9B31m", "/fine"]);
    let mut term = TestTerminal::open(24, 200);
    let mut child = asking_on(&term, state.path(), &args(true, &script));
    let asked = answer_next(&mut term, "always");
    let rest = term.expect("200", Duration::from_secs(60));
    let status = child.wait().unwrap();
    let all = format!("{asked}{rest}");
    assert!(
        asked.contains("/fine") && !asked.contains("/x"),
        "the first question is the ordinary path's: {all}"
    );
    assert!(status.success(), "{all}");
    let seen = forge.up.requests();
    assert!(!seen.iter().any(|r| r.contains("/x")), "{seen:?}");
    assert!(seen.iter().any(|r| r.contains("GET /fine")), "{seen:?}");
    let grants: Vec<_> = std::fs::read_dir(state.path().join("grants"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert!(grants[0].contains("/fine"), "{grants:?}");
    assert!(raw_controls(&grants[0]).is_empty(), "{grants:?}");
    // The next run of the project reads its grants and runs: the granted
    // request goes unasked, and both spellings of the CSI are refused
    // (400) with nothing sent.
    let next = raw_gets(&["/fine", "/x\u{9b}31m", "/x%c2%9b31m"]);
    let out = unasked(state.path(), &args(false, &next));
    let (s, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{s}\n{err}");
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["200", "400", "400"],
        "{s}\n{err}"
    );
    let seen = forge.up.arrived(2, "only the granted path, once each run");
    assert!(!seen.iter().any(|r| r.contains("/x")), "{seen:?}");
}

#[test]
fn json_events_and_logs_json_hold_no_raw_c1_control_or_direction_override() {
    let Some(forge) = forge_for_raw_client() else {
        return;
    };
    let dir = TempDir::new("requests-c1-json");
    let events = dir.path().join("ev.jsonl");
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/ok/**",
            "--json-events",
            &events.display().to_string(),
        ],
        &raw_gets(&[
            HOSTILE,
            "/ok/q?a=\u{9b}x",
            "/ok/q?a=%C2%9Bx",
            "/ok/a\u{202e}b",
        ]),
    );
    // The CSI in the path or the query (raw or escaped) is refused before
    // anything goes upstream.
    let (s, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{s}\n{err}");
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["400", "400", "400", "200"],
        "{s}\n{err}"
    );
    // The override of the allowed path went upstream escaped.
    let seen = forge.up.arrived(1, "only the allowed path");
    assert!(seen[0].contains("/ok/a%E2%80%AEb"), "{seen:?}");
    let text = std::fs::read_to_string(&events).unwrap();
    assert!(text.contains("/ok/a%E2%80%AEb"), "{text}");
    assert!(raw_controls(&text).is_empty(), "{text:?}");
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }

    // A named sandbox's events, read back with `warden logs --json`.
    let state = TempDir::new("requests-c1-logs-state");
    let w = |args: &[&str]| warden_asking(state.path(), args);
    let port = forge.up.port.to_string();
    create_named(
        state.path(),
        &forge,
        "c1logs",
        &["--allow-request", "GET forge.test:PORT/ok/**"],
    );
    let e = w(&[
        "exec",
        "c1logs",
        "--",
        "sh",
        "-c",
        &raw_gets(&[HOSTILE]).replace("PORT", &port),
    ]);
    assert_eq!(stdout(&e).trim(), "400", "{}", stderr(&e));
    let logs = w(&["logs", "c1logs", "--json"]);
    let text = stdout(&logs);
    assert!(logs.status.success(), "{}", stderr(&logs));
    assert!(text.contains("/x"), "{text}");
    assert!(raw_controls(&text).is_empty(), "{text:?}");
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
    let _ = w(&["rm", "-f", "c1logs"]);
}

//! Ask rules through the real binary: a request an ask rule holds waits
//! for a person's answer on the same desks as names (the terminal of
//! `warden run`; a named sandbox's approvals, answered with `warden
//! approvals` over its control socket as the daemon's API does), and
//! reaches the recording server only when allowed. Nobody to ask, "deny"
//! and no answer in time all refuse it.

use super::{answer_next, asking_on, unasked};
use crate::common::forge::{reach, Forge};
use crate::common::*;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

#[test]
fn a_request_an_ask_rule_holds_is_put_to_the_terminal_and_goes_only_when_allowed() {
    let Some(forge) = Forge::start() else { return };
    let state = TempDir::new("requests-ask-terminal");
    let script = "for n in 1 2; do curl -sS --noproxy '*' -o /dev/null -w 'issue '$n' %{http_code}\\n' -X POST https://forge.test:PORT/issues/$n; done; \
         curl -sS --noproxy '*' -o /dev/null -w 'read %{http_code}\\n' https://forge.test:PORT/issues/1";
    let rules = [
        "--allow-request",
        "GET forge.test:PORT/**",
        "--ask-request",
        "POST forge.test:PORT/issues/*",
    ];
    let mut term = TestTerminal::open(24, 200);
    let args = forge.run_args(&["--no-audit-log"], &rules, script);
    let mut child = asking_on(&term, state.path(), &args);
    let asked = answer_next(&mut term, "once");
    assert!(asked.contains("a request an ask rule holds"), "{asked}");
    assert!(asked.contains("POST /issues/1"), "{asked}");
    let second = answer_next(&mut term, "deny");
    assert!(
        second.contains("POST /issues/2"),
        "once covers one request only: {second}"
    );
    let rest = term.expect("read 200", Duration::from_secs(30));
    let status = child.wait().unwrap();
    let all = format!("{asked}{second}{rest}");
    assert!(status.success(), "{all}");
    assert!(all.contains("issue 1 200"), "{all}");
    assert!(all.contains("issue 2 403"), "{all}");
    let seen = forge.up.requests();
    assert!(
        seen.iter().any(|r| r.contains("POST /issues/1")),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|r| r.contains("/issues/2")),
        "the denied request reached the server: {seen:?}"
    );
}

#[test]
fn without_anyone_to_ask_a_request_an_ask_rule_holds_is_refused() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &["--ask-request", "POST forge.test:PORT/issues/*"],
        "curl -sS --noproxy '*' -D - -o /dev/null -X POST https://forge.test:PORT/issues/1",
    );
    let s = stdout(&out);
    assert!(s.contains(" 403"), "{s}\n{}", stderr(&out));
    assert!(s.contains("x-warden-reason: request_not_asked"), "{s}");
    forge.up.arrived(0, "nothing");
}

#[test]
fn a_named_sandboxs_held_request_is_answered_through_its_approvals_and_times_out_closed() {
    let Some(forge) = Forge::start() else { return };
    let port = forge.up.port;
    let state = TempDir::new("requests-ask");
    let w = |args: &[&str]| warden_asking(state.path(), args);
    create_named(
        state.path(),
        &forge,
        "held",
        &["--ask-request", "POST forge.test:PORT/issues/*"],
    );
    ok(&w(&["start", "held"]));
    let post = |n: u32| {
        let url = format!("https://forge.test:{port}/issues/{n}?token=s3cret");
        post_in(state.path(), "held", &[], &url)
    };
    let question = || first_question(w);
    // Allowed once: that request arrives.
    let first = post(1);
    let q = question();
    assert_eq!(q["protocol"].as_str(), Some("request"), "{q}");
    assert!(
        q["request"]
            .as_str()
            .is_some_and(|r| r.starts_with("POST /issues/1?token=s3cret [request sha256 ")),
        "the query's value is shown to whoever answers: {q}"
    );
    let listed = ok(&w(&["approvals"]));
    assert!(listed.contains("POST /issues/1"), "{listed}");
    forge.up.arrived(0, "nothing before the answer");
    answer(state.path(), &q, "allow_once");
    assert_eq!(posted(first), "200");
    // Denied: it never arrives.
    let second = post(2);
    answer(state.path(), &question(), "deny");
    assert_eq!(posted(second), "403");
    // Unanswered: refused when its time runs out.
    let third = post(3);
    let _ = question();
    assert_eq!(posted(third), "403");
    let seen = forge.up.arrived(1, "only the request allowed once");
    assert!(seen[0].contains("POST /issues/1"), "{seen:?}");
    ok(&w(&["stop", "--time", "1s", "held"]));
}

#[test]
fn an_always_answer_about_a_request_is_kept_for_the_projects_next_run_and_covers_that_request_only()
{
    let Some(forge) = Forge::start() else { return };
    let state = TempDir::new("requests-always-state");
    let ws = TempDir::new("requests-always-ws");
    let post = |n: u32| {
        format!("curl -sS --noproxy '*' -o /dev/null -w 'issue {n} %{{http_code}}\\n' -X POST https://forge.test:PORT/issues/{n}")
    };
    // `lead`: `--no-audit-log` on a terminal, `--no-tty` with none.
    let args = |lead: &str, script: &str| {
        forge.run_args(
            &[lead, "-w", ws.str()],
            &["--ask-request", "POST forge.test:PORT/issues/*"],
            script,
        )
    };
    let mut term = TestTerminal::open(24, 200);
    let mut child = asking_on(&term, state.path(), &args("--no-audit-log", &post(1)));
    let asked = answer_next(&mut term, "always");
    let rest = term.expect("issue 1", Duration::from_secs(30));
    let status = child.wait().unwrap();
    assert!(status.success(), "{asked}{rest}");
    assert!(rest.contains("issue 1 200"), "{asked}{rest}");
    // The next run of the project, with no terminal to ask on: the same
    // request goes unasked, another is still refused.
    let out = unasked(
        state.path(),
        &args("--no-tty", &format!("{}; {}", post(1), post(2))),
    );
    let s = stdout(&out);
    assert!(s.contains("issue 1 200"), "{s}\n{}", stderr(&out));
    assert!(s.contains("issue 2 403"), "{s}\n{}", stderr(&out));
    let seen = forge.up.requests();
    assert_eq!(
        seen.iter().filter(|r| r.contains("POST /issues/1")).count(),
        2,
        "{seen:?}"
    );
    assert!(!seen.iter().any(|r| r.contains("/issues/2")), "{seen:?}");
    // Nothing in the workspace: the sandbox cannot grant itself a rule.
    assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0);
}

/// `warden ARGS` on the named sandboxes under `state`, whose held
/// requests wait 4 s for an answer.
pub(super) fn warden_asking(state: &Path, args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .env("WARDEN_TEST_ASK_TIMEOUT_MS", "4000")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The first question on the approvals `w` (a [`warden_asking`]) lists,
/// once there is one (within 15 s).
pub(super) fn first_question(w: impl Fn(&[&str]) -> Output) -> serde_json::Value {
    let mut q = serde_json::Value::Null;
    wait_until("the question", Duration::from_secs(15), || {
        let out = ok(&w(&["approvals", "--json"]));
        q = serde_json::from_str::<serde_json::Value>(&out).unwrap()[0].clone();
        !q.is_null()
    });
    q
}

/// curl POSTing to `url` from inside the named sandbox `sandbox` (with
/// `extra` arguments), in the background, printing only the status.
pub(super) fn post_in(state: &Path, sandbox: &str, extra: &[&str], url: &str) -> Child {
    Command::new(warden_bin())
        .args(["exec", sandbox, "--", "curl", "-sS", "--noproxy", "*"])
        .args(["-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .args(extra)
        .arg(url)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a [`post_in`] printed (the status), once it ends.
pub(super) fn posted(child: Child) -> String {
    String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).to_string()
}

/// The named sandbox `name` made (not started) under `state` (a
/// [`warden_asking`] one), the forge reached, with `rules` (flags; `PORT`
/// in them is the forge's port).
pub(super) fn create_named(state: &Path, forge: &Forge, name: &str, rules: &[&str]) {
    let port = forge.up.port.to_string();
    let mut args: Vec<String> = vec!["create".into(), name.into()];
    args.extend(reach(&forge.ca, &port));
    args.extend(rules.iter().map(|r| r.replace("PORT", &port)));
    ok(&warden_asking(
        state,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
}

/// Question `q` on the approvals under `state` (a [`warden_asking`] one)
/// answered `decision` (`allow_once`, `allow_always`, `deny`).
pub(super) fn answer(state: &Path, q: &serde_json::Value, decision: &str) {
    ok(&warden_asking(
        state,
        &["approvals", q["id"].as_str().unwrap(), decision],
    ));
}

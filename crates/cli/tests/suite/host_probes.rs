//! What a token holder learns of the daemon's host by probing it: nothing.
//! A token that names a path (a workspace, or any string an answer may
//! say back) is answered alike whether its guess is one of the owner's
//! paths (the state directory, a workspace root, warden's executable, the
//! owner's configuration) or not, and whether a path outside what it was
//! granted exists, is a file or a directory, is the owner's alone, or is a
//! link or a `..` into a root. Each pair is asked through the real daemon
//! over HTTP with a real token, and the two answers are compared byte for
//! byte once the guess itself is taken out (outside review 31, F11).

use crate::common::daemon::*;
use crate::common::*;
use std::path::Path;

/// The answer to `body` (JSON, `GUESS` standing for `guess`) at
/// `method path` (where `GUESS` stands for `guess` too, percent-encoded)
/// as token `t` sees it: its status, and its body with the guess, as
/// sent and as a quoted string would say it, put back as `GUESS`.
fn answer_to(d: &Daemon, t: &str, method: &str, path: &str, body: &str, guess: &str) -> String {
    let quoted = serde_json::to_string(guess).unwrap();
    let inner = &quoted[1..quoted.len() - 1];
    let body = body.replace("GUESS", inner);
    let path = path.replace("GUESS", &q(guess));
    let (s, b) = json_as(d, t, method, &path, &body);
    let text = b.to_string();
    // A message says the guess as it was sent, or quoted by Rust's `{:?}`
    // (the same escapes for these plain paths), inside a JSON string.
    let debug = format!("{guess:?}");
    let debug = serde_json::to_string(&debug[1..debug.len() - 1]).unwrap();
    let text = text
        .replace(&debug[1..debug.len() - 1], "GUESS")
        .replace(inner, "GUESS");
    // Where a parser stopped counts the guess's own length, which the
    // token knows: its column is not a fact of the host.
    let text = match text.split_once(" column ") {
        Some((head, tail)) => {
            let rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
            format!("{head} column N{rest}")
        }
        None => text,
    };
    format!("{s} {text}")
}

/// The pairs whose two answers differ, each said with both answers.
fn differing(
    d: &Daemon,
    t: &str,
    method: &str,
    path: &str,
    body: &str,
    pairs: &[(&str, String, String)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (what, right, wrong) in pairs {
        let a = answer_to(d, t, method, path, body, right);
        let b = answer_to(d, t, method, path, body, wrong);
        if a != b {
            out.push(format!("{what}:\n  {right} -> {a}\n  {wrong} -> {b}"));
        }
    }
    out
}

/// A daemon with one workspace root, `ROOT/proj` in it, and beside it a
/// directory of the test's own (`other`) holding a plain directory, a
/// file, and a link to `ROOT/proj`.
struct Probed {
    state: TempDir,
    roots: TempDir,
    other: TempDir,
    d: Daemon,
    t: String,
}

fn probed(tag: &str) -> Option<Probed> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new(&format!("{tag}-state"));
    let roots = TempDir::new(&format!("{tag}-roots"));
    let other = TempDir::new(&format!("{tag}-other"));
    std::fs::create_dir_all(roots.path().join("proj")).unwrap();
    std::fs::create_dir_all(other.path().join("plain")).unwrap();
    std::fs::write(other.path().join("file"), "x").unwrap();
    std::os::unix::fs::symlink(roots.path().join("proj"), other.path().join("link")).unwrap();
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--workspace-root", roots.path().to_str().unwrap()],
        &[],
    );
    let t = api_token(&d, "prober", WORKER_SCOPES, None);
    Some(Probed {
        state,
        roots,
        other,
        d,
        t,
    })
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// Before: a token naming warden's state directory, its executable or a
/// path under the workspace root as `workspace` saw its guess replaced
/// by the path's name in the refusal, and a wrong guess said back as
/// sent; a link beside the root into it, or a `..` through an existing
/// directory into it, made a sandbox (201) where a plain directory or a
/// missing one was refused (403). Now every path outside what the token
/// was granted is refused in the same words, before anything of the
/// host is looked at.
#[test]
fn a_tokens_workspace_guess_is_answered_alike_whatever_the_host_holds_there() {
    let Some(p) = probed("probe-workspace") else {
        return;
    };
    let (state, roots, other) = (p.state.path(), p.roots.path(), p.other.path());
    let root_name = roots.file_name().unwrap().to_str().unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let pairs = [
        (
            "the state directory",
            s(&state.join("warden")),
            s(&other.join("plain")),
        ),
        (
            "a path inside the state directory",
            s(&state.join("warden/sandboxes")),
            s(&other.join("plain/sandboxes")),
        ),
        (
            "warden's executable",
            s(&warden_bin()),
            s(&other.join("file")),
        ),
        (
            "a missing path under the root",
            s(&roots.join("missing")),
            s(&other.join("missing")),
        ),
        (
            "the owner's configuration",
            format!("{home}/.config/warden"),
            s(&other.join("plain/.config/warden")),
        ),
        ("a path that exists", "/etc".into(), "/etc-not-there".into()),
        ("a file", "/etc/hostname".into(), "/etc".into()),
        ("the owner's own directory", "/root".into(), "/tmp".into()),
        (
            "a link beside the root into it",
            s(&other.join("link")),
            s(&other.join("plain")),
        ),
        (
            "a `..` through an existing directory into the root",
            format!("{}/../{root_name}/proj", s(&other.join("plain"))),
            format!("{}/../{root_name}/proj", s(&other.join("missing"))),
        ),
    ];
    let body = r#"{"workspace":"GUESS","start":false}"#;
    let found = differing(&p.d, &p.t, "POST", "/v1/sandboxes", body, &pairs);
    // A sandbox made by a probe would be listed: none was.
    let (_, list) = json_as(&p.d, &p.t, "GET", "/v1/sandboxes", "");
    assert!(
        found.is_empty(),
        "answers that tell the host apart:\n{}",
        found.join("\n")
    );
    assert_eq!(list["sandboxes"], serde_json::json!([]), "{list}");
    // What the token was granted still works, and is still refused in
    // words of its own where the owner's configuration is.
    let (st, b) = json_as(
        &p.d,
        &p.t,
        "POST",
        "/v1/sandboxes",
        &format!(
            r#"{{"name":"ok","workspace":"{}","start":false}}"#,
            s(&roots.join("proj"))
        ),
    );
    assert_eq!(st, 201, "{b}");
}

/// Before: a value a token sent that an answer says back (a field of the
/// wrong type, a query that is not one) came back replaced by a name when
/// it was one of the owner's paths, and as sent when it was not. Now the
/// token's own words come back as it sent them, whatever they name.
#[test]
fn a_tokens_own_words_said_back_in_a_refusal_come_back_as_it_sent_them() {
    let Some(p) = probed("probe-echo") else {
        return;
    };
    let (state, roots, other) = (p.state.path(), p.roots.path(), p.other.path());
    let pairs = [
        (
            "the state directory",
            s(&state.join("warden")),
            s(&other.join("plain")),
        ),
        ("the workspace root", s(roots), s(&other.join("plain"))),
        (
            "warden's executable",
            s(&warden_bin()),
            s(&other.join("file")),
        ),
    ];
    let mut found = differing(
        &p.d,
        &p.t,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"n","ttl_seconds":"GUESS"}"#,
        &pairs,
    );
    found.extend(differing(
        &p.d,
        &p.t,
        "GET",
        "/v1/sandboxes?state=GUESS",
        "",
        &pairs,
    ));
    assert!(
        found.is_empty(),
        "answers that tell the host apart:\n{}",
        found.join("\n")
    );
}

/// Before: a label a token set to one of the owner's paths was shown it
/// again, in its sandbox's description, as that path's name; any other
/// value as it was set. Now a label reads back as it was set.
#[test]
fn a_label_a_token_set_reads_back_as_it_was_set_whatever_it_names() {
    let Some(p) = probed("probe-labels") else {
        return;
    };
    let (state, roots) = (p.state.path(), p.roots.path());
    for (i, value) in [s(&state.join("warden")), s(roots), s(&warden_bin())]
        .iter()
        .enumerate()
    {
        let body = serde_json::json!({
            "name": format!("l{i}"), "start": false, "labels": {"where": value},
        });
        let (st, b) = json_as(&p.d, &p.t, "POST", "/v1/sandboxes", &body.to_string());
        assert_eq!(st, 201, "{b}");
        assert_eq!(b["labels"]["where"], value.as_str(), "{b}");
        let (st, b) = json_as(&p.d, &p.t, "GET", &format!("/v1/sandboxes/l{i}"), "");
        assert_eq!(st, 200, "{b}");
        assert_eq!(b["labels"]["where"], value.as_str(), "{b}");
        // The workspace, the owner's, is still not shown.
        assert_eq!(b["workspace"], "", "{b}");
    }
}

/// Before: a command a token ran that named one of the owner's paths
/// (`cat STATE_DIR`) was shown in its sandbox's events with that path
/// replaced by its name, and any other command as it ran; a file path a
/// token asked for was said back the same way. Now each comes back as
/// the token sent it, while the host's words in the same log are still
/// scrubbed.
#[test]
fn a_command_a_token_ran_reads_back_in_its_events_as_it_ran_it() {
    let Some(p) = probed("probe-events") else {
        return;
    };
    let (state, other) = (p.state.path(), p.other.path());
    let t = api_token(
        &p.d,
        "runner",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
        None,
    );
    let (st, b) = json_as(&p.d, &t, "POST", "/v1/sandboxes", r#"{"name":"e"}"#);
    assert_eq!(st, 201, "{b}");
    let right = s(&state.join("warden"));
    let wrong = s(&other.join("plain"));
    for guess in [&right, &wrong] {
        let body = serde_json::json!({ "argv": ["true", guess] }).to_string();
        let (st, b) = json_as(&p.d, &t, "POST", "/v1/sandboxes/e/exec", &body);
        assert_eq!(st, 200, "{b}");
    }
    let url = format!(
        "http://{}/v1/sandboxes/e/events?follow=false",
        p.d.tcp.as_ref().unwrap()
    );
    let (st, log) = exchange(
        "GET",
        &url,
        &[("authorization", &format!("Bearer {t}"))],
        None,
        &[],
    );
    assert_eq!(st, 200, "{log}");
    let argvs: Vec<&str> = log.lines().filter(|l| l.contains("exec_started")).collect();
    assert_eq!(argvs.len(), 2, "{log}");
    assert!(
        argvs[0].contains(&format!(r#"["true","{right}"]"#)),
        "{log}"
    );
    assert!(
        argvs[1].contains(&format!(r#"["true","{wrong}"]"#)),
        "{log}"
    );
    // The host's words in the log (the created event's workspace in the
    // state directory) are still not shown.
    assert!(
        !log.replace(&right, "").contains(state.to_str().unwrap()),
        "{log}"
    );
    let pairs = [("the state directory", right.clone(), wrong.clone())];
    let found = differing(
        &p.d,
        &t,
        "GET",
        "/v1/sandboxes/e/files?path=GUESS",
        "",
        &pairs,
    );
    assert!(
        found.is_empty(),
        "answers that tell the host apart:\n{}",
        found.join("\n")
    );
    stop_as(&p.d, &t, "e");
}

/// The same at the E2B door: before, a sandbox's `metadata` value that
/// named warden's state directory read back as the directory's name in
/// the door's description of the sandbox. Now it reads back as it was
/// set, and so does a wrong guess.
#[test]
fn a_value_of_an_e2b_sandboxs_metadata_reads_back_as_it_was_set() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("probe-e2b");
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &addr], &[]);
    let t = api_token(
        &d,
        "e2b",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
        None,
    );
    let right = s(&state.path().join("warden"));
    let body = serde_json::json!({
        "templateID": "base", "timeout": 60, "metadata": {"where": right},
    });
    let (st, b) = exchange(
        "POST",
        &format!("http://{addr}/sandboxes"),
        &[("x-api-key", &t)],
        Some(&body.to_string()),
        &[],
    );
    assert!(st == 200 || st == 201, "{st} {b}");
    let id = json(&b)["sandboxID"].as_str().unwrap().to_string();
    let (st, b) = exchange(
        "GET",
        &format!("http://{addr}/sandboxes/{id}"),
        &[("x-api-key", &t)],
        None,
        &[],
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(json(&b)["metadata"]["where"], right.as_str(), "{b}");
    let (st, _) = exchange(
        "DELETE",
        &format!("http://{addr}/sandboxes/{id}"),
        &[("x-api-key", &t)],
        None,
        &[],
    );
    assert!(st < 300, "{st}");
}

/// Before: under a root, a directory holding the file an owner's profile
/// reads a secret from was refused with a reason and words of its own
/// (`holds_configuration`), where a missing directory was `forbidden`;
/// and a directory inside it, or beside the file's own below the same
/// directory of the root, made a sandbox (201), which told that the
/// refused one existed (outside review 34, F3). Now each is refused as a
/// missing directory is, and a directory the owner's configuration is
/// nowhere in is still the token's.
#[test]
fn a_tokens_workspace_guess_under_a_root_tells_not_where_the_owners_configuration_is() {
    let Some(host) = crate::common::owner::OwnerHost::new("probe-owners") else {
        return;
    };
    let root = &host.root;
    let sec = host.project("sec", "tokfile", "tok-abc\n");
    std::fs::create_dir_all(sec.join("deeper")).unwrap();
    let deep = host.project("deep", "er/tokfile", "tok-def\n");
    std::fs::create_dir_all(deep.join("side")).unwrap();
    let other = host.project("other", "notes.txt", "x\n");
    std::fs::write(
        host.profile("ff"),
        format!(
            "secrets:\n  S:\n    from_file: {}\n    hosts: [example.com]\n  T:\n    from_file: {}\n    hosts: [example.com]\n",
            s(&sec.join("tokfile")),
            s(&deep.join("er/tokfile")),
        ),
    )
    .unwrap();
    let d = host.daemon_over_root();
    let t = host.agent();
    let pairs = [
        (
            "the directory holding the owner's secret file",
            s(&sec),
            s(&root.join("missing")),
        ),
        (
            "a directory inside it",
            s(&sec.join("deeper")),
            s(&root.join("missing/deeper")),
        ),
        (
            "a directory on the way to another secret file",
            s(&deep),
            s(&root.join("missing")),
        ),
        (
            "the directory holding that file",
            s(&deep.join("er")),
            s(&root.join("missing/er")),
        ),
        (
            "a directory beside it, under the same directory of the root",
            s(&deep.join("side")),
            s(&root.join("missing/side")),
        ),
    ];
    let body = r#"{"workspace":"GUESS","start":false}"#;
    let found = differing(&d, &t, "POST", "/v1/sandboxes", body, &pairs);
    let (_, list) = json_as(&d, &t, "GET", "/v1/sandboxes", "");
    assert!(
        found.is_empty(),
        "answers that tell the host apart:\n{}",
        found.join("\n")
    );
    assert_eq!(list["sandboxes"], serde_json::json!([]), "{list}");
    let (st, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes",
        &format!(
            r#"{{"name":"ok","workspace":"{}","start":false}}"#,
            s(&other)
        ),
    );
    assert_eq!(st, 201, "{b}");
}

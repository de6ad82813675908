//! Request rules through the real binary: curl inside a sandbox, over
//! HTTP/1.1 and HTTP/2, against a local HTTPS server whose certificate
//! comes from a test authority and that records every request it gets.
//! Each allowed request reaches it; each refused one never does, and the
//! client sees why.
//!
//! The set-up the request-rule tests share is here: the forge's run
//! ([`Forge::run`]) and what arrived there ([`Recorder::arrived`]) are in
//! `common::forge`; what a run's script printed, the labelled `curl` its
//! lines call, the raw client for request lines curl will not write, and
//! the grants a named sandbox kept are below.

use crate::common::forge::Forge;
use crate::common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// What a run printed, the run having ended well.
fn printed(out: &Output) -> String {
    let s = stdout(out);
    assert!(out.status.success(), "{s}\n{}", stderr(out));
    s
}

/// What a script's calls printed, a line each (`STATUS LABEL`: the answer
/// each request got, in order), the run having ended well.
fn answered(out: &Output) -> Vec<String> {
    printed(out).lines().map(str::to_string).collect()
}

/// The first lines of a script: `c LABEL ARGS...` runs `curl` with the
/// given flags and ARGS and prints the status and the label; `$u` is the
/// forge (`PORT` its port, as [`Forge::run`] fills in).
macro_rules! labelled_curl {
    ($flags:literal) => {
        concat!(
            "c() { l=$1; shift; curl -sS ",
            $flags,
            " --noproxy '*' -o /dev/null -w \"%{http_code} $l\\n\" \"$@\"; }\nu=https://forge.test:PORT\n"
        )
    };
}

/// Whether `python3` with `ssl` is here for `client` (a raw client inside
/// the sandbox), said when it is not.
fn python_ssl(client: &str) -> bool {
    let here = Command::new("python3")
        .args(["-c", "import ssl"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        skip(&format!("python3 with ssl is needed for {client}"));
    }
    here
}

/// The forge, when a raw client can run inside the sandbox too
/// ([`python_ssl`]); `None`, said, when either cannot.
fn forge_for_raw_client() -> Option<Forge> {
    let forge = Forge::start()?;
    python_ssl("the raw client inside the sandbox").then_some(forge)
}

/// `raw.py PORT PATH...`: a GET for each path, written raw (UTF-8) in the
/// request line, each on its own TLS connection; prints each answer's
/// status (`none` when there was none).
const RAW_GETS: &str = r#"
import os, re, socket, ssl, sys
port = int(sys.argv[1])
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
for path in sys.argv[2:]:
    s = ctx.wrap_socket(socket.create_connection(("forge.test", port), timeout=10), server_hostname="forge.test")
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: forge.test:{port}\r\nConnection: close\r\n\r\n".encode())
    s.settimeout(30)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except (socket.timeout, ConnectionError, ssl.SSLError):
        pass
    s.close()
    print(" ".join(c.decode() for c in re.findall(rb"HTTP/1\.1 (\d{3}) ", got)) or "none", flush=True)
"#;

/// The script that writes [`RAW_GETS`] and runs it on `paths` (`PORT` the
/// forge's port).
fn raw_gets(paths: &[&str]) -> String {
    let quoted: Vec<String> = paths.iter().map(|p| format!("'{p}'")).collect();
    format!(
        "cat > /tmp/raw.py <<'EOF'\n{RAW_GETS}\nEOF\npython3 /tmp/raw.py PORT {}\n",
        quoted.join(" ")
    )
}

/// `warden ARGS` (a [`Forge::run_args`]) with its state in `state`, on
/// the terminal `term`, where it asks its questions.
fn asking_on(term: &TestTerminal, state: &Path, args: &[String]) -> Child {
    let mut cmd = Command::new(warden_bin());
    cmd.env("WARDEN_STATE_DIR", state).args(args);
    term.spawn(&mut cmd)
}

/// The next question on `term` answered `answer` (`once`, `always`,
/// `deny`) once warden takes answers: what the terminal showed up to it.
fn answer_next(term: &mut TestTerminal, answer: &str) -> String {
    let asked = term.expect("then Enter", Duration::from_secs(60));
    // Past the moment when input is taken for typed-ahead keys.
    std::thread::sleep(Duration::from_millis(700));
    term.master
        .write_all(format!("{answer}\r").as_bytes())
        .unwrap();
    asked
}

/// `warden ARGS` (a [`Forge::run_args`]) with its state in `state`, with
/// no terminal and stdin closed: nobody to ask.
fn unasked(state: &Path, args: &[String]) -> Output {
    Command::new(warden_bin())
        .env("WARDEN_STATE_DIR", state)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Every file below `dir` whose path holds `part`.
fn files_under(dir: &Path, part: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(files_under(&p, part));
        } else if p.to_string_lossy().contains(part) {
            out.push(p);
        }
    }
    out
}

/// The text of every grants file the named sandboxes under `state` (a
/// [`ask::warden_asking`] state) kept.
fn kept_grants(state: &Path) -> String {
    files_under(&state.join("warden"), "grants")
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect()
}

#[test]
fn allowed_requests_reach_the_server_and_refused_ones_never_do_over_http1_and_http2() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &[
            "--allow-request",
            "GET,HEAD forge.test:PORT/repos/**",
            "--deny-request",
            "* forge.test:PORT/repos/*/private/**",
        ],
        r#"for v in --http1.1 --http2; do
  curl -sS --noproxy '*' $v "https://forge.test:PORT/repos/acme/w?token=s3cret"
  curl -sS --noproxy '*' $v -D - -o /dev/null -X DELETE "https://forge.test:PORT/repos/acme/w"
  curl -sS --noproxy '*' $v -D - -o /dev/null "https://forge.test:PORT/repos/acme/private/key"
  curl -sS --noproxy '*' $v -D - -o /dev/null "https://forge.test:PORT/repos/x/..%2F..%2Facme/private/key"
done
"#,
    );
    let s = printed(&out);
    assert_eq!(s.matches("ok\n").count(), 2, "{s}");
    assert_eq!(s.matches(" 403").count(), 6, "{s}");
    assert!(
        s.to_ascii_lowercase()
            .contains("x-warden-denied: no request rule for forge.test allows delete")
            || s.to_ascii_lowercase()
                .contains("x-warden-denied: no request rule for forge.test allows"),
        "{s}"
    );
    assert!(s.contains("x-warden-reason: request_denied"), "{s}");
    assert!(s.contains("x-warden-reason: no_request_rule"), "{s}");
    let seen = forge.up.arrived(2, "only the allowed requests");
    // The sandbox's HTTP/1.1 and HTTP/2 requests alike; the hop to the
    // server is the proxy's own connection, in the protocol it and the
    // server agree on.
    assert!(
        seen.iter().all(|r| r.contains(" GET /repos/acme/w")),
        "{seen:?}"
    );
}

/// A read-only rule is not a way to send a DELETE that a server takes
/// from a method-override header or a `_method` query key: such a request
/// is decided as each method it may be taken as, and never arrives.
#[test]
fn a_method_override_is_decided_as_the_method_it_names() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &["--allow-request", "GET,HEAD forge.test:PORT/repos/**"],
        r#"u="https://forge.test:PORT/repos/acme/w"
curl -sS --noproxy '*' -o /dev/null -w '%{http_code}\n' -H 'X-HTTP-Method-Override: DELETE' "$u"
curl -sS --noproxy '*' -o /dev/null -w '%{http_code}\n' -H 'X-Method-Override: delete' "$u"
curl -sS --noproxy '*' -o /dev/null -w '%{http_code}\n' "$u?_method=DELETE"
curl -sS --noproxy '*' -o /dev/null -w '%{http_code}\n' -H 'X-HTTP-Method-Override: HEAD' "$u"
"#,
    );
    let s = printed(&out);
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["403", "403", "403", "200"],
        "{s}"
    );
    forge.up.arrived(1, "only the HEAD-override GET");
}

#[test]
fn a_name_with_request_rules_is_not_reached_without_them_in_plain_tcp() {
    let Some(forge) = Forge::start() else { return };
    // A raw TCP connection that is not TLS: the name's requests could not
    // be read, so it is refused before anything reaches the server.
    let out = forge.run(
        &["--allow-request", "GET forge.test:PORT/**"],
        r#"printf 'DELETE /x HTTP/1.1\r\nHost: forge.test\r\n\r\n' | curl -sS --noproxy '*' -m 5 telnet://forge.test:PORT >/dev/null 2>&1; echo done"#,
    );
    assert!(stdout(&out).contains("done"), "{}", stderr(&out));
    forge.up.arrived(0, "nothing");
}

#[test]
fn a_request_body_carrying_a_credential_never_reaches_the_server() {
    let Some(forge) = Forge::start() else { return };
    // An AWS access key id's shape, made here so no scanner flags this file.
    let key = format!("AKIA{}", "QZTX4X2MWPLK3VNB");
    let out = forge.run(
        &["--allow-request", "POST forge.test:PORT/upload"],
        &format!(
            r#"curl -sS --noproxy '*' -D - -o /dev/null --data '{{"note": "{key}"}}' "https://forge.test:PORT/upload?leaked=1"
curl -sS --noproxy '*' --data '{{"note": "nothing here"}}' "https://forge.test:PORT/upload?clean=1"
"#
        ),
    );
    let s = printed(&out);
    assert!(s.contains(" 403"), "{s}");
    assert!(s.contains("x-warden-reason: credential_in_body"), "{s}");
    assert!(
        !s.contains(&key),
        "the refusal never repeats the value: {s}"
    );
    let seen = forge.up.arrived(1, "only the clean body");
    assert!(seen[0].contains("clean=1"), "{seen:?}");
}

#[test]
fn a_credential_in_a_header_the_path_or_the_query_never_reaches_the_server_nor_the_record() {
    let Some(forge) = Forge::start() else { return };
    // A GitHub token's shape, made here so no scanner flags this file.
    let token = format!("ghp_{}", "Zq8Xv2Lm4Np6Rt0Yb3Wc5Kd7Hf9Jg1Ts2Ue4");
    let events = TempDir::new("requests-heads");
    let log = events.path().join("events.jsonl");
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/**",
            "--json-events",
            log.to_str().unwrap(),
        ],
        &format!(
            r#"c() {{ curl -sS --noproxy '*' -D - -o /dev/null "$@"; }}
c -H "X-Note: {token}" "https://forge.test:PORT/a?leak=header"
c "https://forge.test:PORT/a?leak=query&key={token}"
c -u "x-access-token:{token}" "https://forge.test:PORT/a?leak=basic"
c "https://forge.test:PORT/keys/{token}/send"
curl -sS --noproxy '*' "https://forge.test:PORT/a?clean=1"
"#
        ),
    );
    let s = printed(&out);
    assert_eq!(s.matches(" 403").count(), 4, "{s}");
    assert_eq!(
        s.matches("x-warden-reason: credential_in_request").count(),
        4,
        "{s}"
    );
    assert!(s.contains("ok\n"), "{s}");
    let seen = forge.up.arrived(1, "only the clean request");
    assert!(seen[0].contains("clean=1"), "{seen:?}");
    let secret = &token[4..];
    let recorded = std::fs::read_to_string(&log).unwrap();
    assert!(recorded.contains("credential_in_request"), "{recorded}");
    for (what, text) in [
        ("the answer", &s),
        ("the events", &recorded),
        ("warden's messages", &stderr(&out)),
    ] {
        assert!(!text.contains(secret), "{what} repeat the value: {text}");
    }
}

#[test]
fn requests_refused_for_want_of_a_rule_are_proposed_as_request_rules_at_exit_and_in_the_events() {
    let Some(forge) = Forge::start() else { return };
    let events = TempDir::new("requests-proposed");
    let log = events.path().join("events.jsonl");
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/repos/**",
            "--json-events",
            log.to_str().unwrap(),
        ],
        r#"curl -sS --noproxy '*' -o /dev/null -X POST "https://forge.test:PORT/repos/acme/w/issues?token=s3cret"
curl -sS --noproxy '*' "https://forge.test:PORT/repos/acme/w"
"#,
    );
    let port = forge.up.port;
    let err = stderr(&out);
    assert!(out.status.success(), "{}\n{err}", stdout(&out));
    let rule = format!("POST forge.test:{port}/repos/acme/w/issues");
    assert!(
        err.contains("to allow the requests this run was refused"),
        "{err}"
    );
    assert!(
        err.contains(&format!("allow_requests: [\"{rule}\"]")),
        "the profile line: {err}"
    );
    assert!(
        err.contains(&format!("--allow-request '{rule}'")),
        "the flag: {err}"
    );
    assert!(
        !err.contains("s3cret"),
        "a query value is never proposed: {err}"
    );
    let proposed: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["protocol"] == "request" && e["allowed"] == false)
        .collect();
    assert_eq!(proposed.len(), 1, "{proposed:?}");
    assert_eq!(
        proposed[0]["reason"]["allow"],
        serde_json::json!({"field": "egress.allow_requests", "value": rule}),
        "{proposed:?}"
    );
    // The proposed rule, passed, lets the same request through.
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/repos/**",
            "--allow-request",
            &rule,
        ],
        r#"curl -sS --noproxy '*' -X POST "https://forge.test:PORT/repos/acme/w/issues?token=s3cret""#,
    );
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));
}

mod api;
mod ask;
mod ask_scope;
mod body_ignored;
mod body_params;
mod characters;
mod elicit;
mod evasion;
mod git;
mod head;
mod held;
mod literal;
mod mcp;
mod ports;
mod readings;
mod record;
mod segments;
mod shown;
mod websocket;
mod wire;

//! What the secret proxy did, recorded as data: each kind of secret
//! action and refusal a sandbox can provoke against a real raw server
//! (the value put in and taken out, a placeholder towards a name pinned
//! beside the secret's host, a real value in a request, a response in a
//! coding warden cannot read, the value inside compressed data from a
//! headers-only host, a body that decodes past warden's bound) carries
//! its stable reason code in the `secret` event, the same in
//! `--json-events` and in the hash-chained audit log, beside the words.

use super::*;
use std::path::Path;

/// A name pinned to the secret's host's address: served as that host.
const BESIDE: &str = "beside.records.test";
/// The second secret's own host, which the sandbox never reaches.
const LEAK_HOST: &str = "leak.records.test";
/// Zeros gzip'd three times over (64 members of a MiB each, then twice
/// more), with no Content-Encoding: far past what warden reads of so few
/// coded bytes, stacked as one layer never packs.
fn bomb() -> Vec<u8> {
    let member = gzip(&vec![0u8; 1 << 20]);
    gzip(&gzip(&member.repeat(64)))
}

/// The secret's host: each route answers one way the proxy must act on.
fn answer(req: &RawRequest) -> Vec<Vec<u8>> {
    let v = bearer(req);
    let reply = |extra: &str, body: Vec<u8>| {
        head_and(
            format!(
                "HTTP/1.1 200 OK\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            ),
            body,
        )
    };
    match req.target.as_str() {
        // The value it was sent, back in the body: scrubbed.
        "/echo" => reply("", format!("token: {v}\n").into_bytes()),
        // The request's head gzip'd with no Content-Encoding, from a host
        // sent the secret in headers only: packed_value.
        "/gz" => reply(
            "Content-Type: application/octet-stream\r\n",
            gzip(format!("Authorization: Bearer {v}\r\n").as_bytes()),
        ),
        // A coding warden cannot undo: response_withheld.
        "/unknown" => reply("Content-Encoding: x-unheard-of\r\n", b"abc".to_vec()),
        // Data that decodes past the bound: decoded_too_large.
        "/bomb" => reply("Content-Type: application/octet-stream\r\n", bomb()),
        _ => reply("", b"ok\n".to_vec()),
    }
}

/// The reason codes of the `secret` events (and their aggregated
/// repeats) in a JSON-lines file, by action, with the events that carry
/// none.
fn codes(path: &Path) -> (Vec<(String, String)>, Vec<serde_json::Value>) {
    let mut codes = Vec::new();
    let mut bare = Vec::new();
    for e in events(path) {
        if e["event"] != "secret" && e["event"] != "secrets_aggregated" {
            continue;
        }
        match e["reason"]["code"].as_str() {
            Some(c) => codes.push((e["action"].as_str().unwrap_or("").to_string(), c.into())),
            None => bare.push(e),
        }
    }
    (codes, bare)
}

#[test]
fn every_secret_action_and_refusal_records_its_reason_code_in_the_events_and_the_audit_log() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST, BESIDE], answer);
    let port = up.port;
    let value = token();
    let leaked = format!("sk-live-{}", token());
    let dir = TempDir::new("secret-records");
    let ev = dir.path().join("events.jsonl");
    let log = dir.path().join("audit.jsonl");
    let url = |name: &str, path: &str| format!("https://{name}:{port}{path}");
    let script = format!(
        r#"get() {{ curl -s -o /dev/null -w "$1 %{{http_code}}\n" -H "Authorization: Bearer $TOKEN" "$2"; }}
get echo "{echo}"
get beside "{beside}"
curl -s -o /dev/null -w "leak %{{http_code}}\n" -H "X-Key: $LEAKED" "{plain}"
get gz "{gz}"
get unknown "{unknown}"
get bomb "{bomb}"
"#,
        echo = url(HOST, "/echo"),
        beside = url(BESIDE, "/beside"),
        plain = url(HOST, "/plain"),
        gz = url(HOST, "/gz"),
        unknown = url(HOST, "/unknown"),
        bomb = url(HOST, "/bomb"),
    );
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@{HOST}:{port}"))
        // LEAK's real value is known inside only because the test passes
        // it in (as a person might by mistake); its host is never asked.
        .arg("--secret")
        .arg(format!("LEAK=env:LEAKED_SOURCE@{LEAK_HOST}:{port}"))
        .args(["--env", &format!("LEAKED={leaked}")])
        .args(["--allow-domain", &format!("{BESIDE}:{port}")])
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--add-host", &format!("{BESIDE}=127.0.0.1")])
        .args(["--upstream-ca", &ca.pem_path()])
        .args(["--json-events", ev.to_str().unwrap()])
        .args(["--audit-log", log.to_str().unwrap()])
        .args(["--", "sh", "-c", &script])
        .env("TOKEN", &value)
        .env("LEAKED_SOURCE", &leaked)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    // Each request met what it was sent to meet (the bomb's cut body is
    // whatever curl makes of it).
    for line in ["echo 200", "beside 403", "leak 403", "unknown 502"] {
        assert!(s.contains(line), "no `{line}`:\n{s}\n{}", stderr(&out));
    }
    let want = [
        ("substituted", "substituted"),
        ("scrubbed", "scrubbed"),
        ("blocked", "stray_placeholder"),
        ("blocked", "secret_value"),
        ("blocked", "packed_value"),
        ("blocked", "response_withheld"),
        ("blocked", "decoded_too_large"),
    ];
    for (what, file) in [("--json-events", &ev), ("the audit log", &log)] {
        let (codes, bare) = codes(file);
        // Before: no secret event carried a code, only its words.
        assert!(
            bare.is_empty(),
            "{what}: secret events without a reason code: {bare:#?}"
        );
        for (action, code) in want {
            assert!(
                codes.iter().any(|(a, c)| a == action && c == code),
                "{what}: no {action} secret event with reason {code}: {codes:?}\n{s}"
            );
        }
    }
    // The code is data beside the words, which never hold the values.
    let all = std::fs::read_to_string(&log).unwrap();
    assert_no_value("the audit log", &all, &value);
    assert_no_value("the audit log", &all, &leaked);
    let verify = Command::new(warden_bin())
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", stderr(&verify));
}

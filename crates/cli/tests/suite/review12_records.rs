//! The daemon's doors against a caller they refuse: every refusal of a
//! credential or a session leaves its line in the daemon's audit log
//! (the E2B door's envd access tokens and signed URLs, an MCP session of
//! another token's or of nobody's, a browser session that is not live),
//! bounded as every refusal is; and a create with a name in use tells the
//! caller only that the name is taken, in the API's words, whoever holds
//! it. The real daemon over TCP, its real log read back.

use crate::common::daemon::*;
use crate::common::mcp::session_of;
use crate::common::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A token's id, as the daemon's records name it (`wdn_ID_SECRET`).
fn id_of(token: &str) -> String {
    token.split('_').nth(1).unwrap_or_default().to_string()
}

/// One exchange with `url`, its status only.
fn status(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> u16 {
    exchange(method, url, headers, body, &[]).0
}

/// `n` GETs of `url` with `headers` on one curl: the statuses seen.
fn flood(url: &str, headers: &[(&str, &str)], n: usize) -> Vec<String> {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-w", "%{http_code}\n"]);
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    let out = cmd
        .args((0..n).flat_map(|_| ["-o", "/dev/null", url]))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// One `/mcp` request on its own connection as `token`, naming session
/// `sid` when given: the status and the answer's head and body.
fn mcp(addr: &str, token: &str, sid: Option<&str>, body: &str) -> (u16, String) {
    let sid = sid
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    let text = mcp_raw(
        addr,
        "POST",
        token,
        &sid,
        body,
        Duration::from_secs(3),
        |got| got.len() > 64 * 1024,
    );
    (status_of(&text), text)
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

/// A daemon with its E2B door; tokens A (which made a sandbox through the
/// door) and B; the sandbox's id.
struct Doors {
    _state: TempDir,
    d: Daemon,
    log: PathBuf,
    e2b: String,
    a: String,
    b: String,
    sandbox: String,
}

impl Doors {
    fn new(tag: &str) -> Doors {
        let state = TempDir::new(tag);
        let e2b = format!("127.0.0.1:{}", free_port());
        let d = Daemon::start_with(state.path(), true, &["--e2b", &e2b], &[]);
        let a = token(
            state.path(),
            "a",
            &["sandboxes:read", "sandboxes:write", "exec", "files", "mcp"],
        );
        let b = token(
            state.path(),
            "b",
            &["sandboxes:read", "sandboxes:write", "mcp"],
        );
        let sandbox = e2b_sandbox(&e2b, &a)["sandboxID"]
            .as_str()
            .unwrap()
            .to_string();
        Doors {
            log: state.path().join("warden/daemon-audit.jsonl"),
            _state: state,
            d,
            e2b,
            a,
            b,
            sandbox,
        }
    }
}

#[test]
fn each_refused_envd_key_signature_foreign_mcp_session_and_dead_browser_session_is_recorded() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let doors = Doors::new("r12-records");
    let Doors {
        d,
        log,
        e2b,
        a,
        b,
        sandbox,
        ..
    } = &doors;
    let tcp = d.tcp.clone().unwrap();
    let at = |route: &str| {
        let route = format!("\"route\":\"{route}\"");
        denied(log, move |l| l.contains(&route)).len()
    };

    // A wrong envd access token for A's sandbox, on the health probe and
    // on an RPC.
    let bogus = [("x-access-token", "wde_bogus"), ("e2b-sandbox-id", sandbox)];
    assert_eq!(
        status("GET", &format!("http://{e2b}/health"), &bogus, None),
        401
    );
    assert_eq!(
        status(
            "POST",
            &format!("http://{e2b}/process.Process/List"),
            &bogus,
            Some("{}")
        ),
        401
    );
    assert_eq!(at("/e2b/envd"), 2, "{:?}", denied(log, |_| true));

    // A forged signature on a file URL.
    let url = format!("http://{e2b}/files?path=/etc/passwd&signature=v1_bogus&username=user");
    assert_eq!(
        status("GET", &url, &[("e2b-sandbox-id", sandbox)], None),
        401
    );
    assert_eq!(at("/e2b/files?signature"), 1, "{:?}", denied(log, |_| true));

    // A wrong key for one of the sandbox's ports, and a wrong MCP token
    // for warden's MCP of the sandbox.
    let port = [
        ("x-access-token", "wde_bogus"),
        ("e2b-sandbox-id", sandbox.as_str()),
        ("e2b-sandbox-port", "8080"),
    ];
    assert_eq!(status("GET", &format!("http://{e2b}/"), &port, None), 401);
    assert_eq!(at("/e2b/port"), 1, "{:?}", denied(log, |_| true));
    let mcp_port = [
        ("authorization", "Bearer not-an-mcp-token"),
        ("e2b-sandbox-id", sandbox.as_str()),
        ("e2b-sandbox-port", "50005"),
    ];
    assert_eq!(
        status("POST", &format!("http://{e2b}/mcp"), &mcp_port, Some("{}")),
        401
    );
    assert_eq!(at("/e2b/mcp"), 1, "{:?}", denied(log, |_| true));
    assert!(
        !std::fs::read_to_string(log)
            .unwrap()
            .contains("not-an-mcp-token"),
        "a refused credential is never written"
    );

    // A token without the mcp scope asks for its own sandbox's MCP token.
    let c = token(
        &d.state,
        "c",
        &["sandboxes:read", "sandboxes:write", "files"],
    );
    let (s, made) = e2b_call(
        e2b,
        "POST",
        "/sandboxes",
        &c,
        Some(r#"{"templateID":"base","timeout":300}"#),
    );
    assert!(s == 200 || s == 201, "{s} {made}");
    let own = json(&made)["sandboxID"].as_str().unwrap().to_string();
    let (s, answer) = exchange(
        "GET",
        &format!("http://{e2b}/files?path=/etc/mcp-gateway/.token"),
        &[("x-access-token", &c), ("e2b-sandbox-id", &own)],
        None,
        &[],
    );
    assert_eq!(s, 403, "{answer}");
    let under_c = format!("\"token\":\"{}\"", id_of(&c));
    let of_c = denied(log, |l| {
        l.contains("/e2b/mcp-token") && l.contains(&under_c)
    });
    assert_eq!(of_c.len(), 1, "{:?}", denied(log, |_| true));

    // B names A's MCP session, then one nobody began: the same 404, and
    // one line each under B, in the same words.
    let (code, head) = mcp(&tcp, a, None, INITIALIZE);
    assert_eq!(code, 200, "{head}");
    let sid = session_of(&head);
    let (code, answer) = mcp(&tcp, b, Some(&sid), LIST);
    assert_eq!(code, 404, "{answer}");
    let (code, answer) = mcp(&tcp, b, Some("00000000-0000-4000-8000-000000000000"), LIST);
    assert_eq!(code, 404, "{answer}");
    let under_b = format!("\"token\":\"{}\"", id_of(b));
    let of_b = denied(log, |l| {
        l.contains("\"route\":\"/mcp\"") && l.contains(&under_b)
    });
    assert_eq!(of_b.len(), 2, "{of_b:?}");
    let reason = |l: &str| json(l)["reason"].as_str().unwrap_or_default().to_string();
    assert_eq!(reason(&of_b[0]), reason(&of_b[1]), "{of_b:?}");
    // A's session goes on.
    let (code, answer) = mcp(&tcp, a, Some(&sid), LIST);
    assert_eq!(code, 200, "{answer}");

    // A browser cookie that names no live session, on the API and on the
    // dashboard's own route.
    let cookie = [("cookie", "warden_session=not-a-live-session")];
    assert_eq!(
        status("GET", &format!("http://{tcp}/v1/sandboxes"), &cookie, None),
        401
    );
    assert_eq!(
        status("GET", &format!("http://{tcp}/session"), &cookie, None),
        401
    );
    let browser = denied(log, |l| l.contains("browser session"));
    assert_eq!(browser.len(), 2, "{browser:?}");
    assert!(
        !std::fs::read_to_string(log)
            .unwrap()
            .contains("not-a-live-session"),
        "a cookie's value is never written"
    );

    let verify = warden(
        &d.state.join("warden"),
        &["audit", "verify", log.to_str().unwrap()],
    );
    assert!(stdout(&verify).contains("intact"), "{}", stdout(&verify));
}

#[test]
fn a_flood_of_refused_envd_keys_and_foreign_mcp_sessions_leaves_a_bounded_number_of_lines() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let doors = Doors::new("r12-flood");
    let Doors {
        d,
        log,
        e2b,
        b,
        sandbox,
        ..
    } = &doors;
    let tcp = d.tcp.clone().unwrap();
    let statuses = flood(
        &format!("http://{e2b}/health"),
        &[("x-access-token", "wde_bogus"), ("e2b-sandbox-id", sandbox)],
        400,
    );
    assert_eq!(statuses.iter().filter(|s| *s == "401").count(), 400);
    let unknown = denied(log, |l| !l.contains("\"token\":\""));
    assert!(
        (1..=61).contains(&unknown.len()),
        "{} lines for 400 refused keys within a minute",
        unknown.len()
    );

    // B sends 300 requests naming a session that is not its own.
    let mut body = String::new();
    for _ in 0..300 {
        let (code, answer) = mcp(&tcp, b, Some("00000000-0000-4000-8000-000000000000"), LIST);
        assert_eq!(code, 404, "{answer}");
        body = answer;
    }
    let under_b = format!("\"token\":\"{}\"", id_of(b));
    let of_b = denied(log, |l| l.contains(&under_b));
    assert!(
        (1..=61).contains(&of_b.len()),
        "{} lines for 300 foreign sessions within a minute: {body}",
        of_b.len()
    );
    let verify = warden(
        &d.state.join("warden"),
        &["audit", "verify", log.to_str().unwrap()],
    );
    assert!(stdout(&verify).contains("intact"), "{}", stdout(&verify));
}

#[test]
fn a_taken_name_is_one_api_worded_conflict_whoever_holds_it() {
    let Some((state, d)) = over_tcp("r12-names") else {
        return;
    };
    let a = token(
        state.path(),
        "a",
        &["sandboxes:read", "sandboxes:write", "exec"],
    );
    let b = token(
        state.path(),
        "b",
        &["sandboxes:read", "sandboxes:write", "exec"],
    );
    let create = |token: Option<&str>, name: &str| {
        let body = format!(r#"{{"name":"{name}","start":false}}"#);
        match token {
            Some(t) => call_on(&d, true, "POST", "/v1/sandboxes", Some(&body), Some(t)),
            None => call(&d, "POST", "/v1/sandboxes", Some(&body), None),
        }
    };
    let (s, body) = create(Some(&a), "held-by-a");
    assert_eq!(s, 201, "{body}");
    let (s, body) = create(None, "held-by-owner");
    assert_eq!(s, 201, "{body}");
    let (s, body) = create(Some(&b), "held-by-b");
    assert_eq!(s, 201, "{body}");

    // B asks for each name: A's, the owner's, its own.
    let mut said = Vec::new();
    for name in ["held-by-a", "held-by-owner", "held-by-b"] {
        let (s, body) = create(Some(&b), name);
        assert_eq!(s, 409, "{name}: {body}");
        let p = json(&body);
        assert_eq!(p["code"], "conflict", "{body}");
        assert_eq!(p["field"], "/name", "{body}");
        assert_eq!(p["reason"], "name_taken", "{body}");
        let message = p["message"].as_str().unwrap().to_string();
        for leak in ["warden ", "`", "rm", &id_of(&a), "pid", "running"] {
            assert!(!message.contains(leak), "{name}: {leak:?} in {message}");
        }
        // The words, the name set aside, are the same whoever holds it.
        said.push(body.replace(name, "NAME"));
    }
    assert!(said.iter().all(|s| *s == said[0]), "{said:#?}");
    // A's sandbox was not touched.
    let (s, body) = call_on(&d, true, "GET", "/v1/sandboxes/held-by-a", None, Some(&a));
    assert_eq!(s, 200, "{body}");
}

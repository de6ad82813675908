//! `/mcp` sessions are bound to the token that began them at the
//! transport: another token holding a session's ID gets, for every verb
//! (a POST of a request, of a response to the server's question, the GET
//! stream, the DELETE), the very answer an unknown session gets, and the
//! session goes on for its own token untouched. Raw HTTP against the real
//! daemon over TCP.

use crate::common::daemon::*;
use crate::common::mcp::session_of;
use crate::common::*;
use std::time::Duration;

/// One exchange on its own connection: the status code, the head and
/// what of the body came within a few seconds.
fn raw(addr: &str, method: &str, token: &str, sid: Option<&str>, body: &str) -> (u16, String) {
    let sid = sid
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    // An SSE answer stays open: its head and first event are enough.
    let text = mcp_raw(
        addr,
        method,
        token,
        &sid,
        body,
        Duration::from_secs(3),
        |got| got.len() > 64 * 1024,
    );
    (status_of(&text), text)
}

fn body_of(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("")
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"resources/list"}"#;
const ANSWER: &str =
    r#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept","content":{"allow":false}}}"#;

#[test]
fn another_tokens_request_to_a_session_is_answered_as_an_unknown_session_for_every_verb() {
    if !curl_available() {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let state = TempDir::new("mcp-sessions");
    let d = Daemon::start(state.path(), true);
    let addr = d.tcp.clone().unwrap();
    let victim = token(
        state.path(),
        "victim",
        &[
            "mcp",
            "sandboxes:read",
            "sandboxes:write",
            "exec",
            "approvals",
        ],
    );
    let other = token(state.path(), "other", &["mcp"]);

    let (code, head) = raw(&addr, "POST", &victim, None, INITIALIZE);
    assert_eq!(code, 200, "{head}");
    let sid = session_of(&head);
    let (code, _) = raw(&addr, "POST", &victim, Some(&sid), INITIALIZED);
    assert_eq!(code, 202);

    // What an unknown session is answered, for comparison.
    let (unknown_code, unknown) = raw(
        &addr,
        "POST",
        &other,
        Some("00000000-0000-4000-8000-000000000000"),
        LIST,
    );
    assert_eq!(unknown_code, 404, "{unknown}");

    for (verb, method, body) in [
        ("a request (resources/list)", "POST", LIST),
        ("a response to the server's question", "POST", ANSWER),
        ("the server's stream", "GET", ""),
        ("the end of the session", "DELETE", ""),
    ] {
        let (code, answer) = raw(&addr, method, &other, Some(&sid), body);
        assert_eq!(code, 404, "{verb}: {answer}");
        assert_eq!(body_of(&answer), body_of(&unknown), "{verb}: {answer}");
    }

    // The session is still its own token's, and ends only by its hand.
    let (code, answer) = raw(&addr, "POST", &victim, Some(&sid), LIST);
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("\"result\""), "{answer}");
    let (code, answer) = raw(&addr, "DELETE", &victim, Some(&sid), "");
    assert_eq!(code, 204, "{answer}");
    let (code, _) = raw(&addr, "POST", &victim, Some(&sid), LIST);
    assert_eq!(code, 404);
}

/// Sessions cost the daemon memory, and once they were evicted oldest
/// first across callers: one token opening thousands ended another's live
/// session. Now a token keeps at most 32 open over every MCP endpoint
/// together, its next is refused, and the other token's session goes on.
#[test]
fn a_token_opening_session_after_session_is_refused_past_its_bound_and_another_tokens_goes_on() {
    if !curl_available() {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let state = TempDir::new("mcp-session-bounds");
    let d = Daemon::start(state.path(), true);
    let addr = d.tcp.clone().unwrap();
    let victim = token(state.path(), "victim", &["mcp"]);
    let greedy = token(state.path(), "greedy", &["mcp"]);
    let (code, head) = raw(&addr, "POST", &victim, None, INITIALIZE);
    assert_eq!(code, 200, "{head}");
    let sid = session_of(&head);
    let (code, _) = raw(&addr, "POST", &victim, Some(&sid), INITIALIZED);
    assert_eq!(code, 202);

    let mut mine = Vec::new();
    for _ in 0..32 {
        let (code, head) = raw(&addr, "POST", &greedy, None, INITIALIZE);
        assert_eq!(code, 200, "{head}");
        mine.push(session_of(&head));
    }
    let (code, answer) = raw(&addr, "POST", &greedy, None, INITIALIZE);
    assert_eq!(code, 429, "{answer}");
    // A bound on sessions, not a quota (before: code `quota`).
    let p = json(body_of(&answer));
    assert_eq!(p["code"], "too_many_sessions", "{answer}");
    assert_eq!(p["details"]["bound"], "per_token", "{answer}");
    // The other token's session is untouched.
    let (code, answer) = raw(&addr, "POST", &victim, Some(&sid), LIST);
    assert_eq!(code, 200, "{answer}");
    // Ending one of its own makes room.
    let (code, _) = raw(&addr, "DELETE", &greedy, Some(&mine[0]), "");
    assert_eq!(code, 204);
    let (code, head) = raw(&addr, "POST", &greedy, None, INITIALIZE);
    assert_eq!(code, 200, "{head}");
}

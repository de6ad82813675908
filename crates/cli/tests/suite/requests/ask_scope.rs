//! What one answer to an ask covers, through the real binary: a named
//! sandbox whose ask rule holds every JSON-RPC tool call to a remote MCP
//! endpoint (`rpc:tools/call:*`), answered through its approvals as the
//! daemon's API answers. The question names the tool; "always" about one
//! tool lets that tool through, in this run and the next, and every other
//! tool is asked about again, never let through unasked.

use super::ask::{answer, create_named, first_question, post_in, posted, warden_asking};
use super::kept_grants;
use crate::common::forge::Forge;
use crate::common::*;

#[test]
fn an_always_answer_about_one_tool_call_lets_that_tool_through_and_every_other_tool_is_asked_again()
{
    let Some(forge) = Forge::start() else { return };
    let port = forge.up.port;
    let state = TempDir::new("requests-ask-scope");
    let w = |args: &[&str]| warden_asking(state.path(), args);
    let create = || {
        create_named(
            state.path(),
            &forge,
            "scoped",
            &["--ask-request", "POST forge.test:PORT/mcp rpc:tools/call:*"],
        );
        ok(&w(&["start", "scoped"]));
    };
    // A tool call to `/mcp?n`: the query only tells the calls apart in
    // the server's record (no rule looks at it).
    let call = |n: u32, tool: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        );
        let url = format!("https://forge.test:{port}/mcp?{n}");
        post_in(
            state.path(),
            "scoped",
            &["-H", "Content-Type: application/json", "--data", &body],
            &url,
        )
    };
    let question = || first_question(w);
    create();
    // Asked about search, with the tool named; answered always.
    let first = call(1, "search");
    let q = question();
    assert!(
        q["request"].as_str().is_some_and(|r| r.starts_with(
            r#"POST /mcp?1 (JSON-RPC "tools/call:search") [body: "#
        )),
        "the question names the tool: {q}"
    );
    answer(state.path(), &q, "allow_always");
    assert_eq!(posted(first), "200");
    // Another tool of the same method and path: asked about, not let
    // through on the answer about search.
    let second = call(2, "delete_repo");
    let q = question();
    assert!(
        q["request"].as_str().is_some_and(
            |r| r.starts_with(r#"POST /mcp?2 (JSON-RPC "tools/call:delete_repo") [body: "#)
        ),
        "{q}"
    );
    answer(state.path(), &q, "deny");
    assert_eq!(posted(second), "403");
    // Search again: by the answer, unasked.
    assert_eq!(posted(call(3, "search")), "200");
    // The grant kept states the call it was asked about.
    let kept = kept_grants(state.path());
    assert!(
        kept.contains(&format!(
            r#"allow_requests: ["POST forge.test:{port}/mcp rpc:tools/call:search"]"#
        )),
        "{kept}"
    );
    ok(&w(&["stop", "--time", "1s", "scoped"]));
    ok(&w(&["rm", "scoped"]));
    // A later run of the same sandbox's workspace: search goes unasked
    // (no question: unanswered, it would be refused), delete_repo is
    // still asked about and refused when its time runs out.
    create();
    assert_eq!(posted(call(4, "search")), "200");
    let fifth = call(5, "delete_repo");
    let q = question();
    assert!(
        q["request"]
            .as_str()
            .is_some_and(|r| r.contains("delete_repo")),
        "{q}"
    );
    assert_eq!(posted(fifth), "403");
    let seen = forge.up.requests();
    let reached: Vec<&str> = seen
        .iter()
        .filter_map(|r| r.split_once("POST /mcp?").map(|(_, n)| n))
        .collect();
    assert_eq!(reached, ["1", "3", "4"], "{seen:?}");
    ok(&w(&["stop", "--time", "1s", "scoped"]));
}

/// The same through MCP: the elicitation names the tool call it asks
/// about, "always" about search lets search go unasked, and delete_repo
/// is put to the person again (and refused, it never arrives).
#[test]
fn an_mcp_elicitation_names_the_tool_call_and_its_always_answer_covers_that_tool_only() {
    use super::elicit::{asking_profile, run_command, serve_to, Person};
    let Some(forge) = Forge::start() else { return };
    let port = forge.up.port;
    let state = TempDir::new("requests-ask-scope-mcp");
    let ws = TempDir::new("requests-ask-scope-mcp-ws");
    let config = TempDir::new("requests-ask-scope-mcp-config");
    asking_profile(
        &config,
        "tools",
        &forge.ca,
        port,
        &format!("POST forge.test:{port}/mcp rpc:tools/call:*"),
    );
    let runtime = crate::common::mcp::runtime();
    let person = Person::default();
    person.answers.lock().unwrap().extend(["always", "deny"]);
    runtime.block_on(async {
        let c = serve_to(&person, "tools", &ws, &state, &config).await;
        let call = |n: u32, tool: &str| {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
            );
            let args = serde_json::json!({"argv": [
                "curl", "-sS", "--noproxy", "*", "-o", "/dev/null",
                "-w", format!("call {n} %{{http_code}}"), "-X", "POST",
                "-H", "Content-Type: application/json", "--data", body,
                format!("https://forge.test:{port}/mcp?{n}"),
            ]});
            run_command(&c, args)
        };
        let out = call(1, "search").await;
        assert!(out.contains("call 1 200"), "{out}");
        let out = call(2, "search").await;
        assert!(out.contains("call 2 200"), "{out}");
        let out = call(3, "delete_repo").await;
        assert!(out.contains("call 3 403"), "{out}");
        c.cancel().await.unwrap();
    });
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "search once, delete_repo once: {asked:?}");
    assert!(
        asked[0].contains(r#"send POST /mcp?1 (JSON-RPC "tools/call:search") [body: "#),
        "the question names the tool: {asked:?}"
    );
    assert!(
        asked[1].contains(r#"send POST /mcp?3 (JSON-RPC "tools/call:delete_repo") [body: "#),
        "{asked:?}"
    );
    let seen = forge.up.requests();
    let reached: Vec<&str> = seen
        .iter()
        .filter_map(|r| r.split_once("POST /mcp?").map(|(_, n)| n))
        .collect();
    assert_eq!(reached, ["1", "2"], "{seen:?}");
}

//! Ask mode for a token that may make sandboxes but not answer approvals
//! (no `approvals` scope), through the daemon's `/mcp` with the official
//! SDK's client: the question is never put to that caller (its answer
//! would not be its to give), it waits where whoever may answer sees it
//! (the owner's API, which the dashboard reads), the model is told it
//! waits for an approval it cannot give, and the owner's answer decides
//! (a real listener counts what arrives).

use super::*;

async fn http_person(
    addr: &str,
    token: &str,
    person: Person,
) -> RunningService<RoleClient, Person> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
        .auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config);
    tokio::time::timeout(Duration::from_secs(30), person.serve(transport))
        .await
        .expect("the MCP server answered initialize in time")
        .unwrap()
}

#[test]
fn a_tokens_question_it_may_not_answer_waits_for_the_owner_and_the_model_is_told_so() {
    if !egress_available() {
        return;
    }
    if !common::daemon::curl_available() {
        return skip("curl is not installed");
    }
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        return skip("python3 is not installed");
    }
    let state = TempDir::new("mcp-ask-scope");
    let config = TempDir::new("mcp-ask-scope-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("asking.yaml"),
        "egress:\n  ask: true\n  hosts:\n    asked.test: 127.0.0.1\n",
    )
    .unwrap();
    let d = Daemon::start_with(
        state.path(),
        true,
        &[],
        &[
            ("XDG_CONFIG_HOME", config.path()),
            ("WARDEN_TEST_ASK_LOOPBACK", Path::new("1")),
            ("WARDEN_TEST_ASK_TIMEOUT_MS", Path::new("60000")),
        ],
    );
    let addr = d.tcp.clone().unwrap();
    let agent = token(
        state.path(),
        "agent",
        &["mcp", "sandboxes:read", "sandboxes:write", "exec"],
    );
    let up = Holder::start();
    let port = up.port.to_string();
    runtime().block_on(async {
        // The client takes elicitation requests: it would answer allow
        // if it were asked, and it must not be.
        let person = Person::default();
        let c = http_person(&addr, &agent, person.clone()).await;
        good(
            &call(
                &c,
                "create_sandbox",
                serde_json::json!({"profile": "asking"}),
            )
            .await,
        );
        let connect =
            serde_json::json!({"argv": ["python3", "-c", PY_CONNECT, "asked.test", port]});
        let c = std::sync::Arc::new(c);
        let running = {
            let c = c.clone();
            tokio::spawn(async move { call(&c, "run_command", connect).await })
        };

        // The question waits where the owner sees it.
        let mut id = String::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while id.is_empty() && Instant::now() < deadline {
            let (s, b) = tokio::task::block_in_place(|| {
                common::daemon::call(&d, "GET", "/v1/approvals", None, None)
            });
            assert_eq!(s, 200, "{b}");
            let list = common::daemon::json(&b);
            if let Some(q) = list["approvals"]
                .as_array()
                .and_then(|a| a.iter().find(|q| q["name"] == "asked.test"))
            {
                id = q["id"].as_str().unwrap().to_string();
            } else {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        assert!(!id.is_empty(), "the owner never saw the question");
        assert_eq!(up.arrivals(), 0, "a connection arrived before any answer");
        // The token cannot answer it over the API either.
        let answer = r#"{"decision":"allow_once"}"#;
        let (s, b) = tokio::task::block_in_place(|| {
            common::daemon::call_on(
                &d,
                true,
                "POST",
                &format!("/v1/approvals/{id}"),
                Some(answer),
                Some(&agent),
            )
        });
        assert_eq!(s, 403, "{b}");
        // A person takes a moment to answer: the session's watcher (every
        // 250 ms) sees the question meanwhile.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // The owner's answer decides.
        let (s, b) = tokio::task::block_in_place(|| {
            common::daemon::call(
                &d,
                "POST",
                &format!("/v1/approvals/{id}"),
                Some(answer),
                None,
            )
        });
        assert!((200..300).contains(&s), "{s} {b}");
        let out = tokio::time::timeout(Duration::from_secs(60), running)
            .await
            .expect("the command ended once the owner answered")
            .unwrap();
        let out = text(&out);
        assert!(
            out.contains("this caller may not answer its questions")
                && out.contains("the owner's dashboard"),
            "the model is not told who answers: {out}"
        );
        assert!(
            out.contains("asked to connect to asked.test")
                && out.contains("waits for an approval this caller cannot give"),
            "the model is not told of its question: {out}"
        );
        assert!(
            !out.contains("closed"),
            "the allowed connection was cut: {out}"
        );
        assert_eq!(up.arrivals(), 1, "the allowed connection did not arrive");
        assert!(
            person.asked.lock().unwrap().is_empty(),
            "a caller who may not answer was asked"
        );
        if let Ok(c) = std::sync::Arc::try_unwrap(c) {
            c.cancel().await.unwrap();
        }
    });
    drop(d);
}

//! Ask rules through MCP: `warden mcp` over stdio with a real MCP client
//! (the official SDK's, `rmcp`) that takes elicitation requests. A request
//! an ask rule holds is put to the person as an elicitation that names
//! the request (its method and path, the query's values as sent), and
//! the answer decides it: "allow" lets that one request reach the
//! recording server, "allow always" lets it go unasked afterwards, a
//! refusal keeps it from the server.

use crate::common::forge::Forge;
use crate::common::upstream::TestCa;
use crate::common::*;
use rmcp::model::{CallToolRequestParams, CallToolResult, ElicitRequestParams, ElicitResult};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::ServiceExt;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An MCP client whose person answers each question with the next of
/// `answers` (`allow`, `always` or `deny`), recording the question.
#[derive(Clone, Default)]
pub(super) struct Person {
    pub(super) asked: Arc<Mutex<Vec<String>>>,
    pub(super) answers: Arc<Mutex<VecDeque<&'static str>>>,
}

impl rmcp::ClientHandler for Person {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps: rmcp::model::ClientCapabilities =
            serde_json::from_value(serde_json::json!({"elicitation": {"form": {}}})).unwrap();
        rmcp::model::ClientConfig::new(caps, rmcp::model::Implementation::new("person", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        let next = self.answers.lock().unwrap().pop_front().unwrap_or("deny");
        let mut answer = ElicitResult::new(rmcp::model::ElicitationAction::Accept);
        answer.content = Some(match next {
            "allow" => serde_json::json!({"allow": true, "always": false}),
            "always" => serde_json::json!({"allow": true, "always": true}),
            _ => serde_json::json!({"allow": false, "always": false}),
        });
        Ok(answer)
    }
}

/// The text of a tool result that must have succeeded.
pub(super) fn good(r: &CallToolResult) -> String {
    let text: Vec<String> = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_ne!(r.is_error, Some(true), "a tool error: {text:?}");
    text.join("\n")
}

/// The owner's profile `name` in `config`: the forge at `port` reached
/// through the test authority `ca`, requests `rule` asked about.
pub(super) fn asking_profile(config: &TempDir, name: &str, ca: &TestCa, port: u16, rule: &str) {
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join(format!("{name}.yaml")),
        format!(
            "egress:\n  domains: [\"forge.test:{port}\"]\n  hosts: {{forge.test: 127.0.0.1}}\n  upstream_ca: [\"{}\"]\n  ask_requests: [\"{rule}\"]\n",
            ca.pem_path()
        ),
    )
    .unwrap();
}

/// `warden mcp --profile PROFILE --workspace WS` (state in `state`, the
/// owner's profiles in `config`, a held request waiting 20 s) served to
/// `person`: the client, once the server answered initialize.
pub(super) async fn serve_to(
    person: &Person,
    profile: &str,
    ws: &TempDir,
    state: &TempDir,
    config: &TempDir,
) -> RunningService<RoleClient, Person> {
    let mut cmd = tokio::process::Command::new(warden_bin());
    cmd.args(["mcp", "--profile", profile, "--workspace", ws.str()])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env("XDG_CONFIG_HOME", config.path())
        .env("WARDEN_TEST_ASK_TIMEOUT_MS", "20000");
    tokio::time::timeout(
        Duration::from_secs(30),
        person
            .clone()
            .serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()),
    )
    .await
    .expect("the MCP server answered initialize in time")
    .unwrap()
}

/// Tool `run_command` called on `c` with `args` (an object): the text of
/// its result, which must have succeeded, within two minutes.
pub(super) async fn run_command(
    c: &RunningService<RoleClient, Person>,
    args: serde_json::Value,
) -> String {
    let serde_json::Value::Object(args) = args else {
        unreachable!()
    };
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        c.call_tool(CallToolRequestParams::new("run_command".to_string()).with_arguments(args)),
    )
    .await
    .expect("run_command answered in time")
    .expect("a tool result");
    good(&r)
}

#[test]
fn a_held_request_is_put_to_the_person_through_mcp_elicitation_and_decided_by_the_answer() {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    let port = up.port;
    let state = TempDir::new("requests-elicit");
    let ws = TempDir::new("requests-elicit-ws");
    let config = TempDir::new("requests-elicit-config");
    asking_profile(
        &config,
        "forge",
        &ca,
        port,
        &format!("POST forge.test:{port}/issues/*"),
    );
    let runtime = crate::common::mcp::runtime();
    let person = Person::default();
    runtime.block_on(async {
        person
            .answers
            .lock()
            .unwrap()
            .extend(["allow", "always", "deny"]);
        let c = serve_to(&person, "forge", &ws, &state, &config).await;
        let post = |n: u32| {
            let args = serde_json::json!({"argv": [
                "curl", "-sS", "--noproxy", "*", "-o", "/dev/null",
                "-w", format!("issue {n} %{{http_code}}"), "-X", "POST",
                format!("https://forge.test:{port}/issues/{n}?token=s3cret"),
            ]});
            run_command(&c, args)
        };
        // "allow": that request goes, once.
        let out = post(1).await;
        assert!(out.contains("issue 1 200"), "{out}");
        assert!(
            out.contains("send POST /issues/1?token=s3cret [request sha256 "),
            "the model is told which request was asked about: {out}"
        );
        // "always": it goes, and later goes unasked.
        let out = post(2).await;
        assert!(out.contains("issue 2 200"), "{out}");
        let out = post(2).await;
        assert!(out.contains("issue 2 200"), "{out}");
        // A refusal: it never arrives.
        let out = post(3).await;
        assert!(out.contains("issue 3 403"), "{out}");
        c.cancel().await.unwrap();
    });
    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(
        asked.len(),
        3,
        "asked once each, the always one once: {asked:?}"
    );
    for (q, n) in asked.iter().zip([1, 2, 3]) {
        assert!(
            q.contains(&format!(
                "send POST /issues/{n}?token=s3cret [request sha256 "
            )) && q.contains(&format!("] to forge.test:{port}")),
            "the question names the request as it is sent: {q}"
        );
    }
    let seen = up.requests();
    let arrived = |path: &str| seen.iter().filter(|r| r.contains(path)).count();
    assert_eq!(arrived("POST /issues/1?"), 1, "{seen:?}");
    assert_eq!(arrived("POST /issues/2?"), 2, "{seen:?}");
    assert_eq!(arrived("/issues/3"), 0, "{seen:?}");
}

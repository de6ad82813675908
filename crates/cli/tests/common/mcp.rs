//! A real MCP client of `warden mcp` for the tests: the server as the
//! client's child over stdio, tool calls bounded in time, and their
//! results read as a success's text or a tool error's.

use super::warden_bin;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::ServiceExt;
use std::path::Path;
use std::time::Duration;

pub type Client = RunningService<RoleClient, ()>;

/// A runtime for the client, on two threads.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `warden mcp ARGS` as the client's child, its state in `state`/warden.
pub async fn stdio_client(state: &Path, args: &[&str], env: &[(&str, &Path)]) -> Client {
    let cmd = tokio::process::Command::new(warden_bin());
    let env: Vec<(String, std::path::PathBuf)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_path_buf()))
        .collect();
    let state = state.join("warden");
    let cmd = cmd.configure(|c| {
        c.arg("mcp").args(args).env("WARDEN_STATE_DIR", &state);
        for (k, v) in &env {
            c.env(k, v);
        }
    });
    let transport = TokioChildProcess::new(cmd).unwrap();
    tokio::time::timeout(Duration::from_secs(30), ().serve(transport))
        .await
        .expect("the MCP server answered initialize in time")
        .unwrap()
}

/// Tool `name` called with `args` (an object): its result, within two
/// minutes.
pub async fn call<H: rmcp::ClientHandler>(
    c: &RunningService<RoleClient, H>,
    name: &str,
    args: serde_json::Value,
) -> CallToolResult {
    let serde_json::Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    tokio::time::timeout(
        Duration::from_secs(120),
        c.call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(args)),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} answered in time"))
    .unwrap_or_else(|e| panic!("{name} was answered as a tool result, not {e}"))
}

pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool result that must have succeeded; its text.
pub fn good(r: &CallToolResult) -> String {
    assert_ne!(r.is_error, Some(true), "a tool error: {}", text(r));
    text(r)
}

/// A tool result that must be a tool error; its text.
pub fn refused(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "not a tool error: {}", text(r));
    text(r)
}

/// The session ID in an MCP answer's head (`mcp-session-id`), if any.
pub fn session_id(head: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("mcp-session-id")
            .then(|| v.trim().to_string())
    })
}

/// The session ID an `initialize` was answered with (the test fails
/// without one).
pub fn session_of(head: &str) -> String {
    session_id(head).unwrap_or_else(|| panic!("no session id: {head}"))
}

/// An MCP session spoken by hand through curl to a daemon's `/mcp`, as a
/// model's client would: over TCP as a token, or on the owner's socket
/// without one; initialized, its session ID kept.
pub struct CurlSession<'a> {
    d: &'a super::daemon::Daemon,
    token: Option<String>,
    /// Where curl writes each answer's head.
    heads: std::path::PathBuf,
    id: Option<String>,
}

impl<'a> CurlSession<'a> {
    /// `initialize` (as client `attack`), then `notifications/initialized`;
    /// the answers' heads are written to `heads`.
    pub fn open(
        d: &'a super::daemon::Daemon,
        token: Option<&str>,
        heads: std::path::PathBuf,
    ) -> CurlSession<'a> {
        let mut s = CurlSession {
            d,
            token: token.map(str::to_string),
            heads,
            id: None,
        };
        let (h, b) = s.send(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"attack","version":"1"}}}"#,
        );
        s.id = Some(session_id(&h).unwrap_or_else(|| panic!("no MCP session: {h}\n{b}")));
        s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        s
    }

    /// One JSON-RPC message `body`, in the session once it has one: the
    /// answer's head and body.
    pub fn send(&self, body: &str) -> (String, String) {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "--max-time", "60", "-D"]).arg(&self.heads);
        let url = match &self.token {
            Some(t) => {
                cmd.args(["-H", &format!("authorization: Bearer {t}")]);
                format!("http://{}/mcp", self.d.tcp.as_ref().unwrap())
            }
            None => {
                cmd.arg("--unix-socket").arg(&self.d.socket);
                "http://warden/mcp".to_string()
            }
        };
        cmd.args(["-H", "content-type: application/json"])
            .args(["-H", "accept: application/json, text/event-stream"]);
        if let Some(s) = &self.id {
            cmd.args(["-H", &format!("mcp-session-id: {s}")]);
        }
        let out = cmd.args(["--data-binary", body]).arg(url).output().unwrap();
        let h = std::fs::read_to_string(&self.heads).unwrap_or_default();
        (h, String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `tools/call` of `tool` with `arguments`: the answer's body.
    pub fn call_tool(&self, tool: &str, arguments: serde_json::Value) -> String {
        let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        self.send(&call.to_string()).1
    }
}

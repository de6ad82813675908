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

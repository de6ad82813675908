//! A remote MCP server behind JSON-RPC request rules: the official MCP
//! Python SDK's streamable HTTP server (`mcp` from PyPI, in a venv: set
//! `WARDEN_TEST_MCP_PYTHON` to its python, or have it at
//! /tmp/mcp-venv/bin/python) with two tools that record each call, behind
//! a TLS front whose certificate comes from a test authority. An MCP
//! client speaking the protocol over HTTP from inside the sandbox may list
//! the tools and call one of them; the other tool's call is refused with
//! the reason and never reaches the server; every decision is in the
//! audit log.

use crate::common::upstream::{tls_server, TestCa};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The server: `server.py PORT LOG`.
const SERVER: &str = r#"
import sys
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

port, log = int(sys.argv[1]), sys.argv[2]
server = MCPServer("forge-tools")

def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")

@server.tool()
def search(query: str) -> str:
    """Search the forge."""
    note(f"search {query}")
    return f"found: {query}"

@server.tool()
def delete_repo(name: str) -> str:
    """Delete a repository."""
    note(f"delete_repo {name}")
    return f"deleted {name}"

server.run(
    "streamable-http",
    host="127.0.0.1",
    port=port,
    json_response=True,
    stateless_http=True,
    # Reached through the TLS front under its own name.
    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
)
"#;

/// The venv's python with the SDK, or `None` (said).
fn mcp_python() -> Option<PathBuf> {
    let python = std::env::var_os("WARDEN_TEST_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/mcp-venv/bin/python"));
    let ok = Command::new(&python)
        .args(["-c", "import mcp.server.mcpserver"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(&format!(
            "the MCP Python SDK is not at {} (python3 -m venv /tmp/mcp-venv && /tmp/mcp-venv/bin/pip install mcp)",
            python.display()
        ));
        return None;
    }
    Some(python)
}

/// The Python server on a port of its own, killed when dropped.
struct McpServer {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
}

impl McpServer {
    fn start(python: &Path, dir: &Path) -> McpServer {
        let script = dir.join("server.py");
        std::fs::write(&script, SERVER).unwrap();
        let log = dir.join("calls.log");
        let port = free_port();
        let child = Command::new(python)
            .arg(&script)
            .arg(port.to_string())
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until("the MCP server", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        McpServer { child, port, log }
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// TLS for `name` on 127.0.0.1, each connection relayed to `to`.
struct TlsFront {
    port: u16,
    _runtime: tokio::runtime::Runtime,
}

impl TlsFront {
    fn start(ca: &TestCa, name: &str, to: u16) -> TlsFront {
        let at = (std::net::Ipv4Addr::LOCALHOST, 0);
        let (port, runtime) =
            tls_server(ca, &[name], &[b"http/1.1"], at, move |mut tls| async move {
                let Ok(mut up) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            })
            .unwrap();
        TlsFront {
            port,
            _runtime: runtime,
        }
    }
}

#[test]
fn a_remote_mcp_server_gets_only_the_json_rpc_calls_a_rule_allows_and_every_call_is_audited() {
    if !egress_available() {
        return;
    }
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = TempDir::new("requests-mcp");
    let server = McpServer::start(&python, dir.path());
    let ca = TestCa::new();
    let front = TlsFront::start(&ca, "mcp.test", server.port);
    let port = front.port;
    let audit = dir.path().join("audit.jsonl");
    let call = |id: u32, body: &str| {
        format!(
            "curl -sS --noproxy '*' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -D /tmp/h{id} -d '{body}' https://mcp.test:{port}/mcp; echo; grep -i '^x-warden' /tmp/h{id}; echo\n"
        )
    };
    let mut script = String::new();
    script.push_str(&call(1, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}"#));
    script.push_str(&call(
        2,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ));
    script.push_str(&call(3, r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{"query":"widgets"}}}"#));
    script.push_str(&call(4, r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"delete_repo","arguments":{"name":"acme/w"}}}"#));
    // The same call hidden in a batch behind an allowed one.
    script.push_str(&call(5, r#"[{"jsonrpc":"2.0","id":5,"method":"tools/list"},{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"delete_repo","arguments":{"name":"acme/x"}}}]"#));
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args([
            "--allow-domain",
            &format!("mcp.test:{port}"),
            "--add-host",
            "mcp.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
            "--allow-request",
            &format!("POST mcp.test:{port}/mcp rpc:initialize,notifications/*,tools/list,tools/call:search"),
            "--audit-log",
            audit.to_str().unwrap(),
        ])
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    assert!(s.contains("\"serverInfo\""), "initialize: {s}");
    assert!(s.contains("\"name\":\"delete_repo\""), "tools/list: {s}");
    assert!(s.contains("found: widgets"), "the allowed tool: {s}");
    assert_eq!(
        s.matches("x-warden-reason: no_request_rule").count(),
        2,
        "the other tool, alone and in a batch: {s}"
    );
    assert!(
        s.contains("JSON-RPC tools/call:delete_repo"),
        "the reason names the call: {s}"
    );
    let calls = server.calls();
    assert_eq!(calls, "search widgets\n", "only the allowed call arrived");
    let audited = std::fs::read_to_string(&audit).unwrap();
    let requests: Vec<serde_json::Value> = audited
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["protocol"] == "request")
        .collect();
    let text = serde_json::to_string(&requests).unwrap();
    assert!(requests.iter().any(|e| e["allowed"] == false), "{text}");
    assert!(
        requests.iter().any(|e| e["allowed"] == true),
        "the allowed calls are recorded too: {text}"
    );
    assert!(text.contains("tools/call:delete_repo"), "{text}");
    // The log's chain holds.
    let verified = Command::new(warden_bin())
        .args(["audit", "verify"])
        .arg(&audit)
        .output()
        .unwrap();
    assert!(verified.status.success(), "{}", stderr(&verified));
}

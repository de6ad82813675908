//! MCP with a real MCP client (the official SDK's, `rmcp`): `warden mcp`
//! spawned as a child over stdio, and `warden serve`'s `/mcp` over
//! streamable HTTP with a token. Real sandboxes, real files planted on
//! the host that must stay unread, real network decisions.
//!
//! A desktop sandbox's tools through the daemon's `/mcp`: the screenshot
//! comes back as an image content (a real PNG), an action is done, bad
//! input is a tool error with its reason, and each tool is checked against
//! its route's scope (a token with `desktop:view` only sees the screen and
//! may not touch it).

use crate::common;
use crate::common::daemon::{mcp_raw, sandboxes_on_disk, token, Daemon};
use crate::common::mcp::{call, good, refused, runtime, session_of, stdio_client, text, Client};
use crate::common::*;
use rmcp::model::ReadResourceRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use std::path::Path;
use std::time::{Duration, Instant};

mod ask_scope;

/// A state directory and a workspace (with `a.txt`) for a stdio session,
/// and a file outside the workspace with a link to it planted in the
/// workspace: the files tools must never read it.
fn planted(name: &str) -> (TempDir, TempDir, std::path::PathBuf) {
    let state = TempDir::new(name);
    let ws = TempDir::new(&format!("{name}-ws"));
    std::fs::write(ws.path().join("a.txt"), "hello from the host\n").unwrap();
    let secret = state.path().join("secret.txt");
    std::fs::write(&secret, "MARKER-host-secret-7f3a\n").unwrap();
    std::os::unix::fs::symlink(&secret, ws.path().join("hostlink")).unwrap();
    (state, ws, secret)
}

/// Every tool is listed, and `run_command`'s description says what the
/// session's sandboxes are allowed.
async fn lists_its_tools_and_says_what_is_allowed(c: &Client) {
    let tools = c.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for n in [
        "create_sandbox",
        "run_command",
        "start_command",
        "poll_command",
        "read_file",
        "write_file",
        "list_files",
        "get_changes",
        "commit_changes",
        "destroy_sandbox",
    ] {
        assert!(names.contains(&n), "{n} is listed: {names:?}");
    }
    let run = tools.iter().find(|t| t.name == "run_command").unwrap();
    let d = run.description.as_deref().unwrap_or("");
    assert!(
        d.contains("network: none"),
        "the description says what is allowed: {d}"
    );
}

#[test]
fn an_mcp_client_uses_warden_as_its_computer_over_stdio() {
    let (state, ws, _secret) = planted("mcp-stdio");
    runtime().block_on(async {
        let c = stdio_client(state.path(), &["--workspace", ws.str()], &[]).await;

        lists_its_tools_and_says_what_is_allowed(&c).await;

        // A command, in a sandbox made on first use, over the workspace.
        let out = good(
            &call(
                &c,
                "run_command",
                serde_json::json!({"shell": "cat a.txt; echo $((6*7))"}),
            )
            .await,
        );
        assert!(out.contains("exit status 0"), "{out}");
        assert!(
            out.contains("hello from the host") && out.contains("42"),
            "{out}"
        );
        let made = sandboxes_on_disk(state.path());
        assert_eq!(made.len(), 1, "one sandbox: {made:?}");

        // Long output is cut, with a note saying how much.
        let out = good(
            &call(
                &c,
                "run_command",
                serde_json::json!({"argv": ["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x"]}),
            )
            .await,
        );
        assert!(
            out.contains("bytes cut of 200000"),
            "{}",
            &out[..out.len().min(400)]
        );
        assert!(out.len() < 100_000);

        // Write, then read, a file: the host's workspace is untouched.
        good(
            &call(
                &c,
                "write_file",
                serde_json::json!({"path": "new.txt", "content": "written by the model\n"}),
            )
            .await,
        );
        assert!(
            !ws.path().join("new.txt").exists(),
            "nothing reaches the host before a commit"
        );
        let back = good(
            &call(
                &c,
                "read_file",
                serde_json::json!({"path": "/workspace/new.txt"}),
            )
            .await,
        );
        assert_eq!(back, "written by the model\n");
        let listed = good(&call(&c, "list_files", serde_json::json!({})).await);
        assert!(
            listed.contains("new.txt") && listed.contains("a.txt"),
            "{listed}"
        );

        // A long command: started, then polled to its end.
        let started = good(
            &call(
                &c,
                "start_command",
                serde_json::json!({"shell": "echo first; sleep 1; echo second"}),
            )
            .await,
        );
        let id = started.split_whitespace().nth(1).unwrap().to_string();
        let mut seen = String::new();
        for _ in 0..10 {
            let p = good(
                &call(
                    &c,
                    "poll_command",
                    serde_json::json!({"command": id, "wait_seconds": 5}),
                )
                .await,
            );
            seen.push_str(&p);
            if p.starts_with("ended") {
                break;
            }
        }
        assert!(
            seen.contains("first")
                && seen.contains("second")
                && seen.contains("ended: exit status 0"),
            "{seen}"
        );

        // The changes, then the commit: now the host has the files.
        good(
            &call(
                &c,
                "run_command",
                serde_json::json!({"shell": "echo changed >> a.txt"}),
            )
            .await,
        );
        let changes = good(&call(&c, "get_changes", serde_json::json!({})).await);
        assert!(
            changes.contains("new.txt") && changes.contains("+changed"),
            "{changes}"
        );
        assert!(!std::fs::read_to_string(ws.path().join("a.txt"))
            .unwrap()
            .contains("changed"));
        let committed = good(&call(&c, "commit_changes", serde_json::json!({})).await);
        assert!(committed.contains("committed"), "{committed}");
        assert_eq!(
            std::fs::read_to_string(ws.path().join("new.txt")).unwrap(),
            "written by the model\n"
        );
        let again = good(
            &call(
                &c,
                "run_command",
                serde_json::json!({"argv": ["cat", "new.txt"]}),
            )
            .await,
        );
        assert!(
            again.contains("written by the model"),
            "the sandbox runs again: {again}"
        );

        // The event log is a resource.
        let resources = c.list_all_resources().await.unwrap();
        let uri = resources[0].uri.clone();
        assert!(uri.ends_with("/events"), "{uri}");
        let log = c
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .unwrap();
        let log = format!("{:?}", log.contents);
        assert!(log.contains("exec_started"), "{log}");

        // The client goes: its sandbox (committed, not kept) goes too.
        c.cancel().await.unwrap();
        wait_until(
            "the session's sandbox is removed",
            Duration::from_secs(30),
            || sandboxes_on_disk(state.path()).is_empty(),
        );
    });
}

#[test]
fn bad_arguments_and_path_escapes_are_tool_errors_that_read_nothing_of_the_host() {
    let (state, ws, secret) = planted("mcp-refused");
    runtime().block_on(async {
        let c = stdio_client(state.path(), &["--workspace", ws.str()], &[]).await;
        // Bad arguments are tool errors that say what is wrong.
        let e = refused(&call(&c, "run_command", serde_json::json!({"argv": "ls -l"})).await);
        assert!(e.contains("do not fit") && e.contains("argv"), "{e}");
        let e = refused(
            &call(
                &c,
                "run_command",
                serde_json::json!({"shell": "true", "timeout_seconds": -1}),
            )
            .await,
        );
        assert!(e.contains("timeout_seconds"), "{e}");
        let e = refused(
            &call(
                &c,
                "run_command",
                serde_json::json!({"argv": ["true"], "shell": "true"}),
            )
            .await,
        );
        assert!(e.contains("not both"), "{e}");
        let e = refused(&call(&c, "no_such_tool", serde_json::json!({})).await);
        assert!(e.contains("no tool"), "{e}");
        let e = refused(
            &call(
                &c,
                "run_command",
                serde_json::json!({"sandbox": "someone-elses", "shell": "true"}),
            )
            .await,
        );
        assert!(e.contains("only the sandboxes it made"), "{e}");

        // Path escapes: `..`, an absolute path elsewhere, links (one
        // planted by the host, one made inside), for reading and writing.
        for (tool, args, why) in [
            (
                "read_file",
                serde_json::json!({"path": "../secret.txt"}),
                "leaves",
            ),
            // A host path under /tmp names the sandbox's own /tmp, where
            // no such file is: the host's is never reached.
            (
                "read_file",
                serde_json::json!({"path": secret.to_str().unwrap()}),
                "in the sandbox",
            ),
            (
                "read_file",
                serde_json::json!({"path": "/etc/passwd"}),
                "own places",
            ),
            (
                "read_file",
                serde_json::json!({"path": "hostlink"}),
                "symbolic link",
            ),
            (
                "write_file",
                serde_json::json!({"path": "hostlink", "content": "x"}),
                "symbolic link",
            ),
            (
                "write_file",
                serde_json::json!({"path": "../escape.txt", "content": "x"}),
                "leaves",
            ),
            (
                "list_files",
                serde_json::json!({"path": "/etc"}),
                "own places",
            ),
        ] {
            let e = refused(&call(&c, tool, args.clone()).await);
            assert!(e.contains(why), "{tool} {args}: {e}");
            assert!(
                !e.contains("MARKER"),
                "{tool} {args} read the host's file: {e}"
            );
        }
        good(
            &call(
                &c,
                "run_command",
                serde_json::json!({"shell": "ln -s /etc/passwd inner"}),
            )
            .await,
        );
        let e = refused(&call(&c, "read_file", serde_json::json!({"path": "inner"})).await);
        assert!(e.contains("symbolic link") && !e.contains("root:"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            "MARKER-host-secret-7f3a\n"
        );
        assert!(!state.path().join("escape.txt").exists());

        // The client goes: its sandbox goes too.
        c.cancel().await.unwrap();
        wait_until(
            "the session's sandbox is removed",
            Duration::from_secs(30),
            || sandboxes_on_disk(state.path()).is_empty(),
        );
    });
}

#[test]
fn a_profile_the_server_does_not_offer_and_a_workspace_outside_its_root_are_refused() {
    let state = TempDir::new("mcp-offer");
    let ws = TempDir::new("mcp-offer-ws");
    let elsewhere = TempDir::new("mcp-offer-else");
    runtime().block_on(async {
        let c = stdio_client(state.path(), &["--workspace", ws.str()], &[]).await;
        let e = refused(
            &call(
                &c,
                "create_sandbox",
                serde_json::json!({"profile": "devops"}),
            )
            .await,
        );
        assert!(e.contains("not one this server offers"), "{e}");
        let e = refused(
            &call(
                &c,
                "create_sandbox",
                serde_json::json!({"workspace": elsewhere.str()}),
            )
            .await,
        );
        assert!(
            e.contains("not under a directory this server offers"),
            "{e}"
        );
        let e = refused(&call(&c, "create_sandbox", serde_json::json!({"workspace": "/"})).await);
        assert!(e.contains("not under"), "{e}");
        assert!(
            sandboxes_on_disk(state.path()).is_empty(),
            "a refused create leaves nothing"
        );
        // A kept sandbox stays after the session.
        let made = good(&call(&c, "create_sandbox", serde_json::json!({"keep": true})).await);
        assert!(made.contains("network: none"), "{made}");
        // A session has at most eight sandboxes at once.
        for _ in 0..7 {
            good(&call(&c, "create_sandbox", serde_json::json!({})).await);
        }
        let e = refused(&call(&c, "create_sandbox", serde_json::json!({})).await);
        assert!(e.contains("the most it may have"), "{e}");
        // A bound of the session's, not a quota (before: `quota`).
        assert!(e.contains("failed (too_many_sandboxes)"), "{e}");
        assert_eq!(sandboxes_on_disk(state.path()).len(), 8);
        c.cancel().await.unwrap();
        wait_until("the others are removed", Duration::from_secs(60), || {
            sandboxes_on_disk(state.path()).len() == 1
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let left = sandboxes_on_disk(state.path());
        assert_eq!(left.len(), 1, "the kept sandbox stays: {left:?}");
        ok(&warden(state.path(), &["rm", "-f", &left[0]]));
    });
}

#[test]
fn a_denied_network_action_is_a_tool_error_that_says_what_was_denied() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("mcp-net");
    let ws = TempDir::new("mcp-net-ws");
    let config = TempDir::new("mcp-net-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("narrow.yaml"),
        "egress:\n  domains: [allowed.test]\n",
    )
    .unwrap();
    runtime().block_on(async {
        let c = stdio_client(
            state.path(),
            &["--profile", "narrow", "--workspace", ws.str()],
            &[("XDG_CONFIG_HOME", config.path())],
        )
        .await;
        let tools = c.list_all_tools().await.unwrap();
        let run = tools.iter().find(|t| t.name == "run_command").unwrap();
        let d = run.description.as_deref().unwrap_or("");
        assert!(
            d.contains("allowed.test"),
            "the description names the allowed names: {d}"
        );
        let r = call(
            &c,
            "run_command",
            serde_json::json!({"shell": "getent hosts denied.example"}),
        )
        .await;
        let e = refused(&r);
        assert!(
            e.contains("denied.example"),
            "the denial names what was denied: {e}"
        );
        assert!(e.contains("do not retry"), "{e}");
        // The quick retry the report exists to stop: repeats of a denial
        // are counted rather than written one by one, and each result
        // still lists its own.
        for attempt in 0..2 {
            let r = call(
                &c,
                "run_command",
                serde_json::json!({"shell": "getent hosts denied.example"}),
            )
            .await;
            let e = refused(&r);
            assert!(
                e.contains("denied.example"),
                "retry {attempt}: the denial is listed again: {e}"
            );
        }
        c.cancel().await.unwrap();
    });
}

async fn http_client(addr: &str, token: Option<&str>) -> Result<Client, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"));
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    tokio::time::timeout(Duration::from_secs(30), ().serve(transport))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// A bare `initialize` request's body.
const RAW_INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// The head of the answer to a bare `initialize` POSTed to `/mcp`
/// (`what` = "initialize"), or to a `DELETE /mcp` of session `sid`.
fn raw_head(addr: &str, token: &str, what: &str, sid: Option<&str>) -> String {
    let head_read = |got: &[u8]| got.windows(4).any(|w| w == b"\r\n\r\n");
    let wait = Duration::from_secs(10);
    if what == "DELETE" {
        let sid = format!(
            "Mcp-Session-Id: {}\r\nMCP-Protocol-Version: 2025-06-18\r\n",
            sid.unwrap_or("")
        );
        mcp_raw(addr, "DELETE", token, &sid, "", wait, head_read)
    } else {
        mcp_raw(addr, "POST", token, "", RAW_INITIALIZE, wait, head_read)
    }
}

/// The status line of a bare `initialize` POSTed to `/mcp`.
fn raw_initialize(addr: &str, token: &str, origin: Option<&str>) -> String {
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    let line_read = |got: &[u8]| got.windows(2).any(|w| w == b"\r\n");
    let answer = mcp_raw(
        addr,
        "POST",
        token,
        &origin,
        RAW_INITIALIZE,
        Duration::from_secs(10),
        line_read,
    );
    answer.lines().next().unwrap_or("").to_string()
}

#[test]
fn the_daemons_mcp_endpoint_serves_a_token_with_its_scopes_only() {
    let state = TempDir::new("mcp-http");
    let d = Daemon::start(state.path(), true);
    let addr = d.tcp.clone().unwrap();
    let full = token(
        state.path(),
        "agent",
        &["mcp", "sandboxes:read", "sandboxes:write", "exec", "files"],
    );
    let no_mcp = token(
        state.path(),
        "rest-only",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
    );
    let no_exec = token(
        state.path(),
        "no-exec",
        &["mcp", "sandboxes:read", "sandboxes:write", "files"],
    );
    runtime().block_on(async {
        // No token, or a token without the mcp scope: not let in.
        assert!(
            http_client(&addr, None).await.is_err(),
            "no token, no session"
        );
        assert!(
            http_client(&addr, Some(&no_mcp)).await.is_err(),
            "the mcp scope is needed"
        );

        // A browser page is no MCP client of the daemon: a request that
        // says it comes from one is refused, token or not.
        let status = raw_initialize(&addr, &full, Some("http://evil.test"));
        assert!(status.contains(" 403 "), "{status}");
        let status = raw_initialize(&addr, &full, None);
        assert!(status.contains(" 200 "), "{status}");
        // Ending a session is answered 204 (a 202 is logged as a failure
        // by the official clients).
        let head = raw_head(&addr, &full, "initialize", None);
        let sid = session_of(&head);
        let ended = raw_head(&addr, &full, "DELETE", Some(&sid));
        assert!(ended.starts_with("HTTP/1.1 204 "), "{ended}");

        let c = http_client(&addr, Some(&full)).await.unwrap();
        let names: Vec<String> = c
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        assert!(names.contains(&"run_command".to_string()), "{names:?}");
        let out = good(
            &call(
                &c,
                "run_command",
                serde_json::json!({"shell": "echo over-http; hostname"}),
            )
            .await,
        );
        assert!(out.contains("over-http"), "{out}");
        good(
            &call(
                &c,
                "write_file",
                serde_json::json!({"path": "n.txt", "content": "via http"}),
            )
            .await,
        );
        let back = good(&call(&c, "read_file", serde_json::json!({"path": "n.txt"})).await);
        assert_eq!(back, "via http");
        let changes = good(&call(&c, "get_changes", serde_json::json!({})).await);
        assert!(changes.contains("n.txt"), "{changes}");
        let e = refused(
            &call(
                &c,
                "read_file",
                serde_json::json!({"path": "../../etc/shadow"}),
            )
            .await,
        );
        assert!(e.contains("leaves"), "{e}");
        let e = refused(
            &call(
                &c,
                "create_sandbox",
                serde_json::json!({"workspace": "/etc"}),
            )
            .await,
        );
        assert!(
            e.contains("is not a directory the daemon lets token holders use"),
            "{e}"
        );
        // The refusal is the same whether the path exists or not, and
        // never says the path back: the model learns nothing of the
        // host's files from it.
        let e2 = refused(
            &call(
                &c,
                "create_sandbox",
                serde_json::json!({"workspace": "/root/no-such-dir"}),
            )
            .await,
        );
        assert_eq!(e, e2);
        assert!(!e.contains("/etc"), "{e}");
        let made = sandboxes_on_disk(state.path());
        assert_eq!(made.len(), 1, "{made:?}");
        let gone = good(
            &call(
                &c,
                "destroy_sandbox",
                serde_json::json!({"sandbox": made[0]}),
            )
            .await,
        );
        assert!(gone.contains("removed"), "{gone}");
        assert!(sandboxes_on_disk(state.path()).is_empty());

        // A token with mcp but without exec: the tool is refused by the
        // scope of the API route it calls.
        let c2 = http_client(&addr, Some(&no_exec)).await.unwrap();
        let e = refused(&call(&c2, "run_command", serde_json::json!({"shell": "true"})).await);
        assert!(e.contains("lacks the scope exec"), "{e}");
        c2.cancel().await.unwrap();
        c.cancel().await.unwrap();
        // The sandbox the second session made (to run in) goes with it.
        wait_until(
            "the session's sandbox is removed",
            Duration::from_secs(30),
            || sandboxes_on_disk(state.path()).is_empty(),
        );
    });
    drop(d);
}

/// A server on 127.0.0.1 that counts the connections reaching it and
/// holds each open, saying nothing.
struct Holder {
    port: u16,
    seen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Holder {
    fn start() -> Holder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let s = seen.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(conn);
            }
        });
        Holder { port, seen }
    }

    fn arrivals(&self) -> usize {
        self.seen.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Python in the sandbox: resolve NAME, connect to PORT with a TLS
/// ClientHello for it (the proxy reads the name there), and say whether
/// the connection was let through (`open`, then what the server said) or
/// cut (`closed`).
const PY_CONNECT: &str = r#"import socket, ssl, sys
name, port = sys.argv[1], int(sys.argv[2])
ip = socket.gethostbyname(name)
ctx = ssl.create_default_context(); i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
t = ctx.wrap_bio(i, o, server_hostname=name)
try: t.do_handshake()
except ssl.SSLWantReadError: pass
s = socket.create_connection((ip, port), timeout=60); s.sendall(o.read())
s.settimeout(2)
try:
    data = s.recv(100)
    print('closed' if not data else 'data', flush=True)
except socket.timeout:
    print('held open', flush=True)
except OSError as e:
    print('closed', e, flush=True)
"#;

/// An MCP client that takes elicitation requests: it records each
/// question and answers `allow` (for this connection only).
#[derive(Clone, Default)]
struct Person {
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Person {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps: rmcp::model::ClientCapabilities =
            serde_json::from_value(serde_json::json!({"elicitation": {"form": {}}})).unwrap();
        rmcp::model::ClientConfig::new(caps, rmcp::model::Implementation::new("person", "1"))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        if let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        let mut answer = rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept);
        answer.content = Some(serde_json::json!({"allow": true, "always": false}));
        Ok(answer)
    }
}

#[test]
fn ask_mode_questions_go_to_the_person_through_elicitation_or_are_denied() {
    if !egress_available() {
        return;
    }
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        return skip("python3 is not installed");
    }
    let state = TempDir::new("mcp-ask");
    let ws = TempDir::new("mcp-ask-ws");
    let config = TempDir::new("mcp-ask-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("asking.yaml"),
        "egress:\n  ask: true\n  hosts:\n    asked.test: 127.0.0.1\n",
    )
    .unwrap();
    let up = Holder::start();
    let port = up.port.to_string();
    let env: [(&str, &Path); 3] = [
        ("XDG_CONFIG_HOME", config.path()),
        ("WARDEN_TEST_ASK_LOOPBACK", Path::new("1")),
        ("WARDEN_TEST_ASK_TIMEOUT_MS", Path::new("20000")),
    ];
    let args = ["--profile", "asking", "--workspace", ws.str()];
    runtime().block_on(async {
        // A client that asks its person: the connection goes through.
        let person = Person::default();
        let mut cmd = tokio::process::Command::new(warden_bin());
        cmd.arg("mcp")
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let c = person
            .clone()
            .serve(TokioChildProcess::new(cmd).unwrap())
            .await
            .unwrap();
        let connect =
            serde_json::json!({"argv": ["python3", "-c", PY_CONNECT, "asked.test", port]});
        let out = call(&c, "run_command", connect.clone()).await;
        let out = good(&out);
        wait_until(
            "the allowed connection's arrival",
            Duration::from_secs(10),
            || up.arrivals() == 1,
        );
        assert!(
            out.contains("the person answered allow_once"),
            "the model is told: {out}"
        );
        let asked = person.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(asked[0].contains("asked.test"), "{asked:?}");
        c.cancel().await.unwrap();

        // A client without elicitation: the question is denied at once,
        // nothing arrives, and the model is told why.
        let plain = stdio_client(state.path(), &args, &env).await;
        let r = call(&plain, "run_command", connect).await;
        let t = text(&r);
        assert!(
            t.contains("no elicitation") && t.contains("asked.test"),
            "{t}"
        );
        // Denied at once, not held until the question times out.
        assert!(t.contains("closed") && !t.contains("held open"), "{t}");
        assert_eq!(up.arrivals(), 1, "a denied connection reached the server");
        plain.cancel().await.unwrap();
    });
}

#[test]
fn a_stdio_server_killed_with_sigterm_removes_its_sandboxes_first() {
    let state = TempDir::new("mcp-term");
    let ws = TempDir::new("mcp-term-ws");
    runtime().block_on(async {
        let mut cmd = tokio::process::Command::new(warden_bin());
        cmd.arg("mcp")
            .args(["--workspace", ws.str()])
            .env("WARDEN_STATE_DIR", state.path().join("warden"));
        let child = TokioChildProcess::new(cmd).unwrap();
        let pid = child.id().unwrap() as i32;
        let c = ().serve(child).await.unwrap();
        good(
            &call(
                &c,
                "run_command",
                serde_json::json!({"shell": "sleep 300 &"}),
            )
            .await,
        );
        assert_eq!(sandboxes_on_disk(state.path()).len(), 1);
        // SAFETY: kill(2) with the PID of the server this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        wait_until(
            "the session's sandbox is removed",
            Duration::from_secs(30),
            || sandboxes_on_disk(state.path()).is_empty(),
        );
        drop(c);
    });
}

#[test]
fn the_sandboxes_of_a_stdio_server_killed_outright_are_removed_by_the_next_one() {
    let state = TempDir::new("mcp-lease");
    let ws = TempDir::new("mcp-lease-ws");
    let start = || {
        let mut cmd = tokio::process::Command::new(warden_bin());
        cmd.arg("mcp")
            .args(["--workspace", ws.str()])
            .env("WARDEN_STATE_DIR", state.path().join("warden"));
        TokioChildProcess::new(cmd).unwrap()
    };
    runtime().block_on(async {
        let child = start();
        let pid = child.id().unwrap() as i32;
        let c = ().serve(child).await.unwrap();
        // A name that does not resolve in a sandbox without network is
        // explained in the result (nothing was denied: no query left).
        let r = good(
            &call(
                &c,
                "run_command",
                serde_json::json!({"argv": ["python3", "-c", "import socket; socket.getaddrinfo('example.com', 80)"]}),
            )
            .await,
        );
        assert!(r.contains("this sandbox has no network"), "{r}");
        let kept = call(&c, "create_sandbox", serde_json::json!({"keep": true})).await;
        good(&kept);
        assert_eq!(sandboxes_on_disk(state.path()).len(), 2);
        // SAFETY: kill(2) with the PID of the server this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        drop(c);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            sandboxes_on_disk(state.path()).len(),
            2,
            "a server killed outright removes nothing itself"
        );
        let c = ().serve(start()).await.unwrap();
        wait_until(
            "the orphan is removed and the kept one stays",
            Duration::from_secs(30),
            || sandboxes_on_disk(state.path()).len() == 1,
        );
        c.cancel().await.unwrap();
    });
    // The kept one is the person's to remove.
    for id in sandboxes_on_disk(state.path()) {
        let _ = std::process::Command::new(warden_bin())
            .args(["rm", "--force", &id])
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .output();
    }
}

// --- A desktop sandbox's tools --------------------------------------------------

#[test]
fn the_desktop_tools_show_the_screen_as_an_image_and_keep_to_their_scopes() {
    if let Some(why) = common::desktop::unavailable() {
        return skip(&why);
    }
    let state = TempDir::new("mcp-desktop");
    let d = Daemon::start(state.path(), true);
    let addr = d.tcp.clone().unwrap();
    let viewer = token(
        state.path(),
        "viewer",
        &["mcp", "sandboxes:read", "sandboxes:write", "desktop:view"],
    );
    // desktop:control alone: it grants desktop:view (the screenshot).
    let driver = token(
        state.path(),
        "driver",
        &[
            "mcp",
            "sandboxes:read",
            "sandboxes:write",
            "desktop:control",
        ],
    );
    runtime().block_on(async {
        let c = http_client(&addr, Some(&driver)).await.unwrap();
        let names: Vec<String> = c
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert!(
            names.contains(&"desktop_screenshot".to_string()),
            "{names:?}"
        );
        assert!(names.contains(&"desktop_action".to_string()), "{names:?}");
        good(
            &call(
                &c,
                "create_sandbox",
                serde_json::json!({"profile": "desktop"}),
            )
            .await,
        );
        // The screen, as an image the model sees.
        let deadline = Instant::now() + Duration::from_secs(60);
        let png = loop {
            let r = call(&c, "desktop_screenshot", serde_json::json!({})).await;
            if r.is_error != Some(true) {
                let image = r.content[0].as_image().expect("an image content");
                assert_eq!(image.mime_type, "image/png");
                use base64::Engine;
                break base64::engine::general_purpose::STANDARD
                    .decode(&image.data)
                    .unwrap();
            }
            assert!(Instant::now() < deadline, "no screenshot: {}", text(&r));
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert_eq!(&png[16..24], &[0, 0, 5, 0, 0, 0, 3, 32], "1280x800");
        // Done, and bad input refused with its reason.
        good(
            &call(
                &c,
                "desktop_action",
                serde_json::json!({"action": "move_mouse", "x": 5, "y": 5}),
            )
            .await,
        );
        let e = refused(
            &call(
                &c,
                "desktop_action",
                serde_json::json!({"action": "left_click", "x": 9999, "y": 5}),
            )
            .await,
        );
        assert!(e.contains("off the screen"), "{e}");
        // A token without desktop:control is refused the action by the
        // scope table before anything looks at the sandbox; with
        // desktop:view it gets as far as the sandbox (which has no desktop).
        let c2 = http_client(&addr, Some(&viewer)).await.unwrap();
        good(&call(&c2, "create_sandbox", serde_json::json!({})).await);
        let e = refused(
            &call(
                &c2,
                "desktop_action",
                serde_json::json!({"action": "move_mouse", "x": 5, "y": 5}),
            )
            .await,
        );
        assert!(e.contains("desktop:control"), "{e}");
        let e = refused(&call(&c2, "desktop_screenshot", serde_json::json!({})).await);
        assert!(e.contains("no desktop"), "{e}");
        c2.cancel().await.unwrap();
        c.cancel().await.unwrap();
    });
}

#[test]
fn a_refused_create_is_a_tool_error_naming_its_code_and_reason() {
    let state = TempDir::new("mcp-reason");
    let ws = TempDir::new("mcp-reason-ws");
    let config = TempDir::new("mcp-reason-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("gvc.yaml"),
        "isolation: gvisor\nfilesystem:\n  caches: [pip]\n",
    )
    .unwrap();
    runtime().block_on(async {
        let c = stdio_client(
            state.path(),
            &["--profile", "gvc", "--workspace", ws.str()],
            &[("XDG_CONFIG_HOME", config.path())],
        )
        .await;
        // Before: `create_sandbox failed (refused): cannot set up the
        // sandbox: ...`, once runsc's start was refused.
        let e = refused(&call(&c, "create_sandbox", serde_json::json!({})).await);
        assert!(
            e.contains("create_sandbox failed (invalid_spec, caches_with_gvisor)"),
            "{e}"
        );
        assert!(
            sandboxes_on_disk(state.path()).is_empty(),
            "a refused create leaves nothing"
        );
        c.cancel().await.unwrap();
    });
}

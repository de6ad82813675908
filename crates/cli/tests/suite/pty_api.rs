//! Terminal sessions of `warden serve` over a real WebSocket (on the
//! owner's socket, and with tokens): a shell on a terminal inside the
//! sandbox, typed into and read back, resized, its exit status delivered
//! last; a token without `exec`, or for another sandbox, refused before
//! the upgrade; a process whose client goes away does not stay behind.

use crate::common::daemon::{self, on_socket, Daemon};
use crate::common::rfb::{connect, runtime, Ws};
use crate::common::*;
use futures_util::{SinkExt, StreamExt};
use std::process::Command;
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self, Message};

fn call(d: &Daemon, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    daemon::call(d, method, path, body, None)
}

/// What a session said, as it came.
#[derive(Default)]
struct Seen {
    output: Vec<u8>,
    messages: Vec<serde_json::Value>,
    closed: bool,
}

impl Seen {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output).into_owned()
    }
}

/// Read until `f` holds (or the session closes), for at most 20 s.
async fn read_until(ws: &mut Ws, seen: &mut Seen, f: impl Fn(&Seen) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !f(seen) && !seen.closed {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .unwrap_or_else(|_| panic!("timed out; the terminal showed {:?}", seen.text()));
        match m {
            Some(Ok(Message::Binary(b))) => seen.output.extend_from_slice(&b),
            Some(Ok(Message::Text(t))) => seen.messages.push(serde_json::from_str(&t).unwrap()),
            Some(Ok(Message::Close(_))) | None => seen.closed = true,
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("the session broke: {e}"),
        }
    }
}

async fn type_in(ws: &mut Ws, keys: &str) {
    ws.send(Message::Binary(keys.as_bytes().to_vec().into()))
        .await
        .unwrap();
}

fn setup(tag: &str) -> Option<(TempDir, Daemon)> {
    let (state, d) = on_socket(tag)?;
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"p"}"#));
    assert_eq!(s, 201, "{b}");
    Some((state, d))
}

#[test]
fn a_shell_on_the_websocket_is_a_terminal_that_resizes_and_reports_its_exit() {
    let Some((state, d)) = setup("pty-shell") else {
        return;
    };
    runtime().block_on(async {
        let mut ws = connect(&d, "/v1/sandboxes/p/pty", None).await.unwrap();
        ws.send(Message::Text(
            r#"{"type":"start","argv":["sh"],"rows":24,"cols":80,"env":{"PS1":"$ "}}"#.into(),
        ))
        .await
        .unwrap();
        let mut seen = Seen::default();
        read_until(&mut ws, &mut seen, |s| !s.messages.is_empty()).await;
        assert_eq!(seen.messages[0]["type"], "started", "{:?}", seen.messages);
        type_in(&mut ws, "echo h''i; tty\n").await;
        read_until(&mut ws, &mut seen, |s| {
            s.text().contains("hi\r\n") && s.text().contains("/dev/pts/")
        })
        .await;
        assert!(!seen.text().contains("not a tty"), "{}", seen.text());
        type_in(&mut ws, "stty size\n").await;
        read_until(&mut ws, &mut seen, |s| s.text().contains("24 80")).await;
        ws.send(Message::Text(
            r#"{"type":"resize","rows":40,"cols":132}"#.into(),
        ))
        .await
        .unwrap();
        type_in(&mut ws, "stty size\n").await;
        read_until(&mut ws, &mut seen, |s| s.text().contains("40 132")).await;
        type_in(&mut ws, "exit 3\n").await;
        read_until(&mut ws, &mut seen, |s| {
            s.messages.iter().any(|m| m["type"] == "exit")
        })
        .await;
        let exit = seen.messages.last().unwrap();
        assert_eq!(exit["type"], "exit", "the exit is the last message");
        assert_eq!(exit["exit_status"], 3, "{exit}");
        read_until(&mut ws, &mut seen, |_| false).await;
        assert!(seen.closed, "the session closes after its exit");
    });
    // In the sandbox's command records, as a terminal session with its end.
    let (s, b) = call(&d, "GET", "/v1/sandboxes/p/execs", None);
    assert_eq!(s, 200, "{b}");
    let list: serde_json::Value = serde_json::from_str(&b).unwrap();
    let session = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tty"] == true)
        .unwrap_or_else(|| panic!("no terminal session in {b}"));
    assert_eq!(session["argv"], serde_json::json!(["sh"]), "{session}");
    assert_eq!(session["exit_status"], 3, "{session}");
    assert!(session["finished_ms"].as_u64().is_some(), "{session}");
    let id = session["id"].as_str().unwrap();
    let (s, one) = call(&d, "GET", &format!("/v1/sandboxes/p/execs/{id}"), None);
    assert_eq!(s, 200, "{one}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&one).unwrap(),
        *session
    );
    // Audited like any exec: started on a terminal, and its end.
    let audit = events(&sandbox_dir(state.path(), "p").join("audit.jsonl"));
    let started = audit
        .iter()
        .find(|e| e["event"] == "exec_started" && e["tty"] == true)
        .unwrap_or_else(|| panic!("no exec_started on a terminal in {audit:?}"));
    let exec = started["exec"].clone();
    assert!(
        audit
            .iter()
            .any(|e| e["event"] == "exec_exited" && e["exec"] == exec && e["status"] == 3),
        "{audit:?}"
    );
}

#[test]
fn a_command_in_the_query_starts_at_once_and_bad_input_is_refused_in_http() {
    let Some((_state, d)) = setup("pty-query") else {
        return;
    };
    runtime().block_on(async {
        let mut ws = connect(
            &d,
            "/v1/sandboxes/p/pty?shell=stty%20size%3B%20exit%205&rows=7&cols=33",
            None,
        )
        .await
        .unwrap();
        let mut seen = Seen::default();
        read_until(&mut ws, &mut seen, |s| s.closed).await;
        assert!(seen.text().contains("7 33"), "{}", seen.text());
        let last = seen.messages.last().unwrap();
        assert_eq!(
            (last["type"].as_str(), last["exit_status"].as_i64()),
            (Some("exit"), Some(5))
        );
        // Before any upgrade: a size out of range, a sandbox that is not
        // there, one that is not running.
        assert_eq!(
            connect(&d, "/v1/sandboxes/p/pty?rows=0", None).await.err(),
            Some(400)
        );
        assert_eq!(
            connect(&d, "/v1/sandboxes/nope/pty", None).await.err(),
            Some(404)
        );
    });
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"idle","start":false}"#),
    );
    assert_eq!(s, 201, "{b}");
    runtime().block_on(async {
        assert_eq!(
            connect(&d, "/v1/sandboxes/idle/pty", None).await.err(),
            Some(409)
        );
        // A program that is not there: said in the session, then closed.
        let mut ws = connect(&d, "/v1/sandboxes/p/pty", None).await.unwrap();
        ws.send(Message::Text(
            r#"{"type":"start","argv":["/no/such/program"]}"#.into(),
        ))
        .await
        .unwrap();
        let mut seen = Seen::default();
        read_until(&mut ws, &mut seen, |s| s.closed).await;
        assert!(
            seen.messages
                .iter()
                .any(|m| m["type"] == "error" && m["code"] == "not_found")
                || seen
                    .messages
                    .iter()
                    .any(|m| m["type"] == "exit" && m["exit_status"] == 127),
            "{:?}",
            seen.messages
        );
    });
}

#[test]
fn a_token_without_exec_or_for_another_sandbox_is_refused_before_the_upgrade() {
    let Some((state, d)) = setup("pty-auth") else {
        return;
    };
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"other"}"#));
    assert_eq!(s, 201, "{b}");
    let token = |name: &str, scopes: &[&str], sandbox: Option<&str>| -> String {
        let mut args = vec!["token", "create", name];
        for s in scopes {
            args.extend(["--scope", s]);
        }
        if let Some(sb) = sandbox {
            args.extend(["--sandbox", sb]);
        }
        ok(&warden(state.path(), &args)).trim().to_string()
    };
    let no_exec = token(
        "no-exec",
        &["sandboxes:read", "sandboxes:write", "files", "approvals"],
        None,
    );
    let others = token("others", &["exec"], Some("other"));
    let mine = token("mine", &["exec"], Some("p"));
    let before = events(&sandbox_dir(state.path(), "p").join("audit.jsonl"))
        .iter()
        .filter(|e| e["event"] == "exec_started")
        .count();
    runtime().block_on(async {
        let path = "/v1/sandboxes/p/pty?shell=touch%20/workspace/ran";
        assert_eq!(connect(&d, path, Some(&no_exec)).await.err(), Some(403));
        assert_eq!(connect(&d, path, Some(&others)).await.err(), Some(403));
        assert_eq!(
            connect(&d, path, Some("wdn_000000000000_nope")).await.err(),
            Some(401)
        );
        // The right token works.
        let mut ws = connect(&d, "/v1/sandboxes/p/pty?shell=exit%200", Some(&mine))
            .await
            .unwrap();
        let mut seen = Seen::default();
        read_until(&mut ws, &mut seen, |s| s.closed).await;
        assert_eq!(seen.messages.last().unwrap()["exit_status"], 0);
    });
    let after = events(&sandbox_dir(state.path(), "p").join("audit.jsonl"))
        .iter()
        .filter(|e| e["event"] == "exec_started")
        .count();
    assert_eq!(
        after,
        before + 1,
        "only the allowed session started a process"
    );
    let denials = events(&state.path().join("warden/daemon-audit.jsonl"))
        .iter()
        .filter(|e| e["event"] == "api_denied" && e["route"] == "/v1/sandboxes/{id}/pty")
        .count();
    assert_eq!(
        denials, 3,
        "each refusal is recorded, the unknown token's too"
    );
}

#[test]
fn a_process_whose_websocket_goes_away_does_not_stay_behind() {
    let Some((_state, d)) = setup("pty-gone") else {
        return;
    };
    // A sleep no other test starts: its length is this test's own.
    let secs = format!("{}", 900_000 + std::process::id() % 99_999);
    runtime().block_on(async {
        let mut ws = connect(&d, "/v1/sandboxes/p/pty", None).await.unwrap();
        let start = serde_json::json!({
            "type": "start",
            "argv": ["sh", "-c", format!("trap '' HUP; echo ready; exec sleep {secs}")],
        });
        ws.send(Message::Text(start.to_string().into()))
            .await
            .unwrap();
        let mut seen = Seen::default();
        read_until(&mut ws, &mut seen, |s| s.text().contains("ready")).await;
        wait_until("the process to run", Duration::from_secs(10), || {
            !pids_running(&["sleep", &secs]).is_empty()
        });
        drop(ws);
    });
    wait_until("the process to be gone", Duration::from_secs(10), || {
        pids_running(&["sleep", &secs]).is_empty()
    });
    // Its record says it was killed when its client went.
    wait_until(
        "the session's end to be recorded",
        Duration::from_secs(10),
        || {
            let (_, b) = call(&d, "GET", "/v1/sandboxes/p/execs", None);
            let list: serde_json::Value = serde_json::from_str(&b).unwrap();
            list.as_array()
                .unwrap()
                .iter()
                .any(|e| e["tty"] == true && e["exit_status"] == 137 && e["signal"] == 9)
        },
    );
}

/// A terminal lives longer than the request that opened it. Revoking the
/// token it was opened with (a leaked token, say) must end it, and its
/// process, not leave a shell to whoever holds the socket.
#[test]
fn revoking_the_token_ends_its_open_terminal() {
    let Some((_state, d)) = setup("pty-revoke") else {
        return;
    };
    let token = ok(&warden(
        &d.state,
        &["token", "create", "t", "--scope", "exec", "--sandbox", "p"],
    ))
    .trim()
    .lines()
    .last()
    .unwrap()
    .to_string();
    runtime().block_on(async {
        let mut ws = connect(&d, "/v1/sandboxes/p/pty", Some(&token))
            .await
            .unwrap();
        ws.send(Message::Text(
            r#"{"type":"start","argv":["sh"],"rows":24,"cols":80,"env":{"PS1":"$ "}}"#.into(),
        ))
        .await
        .unwrap();
        let mut seen = Seen::default();
        type_in(&mut ws, "echo before-$((6*7))\n").await;
        read_until(&mut ws, &mut seen, |s| s.text().contains("before-42")).await;
        let id = token.split('_').nth(1).unwrap();
        ok(&warden(&d.state, &["token", "revoke", id]));
        // Within a few seconds the terminal says why and closes.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
        while !seen.closed && tokio::time::Instant::now() < deadline {
            // A write the daemon no longer takes is no answer either: the
            // loop goes on to its deadline, never waits on it for good.
            let _ = tokio::time::timeout(
                Duration::from_millis(500),
                type_in_quietly(&mut ws, "echo after-$((6*7))\n"),
            )
            .await;
            let m = tokio::time::timeout(Duration::from_millis(500), ws.next()).await;
            match m {
                Ok(Some(Ok(Message::Binary(b)))) => seen.output.extend_from_slice(&b),
                Ok(Some(Ok(Message::Text(t)))) => {
                    seen.messages.push(serde_json::from_str(&t).unwrap())
                }
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => seen.closed = true,
                _ => {}
            }
        }
        assert!(
            seen.closed,
            "the terminal outlived its token's revocation: {}",
            seen.text()
        );
        assert!(
            seen.messages.iter().any(|m| m["code"] == "unauthorized"),
            "{:?}",
            seen.messages
        );
    });
}

async fn type_in_quietly(ws: &mut Ws, keys: &str) -> Result<(), tungstenite::Error> {
    ws.send(Message::Binary(keys.as_bytes().to_vec().into()))
        .await
}

/// The other long-lived answers, the event stream and the file watch,
/// end too when the token they were opened with is revoked.
#[test]
fn revoking_the_token_ends_its_open_event_stream_and_file_watch() {
    let Some((_state, d)) = setup("stream-revoke") else {
        return;
    };
    let token = ok(&warden(
        &d.state,
        &["token", "create", "t", "--scope", "admin"],
    ))
    .trim()
    .lines()
    .last()
    .unwrap()
    .to_string();
    let open = |path: &str| {
        Command::new("curl")
            .args(["-sS", "-N", "--max-time", "30", "--unix-socket"])
            .arg(&d.socket)
            .args(["-H", &format!("authorization: Bearer {token}")])
            .arg(format!("http://warden{path}"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("curl is installed")
    };
    let mut streams = [
        ("events", open("/v1/sandboxes/p/events")),
        ("watch", open("/v1/sandboxes/p/files/watch")),
    ];
    std::thread::sleep(Duration::from_millis(1500));
    for (what, s) in streams.iter_mut() {
        assert!(s.try_wait().unwrap().is_none(), "{what} did not stay open");
    }
    let id = token.split('_').nth(1).unwrap();
    ok(&warden(&d.state, &["token", "revoke", id]));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut open_after = Vec::new();
    for (what, s) in streams.iter_mut() {
        while s.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if s.try_wait().unwrap().is_none() {
            open_after.push(*what);
            let _ = s.kill();
        }
        let _ = s.wait();
    }
    assert!(
        open_after.is_empty(),
        "{open_after:?} outlived the token's revocation"
    );
}

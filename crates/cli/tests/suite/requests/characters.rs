//! What a request path may hold, through the real binary: a path with a
//! character no rule can name (a C1 control, raw or escaped) is refused
//! before anything goes upstream and is never put to the owner, so an
//! "always" can never write a grants file warden cannot read back; and
//! whatever a sandbox puts in a request line, `--json-events` and `warden
//! logs --json` hold no raw C1 control or direction override.

use crate::common::forge::{reach, Forge};
use crate::common::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `raw.py PORT PATH...`: a GET for each path, written raw (UTF-8) in the
/// request line, each on its own TLS connection; prints each status.
const RAW: &str = r#"
import os, re, socket, ssl, sys
port = int(sys.argv[1])
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
for path in sys.argv[2:]:
    s = ctx.wrap_socket(socket.create_connection(("forge.test", port), timeout=10), server_hostname="forge.test")
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: forge.test:{port}\r\nConnection: close\r\n\r\n".encode())
    s.settimeout(30)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except (socket.timeout, ConnectionError, ssl.SSLError):
        pass
    s.close()
    print(" ".join(c.decode() for c in re.findall(rb"HTTP/1\.1 (\d{3}) ", got)) or "none", flush=True)
"#;

/// A path with a CSI (U+009B) and a right-to-left override (U+202E).
const HOSTILE: &str = "/x\u{9b}31m\u{202e}evil";

fn python_ssl() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import ssl"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip("python3 with ssl is needed for the raw client inside the sandbox");
    }
    ok
}

/// The script that writes `raw.py` and runs it on `paths`.
fn raw_script(paths: &[&str]) -> String {
    let quoted: Vec<String> = paths.iter().map(|p| format!("'{p}'")).collect();
    format!(
        "cat > /tmp/raw.py <<'EOF'\n{RAW}\nEOF\npython3 /tmp/raw.py PORT {}\n",
        quoted.join(" ")
    )
}

/// Characters that must never reach a terminal raw.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| {
            let n = u32::from(*c);
            (0x7f..=0x9f).contains(&n) || matches!(n, 0x2028..=0x202e | 0x2066..=0x2069)
        })
        .collect()
}

#[test]
fn a_path_with_a_c1_control_is_refused_before_the_owner_is_asked_and_the_grants_file_stays_readable(
) {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    if !python_ssl() {
        return;
    }
    let port = up.port.to_string();
    let state = TempDir::new("requests-c1-state");
    let ws = TempDir::new("requests-c1-ws");
    // The CSI raw, then escaped, then an ordinary path the owner is asked
    // about and answers "always".
    let script = raw_script(&["/x\u{9b}31m", "/x%C2%9B31m", "/fine"]).replace("PORT", &port);
    let args = |tty: bool, script: &str| -> Vec<String> {
        let mut args: Vec<String> =
            vec!["run".into(), "--ask".into(), "-w".into(), ws.str().into()];
        if !tty {
            args.push("--no-tty".into());
        }
        args.extend(reach(&ca, &port));
        args.extend(
            [
                "--ask-request",
                &format!("GET forge.test:{port}/**"),
                "--",
                "sh",
                "-c",
                script,
            ]
            .map(String::from),
        );
        args
    };
    let mut term = TestTerminal::open(24, 200);
    let mut cmd = Command::new(warden_bin());
    cmd.env("WARDEN_STATE_DIR", state.path())
        .args(args(true, &script));
    let mut child = term.spawn(&mut cmd);
    let asked = term.expect("then Enter", Duration::from_secs(60));
    // Past the moment when input is taken for typed-ahead keys.
    std::thread::sleep(Duration::from_millis(700));
    term.master.write_all(b"always\r").unwrap();
    let rest = term.expect("200", Duration::from_secs(60));
    let status = child.wait().unwrap();
    let all = format!("{asked}{rest}");
    assert!(
        asked.contains("/fine") && !asked.contains("/x"),
        "the first question is the ordinary path's: {all}"
    );
    assert!(status.success(), "{all}");
    let seen = up.requests();
    assert!(!seen.iter().any(|r| r.contains("/x")), "{seen:?}");
    assert!(seen.iter().any(|r| r.contains("GET /fine")), "{seen:?}");
    let grants: Vec<_> = std::fs::read_dir(state.path().join("grants"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert!(grants[0].contains("/fine"), "{grants:?}");
    assert!(raw_controls(&grants[0]).is_empty(), "{grants:?}");
    // The next run of the project reads its grants and runs: the granted
    // request goes unasked, and both spellings of the CSI are refused
    // (400) with nothing sent.
    let next = raw_script(&["/fine", "/x\u{9b}31m", "/x%c2%9b31m"]).replace("PORT", &port);
    let out = Command::new(warden_bin())
        .env("WARDEN_STATE_DIR", state.path())
        .args(args(false, &next))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (s, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{s}\n{err}");
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["200", "400", "400"],
        "{s}\n{err}"
    );
    let seen = up.requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(!seen.iter().any(|r| r.contains("/x")), "{seen:?}");
}

#[test]
fn json_events_and_logs_json_hold_no_raw_c1_control_or_direction_override() {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    if !python_ssl() {
        return;
    }
    let dir = TempDir::new("requests-c1-json");
    let events = dir.path().join("ev.jsonl");
    let out = super::run(
        &ca,
        &up,
        &[
            "--allow-request",
            "GET forge.test:PORT/ok/**",
            "--json-events",
            &events.display().to_string(),
        ],
        &raw_script(&[
            HOSTILE,
            "/ok/q?a=\u{9b}x",
            "/ok/q?a=%C2%9Bx",
            "/ok/a\u{202e}b",
        ]),
    );
    let (s, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{s}\n{err}");
    // The CSI in the path or the query (raw or escaped) is refused before
    // anything goes upstream.
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["400", "400", "400", "200"],
        "{s}\n{err}"
    );
    // The override of the allowed path went upstream escaped.
    let seen = up.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains("/ok/a%E2%80%AEb"), "{seen:?}");
    let text = std::fs::read_to_string(&events).unwrap();
    assert!(text.contains("/ok/a%E2%80%AEb"), "{text}");
    assert!(raw_controls(&text).is_empty(), "{text:?}");
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }

    // A named sandbox's events, read back with `warden logs --json`.
    let state = TempDir::new("requests-c1-logs-state");
    let w = |args: &[&str]| {
        Command::new(warden_bin())
            .env("WARDEN_STATE_DIR", state.path())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let port = up.port.to_string();
    let mut create: Vec<String> = vec!["create".into(), "c1logs".into()];
    create.extend(reach(&ca, &port));
    create.extend([
        "--allow-request".into(),
        format!("GET forge.test:{port}/ok/**"),
    ]);
    let c = w(&create.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(c.status.success(), "{}", stderr(&c));
    let e = w(&[
        "exec",
        "c1logs",
        "--",
        "sh",
        "-c",
        &raw_script(&[HOSTILE]).replace("PORT", &port),
    ]);
    assert_eq!(stdout(&e).trim(), "400", "{}", stderr(&e));
    let logs = w(&["logs", "c1logs", "--json"]);
    let text = stdout(&logs);
    assert!(logs.status.success(), "{}", stderr(&logs));
    assert!(text.contains("/x"), "{text}");
    assert!(raw_controls(&text).is_empty(), "{text:?}");
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
    let _ = w(&["rm", "-f", "c1logs"]);
}

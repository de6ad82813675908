//! Attacks on the daemon's own standing, through a real `warden serve`:
//! an answer that outlives the credential that opened it, a crowd of idle
//! connections from a process with no token, and a process in another
//! user namespace (a sandbox's) using the owner's socket. Each test drives
//! the real binaries over loopback and judges from what arrives.

use crate::common::daemon::*;
use crate::common::tcp::open_for;
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long after a revocation an open answer may still deliver: the
/// daemon asks every second, and the last bytes take a moment.
const GRACE: Duration = Duration::from_millis(2500);

/// Pieces of an answer, each with when it came.
type Pieces = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

/// An answer read on a thread: each piece with when it came, and when
/// the connection ended.
#[derive(Clone, Default)]
struct Streamed {
    chunks: Pieces,
    ended: Arc<Mutex<Option<Instant>>>,
}

impl Streamed {
    fn open(addr: &str, request: Vec<u8>) -> Streamed {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.write_all(&request).unwrap();
        let s = Streamed::default();
        let t = s.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => t
                        .chunks
                        .lock()
                        .unwrap()
                        .push((Instant::now(), buf[..n].to_vec())),
                }
            }
            *t.ended.lock().unwrap() = Some(Instant::now());
        });
        s
    }

    fn text(&self) -> String {
        let c = self.chunks.lock().unwrap();
        String::from_utf8_lossy(&c.iter().flat_map(|(_, b)| b.clone()).collect::<Vec<u8>>())
            .into_owned()
    }

    fn bytes_after(&self, t: Instant) -> usize {
        let c = self.chunks.lock().unwrap();
        c.iter()
            .filter(|(at, _)| *at > t)
            .map(|(_, b)| b.len())
            .sum()
    }

    fn ended(&self) -> Option<Instant> {
        *self.ended.lock().unwrap()
    }

    /// Wait until the answer holds `needle`.
    fn wait_for(&self, needle: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.text().contains(needle) {
            assert!(
                self.ended().is_none() && Instant::now() < deadline,
                "{what}: no {needle:?} in the answer: {}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// An HTTP/1.1 request, whole.
fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

/// Open answer `s` keeps delivering; once `revoke` runs, it ends within
/// [`GRACE`], and nothing arrives after. With `flowing`, bytes must be
/// arriving right up to the revocation (a command printing all along).
fn ends_with_its_credential(s: &Streamed, flowing: bool, revoke: impl FnOnce(), what: &str) {
    if flowing {
        let before = Instant::now();
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            s.bytes_after(before) > 0 && s.ended().is_none(),
            "{what}: not delivering before the revocation: {}",
            s.text()
        );
    }
    revoke();
    let revoked = Instant::now();
    let deadline = revoked + GRACE + Duration::from_secs(3);
    while s.ended().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let late = s.bytes_after(revoked + GRACE);
    match s.ended() {
        Some(at) => assert!(
            at <= revoked + GRACE && late == 0,
            "{what}: ended {:?} after the revocation, {late} bytes after {GRACE:?}",
            at - revoked
        ),
        None => panic!(
            "{what}: still open {:?} after its token was revoked ({} bytes delivered after the revocation, {late} after {GRACE:?})",
            revoked.elapsed(),
            s.bytes_after(revoked)
        ),
    }
}

/// A token with the data scopes, made by the owner through the socket.
fn token(d: &Daemon, name: &str) -> String {
    api_token(
        d,
        name,
        &["exec", "files", "sandboxes:read", "sandboxes:write"],
        None,
    )
}

/// A token the owner made for the owner's sandbox `sandbox` (no other
/// token but an admin one reaches the owner's sandboxes).
fn token_of(d: &Daemon, name: &str, sandbox: &str) -> String {
    api_token(d, name, &["exec", "files", "sandboxes:read"], Some(sandbox))
}

fn revoke(d: &Daemon, name: &str) {
    let (s, b) = call(d, "DELETE", &format!("/v1/tokens/{name}"), None, None);
    assert!(s == 200 || s == 204, "revoking {name}: {s} {b}");
}

/// A command that prints for as long as it runs.
const TICKER: &str = "while :; do echo tick; sleep 0.1; done";

/// A native-API daemon (socket and TCP) with a running sandbox `sb`.
fn native(tag: &str) -> Option<(TempDir, Daemon)> {
    let (state, d) = over_tcp(tag)?;
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"sb"}"#), None);
    assert_eq!(s, 201, "{b}");
    Some((state, d))
}

#[test]
fn a_streamed_exec_ends_within_a_second_of_its_tokens_revocation() {
    let Some((_state, d)) = native("rv-exec") else {
        return;
    };
    let t = token_of(&d, "streamer", "sb");
    let body = format!(r#"{{"shell":"{TICKER}","stream":true}}"#);
    let s = Streamed::open(
        d.tcp.as_ref().unwrap(),
        request(
            "POST",
            "/v1/sandboxes/sb/exec",
            &[
                ("authorization", &format!("Bearer {t}")),
                ("content-type", "application/json"),
            ],
            body.as_bytes(),
        ),
    );
    s.wait_for("tick", "the exec stream");
    ends_with_its_credential(
        &s,
        true,
        || revoke(&d, "streamer"),
        "POST .../exec streaming",
    );
}

#[test]
fn a_followed_exec_output_ends_within_a_second_of_its_tokens_revocation() {
    let Some((_state, d)) = native("rv-output") else {
        return;
    };
    let t = token_of(&d, "follower", "sb");
    // Started by the owner; followed with the token.
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/sb/exec",
        Some(&format!(r#"{{"shell":"{TICKER}","background":true}}"#)),
        None,
    );
    assert_eq!(st, 202, "{b}");
    let id = json(&b)["id"].as_str().unwrap().to_string();
    let s = Streamed::open(
        d.tcp.as_ref().unwrap(),
        request(
            "GET",
            &format!("/v1/sandboxes/sb/execs/{id}/output"),
            &[("authorization", &format!("Bearer {t}"))],
            b"",
        ),
    );
    s.wait_for("tick", "the output stream");
    ends_with_its_credential(
        &s,
        true,
        || revoke(&d, "follower"),
        "GET .../execs/{exec}/output",
    );
}

#[test]
fn an_event_stream_and_a_file_watch_end_within_a_second_of_their_tokens_revocation() {
    let Some((_state, d)) = native("rv-events") else {
        return;
    };
    let t = token_of(&d, "watcher", "sb");
    let bearer = format!("Bearer {t}");
    let addr = d.tcp.clone().unwrap();
    let events = Streamed::open(
        &addr,
        request(
            "GET",
            "/v1/sandboxes/sb/events",
            &[("authorization", &bearer)],
            b"",
        ),
    );
    let watch = Streamed::open(
        &addr,
        request(
            "GET",
            "/v1/sandboxes/sb/files/watch?path=.",
            &[("authorization", &bearer)],
            b"",
        ),
    );
    events.wait_for("data:", "the event stream");
    watch.wait_for("ready", "the file watch");
    let (a, b) = (events.clone(), watch.clone());
    ends_with_its_credential(&a, false, || revoke(&d, "watcher"), "GET .../events");
    ends_with_its_credential(&b, false, || {}, "GET .../files/watch");
}

/// The value of header `name` in an answer's head.
fn header_of(text: &str, name: &str) -> Option<String> {
    text.split("\r\n\r\n").next()?.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

#[test]
fn an_mcp_stream_ends_within_a_second_of_its_tokens_revocation() {
    let Some((_state, d)) = native("rv-mcp") else {
        return;
    };
    let body = r#"{"name":"mcp-client","scopes":["mcp","exec","files","sandboxes:read"]}"#;
    let (st, b) = call(&d, "POST", "/v1/tokens", Some(body), None);
    assert_eq!(st, 201, "{b}");
    let t = json(&b)["token"].as_str().unwrap().to_string();
    let bearer = format!("Bearer {t}");
    let addr = d.tcp.clone().unwrap();
    let post = |body: &str, session: Option<&str>| -> Streamed {
        let mut h = vec![
            ("authorization", bearer.as_str()),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        if let Some(s) = session {
            h.push(("mcp-session-id", s));
        }
        Streamed::open(&addr, request("POST", "/mcp", &h, body.as_bytes()))
    };
    let init = post(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        None,
    );
    init.wait_for("serverInfo", "initialize");
    let session = header_of(&init.text(), "mcp-session-id").expect("a session id");
    let note = post(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        Some(&session),
    );
    note.wait_for("HTTP/1.1 2", "notifications/initialized");
    // The session's standing stream of the server's own messages.
    let s = Streamed::open(
        &addr,
        request(
            "GET",
            "/mcp",
            &[
                ("authorization", &bearer),
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
            ],
            b"",
        ),
    );
    s.wait_for("HTTP/1.1 200", "GET /mcp");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        s.ended().is_none(),
        "GET /mcp ended by itself: {}",
        s.text()
    );
    ends_with_its_credential(&s, false, || revoke(&d, "mcp-client"), "GET /mcp");
}

// --- The E2B door -------------------------------------------------------

/// One Connect envelope (flags 0) around `json`.
fn envelope(json: &str) -> Vec<u8> {
    let mut v = vec![0u8];
    v.extend_from_slice(&(json.len() as u32).to_be_bytes());
    v.extend_from_slice(json.as_bytes());
    v
}

/// A streaming Connect call to the E2B door's sandbox API.
fn connect_call(addr: &str, method: &str, sandbox: &str, key: &str, json: &str) -> Streamed {
    Streamed::open(
        addr,
        request(
            "POST",
            method,
            &[
                ("content-type", "application/connect+json"),
                ("x-access-token", key),
                ("e2b-sandbox-id", sandbox),
                ("authorization", "Basic dXNlcjo="),
            ],
            &envelope(json),
        ),
    )
}

#[test]
fn the_e2b_doors_process_streams_and_directory_watch_end_with_the_api_key() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("rv-e2b");
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &addr], &[]);
    let key = token(&d, "e2b");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "60", "-X", "POST"])
        .args(["-H", &format!("x-api-key: {key}")])
        .args(["-H", "content-type: application/json"])
        .args(["--data-binary", r#"{"templateID":"base","timeout":300}"#])
        .arg(format!("http://{addr}/sandboxes"))
        .output()
        .unwrap();
    let made = json(&String::from_utf8_lossy(&out.stdout));
    let id = made["sandboxID"].as_str().unwrap().to_string();
    let access = made["envdAccessToken"].as_str().unwrap().to_string();
    // Files made all along in the watched directory, by the owner.
    let (st, b) = call(
        &d,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(
            r#"{"shell":"i=0; while :; do i=$((i+1)); echo x > w$i; sleep 0.1; done","background":true}"#,
        ),
        None,
    );
    assert_eq!(st, 202, "{b}");
    let start = connect_call(
        &addr,
        "/process.Process/Start",
        &id,
        &access,
        &format!(r#"{{"process":{{"cmd":"/bin/sh","args":["-c","{TICKER}"]}}}}"#),
    );
    start.wait_for("\"pid\"", "process.Process/Start");
    let text = start.text();
    let pid: String = text
        .split("\"pid\":")
        .nth(1)
        .unwrap()
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let attached = connect_call(
        &addr,
        "/process.Process/Connect",
        &id,
        &access,
        &format!(r#"{{"process":{{"pid":{pid}}}}}"#),
    );
    let watch = connect_call(
        &addr,
        "/filesystem.Filesystem/WatchDir",
        &id,
        &access,
        r#"{"path":"/home/user","recursive":false}"#,
    );
    start.wait_for("data", "process.Process/Start");
    attached.wait_for("data", "process.Process/Connect");
    watch.wait_for("EVENT_TYPE", "filesystem.Filesystem/WatchDir");
    let (w, c) = (watch.clone(), attached.clone());
    ends_with_its_credential(&start, true, || revoke(&d, "e2b"), "process.Process/Start");
    ends_with_its_credential(&c, false, || {}, "process.Process/Connect");
    ends_with_its_credential(&w, false, || {}, "filesystem.Filesystem/WatchDir");
    let _ = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "-X", "DELETE"])
        .arg(format!("--unix-socket={}", d.socket.display()))
        .arg(format!("http://warden/v1/sandboxes/{id}?force=true"))
        .output();
}

// --- A crowd of idle connections ------------------------------------------

/// Set this process's soft limit of open files (children inherit it); the
/// limit it had.
fn set_open_files(soft: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a
    // live rlimit.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        let old = r.rlim_cur;
        r.rlim_cur = soft.min(r.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        old
    }
}

/// GET /v1/health on the owner's socket, and how long it took (`None`: no
/// answer within `within`).
fn health_on_socket(d: &Daemon, within: Duration) -> Option<Duration> {
    let began = Instant::now();
    let mut s = UnixStream::connect(&d.socket).ok()?;
    s.set_read_timeout(Some(within)).ok()?;
    s.write_all(b"GET /v1/health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    (head.starts_with(b"HTTP/1.1 200") && began.elapsed() <= within).then(|| began.elapsed())
}

#[test]
fn the_owners_socket_answers_while_two_thousand_idle_connections_are_held() {
    if !std::path::Path::new("/usr/bin/prlimit").exists() {
        return skip("prlimit is not installed");
    }
    let state = TempDir::new("crowd");
    let e2b = format!("127.0.0.1:{}", free_port());
    // The daemon starts under the common soft limit of 1024 descriptors
    // (it is its own to raise), the test then holds its crowd under the
    // host's. The daemon's limit is set for it alone: lowering the test
    // process's own would hold every other test running in it to 1024.
    let d = Daemon::start_under(
        &["/usr/bin/prlimit", "--nofile=1024:", "--"],
        state.path(),
        true,
        &["--e2b", &e2b],
    );
    set_open_files(u64::MAX);
    if set_open_files(u64::MAX) < 5000 {
        return skip("the host's limit of open files is below 5000");
    }
    // Connections the daemon no longer accepts wait in the kernel's
    // backlog, then time out: those are counted, not held.
    let mut crowd = Vec::new();
    let mut failed = 0;
    for addr in [d.tcp.clone().unwrap(), e2b.clone()] {
        let addr: std::net::SocketAddr = addr.parse().unwrap();
        for _ in 0..2000 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(c) => crowd.push(c),
                Err(_) => failed += 1,
            }
            if failed > 20 {
                break;
            }
        }
    }
    // Let the daemon accept what it will.
    std::thread::sleep(Duration::from_millis(1500));
    for attempt in 0..3 {
        let took = health_on_socket(&d, Duration::from_secs(1));
        assert!(
            took.is_some(),
            "attempt {attempt}: the owner's socket did not answer GET /v1/health within a second while {} idle connections were held ({failed} not made)",
            crowd.len()
        );
    }
    drop(crowd);
}

#[test]
fn a_connection_that_sends_no_request_head_is_closed() {
    let state = TempDir::new("slow-head");
    let e2b = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &e2b], &[]);
    let waits = |addr: &str, send: &[u8], what: &str| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(send).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let began = Instant::now();
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf);
        let took = began.elapsed();
        assert!(
            took < Duration::from_secs(25),
            "{what}: still open after {took:?} ({n:?})"
        );
    };
    let tcp = d.tcp.clone().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| waits(&tcp, b"", "a silent connection to the API"));
        s.spawn(|| {
            waits(
                &tcp,
                b"GET /v1/health HTTP/1.1\r\nho",
                "half a head to the API",
            )
        });
        s.spawn(|| waits(&e2b, b"", "a silent connection to the E2B door"));
    });
}

// --- The owner's socket and its peers ---------------------------------------

#[test]
fn a_process_in_another_user_namespace_is_refused_by_the_owners_socket() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let Some(user) = Unprivileged::get() else {
        return skip("no unprivileged user to run the daemon as");
    };
    // `warden serve` runs the daemon binary installed beside warden.
    let beside = user.bin.with_file_name("warden-daemon");
    copy_program(&warden_bin().with_file_name("warden-daemon"), &beside);
    let state = TempDir::new("peer-ns");
    user.own(state.path());
    let wstate = state.path().join("warden");
    std::fs::create_dir_all(&wstate).unwrap();
    user.own(&wstate);
    let mut daemon = user.command(user.bin.to_str().unwrap());
    daemon
        .args(["serve"])
        .env("WARDEN_STATE_DIR", &wstate)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = daemon.spawn().unwrap();
    let socket = wstate.join("daemon.sock");
    let up = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        socket.exists()
    });
    let health = |unshare: bool| -> String {
        let mut cmd = if unshare {
            let mut c = user.command("unshare");
            c.args(["-U", "--", "curl"]);
            c
        } else {
            user.command("curl")
        };
        let out = cmd
            .args([
                "-sS",
                "--max-time",
                "10",
                "-w",
                "\n%{http_code}",
                "--unix-socket",
            ])
            .arg(&socket)
            .arg("http://warden/v1/sandboxes")
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let result = std::panic::catch_unwind(|| {
        assert!(up, "the daemon did not start");
        let same = health(false);
        assert!(same.ends_with("200"), "the owner on the host: {same}");
        let probe = user.command("unshare").args(["-U", "true"]).status();
        if !matches!(probe, Ok(s) if s.success()) {
            skip("this host gives the unprivileged user no user namespace");
            return;
        }
        let other = health(true);
        assert!(
            other.ends_with("403") && other.contains("user namespace"),
            "the owner's UID in another user namespace: {other}"
        );
        // The refusal is recorded in the daemon's audit log.
        let log = std::fs::read_to_string(wstate.join("daemon-audit.jsonl")).unwrap_or_default();
        assert!(
            log.lines()
                .any(|l| l.contains("api_denied") && l.contains("(the owner's socket)")),
            "no record of the refused peer: {log}"
        );
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn a_bind_that_would_show_the_daemons_socket_is_refused() {
    let state = TempDir::new("sock-bind");
    let outside = TempDir::new("sock-dir");
    let socket = outside.path().join("d.sock");
    let d = Daemon::start_with(
        state.path(),
        false,
        &["--socket", socket.to_str().unwrap()],
        &[],
    );
    assert!(socket.exists());
    for (flag, path) in [
        ("--ro", outside.path().to_path_buf()),
        ("--rw", outside.path().to_path_buf()),
        ("--ro", socket.clone()),
    ] {
        let o = warden(
            state.path(),
            &["run", flag, path.to_str().unwrap(), "--", "true"],
        );
        assert_ne!(code(&o), 0, "{flag} {}: ran", path.display());
        assert!(
            stderr(&o).contains("daemon's socket"),
            "{flag} {}: {}",
            path.display(),
            stderr(&o)
        );
    }
    drop(d);
}

// --- What follows a request head ------------------------------------------

/// The deadlines the daemon is started with below (`--request-timeout`,
/// `--write-timeout`): small, so that the tests are quick.
const DEADLINE: Duration = Duration::from_secs(2);
/// What the daemon may take beyond a deadline to close the connection.
const MARGIN: Duration = Duration::from_secs(3);

/// A daemon (socket, TCP and the E2B door) with small deadlines.
fn with_deadlines(tag: &str) -> (TempDir, Daemon, String) {
    let state = TempDir::new(tag);
    let e2b = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(
        state.path(),
        true,
        &[
            "--e2b",
            &e2b,
            "--request-timeout",
            "2s",
            "--write-timeout",
            "2s",
        ],
        &[],
    );
    (state, d, e2b)
}

#[test]
fn a_request_with_no_token_whose_body_trickles_is_cut_at_its_deadline() {
    let (_state, d, _e2b) = with_deadlines("slow-body");
    let tcp = d.tcp.clone().unwrap();
    let limit = DEADLINE + MARGIN;
    std::thread::scope(|s| {
        // A whole head announcing 100 bytes, and one of them.
        s.spawn(|| {
            let mut c = TcpStream::connect(&tcp).unwrap();
            c.write_all(
                b"POST /login HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
            )
            .unwrap();
            let took = open_for(&mut c, limit + Duration::from_secs(5));
            assert!(
                took <= limit,
                "POST /login with 1 of 100 bytes: still open after {took:?}"
            );
        });
        // A chunked body, one byte every 300 ms.
        s.spawn(|| {
            let mut c = TcpStream::connect(&tcp).unwrap();
            c.write_all(
                b"POST /login HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
            )
            .unwrap();
            let mut w = c.try_clone().unwrap();
            let trickle = std::thread::spawn(move || {
                for _ in 0..50 {
                    if w.write_all(b"1\r\n \r\n").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            });
            let took = open_for(&mut c, limit + Duration::from_secs(5));
            assert!(
                took <= limit,
                "POST /login with a trickling chunked body: still open after {took:?}"
            );
            let _ = c.shutdown(std::net::Shutdown::Both);
            trickle.join().unwrap();
        });
    });
}

/// Whether the daemon closed `c` within `limit`, asked without reading
/// (reading would take the answers the daemon waits to write).
#[test]
fn a_request_head_larger_than_any_callers_is_refused_at_once_not_buffered() {
    // 200 KB of header lines that never end: hyper's default buffer (about
    // 400 KiB) would hold them all for the head's whole timeout, for every
    // such connection.
    let (_state, d, _e2b) = with_deadlines("big-head");
    let tcp = d.tcp.clone().unwrap();
    let mut c = TcpStream::connect(&tcp).unwrap();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(b"GET /v1/health HTTP/1.1\r\nhost: localhost\r\n");
        let line = format!("x-pad: {}\r\n", "a".repeat(8000));
        for _ in 0..25 {
            if w.write_all(line.as_bytes()).is_err() {
                break;
            }
        }
    });
    let took = open_for(&mut c, Duration::from_secs(30));
    assert!(
        took < DEADLINE,
        "a 200 KB head was held for {took:?}, not refused as it passed the buffer's size"
    );
    let _ = c.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
}

fn closed_within(c: &TcpStream, limit: Duration) -> Option<Duration> {
    use std::os::fd::AsRawFd;
    let began = Instant::now();
    while began.elapsed() < limit {
        let mut fds = [libc::pollfd {
            fd: c.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        }];
        // SAFETY: poll(2) on one descriptor this function borrows, with a
        // one-element array that outlives the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 100) };
        if n > 0 && fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
            return Some(began.elapsed());
        }
    }
    None
}

#[test]
fn a_client_that_pipelines_requests_without_reading_the_answers_is_closed() {
    let (_state, d, e2b) = with_deadlines("pipeline");
    let tcp = d.tcp.clone().unwrap();
    let flood = |addr: &str, one: &[u8], what: &str| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_write_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let batch = one.repeat(1000);
        // At most 100,000 requests; the writes block once the daemon,
        // its answers untaken, stops reading.
        for _ in 0..100 {
            if c.write_all(&batch).is_err() {
                break;
            }
        }
        // The daemon first answers what it already read (up to its
        // buffers) before its write deadline runs: on a loaded machine
        // that takes seconds, which is why the bound is wide. What is
        // proved is that the connection ends, not how fast.
        let limit = DEADLINE + MARGIN + Duration::from_secs(15);
        assert!(
            closed_within(&c, limit).is_some(),
            "{what}: still open {limit:?} after the requests stopped"
        );
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            flood(
                &tcp,
                b"GET /v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n",
                "GET /v1/health on the API",
            )
        });
        s.spawn(|| {
            flood(
                &e2b,
                b"GET /no/such/route HTTP/1.1\r\nhost: localhost\r\n\r\n",
                "an unknown route on the E2B door",
            )
        });
    });
}

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: [u8; 4], to: &str) -> TcpStream {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::os::fd::AsRawFd;
    let to: std::net::SocketAddrV4 = to.parse().unwrap();
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::new(from[0], from[1], from[2], from[3], 0),
    )
    .unwrap();
    connect(fd.as_raw_fd(), &SockaddrIn::from(to)).unwrap();
    TcpStream::from(fd)
}

#[test]
fn the_owners_client_gets_in_while_other_loopback_addresses_fill_the_listener() {
    if !std::path::Path::new("/usr/bin/prlimit").exists() {
        return skip("prlimit is not installed");
    }
    let state = TempDir::new("full");
    // 1024 descriptors: 256 connections a listener, 128 a peer address.
    let d = Daemon::start_under(
        &["/usr/bin/prlimit", "--nofile=1024:1024", "--"],
        state.path(),
        true,
        &[],
    );
    let t = token(&d, "owner-client");
    let tcp = d.tcp.clone().unwrap();
    // Two other loopback addresses, each at its bound, together at the
    // listener's: connections without a head, each held 10 s.
    let mut crowd = Vec::new();
    for from in [[127, 0, 0, 2], [127, 0, 0, 3]] {
        for _ in 0..128 {
            crowd.push(connect_from(from, &tcp));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut c = TcpStream::connect(&tcp).unwrap();
    c.write_all(&request(
        "GET",
        "/v1/sandboxes",
        &[("authorization", &format!("Bearer {t}"))],
        b"",
    ))
    .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the owner's client was not answered while {} connections without a token were held: {answer:?}",
        crowd.len()
    );
    drop(crowd);
}

// --- What a credential let in, on the way in ---------------------------------

/// A per-sandbox token for `sb` with `scopes`, made by the owner.
fn sandbox_token(d: &Daemon, name: &str, scopes: &[&str]) -> String {
    api_token(d, name, scopes, Some("sb"))
}

#[test]
fn an_upload_writes_nothing_into_the_sandbox_after_its_tokens_revocation() {
    let Some((_state, d)) = native("rv-upload") else {
        return;
    };
    let t = sandbox_token(&d, "uploader", &["files"]);
    let mut c = TcpStream::connect(d.tcp.as_ref().unwrap()).unwrap();
    c.write_all(
        format!(
            "PUT /v1/sandboxes/sb/files?path=up.txt HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\ntransfer-encoding: chunked\r\n\r\n7\r\nbefore\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    revoke(&d, "uploader");
    std::thread::sleep(GRACE);
    // The rest of the upload, and its end: none of it may land.
    let _ = c.write_all(b"6\r\nafter\n\r\n0\r\n\r\n");
    let _ = open_for(&mut c, Duration::from_secs(5));
    let (s, b) = call(&d, "GET", "/v1/sandboxes/sb/files?path=up.txt", None, None);
    assert!(
        !b.contains("after"),
        "bytes sent after the revocation were written into the sandbox ({s}): {b:?}"
    );
}

/// One masked WebSocket text frame (the mask all zeros).
fn ws_text(payload: &str) -> Vec<u8> {
    let p = payload.as_bytes();
    let mut f = vec![0x81u8];
    if p.len() < 126 {
        f.push(0x80 | p.len() as u8);
    } else {
        f.push(0x80 | 126);
        f.extend_from_slice(&(p.len() as u16).to_be_bytes());
    }
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(p);
    f
}

#[test]
fn a_terminal_opened_before_its_tokens_revocation_starts_nothing_after_it() {
    let Some((_state, d)) = native("rv-pty") else {
        return;
    };
    let t = sandbox_token(&d, "terminal", &["exec"]);
    let mut c = TcpStream::connect(d.tcp.as_ref().unwrap()).unwrap();
    c.write_all(
        format!(
            "GET /v1/sandboxes/sb/pty HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "no upgrade: {head}");
    revoke(&d, "terminal");
    std::thread::sleep(GRACE);
    let _ = c.write_all(&ws_text(
        r#"{"type":"start","shell":"echo started > /workspace/pty-mark"}"#,
    ));
    std::thread::sleep(Duration::from_secs(2));
    let (s, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/sb/files?path=pty-mark",
        None,
        None,
    );
    assert_eq!(
        s, 404,
        "a start message sent after the revocation ran its command: {b:?}"
    );
}

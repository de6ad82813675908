//! Attacks on the daemon's own standing, through a real `warden serve`:
//! an answer that outlives the credential that opened it, a crowd of idle
//! connections from a process with no token, and a process in another
//! user namespace (a sandbox's) using the owner's socket. Each test drives
//! the real binaries over loopback and judges from what arrives.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::daemon::*;
use common::*;
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
    let mut r = format!("{method} {path} HTTP/1.1\r\nhost: warden\r\nconnection: close\r\n");
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
    let body = format!(
        r#"{{"name":"{name}","scopes":["exec","files","sandboxes:read","sandboxes:write"]}}"#
    );
    let (s, b) = call(d, "POST", "/v1/tokens", Some(&body), None);
    assert_eq!(s, 201, "{b}");
    json(&b)["token"].as_str().unwrap().to_string()
}

fn revoke(d: &Daemon, name: &str) {
    let (s, b) = call(d, "DELETE", &format!("/v1/tokens/{name}"), None, None);
    assert!(s == 200 || s == 204, "revoking {name}: {s} {b}");
}

/// A command that prints for as long as it runs.
const TICKER: &str = "while :; do echo tick; sleep 0.1; done";

/// A native-API daemon (socket and TCP) with a running sandbox `sb`.
fn native(tag: &str) -> Option<(TempDir, Daemon)> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new(tag);
    let d = Daemon::start(state.path(), true);
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"sb"}"#), None);
    assert_eq!(s, 201, "{b}");
    Some((state, d))
}

#[test]
fn a_streamed_exec_ends_within_a_second_of_its_tokens_revocation() {
    let Some((_state, d)) = native("rv-exec") else {
        return;
    };
    let t = token(&d, "streamer");
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
    let t = token(&d, "follower");
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
    let t = token(&d, "watcher");
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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

/// Set this process's soft limit of open files (children inherit it).
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
    s.write_all(b"GET /v1/health HTTP/1.1\r\nhost: warden\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    (head.starts_with(b"HTTP/1.1 200") && began.elapsed() <= within).then(|| began.elapsed())
}

#[test]
fn the_owners_socket_answers_while_two_thousand_idle_connections_are_held() {
    let state = TempDir::new("crowd");
    let e2b = format!("127.0.0.1:{}", free_port());
    // The daemon starts under the common soft limit of 1024 descriptors
    // (it is its own to raise), the test then holds its crowd under the
    // host's.
    set_open_files(1024);
    let d = Daemon::start_with(state.path(), true, &["--e2b", &e2b], &[]);
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
    std::fs::copy(warden_bin().with_file_name("warden-daemon"), &beside).unwrap();
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

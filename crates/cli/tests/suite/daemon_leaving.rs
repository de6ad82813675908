//! What the daemon keeps doing for a caller that left (outside review 26's
//! residuals): a review of a large layer asked for and hung up on stops
//! soon after, and gives its thread, its CPU and its token's place back;
//! a stream (a files watch on either door, a command's output followed, a
//! terminal) whose client left ends its threads and gives its place back
//! within seconds while the sandbox says nothing. Through the real daemon
//! over real HTTP.

use crate::common::daemon::*;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// CPU time the process `pid` has used so far (all its threads), in
/// clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's name: utime and stime are the 12th
    // and 13th of them.
    let rest = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// CPU the daemon uses over `span`, in ticks (100 a second per core).
fn cpu_over(pid: i32, span: Duration) -> u64 {
    let before = cpu_ticks(pid);
    std::thread::sleep(span);
    cpu_ticks(pid) - before
}

/// Files of the layer reviewed: enough that one review takes the debug
/// daemon seconds (a review of 100,000 takes it minutes; planting them
/// takes this host's disk a minute).
const FILES: usize = 20_000;

/// `files` small text files planted in the layer `upper`, in directories
/// of a thousand: what a sandbox that wrote them leaves to review.
fn plant(upper: &Path, files: usize) {
    for d in 0..files.div_ceil(1000) {
        let dir = upper.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..1000.min(files - d * 1000) {
            std::fs::write(dir.join(format!("f{f:04}.txt")), format!("line {f}\n")).unwrap();
        }
    }
}

/// A request sent on its own connection, hung up on after `after`.
fn ask_and_leave(addr: &str, token: &str, path: &str, after: Duration) {
    let mut c = TcpStream::connect(addr).unwrap();
    let head =
        format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {token}\r\n\r\n");
    c.write_all(head.as_bytes()).unwrap();
    std::thread::sleep(after);
    let _ = c.shutdown(std::net::Shutdown::Both);
}

#[test]
fn a_review_hung_up_on_stops_and_gives_back_its_thread_and_its_tokens_place() {
    let Some((state, d)) = with_config("leaving-review", "sessions:\n  per_token: 4\n", &[], &[])
    else {
        return;
    };
    let t = worker_with_sandbox(&d, "asker", "big");
    stop_as(&d, &t, "big");
    let upper = state.path().join("warden/sandboxes/big/upper");
    assert!(upper.is_dir(), "the sandbox has a layer");
    let planted = Instant::now();
    plant(&upper, FILES);
    eprintln!("{FILES} files planted in {:?}", planted.elapsed());
    let addr = d.tcp.clone().unwrap();
    let review = "/v1/sandboxes/big/changes?content=true";
    // Ten reviews of the layer, each left after 100 ms.
    for _ in 0..10 {
        ask_and_leave(&addr, &t, review, Duration::from_millis(100));
    }
    // Within a second or two of the last, the daemon walks for nobody:
    // the token's places are its own again (a review of one file is
    // answered, not refused busy), and its CPU is back to idle.
    let began = Instant::now();
    let one = "/v1/sandboxes/big/changes?path=d000/f0001.txt";
    let answered = loop {
        let (s, b) = call_on(&d, true, "GET", one, None, Some(&t));
        if s == 200 || began.elapsed() > Duration::from_secs(8) {
            break (s, b);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let freed = began.elapsed();
    assert_eq!(answered.0, 200, "after {freed:?}: {}", answered.1);
    assert_eq!(
        json(&answered.1)["changes"].as_array().map(Vec::len),
        Some(1),
        "{}",
        answered.1
    );
    assert!(
        freed < Duration::from_secs(2),
        "the token's places came back only {freed:?} after its callers left"
    );
    let busy = cpu_over(d.pid(), Duration::from_secs(1));
    eprintln!("places back after {freed:?}; the daemon's CPU then: {busy} ticks in 1 s");
    assert!(
        busy < 10,
        "the daemon still burns {busy} ticks a second after its callers left"
    );
}

// --- Streams whose client left, on a quiet sandbox ------------------------

/// The daemon's threads now.
fn threads(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// `request` sent on a connection of its own to `addr`, read until
/// `marker` came: the connection, or what came instead.
fn opened(addr: &str, request: &[u8], marker: &str) -> Result<TcpStream, String> {
    use std::io::Read;
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got);
        if text.contains(marker) {
            return Ok(c);
        }
        // A refusal: an error status, or (a Connect stream, whose status
        // is 200 whatever comes) an error message.
        let refused = !text.starts_with("HTTP/1.1 200") && !text.starts_with("HTTP/1.1 101");
        if (refused && text.contains("\r\n\r\n")) || text.contains("{\"error\":") {
            return Err(text.into_owned());
        }
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return Err(text.into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A daemon whose tokens hold `places` places, with the E2B door; a
/// token with every scope a stream needs, and its running E2B sandbox:
/// (state, daemon, token, sandbox, its envd access token).
fn quiet_sandbox(tag: &str, places: usize) -> Option<(TempDirOf, Daemon, String, String, String)> {
    let e2b = format!("127.0.0.1:{}", crate::common::free_port());
    let config = format!("sessions:\n  per_token: {places}\n");
    let (state, d) = with_config(tag, &config, &["--e2b", &e2b], &[])?;
    let t = api_token(
        &d,
        "streamer",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
        None,
    );
    let (id, access) = e2b_sandbox_ids(&e2b, &t);
    Some((state, d, t, id, access))
}

type TempDirOf = crate::common::TempDir;

/// Two streams opened with `open` (the token's places), left; then, twice
/// (the first round lets the daemon's pools grow to what a round needs),
/// within a few seconds of leaving, the daemon's threads are back and the
/// token opens two again. `shape` names the stream in failures.
fn left_streams_give_back(d: &Daemon, shape: &str, open: impl Fn() -> Result<TcpStream, String>) {
    let pid = d.pid();
    let mut before = threads(pid);
    for round in 0..2 {
        let held: Vec<TcpStream> = (0..2)
            .map(|i| open().unwrap_or_else(|e| panic!("{shape}, round {round}, stream {i}: {e}")))
            .collect();
        let open_threads = threads(pid);
        drop(held);
        let left = Instant::now();
        let settled = loop {
            let now = threads(pid);
            if now <= before + 1 || left.elapsed() > Duration::from_secs(5) {
                break now;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!(
            "{shape}, round {round}: threads {before} before, {open_threads} open, {settled} {:?} after leaving",
            left.elapsed()
        );
        if round == 1 {
            assert!(
                settled <= before + 1,
                "{shape}: the streams' threads outlived their clients: {before} before, {settled} after"
            );
        }
        // The places are back: two streams open again.
        // (Each one opened is kept: one opened and left again would hold
        // its place a moment more.)
        let mut again = Vec::new();
        while again.len() < 2 {
            match open() {
                Ok(c) => again.push(c),
                Err(e) if left.elapsed() > Duration::from_secs(8) => {
                    panic!(
                        "{shape}: a place not back {:?} after its client left: {e}",
                        left.elapsed()
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
        eprintln!(
            "{shape}, round {round}: places back {:?} after leaving",
            left.elapsed()
        );
        drop(again);
        std::thread::sleep(Duration::from_secs(2));
        before = threads(pid);
    }
}

#[test]
fn a_files_watch_whose_client_left_ends_on_a_quiet_sandbox_on_either_door() {
    let Some((_state, d, t, id, access)) = quiet_sandbox("leaving-watch", 2) else {
        return;
    };
    let api = d.tcp.clone().unwrap();
    let native = format!(
        "GET /v1/sandboxes/{id}/files/watch?path=/home/user HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\n\r\n"
    );
    left_streams_give_back(&d, "files watch", || {
        opened(&api, native.as_bytes(), "ready")
    });
    let e2b = d.e2b.clone().unwrap();
    let json = r#"{"path":"/home/user","recursive":false}"#;
    let mut body = vec![0u8];
    body.extend_from_slice(&(json.len() as u32).to_be_bytes());
    body.extend_from_slice(json.as_bytes());
    let mut door = format!(
        "POST /filesystem.Filesystem/WatchDir HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/connect+json\r\nx-access-token: {access}\r\ne2b-sandbox-id: {id}\r\nauthorization: Basic dXNlcjo=\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    door.extend_from_slice(&body);
    left_streams_give_back(&d, "E2B WatchDir", || opened(&e2b, &door, "start"));
}

#[test]
fn a_commands_output_followed_and_left_gives_its_place_back_while_the_command_is_quiet() {
    // The quiet command holds one place; its two followers the others.
    let Some((_state, d, t, id, _)) = quiet_sandbox("leaving-output", 3) else {
        return;
    };
    let (s, b) = json_as(
        &d,
        &t,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        r#"{"shell":"sleep 600","background":true}"#,
    );
    assert_eq!(s, 202, "{b}");
    let exec = b["id"].as_str().unwrap().to_string();
    let api = d.tcp.clone().unwrap();
    let follow = format!(
        "GET /v1/sandboxes/{id}/execs/{exec}/output HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\n\r\n"
    );
    left_streams_give_back(&d, "a command's output", || {
        opened(&api, follow.as_bytes(), "HTTP/1.1 200 OK\r\n")
    });
}

/// A masked client frame of WebSocket `opcode` around `payload`.
fn ws_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    let n = payload.len();
    if n < 126 {
        f.push(0x80 | n as u8);
    } else if n < 65536 {
        f.push(0x80 | 126);
        f.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(n as u64).to_be_bytes());
    }
    let mask = [1u8, 2, 3, 4];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

#[test]
fn a_terminal_whose_client_left_ends_even_while_its_process_reads_none_of_its_input() {
    let Some((_state, d, t, id, _)) = quiet_sandbox("leaving-pty", 2) else {
        return;
    };
    let api = d.tcp.clone().unwrap();
    let upgrade = format!(
        "GET /v1/sandboxes/{id}/pty?shell=sleep%20600 HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
    );
    // Left at once.
    left_streams_give_back(&d, "a terminal", || {
        opened(&api, upgrade.as_bytes(), "started")
    });
    // Left after typing more than the terminal and the relay take, to a
    // process that reads none of it and a terminal that echoes nothing:
    // the daemon stops reading the client, and sends it nothing.
    let quiet = upgrade.replace(
        "shell=sleep%20600",
        "shell=stty%20raw%20-echo%3B%20exec%20sleep%20600",
    );
    let chunk = ws_frame(0x2, &vec![b'x'; 60 * 1024]);
    left_streams_give_back(&d, "a terminal holding its client's input", || {
        let mut c = opened(&api, quiet.as_bytes(), "started")?;
        // The echo off before the typing.
        std::thread::sleep(Duration::from_millis(300));
        c.set_write_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        for _ in 0..200 {
            if c.write_all(&chunk).is_err() {
                break;
            }
        }
        Ok(c)
    });
}

/// A Connect streaming call of the E2B door's envd API (`method`, `json`
/// its one message), as raw bytes.
fn envd_stream(id: &str, access: &str, method: &str, json: &str) -> Vec<u8> {
    let mut body = vec![0u8];
    body.extend_from_slice(&(json.len() as u32).to_be_bytes());
    body.extend_from_slice(json.as_bytes());
    let mut req = format!(
        "POST {method} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/connect+json\r\nx-access-token: {access}\r\ne2b-sandbox-id: {id}\r\nauthorization: Basic dXNlcjo=\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    req
}

#[test]
fn an_e2b_process_stream_connected_to_and_left_gives_its_place_back_while_the_process_is_quiet() {
    // The quiet process holds one place; its two Connect streams the
    // others.
    let Some((_state, d, _t, id, access)) = quiet_sandbox("leaving-connect", 3) else {
        return;
    };
    let e2b = d.e2b.clone().unwrap();
    let start = envd_stream(
        &id,
        &access,
        "/process.Process/Start",
        r#"{"process":{"cmd":"/bin/sh","args":["-c","sleep 600"]}}"#,
    );
    let started = opened(&e2b, &start, "\"pid\"").unwrap();
    // Its number inside the sandbox, as the owner lists it.
    let (s, b) = call(&d, "GET", &format!("/v1/sandboxes/{id}/execs"), None, None);
    assert_eq!(s, 200, "{b}");
    let pid = json(&b)
        .as_array()
        .and_then(|a| a.iter().find_map(|e| e["pid"].as_u64()))
        .unwrap_or_else(|| panic!("no running command: {b}"));
    let connect = envd_stream(
        &id,
        &access,
        "/process.Process/Connect",
        &format!(r#"{{"process":{{"pid":{pid}}}}}"#),
    );
    left_streams_give_back(&d, "an E2B Connect stream", || {
        opened(&e2b, &connect, "\"start\"")
    });
    drop(started);
}

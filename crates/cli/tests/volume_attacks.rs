//! A sandbox that spends volume against warden: floods of DNS queries and
//! denied connections meant to push a real connection out of the audit
//! log, and crowds of stalled connections meant to grow the supervisor's
//! memory. Each test runs the real `warden` binary against real listeners
//! on the host's loopback and judges from the host (the verified audit
//! log, `/proc/PID/status`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server on 127.0.0.1 that reads what each connection sends, answers
/// `reply` and closes; returns its port and how many connections it saw.
fn echo_server(reply: &'static [u8]) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            s.fetch_add(1, Ordering::SeqCst);
            conn.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut buf = vec![0u8; 65536];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(reply);
        }
    });
    (port, seen)
}

/// The records of an audit log that `warden audit verify` calls intact.
fn verified_records(log: &std::path::Path) -> Vec<serde_json::Value> {
    let v = Command::new(warden_bin())
        .args(["audit", "verify", log.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        v.status.success(),
        "the audit log does not verify: {} {}",
        stdout(&v),
        stderr(&v)
    );
    assert!(stdout(&v).contains("intact"), "{}", stdout(&v));
    events(log)
}

#[test]
fn a_flood_of_queries_and_denials_cannot_push_a_real_connection_out_of_the_audit_log() {
    if !egress_available() {
        return;
    }
    let (port, seen) = echo_server(b"the data came back");
    let dir = TempDir::new("volume-flood");
    let log = dir.path().join("audit.jsonl");
    const DNS: usize = 30_000;
    const DENIED: usize = 3_000;
    // As fast as it can: DNS questions for names on no list and for a few
    // names over and over, denied connections (plain HTTP to unlisted
    // names, raw TCP to raw addresses), then one allowed connection that
    // carries data.
    let script = format!(
        r#"import socket, struct
def q(name, i):
    qn = b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0'
    return struct.pack('>HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0) + qn + struct.pack('>HH', 1, 1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setblocking(False)
sent = 0
for i in range({DNS}):
    name = 'same.evil.test' if i % 2 else 'n%d.evil.test' % i
    try:
        u.sendto(q(name, i), ('127.0.0.1', 53)); sent += 1
    except BlockingIOError:
        pass
print('dns sent', sent)
denied = 0
for i in range({DENIED}):
    try:
        if i % 2:
            s = socket.create_connection(('203.0.113.%d' % (i % 250 + 1), 80), timeout=5)
            s.sendall(b'GET / HTTP/1.1\r\nHost: denied%d.test\r\n\r\n' % (i % 7))
        else:
            s = socket.create_connection(('198.51.100.%d' % (i % 250 + 1), 5432), timeout=5)
            s.sendall(b'\x00\x00\x00\x08\x04\xd2\x16\x2f')
        s.recv(100); s.close(); denied += 1
    except OSError as e:
        pass
print('denied tried', denied)
ip = socket.gethostbyname('allowed.test')
s = socket.create_connection((ip, {port}), timeout=10)
s.sendall(b'\x16\x03\x01 then the payload of the one real connection')
print('allowed got', s.recv(100))
s.close()
"#
    );
    let out = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--allow-domain",
            &format!("allowed.test:{port}"),
            "--add-host",
            "allowed.test=127.0.0.1",
            "--audit-log",
            log.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(
        s.contains("allowed got b'the data came back'"),
        "{s} {}",
        stderr(&out)
    );
    assert_eq!(seen.load(Ordering::SeqCst), 1, "only the allowed one goes");
    let denied_tried: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("denied tried "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    let records = verified_records(&log);
    // The real connection: its name, port and bytes.
    let closed = records
        .iter()
        .find(|r| r["event"] == "connection_closed" && r["name"] == "allowed.test")
        .unwrap_or_else(|| panic!("the allowed connection's bytes are not in the log"));
    assert_eq!(closed["port"], port);
    assert!(closed["bytes_out"].as_u64().unwrap() > 40, "{closed}");
    assert!(closed["bytes_in"].as_u64().unwrap() > 10, "{closed}");
    assert!(records.iter().any(|r| r["event"] == "connection"
        && r["name"] == "allowed.test"
        && r["allowed"] == true));
    // The flood: counts per name and decision, not a line per attempt.
    let lines = records
        .iter()
        .filter(|r| r["event"] == "connection" && r["allowed"] == false)
        .count();
    assert!(
        lines < 5_000,
        "{lines} lines for {DNS} queries and {denied_tried} denials: one per attempt"
    );
    let agg: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "connections_aggregated")
        .collect();
    assert!(
        agg.iter().any(|r| r["protocol"] == "dns"
            && r["name"] == "same.evil.test"
            && r["allowed"] == false
            && r["count"].as_u64().unwrap() > 1),
        "no count for the repeated name"
    );
    // Every denied connection is accounted for: a line of its own, a
    // count, or (if ever) a count of events dropped.
    let counted = |proto: &str| -> u64 {
        records
            .iter()
            .map(|r| match r["event"].as_str() {
                Some("connection") if r["allowed"] == false && r["protocol"] == proto => 1,
                Some("connections_aggregated")
                    if r["allowed"] == false && r["protocol"] == proto =>
                {
                    r["count"].as_u64().unwrap()
                }
                _ => 0,
            })
            .sum()
    };
    let dropped: u64 = records
        .iter()
        .filter(|r| r["event"] == "events_dropped")
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    let tcp_denied = counted("http") + counted("tcp");
    assert!(
        tcp_denied + dropped >= denied_tried,
        "{denied_tried} denied connections, {tcp_denied} accounted for, {dropped} dropped"
    );
    assert!(counted("dns") > 1_000, "the DNS flood is not counted");
}

/// A server on 127.0.0.1 that, on every connection, sends as much as the
/// connection takes and never reads; returns its port.
fn pushing_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let chunk = vec![b'x'; 64 * 1024];
                    while conn.write_all(&chunk).is_ok() {}
                });
        }
    });
    port
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn stalled_connections_cannot_grow_the_supervisor_beyond_its_budget() {
    if !egress_available() {
        return;
    }
    let port = pushing_server();
    let dir = TempDir::new("volume-stall");
    let log = dir.path().join("audit.jsonl");
    const CONNECTIONS: usize = 3_000;
    // Connections to an allowed name whose server pushes data: the sandbox
    // never reads and never sends again, so every byte the server sends
    // waits in the proxy.
    let script = format!(
        r#"import socket, resource, time, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
ip = socket.gethostbyname('allowed.test')
held = []
for i in range({CONNECTIONS}):
    try:
        s = socket.create_connection((ip, {port}), timeout=5)
        s.sendall(b'\x16\x03\x01 stall')
        held.append(s)
    except OSError as e:
        pass
print('opened', len(held), flush=True)
time.sleep(8)
print('done', flush=True)
"#
    );
    let mut child = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--open-files",
            "8192",
            "--allow-domain",
            &format!("allowed.test:{port}"),
            "--add-host",
            "allowed.test=127.0.0.1",
            "--audit-log",
            log.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut baseline = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while baseline == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        baseline = status_kib(pid, "VmRSS:");
    }
    let mut out = String::new();
    let mut stdout_pipe = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout_pipe.read_to_string(&mut s);
        s
    });
    // The peak while the connections are held.
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        peak = peak.max(status_kib(pid, "VmHWM:"));
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    out.push_str(&reader.join().unwrap());
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(out.contains("opened"), "{out} {err} {status:?}");
    let grown_mib = peak.saturating_sub(baseline) / 1024;
    eprintln!("baseline {baseline} kB, peak {peak} kB, grown {grown_mib} MiB; {out}");
    // The proxy's budget (64 MiB) and some room for the rest of warden.
    assert!(
        grown_mib < 96,
        "the supervisor grew by {grown_mib} MiB holding stalled connections"
    );
    // What the budget refused is reported.
    let records = verified_records(&log);
    let opened: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("opened "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    let allowed = records
        .iter()
        .filter(|r| r["event"] == "connection" && r["allowed"] == true)
        .count();
    if allowed < opened {
        assert!(
            records.iter().any(|r| r["detail"]
                .as_str()
                .is_some_and(|d| d.contains("memory budget"))),
            "{opened} connections, {allowed} allowed, and no refusal for the budget recorded"
        );
    }
}

/// Connections whose TLS the proxy terminates for a secret cost it more
/// (TLS state and HTTP buffers on both sides): a sandbox that opens
/// hundreds of them to a host that pushes a long answer, and never
/// reads, must not grow the supervisor past its budget either; what the
/// budget refused is recorded.
#[test]
fn stalled_terminated_connections_cannot_grow_the_supervisor_beyond_its_budget() {
    use common::upstream::{RawUpstream, TestCa};
    if !egress_available() {
        return;
    }
    const HOST: &str = "api.secret.test";
    const CONNECTIONS: usize = 400;
    let ca = TestCa::new();
    // Each answer: a head, then 8 MiB the sandbox never reads.
    let up = RawUpstream::start(&ca, &[HOST], |_| {
        let mut out = vec![b"HTTP/1.1 200 OK\r\nContent-Length: 8388608\r\n\r\n".to_vec()];
        out.extend(std::iter::repeat_n(vec![b'!'; 64 * 1024], 128));
        out
    });
    let port = up.port;
    let dir = TempDir::new("volume-terminated");
    let log = dir.path().join("audit.jsonl");
    let script = format!(
        r#"import socket, ssl, time
ctx = ssl.create_default_context()
held = []
for i in range({CONNECTIONS}):
    try:
        s = ctx.wrap_socket(socket.create_connection(("{HOST}", {port}), timeout=5), server_hostname="{HOST}")
        s.sendall(b"GET /big HTTP/1.1\r\nHost: {HOST}:{port}\r\nAuthorization: Bearer " + __import__("os").environ["TOKEN"].encode() + b"\r\n\r\n")
        held.append(s)
    except Exception as e:
        print(i, time.time(), repr(e), file=__import__("sys").stderr, flush=True)
print("opened", len(held), flush=True)
time.sleep(8)
print("done", flush=True)
"#,
    );
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@{HOST}:{port}"))
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--upstream-ca", &ca.pem_path()])
        .args(["--audit-log", log.to_str().unwrap()])
        .args(["--", "python3", "-c", &script])
        .env("TOKEN", "ghp_terminatedvolumeTOKEN0123456789")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut baseline = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while baseline == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        baseline = status_kib(pid, "VmRSS:");
    }
    let mut stdout_pipe = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout_pipe.read_to_string(&mut s);
        s
    });
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(90);
    while Instant::now() < until {
        peak = peak.max(status_kib(pid, "VmHWM:"));
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let out = reader.join().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(out.contains("opened"), "{out} {err}");
    let grown_mib = peak.saturating_sub(baseline) / 1024;
    eprintln!(
        "baseline {baseline} kB, peak {peak} kB, grown {grown_mib} MiB; {out} {}",
        err.lines().take(5).collect::<Vec<_>>().join(" | ")
    );
    assert!(
        grown_mib < 96,
        "the supervisor grew by {grown_mib} MiB holding stalled terminated connections"
    );
    let records = verified_records(&log);
    let terminated = records
        .iter()
        .filter(|r| {
            r["event"] == "connection"
                && r["allowed"] == true
                && r["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("terminated"))
        })
        .count();
    assert!(terminated > 0, "no connection was terminated: {err}");
    let opened: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("opened "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    if terminated < opened {
        assert!(
            records.iter().any(|r| r["detail"]
                .as_str()
                .is_some_and(|d| d.contains("memory budget"))),
            "{opened} connections, {terminated} terminated, and no refusal for the budget recorded"
        );
    }
}

/// A connection the sandbox closed just before it ended is in the audit
/// log whole: its close and the bytes it moved are recorded even when its
/// upstream lingers after the sandbox is gone (the proxy used to be cut
/// at the run's end, losing the `connection_closed` record).
#[test]
fn a_connection_closed_as_the_sandbox_ends_keeps_its_bytes_in_the_audit_log() {
    if !egress_available() {
        return;
    }
    // Answers, then holds the connection open a moment before closing.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut buf = vec![0u8; 65536];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(b"the data came back");
                std::thread::sleep(Duration::from_millis(150));
            });
        }
    });
    let dir = TempDir::new("closed-at-end");
    let script = format!(
        "import socket\ns = socket.create_connection(('lingering.test', {port}), timeout=10)\ns.sendall(b'x' * 100)\nprint('got', s.recv(100))\ns.close()\n"
    );
    for round in 0..3 {
        let log = dir.path().join(format!("audit-{round}.jsonl"));
        let out = Command::new(warden_bin())
            .args([
                "run",
                "--no-tty",
                "--allow-domain",
                &format!("lingering.test:{port}"),
                "--add-host",
                "lingering.test=127.0.0.1",
                "--audit-log",
                log.to_str().unwrap(),
                "--",
                "python3",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            stdout(&out).contains("got b'the data came back'"),
            "{}{}",
            stdout(&out),
            stderr(&out)
        );
        let records = verified_records(&log);
        let closed = records
            .iter()
            .find(|r| r["event"] == "connection_closed" && r["name"] == "lingering.test")
            .unwrap_or_else(|| panic!("round {round}: the connection's close is not in the log"));
        assert_eq!(closed["bytes_out"], 100, "{closed}");
        assert_eq!(closed["bytes_in"], 18, "{closed}");
    }
}

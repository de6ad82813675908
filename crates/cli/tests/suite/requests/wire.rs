//! Request rules against what a client can put on the wire, through the
//! real binary: an HTTP/2 connection whose streams are decided one by
//! one, and smuggling attempts from a raw HTTP/1.1 client inside the
//! sandbox (a second request hidden after the first, conflicting length
//! headers, an absolute-form target naming another host, encoded and dot
//! segments), each decided on what the recording server would get. What
//! is refused never arrives there.

use super::{forge_for_raw_client, printed};
use crate::common::forge::{reach, Forge};
use crate::common::*;

#[test]
fn one_http2_connection_carries_an_allowed_stream_to_the_server_and_a_refused_one_nowhere() {
    let Some(forge) = Forge::start() else { return };
    // Two transfers of one curl, the second a stream on the connection the
    // first opened: `num_connects` is 1 for the transfer that opened it and
    // 0 for the one that rode on it.
    let out = forge.run(
        &["--allow-request", "GET forge.test:PORT/repos/**"],
        r#"curl -sS --noproxy '*' --http2 -w '%{http_version} %{num_connects} %{http_code} %{url_effective}\n' \
  -o /dev/null "https://forge.test:PORT/repos/acme/w" -o /dev/null "https://forge.test:PORT/admin/keys"
"#,
    );
    let s = printed(&out);
    let mut lines: Vec<&str> = s.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 2, "{s}");
    assert!(lines.iter().all(|l| l.starts_with("2 ")), "HTTP/2: {s}");
    let connects: u32 = lines
        .iter()
        .filter_map(|l| l.split(' ').nth(1)?.parse::<u32>().ok())
        .sum();
    assert_eq!(connects, 1, "both streams on one connection: {s}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" 200 ") && l.ends_with("/repos/acme/w")),
        "{s}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" 403 ") && l.ends_with("/admin/keys")),
        "{s}"
    );
    let seen = forge.up.arrived(1, "only the allowed stream");
    assert!(seen[0].ends_with("GET /repos/acme/w"), "{seen:?}");
}

/// The program inside: `raw.py PORT`, one TLS connection per attempt (the
/// sandbox's authority trusted), each attempt's bytes written at once;
/// prints `LABEL: STATUS STATUS ...` (every status line that came back
/// before the connection ended).
const RAW: &str = r#"
import os, re, socket, ssl, sys
port = int(sys.argv[1])
H = f"Host: forge.test:{port}\r\n"
ATTEMPTS = [
    # A second request behind the first, in the same write.
    ("pipelined", f"GET /repos/a HTTP/1.1\r\n{H}\r\nDELETE /repos/a HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
    # Content-Length and Transfer-Encoding both: the request that hides
    # behind the chunked body's end.
    ("cl-te", f"GET /repos/a HTTP/1.1\r\n{H}Content-Length: 48\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nDELETE /repos/a HTTP/1.1\r\n{H}\r\n\r\n"),
    # Two Content-Lengths that disagree.
    ("cl-cl", f"GET /repos/a HTTP/1.1\r\n{H}Content-Length: 0\r\nContent-Length: 44\r\n\r\nDELETE /repos/a HTTP/1.1\r\n{H}\r\n\r\n"),
    # A request inside the first's body, by its Content-Length.
    ("in-body", None),
    # An absolute-form target naming another host.
    ("absolute", f"GET https://other.test/repos/a HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
    # Dot and encoded segments that reach a denied path once resolved.
    ("dots", f"GET /repos/x/../a/%70rivate/./k HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
    # An encoded slash that hides dot segments: read two ways, refused.
    ("encoded-slash", f"GET /other/..%2F..%2Frepos/a HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
    # Allowed once resolved: it goes, as the server reads it.
    ("resolved", f"GET /repos/x/../%62 HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
    # Delimiters a server may read where the raw path has none: an
    # encoded `;` (parameters dropped), a trailing space or dot (trimmed),
    # and a dot segment behind an encoded `;`.
    ("encoded-params", f"GET /repos/a/private%3Bx/k HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
    ("trailing-space", f"GET /repos/a/private%20/k HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
    ("trailing-dot", f"GET /repos/a/private./k HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
    ("dot-params", f"GET /repos/a/..%3B/b/private/k HTTP/1.1\r\n{H}Connection: close\r\n\r\n"),
]
hidden = f"DELETE /repos/a HTTP/1.1\r\n{H}\r\n"
ATTEMPTS[3] = ("in-body", f"POST /repos/a HTTP/1.1\r\n{H}Content-Length: {len(hidden)}\r\nConnection: close\r\n\r\n{hidden}")
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
for label, data in ATTEMPTS:
    s = ctx.wrap_socket(socket.create_connection(("forge.test", port), timeout=10), server_hostname="forge.test")
    s.sendall(data.encode())
    s.settimeout(3)
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
    statuses = [c.decode() for c in re.findall(rb"HTTP/1\.1 (\d{3}) ", got)]
    print(f"{label}: {' '.join(statuses)}", flush=True)
"#;

#[test]
fn smuggled_requests_are_decided_as_the_server_would_read_them_and_refused_ones_never_arrive() {
    let Some(forge) = forge_for_raw_client() else {
        return;
    };
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/repos/**",
            "--deny-request",
            "* forge.test:PORT/repos/*/private/**",
        ],
        &format!("cat > /tmp/raw.py <<'EOF'\n{RAW}\nEOF\npython3 /tmp/raw.py PORT\n"),
    );
    let s = printed(&out);
    let answer = |label: &str| -> String {
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{label}: ")))
            .unwrap_or_else(|| panic!("no line for {label}: {s}"))
            .to_string()
    };
    // Each pipelined request decided on its own.
    assert_eq!(answer("pipelined"), "200 403", "{s}");
    // Conflicting framing: what hid behind the body is never a request.
    assert_eq!(answer("cl-te"), "200", "{s}");
    assert_eq!(answer("cl-cl"), "400", "{s}");
    // The POST is refused whole; the request in its body never parsed.
    assert_eq!(answer("in-body"), "403", "{s}");
    assert_eq!(answer("absolute"), "421", "{s}");
    assert_eq!(answer("dots"), "403", "{s}");
    assert_eq!(answer("encoded-slash"), "403", "{s}");
    assert_eq!(answer("resolved"), "200", "{s}");
    for label in ["encoded-params", "trailing-space", "trailing-dot"] {
        assert_eq!(answer(label), "403", "{label}: {s}");
    }
    // A dot segment once parameters are cut: the path itself is refused.
    assert_eq!(answer("dot-params"), "400", "{s}");
    let seen = forge.up.requests();
    let paths: Vec<&str> = seen
        .iter()
        .map(|r| r.split_once(' ').map_or(r.as_str(), |(_, rest)| rest))
        .collect();
    assert_eq!(
        paths,
        ["GET /repos/a", "GET /repos/a", "GET /repos/b"],
        "only the allowed requests arrived, with the path the rules saw: {seen:?}"
    );
}

#[test]
fn request_rules_hold_for_an_unprivileged_user_too() {
    let Some(forge) = Forge::start() else { return };
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as: the rootless half is not run");
        return;
    };
    let port = forge.up.port.to_string();
    let out = who
        .command(who.bin.to_str().unwrap())
        .args(["run", "--no-tty"])
        .args(reach(&forge.ca, &port))
        .args([
            "--allow-request",
            &format!("GET,HEAD forge.test:{port}/repos/**"),
            "--",
            "sh",
            "-c",
            &format!(
                r#"for v in --http1.1 --http2; do
  curl -sS --noproxy '*' $v "https://forge.test:{port}/repos/acme/w"
  curl -sS --noproxy '*' $v -D - -o /dev/null -X DELETE "https://forge.test:{port}/repos/acme/w"
done"#
            ),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let s = printed(&out);
    assert_eq!(s.matches("ok\n").count(), 2, "{s}");
    assert_eq!(s.matches(" 403").count(), 2, "{s}");
    assert!(s.contains("x-warden-reason: no_request_rule"), "{s}");
    let seen = forge.up.arrived(2, "only the allowed requests");
    assert!(
        seen.iter().all(|r| r.ends_with("GET /repos/acme/w")),
        "{seen:?}"
    );
}

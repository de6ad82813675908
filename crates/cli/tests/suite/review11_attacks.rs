//! Attacks of the eleventh outside review on the secret terminator, each
//! through the real binary against a recording server on the host's
//! loopback: a secret's host reached without the terminator (silent until
//! the proxy gives up on a ClientHello, other bytes, plain HTTP, a CONNECT
//! tunnel carrying any of them, another name or a host port leading to the
//! same server), and a placeholder where nothing is substituted or scanned
//! (a header's name, the method). What the server recorded must show that
//! nothing arrived, and the sandbox must never see the real value the
//! server answers with.

use crate::common::tcp::{Upstream, PY_HELLO};
use crate::common::upstream::{RawUpstream, TestCa};
use crate::common::*;
use std::process::{Command, Stdio};

const HOST: &str = "x.review11.test";

/// A value that looks like a real token and occurs nowhere by chance.
fn token() -> String {
    format!("ghp_R11{}Zz", unique("tok").replace('-', "x"))
}

/// A recording TCP server that answers every connection with an HTTP
/// response carrying `value`: what a server storing the secret would send
/// back to whoever asks it.
fn leaky_server(value: &str) -> Upstream {
    let body = format!("stored={value}\n");
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    Upstream::start(Box::leak(reply.into_bytes().into_boxed_slice()))
}

/// `warden run` of a Python script with `TOKEN` a secret for `HOST:port`
/// (pinned to the host's loopback), `args` more, its events in `events`.
fn run_python(
    value: &str,
    port: u16,
    args: &[String],
    events: &std::path::Path,
    script: &str,
) -> std::process::Output {
    Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@{HOST}:{port}"))
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .arg("--json-events")
        .arg(events)
        .args(args)
        .args(["--", "python3", "-c", script])
        .env("TOKEN", value)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Python inside the sandbox: `talk(sock, data, pause)` sends `data`
/// (after `pause` seconds of silence) and returns all it gets back, and
/// `tunnel(name, port)` opens a CONNECT through the proxy warden sets.
const PY_TALK: &str = r#"import os, socket, time
phost, pport = os.environ['HTTPS_PROXY'].rsplit('/', 1)[1].split(':')
def talk(s, data, pause=0):
    out = b''
    try:
        if pause: time.sleep(pause)
        s.sendall(data); s.settimeout(15)
        while True:
            b = s.recv(4096)
            if not b: break
            out += b
        return out
    except OSError as e:
        return ('error', e.errno, out)
def tunnel(name, port):
    s = socket.create_connection((phost, int(pport)), timeout=15)
    s.sendall(f'CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n'.encode())
    return s, s.recv(200)
"#;

/// The connection decisions refused with `code`.
fn refused_with(events: &std::path::Path, code: &str) -> Vec<serde_json::Value> {
    crate::common::events(events)
        .into_iter()
        .filter(|e| e["event"] == "connection" && e["allowed"] == false)
        .filter(|e| e["reason"]["code"] == code)
        .collect()
}

#[test]
fn a_secrets_host_is_reached_only_through_tls_naming_it_whatever_else_is_sent() {
    if !egress_available() {
        return;
    }
    let value = token();
    let up = leaky_server(&value);
    let port = up.port;
    let dir = TempDir::new("r11-unterminated");
    let ev = dir.path().join("events.jsonl");
    // Each way bytes could reach the secret's host without the terminator:
    // silent past the wait for a server that speaks first, bytes that are
    // not TLS, plain HTTP by address and through the explicit proxy, and a
    // CONNECT tunnel carrying other bytes, silence or plain HTTP.
    let script = format!(
        r#"{PY_TALK}
H, P = '{HOST}', {port}
def direct(): return socket.create_connection((H, P), timeout=15)
print('silent', talk(direct(), b'\x00SILENT-PROBE\r\n', 0.7))
print('raw', talk(direct(), b'\x00RAW-PROBE\r\n'))
print('http', talk(direct(), f'GET /PLAIN-PROBE HTTP/1.1\r\nHost: {{H}}:{{P}}\r\n\r\n'.encode()))
s = socket.create_connection((phost, int(pport)), timeout=15)
print('proxy-http', talk(s, f'GET http://{{H}}:{{P}}/ABSOLUTE-PROBE HTTP/1.1\r\nHost: {{H}}:{{P}}\r\n\r\n'.encode()))
s, head = tunnel(H, P); print('connect-raw', head, talk(s, b'\x00TUNNEL-PROBE\r\n'))
s, head = tunnel(H, P); print('connect-silent', head, talk(s, b'\x00TUNNEL-SILENT-PROBE\r\n', 0.7))
s, head = tunnel(H, P); print('connect-http', head, talk(s, f'GET /TUNNEL-HTTP-PROBE HTTP/1.1\r\nHost: {{H}}:{{P}}\r\n\r\n'.encode()))
"#
    );
    let out = run_python(&value, port, &["--allow-http".to_string()], &ev, &script);
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{so}\n{se}");
    for label in [
        "silent",
        "raw",
        "http",
        "proxy-http",
        "connect-raw",
        "connect-silent",
        "connect-http",
    ] {
        assert!(
            so.contains(&format!("{label} ")),
            "{label} did not run: {so}\n{se}"
        );
    }
    assert!(
        !so.contains(&value),
        "the real value reached the sandbox: {so}"
    );
    // Nothing of any attempt reached the server (a CONNECT's upstream is
    // connected before its tunnel is judged: it sees an empty connection).
    for c in up.connections() {
        assert!(
            c.is_empty(),
            "the server got {:?}",
            String::from_utf8_lossy(&c)
        );
    }
    // Repeats of a decision may be counted rather than kept one by one:
    // each way in (by address, plain HTTP, a tunnel) is there at least.
    let refused = refused_with(&ev, "secret_needs_tls");
    for protocol in ["tcp", "http", "connect"] {
        assert!(
            refused.iter().any(|e| e["protocol"] == protocol),
            "no {protocol} refusal as secret_needs_tls: {refused:?}\n{so}"
        );
    }
}

#[test]
fn another_name_or_a_host_port_leading_to_a_secrets_server_does_not_reach_it() {
    if !egress_available() {
        return;
    }
    let value = token();
    let up = leaky_server(&value);
    let port = up.port;
    let dir = TempDir::new("r11-address");
    let ev = dir.path().join("events.jsonl");
    // `alias.review11.test` is pinned where the secret's host is, with an
    // entry of its own for any protocol; the same port is open as a host
    // port. Either would carry the sandbox's own TLS (or anything) to the
    // secret's server, the terminator never in the way. The alias is
    // served as the secret's host (review 29): its own TLS is terminated
    // (the proxy's TLS reaches the server, never the sandbox's), anything
    // else refused as for the secret's host; the host port, a name the
    // terminator does not serve, is refused outright.
    let script = format!(
        r#"{PY_TALK}{PY_HELLO}
A, P = 'alias.review11.test', {port}
print('alias-raw', talk(socket.create_connection((A, P), timeout=15), b'\x00ALIAS-PROBE\r\n'))
print('alias-tls-own-name', talk(socket.create_connection((A, P), timeout=15), hello(A)))
print('host-port', talk(socket.create_connection(('host.warden.internal', P), timeout=15), b'\x00HOSTPORT-PROBE\r\n'))
s, head = tunnel(A, P); print('alias-connect', head, talk(s, b'\x00ALIAS-TUNNEL-PROBE\r\n'))
"#
    );
    let args: Vec<String> = [
        "--add-host",
        "alias.review11.test=127.0.0.1",
        "--allow-domain",
        &format!("alias.review11.test:{port}"),
        "--allow-host-port",
        &port.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = run_python(&value, port, &args, &ev, &script);
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{so}\n{se}");
    for label in [
        "alias-raw",
        "alias-tls-own-name",
        "host-port",
        "alias-connect",
    ] {
        assert!(
            so.contains(&format!("{label} ")),
            "{label} did not run: {so}\n{se}"
        );
    }
    assert!(
        !so.contains(&value),
        "the real value reached the sandbox: {so}"
    );
    for c in up.connections() {
        let c = String::from_utf8_lossy(&c).into_owned();
        assert!(
            !c.contains("PROBE") && !c.contains("alias.review11.test"),
            "the sandbox's own bytes reached the server: {c:?}"
        );
    }
    let refused = |code: &str, protocol: &str, name: &str| {
        refused_with(&ev, code)
            .iter()
            .any(|e| e["protocol"] == protocol && e["name"] == name)
    };
    for protocol in ["tcp", "connect"] {
        assert!(
            refused("secret_needs_tls", protocol, "alias.review11.test"),
            "no {protocol} refusal of the alias as secret_needs_tls\n{so}"
        );
    }
    assert!(
        refused("terminated_address", "tcp", "host.warden.internal"),
        "no refusal of the host port as terminated_address\n{so}"
    );
    let terminated = crate::common::events(&ev).into_iter().any(|e| {
        e["event"] == "connection"
            && e["name"] == "alias.review11.test"
            && e["detail"]
                .as_str()
                .unwrap_or("")
                .contains("TLS terminated")
    });
    assert!(terminated, "the alias's TLS was not terminated\n{so}");
}

#[test]
fn a_name_with_request_rules_is_reached_only_through_tls_naming_it_by_any_name() {
    if !egress_available() {
        return;
    }
    let value = token();
    let up = leaky_server(&value);
    let port = up.port;
    let dir = TempDir::new("r11-rules");
    let ev = dir.path().join("events.jsonl");
    // No secret: request rules alone make the name one the terminator
    // serves, and its entry, an alias pinned where it is and a host port
    // must not carry requests no rule saw.
    let script = format!(
        r#"{PY_TALK}{PY_HELLO}
H, A, P = '{HOST}', 'alias.review11.test', {port}
print('silent', talk(socket.create_connection((H, P), timeout=15), b'\x00SILENT-PROBE\r\n', 0.7))
print('http', talk(socket.create_connection((H, P), timeout=15), f'DELETE /RULES-PROBE HTTP/1.1\r\nHost: {{H}}:{{P}}\r\n\r\n'.encode()))
s, head = tunnel(H, P); print('connect-raw', head, talk(s, b'\x00TUNNEL-PROBE\r\n'))
print('alias-raw', talk(socket.create_connection((A, P), timeout=15), b'\x00ALIAS-PROBE\r\n'))
print('alias-tls-own-name', talk(socket.create_connection((A, P), timeout=15), hello(A)))
print('host-port', talk(socket.create_connection(('host.warden.internal', P), timeout=15), b'\x00HOSTPORT-PROBE\r\n'))
"#
    );
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--allow-http"])
        .args(["--allow-request", &format!("GET {HOST}:{port}/**")])
        .args(["--allow-domain", &format!("{HOST}:{port}")])
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--add-host", "alias.review11.test=127.0.0.1"])
        .args(["--allow-domain", &format!("alias.review11.test:{port}")])
        .args(["--allow-host-port", &port.to_string()])
        .arg("--json-events")
        .arg(&ev)
        .args(["--", "python3", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{so}\n{se}");
    for label in [
        "silent",
        "http",
        "connect-raw",
        "alias-raw",
        "alias-tls-own-name",
        "host-port",
    ] {
        assert!(
            so.contains(&format!("{label} ")),
            "{label} did not run: {so}\n{se}"
        );
    }
    assert!(
        !so.contains(&value),
        "the server's answer reached the sandbox: {so}"
    );
    for c in up.connections() {
        assert!(
            c.is_empty(),
            "the server got {:?}",
            String::from_utf8_lossy(&c)
        );
    }
    let rules = refused_with(&ev, "request_rules_need_tls");
    for protocol in ["tcp", "http", "connect"] {
        assert!(
            rules.iter().any(|e| e["protocol"] == protocol),
            "no {protocol} refusal as request_rules_need_tls: {rules:?}\n{so}"
        );
    }
    let address = refused_with(&ev, "terminated_address");
    for name in ["alias.review11.test", "host.warden.internal"] {
        assert!(
            address.iter().any(|e| e["name"] == name),
            "no refusal of {name} as terminated_address: {address:?}\n{so}"
        );
    }
}

#[test]
fn a_placeholder_in_a_header_name_or_the_method_is_blocked_over_http1_and_http2() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], |_| {
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n".to_vec()]
    });
    let port = up.port;
    let dir = TempDir::new("r11-names");
    let ev = dir.path().join("events.jsonl");
    let url = format!("https://{HOST}:{port}");
    // TOKEN is this host's secret, OTHER another host's: neither may stand
    // in a header's name or as the method, in either protocol; the last
    // request (the placeholder in a value) is the control.
    let script = format!(
        r#"c() {{ curl -sS --noproxy '*' -o /dev/null -w "$1 %{{http_code}}\n" "$@"; }}
for v in --http1.1 --http2; do
c "$v" -H "$TOKEN: 1" "{url}/own-name"
c "$v" -H "x-$OTHER: 1" "{url}/other-name"
c "$v" -H "X-Up-$TOKEN-Case: 1" "{url}/inner-name"
c "$v" -X "$TOKEN" "{url}/method"
c "$v" -H "X-Ok: $TOKEN" "{url}/control"
done
"#
    );
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@{HOST}:{port}"))
        .args(["--secret", "OTHER@elsewhere.review11.test:443"])
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--upstream-ca", &ca.pem_path()])
        .arg("--json-events")
        .arg(&ev)
        .args(["--", "sh", "-c", &script])
        .env("TOKEN", token())
        .env("OTHER", token())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (so, se) = (stdout(&out), stderr(&out));
    let lines: Vec<&str> = so.lines().collect();
    assert_eq!(lines.len(), 10, "{so}\n{se}");
    for (i, line) in lines.iter().enumerate() {
        let want = if i % 5 == 4 { "200" } else { "403" };
        assert!(line.ends_with(want), "request {i}: {line}\n{so}\n{se}");
    }
    let seen = up.requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for r in &seen {
        assert_eq!(r.target, "/control", "{r:?}");
        assert!(
            r.headers
                .iter()
                .all(|(k, _)| !k.to_ascii_lowercase().contains("warden-secret-")),
            "{r:?}"
        );
    }
    // Recorded as the secret's blocked decisions, in both places (repeats
    // of a decision may be counted rather than kept one by one).
    let blocked: Vec<String> = crate::common::events(&ev)
        .into_iter()
        .filter(|e| e["event"] == "secret" && e["action"] == "blocked")
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    for (secret, place) in [
        ("TOKEN", "in a header name"),
        ("OTHER", "in a header name"),
        ("TOKEN", "in the method"),
    ] {
        let want = format!("the placeholder of secret {secret} {place}");
        assert!(
            blocked.iter().any(|d| d.contains(&want)),
            "no block of {want}: {blocked:?}"
        );
    }
}

/// Python that sends one chunked POST to `HOST:port` over TLS (trusting
/// `cafile`, or the sandbox's bundle) with `trailers` after its last
/// chunk, and prints the status line.
fn trailer_client(port: u16, cafile: &str, trailers: &str) -> String {
    format!(
        r#"import os, socket, ssl
ctx = ssl.create_default_context(cafile={cafile})
t = {trailers}.replace("TOKEN", os.environ.get("TOKEN", ""))
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1" if {cafile} else "{HOST}", {port}), timeout=15), server_hostname="{HOST}")
s.sendall(("POST /trailers HTTP/1.1\r\nHost: {HOST}:{port}\r\nTransfer-Encoding: chunked\r\nTrailer: X-Leak\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n" + t + "\r\n").encode())
print(s.recv(100).split(b"\r\n")[0].decode())
"#
    )
}

#[test]
fn trailers_the_sandbox_sends_never_reach_a_secrets_host() {
    use http_body_util::BodyExt;
    if !egress_available() {
        return;
    }
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<String>)>>>;
    let ca = TestCa::new();
    let seen: Seen = Default::default();
    let s = seen.clone();
    let (port, _runtime) =
        crate::common::upstream::https_server(&ca, &[HOST], &[b"http/1.1"], move || {
            let s = s.clone();
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let s = s.clone();
                async move {
                    let path = req.uri().path().to_string();
                    let trailers: Vec<String> = match req.into_body().collect().await {
                        Ok(c) => c
                            .trailers()
                            .map(|t| {
                                t.iter()
                                    .map(|(k, v)| {
                                        format!("{k}: {}", String::from_utf8_lossy(v.as_bytes()))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        Err(_) => vec!["(unreadable body)".to_string()],
                    };
                    s.lock().unwrap().push((path, trailers));
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"ok\n")),
                    ))
                }
            })
        });
    // The server reads trailers: one sent to it directly is recorded.
    let direct = Command::new("python3")
        .args([
            "-c",
            &trailer_client(
                port,
                &format!("{:?}", ca.pem_path()),
                "'X-Leak: direct\\r\\n'",
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&direct).trim(),
        "HTTP/1.1 200 OK",
        "{}",
        stderr(&direct)
    );
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![("/trailers".to_string(), vec!["x-leak: direct".to_string()])]
    );
    seen.lock().unwrap().clear();
    // Through the terminator, a trailer holding the placeholder (and one
    // without) never arrives: trailers of a request are dropped.
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@{HOST}:{port}"))
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--upstream-ca", &ca.pem_path()])
        .args([
            "--",
            "python3",
            "-c",
            &trailer_client(port, "None", "'X-Leak: TOKEN\\r\\nX-Fine: 1\\r\\n'"),
        ])
        .env("TOKEN", token())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(stdout(&out).trim(), "HTTP/1.1 200 OK", "{}", stderr(&out));
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![("/trailers".to_string(), Vec::<String>::new())]
    );
}

#[test]
fn ssh_to_a_secrets_host_goes_only_on_a_port_the_owner_names_and_its_refusal_names_the_option() {
    if !egress_available() {
        return;
    }
    let value = token();
    let up = leaky_server(&value);
    let ssh = Upstream::start(b"SSH-2.0-forge_server\r\n");
    let dir = TempDir::new("r29-plain-port");
    let script = format!(
        r#"{PY_TALK}
print('ssh', talk(socket.create_connection(('{HOST}', {p}), timeout=15), b'SSH-2.0-OpenSSH_9.6\r\n'))
"#,
        p = ssh.port
    );
    let run = |plain: bool, ev: &std::path::Path| {
        let mut args = vec!["--allow-domain".to_string(), format!("{HOST}:{}", ssh.port)];
        if plain {
            args.push("--secret-plain-port".into());
            args.push(format!("{HOST}:{}", ssh.port));
        }
        run_python(&value, up.port, &args, ev, &script)
    };
    // Without the owner's word: refused as what is not TLS to a secret's
    // host, and the refusal carries, as data, which option would let it
    // go and its entry; the CLI words it as its flag, the words below
    // the door name no option's spelling.
    let ev = dir.path().join("refused.jsonl");
    let out = run(false, &ev);
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{so}\n{se}");
    assert!(!so.contains("forge_server"), "{so}");
    assert!(ssh.connections().is_empty(), "{:?}", ssh.connections());
    let refused = refused_with(&ev, "secret_needs_tls");
    let entry = format!("{HOST}:{}", ssh.port);
    assert!(
        refused.iter().any(|e| {
            e["reason"]["field"] == "egress.secret_plain_ports"
                && e["reason"]["allow"]["field"] == "egress.secret_plain_ports"
                && e["reason"]["allow"]["value"] == entry.as_str()
        }),
        "{refused:?}\n{se}"
    );
    assert!(
        refused.iter().all(|e| e["detail"]
            .as_str()
            .is_some_and(|d| !d.contains("secret_plain_ports") && !d.contains("--secret"))),
        "{refused:?}"
    );
    assert!(
        se.contains(&format!("`--secret-plain-port {entry}` would allow it")),
        "{se}"
    );
    // With it: SSH's bytes reach the server and its answer comes back.
    let ev = dir.path().join("allowed.jsonl");
    let out = run(true, &ev);
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{so}\n{se}");
    assert!(so.contains("SSH-2.0-forge_server"), "{so}\n{se}");
    assert!(
        ssh.connections()
            .iter()
            .any(|c| c.starts_with(b"SSH-2.0-OpenSSH_9.6")),
        "{:?}",
        ssh.connections()
    );
}

#[test]
fn a_value_stored_through_a_secrets_host_never_comes_back_real_through_a_name_pinned_beside_it() {
    // Outside review 29, finding 1: one application on two TLS ports
    // sharing its storage; the value stored through the secret's name
    // and port came back real through another name pinned to the same
    // address on the other port (spliced). The reader verifies nothing
    // (`-k`), as an attacker's would not.
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let note = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let app = |note: std::sync::Arc<std::sync::Mutex<Vec<u8>>>| {
        move |r: &crate::common::upstream::RawRequest| {
            let body = if r.target == "/store" {
                *note.lock().unwrap() = r.body.clone();
                b"stored".to_vec()
            } else {
                note.lock().unwrap().clone()
            };
            let mut out = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            out.extend_from_slice(&body);
            vec![out]
        }
    };
    let names = [HOST, "other.review29.test"];
    let own = RawUpstream::start(&ca, &names, app(note.clone()));
    let other = RawUpstream::start(&ca, &names, app(note.clone()));
    let value = token();
    let dir = TempDir::new("r29-beside");
    let ev = dir.path().join("events.jsonl");
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@{HOST}:{}", own.port))
        .args(["--secret-in-body", "TOKEN"])
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--add-host", "other.review29.test=127.0.0.1"])
        .args([
            "--allow-domain",
            &format!("other.review29.test:{}", other.port),
        ])
        .args(["--upstream-ca", &ca.pem_path()])
        .arg("--json-events")
        .arg(&ev)
        .args([
            "--",
            "sh",
            "-c",
            &format!(
                r#"curl -sS --noproxy '*' -d "note=$TOKEN" "https://{HOST}:{}/store"; echo
curl -sSk --noproxy '*' "https://other.review29.test:{}/load"; echo
curl -sS --noproxy '*' -o /dev/null -w 'stored-beside %{{http_code}}\n' -d "note=$TOKEN" "https://other.review29.test:{}/store""#,
                own.port, other.port, other.port
            ),
        ])
        .env("TOKEN", &value)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(
        note.lock().unwrap().ends_with(value.as_bytes()),
        "the secret's own host did not get the value: {so}\n{se}"
    );
    assert!(so.starts_with("stored\n"), "{so}\n{se}");
    assert!(!so.contains(&value), "the real value came back: {so}");
    assert!(so.contains("note=warden-secret-"), "{so}\n{se}");
    // No placeholder is put in towards the name beside: blocked.
    assert!(so.contains("stored-beside "), "{so}\n{se}");
    assert!(!so.contains("stored-beside 200"), "{so}\n{se}");
    assert!(se.contains("blocked"), "{se}");
}

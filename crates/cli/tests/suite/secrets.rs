//! Secrets against real HTTPS servers on the host's loopback: each test
//! makes its own authority, starts servers that record every request and
//! echo it back, runs real clients inside a sandbox that holds only a
//! placeholder, and checks what reached the servers and what came back.

use crate::common;
use crate::common::upstream::{https_server, TestCa};
use crate::common::*;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as a test server received it.
#[derive(Debug, Clone)]
struct Seen {
    version: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTPS server on 127.0.0.1 for `names`, offering HTTP/2 (when `h2`)
/// and HTTP/1.1, that records each request and answers with a dump of it.
struct Echo {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Echo {
    fn start(ca: &TestCa, names: &[&str], h2: bool) -> Echo {
        let alpn: &[&[u8]] = if h2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let (port, runtime) = https_server(ca, names, alpn, move || {
            let s = s.clone();
            hyper::service::service_fn(move |req| {
                let s = s.clone();
                async move { Ok::<_, std::convert::Infallible>(echo(req, &s).await) }
            })
        });
        Echo {
            port,
            seen,
            _runtime: runtime,
        }
    }

    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn echo(
    req: hyper::Request<hyper::body::Incoming>,
    seen: &Mutex<Vec<Seen>>,
) -> hyper::Response<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let s = Seen {
        version: format!("{:?}", parts.version),
        target: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    };
    let mut dump = format!("{} {}\n", s.version, s.target);
    for (k, v) in &s.headers {
        dump.push_str(&format!("{k}: {v}\n"));
    }
    dump.push('\n');
    dump.push_str(&String::from_utf8_lossy(&s.body));
    // The request's Authorization comes back in a trailer too, as servers
    // that report errors in trailers (gRPC) may do.
    let mut trailers = hyper::HeaderMap::new();
    if let Some(v) = parts.headers.get("authorization") {
        trailers.insert("x-echo-trailer", v.clone());
    }
    seen.lock().unwrap().push(s);
    let auth = parts
        .headers
        .get("authorization")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let value = auth.strip_prefix("Bearer ").unwrap_or(&auth).to_string();
    let target = parts.uri.path();
    if target == "/forms" {
        // The value as servers spell it back: JSON escapes, percent
        // encoding in lower case, hexadecimal.
        let pct: String = value
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02x}")
                }
            })
            .collect();
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        let json = value.replace('/', "\\/");
        dump = format!("json={json}\npct={pct}\nhex={hex}\n");
    }
    // `/gzip` compresses its answer though nobody asked; `/not-gzip`
    // says it did and did not.
    let (encoding, dump) = match target {
        "/gzip" => {
            use std::io::Write;
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(dump.as_bytes()).unwrap();
            ("gzip", e.finish().unwrap())
        }
        "/not-gzip" => ("gzip", dump.into_bytes()),
        _ => ("identity", dump.into_bytes()),
    };
    hyper::Response::builder()
        .header("content-encoding", encoding)
        .header("x-echo-auth", "see body")
        .body(
            Full::new(Bytes::from(dump))
                .with_trailers(async move { Some(Ok(trailers)) })
                .boxed(),
        )
        .unwrap()
}

/// A value that looks like a real token and occurs nowhere by chance.
fn token() -> String {
    format!("ghp_{}", unique("tok").replace('-', "x"))
}

/// `warden run` with `TOKEN` (and `OTHER_TOKEN`) in its environment.
fn run_with_token(value: &str, args: &[&str], script: &str) -> std::process::Output {
    Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args(args)
        .args(["--", "sh", "-c", script])
        .env("TOKEN", value)
        .env("OTHER_TOKEN", format!("{value}-other"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A fresh authority and an [`Echo`] for `names` on it; `None` when this
/// kernel cannot wire a sandbox's network (`egress_available` says why).
fn echo_for(names: &[&str], h2: bool) -> Option<(TestCa, Echo)> {
    if !egress_available() {
        return None;
    }
    let ca = TestCa::new();
    let up = Echo::start(&ca, names, h2);
    Some((ca, up))
}

/// [`run_with_token`] with `TOKEN` a secret for `api.secret.test:PORT`,
/// the name pinned to the host's loopback and `ca` trusted upstream, and
/// `args` after those.
fn run_with_secret(
    value: &str,
    ca: &TestCa,
    port: impl std::fmt::Display,
    args: &[&str],
    script: &str,
) -> std::process::Output {
    let secret = format!("TOKEN@api.secret.test:{port}");
    let pem = ca.pem_path();
    let mut all = vec![
        "--secret",
        &secret,
        "--add-host",
        "api.secret.test=127.0.0.1",
        "--upstream-ca",
        &pem,
    ];
    all.extend_from_slice(args);
    run_with_token(value, &all, script)
}

fn secret_events(path: &Path) -> Vec<serde_json::Value> {
    events(path)
        .into_iter()
        .filter(|e| e["event"] == "secret")
        .collect()
}

#[test]
fn a_placeholder_reaches_its_host_as_the_real_value_and_comes_back_scrubbed() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], false) else {
        return;
    };
    let value = token();
    let dir = TempDir::new("secrets-ev");
    let ev = dir.path().join("events.jsonl");
    let port = up.port.to_string();
    let url = format!("https://api.secret.test:{port}");
    let out = run_with_secret(
        &value,
        &ca,
        &port,
        &["--json-events", ev.to_str().unwrap()],
        &format!(
            r#"case "$TOKEN" in warden-secret-*) echo placeholder-ok;; esac
curl -sS --noproxy '*' -H "Authorization: Bearer $TOKEN" "{url}/bearer"
echo; echo ---
curl -sS --noproxy '*' -u "user:$TOKEN" "{url}/basic"
echo; echo ---
curl -sS "{url}/query/$TOKEN?token=$TOKEN&x=1"
"#
        ),
    );
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    assert!(s.contains("placeholder-ok"), "{s}");
    let seen = up.requests();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {value}").as_str())
    );
    let basic = seen[1].header("authorization").unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(basic.strip_prefix("Basic ").unwrap())
        .unwrap();
    assert_eq!(decoded, format!("user:{value}").as_bytes());
    assert_eq!(seen[2].target, format!("/query/{value}?token={value}&x=1"));
    // The echoes held the real value; the sandbox got them scrubbed.
    assert!(
        !s.contains(&value),
        "the real value reached the sandbox: {s}"
    );
    assert!(s.contains("authorization: Bearer warden-secret-"), "{s}");
    assert!(!s.contains(basic), "{s}");
    let events = secret_events(&ev);
    assert!(
        events
            .iter()
            .any(|e| e["action"] == "substituted" && e["name"] == "TOKEN"),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e["action"] == "scrubbed"),
        "{events:?}"
    );
    let all = std::fs::read_to_string(&ev).unwrap();
    assert!(!all.contains(&value), "an event holds the real value");
    assert!(!stderr(&out).contains(&value));
}

#[test]
fn a_placeholder_sent_to_another_host_is_blocked_and_logged() {
    let Some((ca, up)) = echo_for(&["api.secret.test", "other.secret.test"], true) else {
        return;
    };
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_port = plain.local_addr().unwrap().port();
    let plain_seen = Arc::new(Mutex::new(0usize));
    let ps = plain_seen.clone();
    std::thread::spawn(move || {
        for c in plain.incoming().flatten() {
            *ps.lock().unwrap() += 1;
            drop(c);
        }
    });
    let value = token();
    let dir = TempDir::new("secrets-ev");
    let ev = dir.path().join("events.jsonl");
    let port = up.port.to_string();
    let out = run_with_token(
        &value,
        &[
            "--secret",
            &format!("TOKEN@api.secret.test:{port}"),
            "--secret",
            &format!("OTHER_TOKEN@other.secret.test:{port}"),
            "--allow-domain",
            &format!("plain.test:{plain_port}"),
            // Pinned where the secrets' hosts are, plain.test is served
            // as one of them, and plain HTTP to it refused as to them
            // (`secret_needs_tls`) before its placeholder is read: the
            // owner's opt-in lets it be, so the placeholder is what
            // refuses it here.
            "--secret-plain-port",
            &format!("plain.test:{plain_port}"),
            "--allow-domain",
            &format!(".wild.test:{port}"),
            "--allow-http",
            "--add-host",
            "api.secret.test=127.0.0.1",
            "--add-host",
            "other.secret.test=127.0.0.1",
            "--add-host",
            "plain.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
            "--json-events",
            ev.to_str().unwrap(),
        ],
        &format!(
            r#"curl -sS --noproxy '*' -o /dev/null -w 'other %{{http_code}}\n' -H "Authorization: Bearer $TOKEN" "https://other.secret.test:{port}/"
curl -sS --noproxy '*' -o /dev/null -w 'basic %{{http_code}}\n' -u "me:$TOKEN" "https://other.secret.test:{port}/"
curl -sS --noproxy '*' -o /dev/null -w 'plain %{{http_code}}\n' "http://plain.test:{plain_port}/?t=$TOKEN"
curl -sS -o /dev/null -w 'proxied %{{http_code}}\n' -H "X-Token: $TOKEN" "http://plain.test:{plain_port}/"
curl -sS -o /dev/null -w 'connect %{{http_connect}}\n' "https://$TOKEN.wild.test:{port}/"
"#
        ),
    );
    let s = stdout(&out);
    assert!(s.contains("other 403"), "{s}\n{}", stderr(&out));
    assert!(s.contains("basic 403"), "{s}");
    assert!(s.contains("plain 403"), "{s}");
    assert!(s.contains("proxied 403"), "{s}");
    assert!(s.contains("connect 403"), "{s}");
    assert!(up.requests().is_empty(), "{:?}", up.requests());
    assert_eq!(*plain_seen.lock().unwrap(), 0);
    let events = secret_events(&ev);
    // Repeats within a second are counted in a secrets_aggregated record.
    let repeats: u64 = common::events(&ev)
        .iter()
        .filter(|e| {
            e["event"] == "secrets_aggregated" && e["action"] == "blocked" && e["name"] == "TOKEN"
        })
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    let blocked = events
        .iter()
        .filter(|e| e["action"] == "blocked" && e["name"] == "TOKEN")
        .count() as u64;
    assert_eq!(blocked + repeats, 5, "{events:?}");
    assert!(stderr(&out).contains("secret TOKEN: blocked"));
}

#[test]
fn the_real_value_is_nowhere_inside_the_sandbox() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], false) else {
        return;
    };
    let value = token();
    let rw = TempDir::new("secrets-rw");
    // What the sandbox wrote goes to `out`, which the scan leaves out; the
    // rest of the workspace is scanned like every other place it can write.
    let out = rw.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let port = up.port.to_string();
    let marker = unique("secret-scan");
    // Every mount the sandbox has that could hold the value: the writable
    // ones (the workspace, home, /tmp, its root if writable) and every
    // tmpfs or overlay (its root, which warden filled), each scanned
    // whole without crossing into another mount; not the host's read-only
    // system directories (a bind of /usr is 1.2 GB and was never the
    // sandbox's to write), nor /proc and /sys (their environs and command
    // lines are read on their own).
    let script = format!(
        r#"env > {out}/env
cat /proc/self/environ > {out}/self-environ
cat /proc/[0-9]*/environ > {out}/environs 2>/dev/null
cat /proc/[0-9]*/cmdline > {out}/cmdlines 2>/dev/null
curl -sS --noproxy '*' -H "Authorization: Bearer $TOKEN" "https://api.secret.test:{port}/" > {out}/echo
while read -r id parent dev root mnt opts rest; do
  fs=" $rest"; fs=${{fs#* - }}; fs=${{fs%% *}}
  case "$fs" in proc|sysfs|cgroup|cgroup2|devpts|devtmpfs|mqueue|securityfs|debugfs|tracefs) continue ;; esac
  case "$opts,$fs" in rw*|*,tmpfs|*,overlay) echo "$mnt" ;; esac
done < /proc/self/mountinfo > {out}/mounts
while read -r m; do
  find "$m" -xdev -path {out} -prune -o -type f -readable -print 2>/dev/null
done < {out}/mounts | while read -r f; do
  [ -f "$f" ] || continue # a device bound over a file (/dev/zero) is listed as one
  cat "$f"; echo "$f" >> {out}/scanned
done > {out}/files 2>/dev/null
touch {out}/ready
sleep 30 # {marker}
"#,
        out = out.display()
    );
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--rw", rw.str()])
        .args([
            "--secret",
            &format!("TOKEN@api.secret.test:{port}"),
            "--add-host",
            "api.secret.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("TOKEN", &value)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ready = out.join("ready");
    for _ in 0..600 {
        if ready.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ready.exists(), "the sandbox never got ready");
    assert_eq!(
        up.requests()[0].header("authorization"),
        Some(format!("Bearer {value}").as_str()),
        "the request did not carry the value: the scan would prove nothing"
    );
    // The scan reached the places the value could have been left: the
    // sandbox's root, its workspace, its /tmp (a mount, or part of a
    // scanned root), and the files in them.
    let mounts = std::fs::read_to_string(out.join("mounts")).unwrap_or_default();
    let mounts: Vec<&str> = mounts.lines().collect();
    for m in ["/", rw.str()] {
        assert!(mounts.contains(&m), "{m} was not scanned: {mounts:?}");
    }
    let scanned = std::fs::read_to_string(out.join("scanned")).unwrap_or_default();
    assert!(
        scanned
            .lines()
            .any(|f| f.starts_with("/tmp/") || f.starts_with("/etc/")),
        "the scan read no file of the sandbox's own root: {scanned}"
    );
    for f in [
        "env",
        "self-environ",
        "environs",
        "cmdlines",
        "echo",
        "files",
    ] {
        let content = std::fs::read(out.join(f)).unwrap_or_default();
        assert!(
            find(&content, value.as_bytes()).is_none(),
            "the real value is in the sandbox's {f}"
        );
    }
    let env = std::fs::read_to_string(out.join("env")).unwrap();
    assert!(env.contains("TOKEN=warden-secret-"), "{env}");

    // From outside, as root: the memory of every process of the sandbox
    // (its init, a copy of the supervisor, included; not the supervisor).
    if is_root() {
        let supervisor = child.id() as i32;
        let mut scanned = 0;
        for pid in pids_with_marker(&marker) {
            if pid == supervisor {
                continue;
            }
            for p in std::iter::once(pid).chain(descendants(pid)) {
                let hits = scan_memory(p, value.as_bytes());
                assert_eq!(hits, 0, "the real value is in the memory of PID {p}");
                scanned += 1;
            }
        }
        assert!(scanned >= 2, "found only {scanned} processes to scan");
    } else {
        skip("scanning the sandbox's memory needs root");
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            out.push(c);
            out.extend(descendants(c));
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How many times `needle` occurs in the readable memory of `pid`.
fn scan_memory(pid: i32, needle: &[u8]) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let Ok(mut mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        return 0;
    };
    let mut hits = 0;
    for line in maps.lines() {
        let mut parts = line.split_whitespace();
        let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
            continue;
        };
        if !perms.starts_with('r') || line.contains("[vvar") || line.contains("[vsyscall]") {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let mut buf = vec![0u8; (b - a) as usize];
        if mem.seek(SeekFrom::Start(a)).is_err() || mem.read_exact(&mut buf).is_err() {
            continue;
        }
        let mut at = 0;
        while let Some(i) = find(&buf[at..], needle) {
            hits += 1;
            at += i + 1;
        }
    }
    hits
}

#[test]
fn curl_python_and_node_trust_the_sandbox_authority_and_http2_works() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], true) else {
        return;
    };
    let value = token();
    let port = up.port.to_string();
    let url = format!("https://api.secret.test:{port}");
    let node = if Path::new("/usr/bin/node").exists() || Path::new("/usr/local/bin/node").exists() {
        format!(
            r#"node -e 'fetch("{url}/node", {{headers: {{authorization: "Bearer " + process.env.TOKEN}}}}).then(r => r.text()).then(t => console.log("node", t.split("\n")[0]))'"#
        )
    } else {
        eprintln!("skipped part: node is not installed, so node's fetch is not tried");
        String::new()
    };
    let out = run_with_secret(
        &value,
        &ca,
        &port,
        &[],
        &format!(
            r#"curl -sS --http2 --noproxy '*' -H "Authorization: Bearer $TOKEN" -o /dev/null -w 'curl %{{http_version}}\n' "{url}/curl"
python3 -c '
import os, urllib.request
r = urllib.request.Request("{url}/python", headers={{"Authorization": "Bearer " + os.environ["TOKEN"]}})
print("python", urllib.request.urlopen(r, timeout=10).read().decode().splitlines()[0])
'
{node}
"#
        ),
    );
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    assert!(s.contains("curl 2\n"), "{s}");
    assert!(s.contains("python HTTP/"), "{s}");
    let seen = up.requests();
    let by_path = |p: &str| seen.iter().find(|r| r.target == p);
    let curl = by_path("/curl").expect("curl's request");
    assert_eq!(curl.version, "HTTP/2.0");
    assert_eq!(
        curl.header("authorization"),
        Some(format!("Bearer {value}").as_str())
    );
    assert_eq!(
        by_path("/python").and_then(|r| r.header("authorization")),
        Some(format!("Bearer {value}").as_str())
    );
    if !node.is_empty() {
        assert!(s.contains("node HTTP/"), "{s}\n{}", stderr(&out));
        assert_eq!(
            by_path("/node").and_then(|r| r.header("authorization")),
            Some(format!("Bearer {value}").as_str())
        );
    }
}

#[test]
fn a_host_without_a_secret_is_still_spliced_with_its_own_certificate() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], false) else {
        return;
    };
    // A server of its own, at another address than the secret's host: a
    // name pinned where a secret's host is would be served as that host
    // (terminated and scrubbed, see the egress suite's `secret_ports`),
    // so the secret's host is pinned elsewhere here (an address this run
    // never connects to).
    let plain = Echo::start(&ca, &["plain.test"], false);
    let value = token();
    let port = up.port.to_string();
    let plain_port = plain.port.to_string();
    let out = run_with_token(
        &value,
        &[
            "--secret",
            &format!("TOKEN@api.secret.test:{port}"),
            "--allow-domain",
            &format!("plain.test:{plain_port}"),
            "--add-host",
            "api.secret.test=10.255.0.7",
            "--add-host",
            "plain.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
            "--ro",
            ca.dir.str(),
        ],
        &format!(
            r#"curl -sS -v --noproxy '*' --cacert {ca} -o /dev/null "https://plain.test:{plain_port}/" 2>&1 | grep -i issuer
"#,
            ca = ca.pem_path()
        ),
    );
    let s = stdout(&out);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 1, "{s}\n{}", stderr(&out));
    assert!(lines[0].contains("warden test upstream CA"), "{s}");
}

#[test]
fn a_secret_cannot_also_be_passed_into_the_sandbox() {
    let out = run_with_token(
        "v",
        &["--secret", "TOKEN@api.secret.test", "--pass-env", "TOKEN"],
        "true",
    );
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("--pass-env TOKEN"),
        "{}",
        stderr(&out)
    );
    let out = run_with_token("v", &["--secret", "TOKEN"], "true");
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("NAME@HOST"), "{}", stderr(&out));
}

#[test]
fn file_and_command_sources_are_read_on_the_host_and_bodies_are_substituted_only_when_asked() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], false) else {
        return;
    };
    let keys = TempDir::new("secrets-keys");
    let file_value = token();
    let cmd_value = token();
    std::fs::write(keys.path().join("file"), format!("{file_value}\n")).unwrap();
    std::fs::write(keys.path().join("cmd"), format!("{cmd_value}\n")).unwrap();
    let port = up.port.to_string();
    let url = format!("https://api.secret.test:{port}");
    let out = run_with_token(
        "unused",
        &[
            "--secret",
            &format!(
                "FILE_TOKEN=file:{}@api.secret.test:{port}",
                keys.path().join("file").display()
            ),
            "--secret",
            &format!(
                "CMD_TOKEN=cmd:cat {}@api.secret.test:{port}",
                keys.path().join("cmd").display()
            ),
            "--secret-in-body",
            "FILE_TOKEN",
            "--env",
            &format!("LEAKED={file_value}"),
            "--add-host",
            "api.secret.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
        ],
        &format!(
            r#"curl -sS --noproxy '*' -o /dev/null -d "a=$FILE_TOKEN&b=$CMD_TOKEN" "{url}/body"
curl -sS --noproxy '*' -o /dev/null -w 'leak %{{http_code}}\n' -H "X-Key: $LEAKED" "{url}/leak"
"#
        ),
    );
    let s = stdout(&out);
    assert!(s.contains("leak 403"), "{s}\n{}", stderr(&out));
    let seen = up.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let body = String::from_utf8_lossy(&seen[0].body).into_owned();
    assert!(
        body.starts_with(&format!("a={file_value}&b=warden-secret-")),
        "{body}"
    );
    assert_eq!(
        seen[0].header("content-length"),
        Some(body.len().to_string().as_str())
    );
    assert!(!body.contains(&cmd_value));
    assert!(stderr(&out).contains("the real value of secret FILE_TOKEN"));
}

#[test]
fn requests_outside_the_secret_rules_are_refused_before_reaching_the_host() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], true) else {
        return;
    };
    let value = token();
    let dir = TempDir::new("secrets-ev");
    let ev = dir.path().join("events.jsonl");
    let port = up.port.to_string();
    let url = format!("https://api.secret.test:{port}");
    let out = run_with_secret(
        &value,
        &ca,
        &port,
        &[
            "--secret-rule",
            "GET api.secret.test/repos/acme/*",
            "--json-events",
            ev.to_str().unwrap(),
        ],
        &format!(
            r#"curl -sS --noproxy '*' -o /dev/null -w 'acme %{{http_code}}\n' -H "Authorization: Bearer $TOKEN" "{url}/repos/acme/widget?x=1"
curl -sS --noproxy '*' -w ' other %{{http_code}}\n' -H "Authorization: Bearer $TOKEN" "{url}/repos/other/widget"
curl -sS --noproxy '*' -o /dev/null -w 'post %{{http_code}}\n' -d x=1 "{url}/repos/acme/widget"
head -c 524288 /dev/zero > /tmp/big
curl -sS --noproxy '*' -o /dev/null -w 'big post %{{http_code}}\n' -H 'Expect:' --data-binary @/tmp/big "{url}/repos/acme/widget"
curl -sS --http1.1 --noproxy '*' -o /dev/null -w 'big http1 post %{{http_code}}\n' -H 'Expect:' --data-binary @/tmp/big "{url}/repos/acme/widget"
"#
        ),
    );
    let s = stdout(&out);
    assert!(s.contains("acme 200"), "{s}\n{}", stderr(&out));
    assert!(s.contains("other 403"), "{s}");
    assert!(s.contains("denied by the secret's request rules"), "{s}");
    assert!(!s.contains("--secret-rule"), "{s}");
    assert!(s.lines().any(|l| l == "post 403"), "{s}");
    // A refused body the proxy never reads still lets its client read the
    // answer (warden's side closes lingering, never with a reset).
    assert!(s.contains("big post 403"), "{s}\n{}", stderr(&out));
    assert!(s.contains("big http1 post 403"), "{s}\n{}", stderr(&out));
    let seen = up.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].target, "/repos/acme/widget?x=1");
    let denied: Vec<_> = events(&ev)
        .into_iter()
        .filter(|e| e["event"] == "connection" && e["protocol"] == "request")
        .collect();
    // The three refused POSTs are one decision, repeated.
    assert_eq!(denied.len(), 2, "{denied:?}");
    assert!(denied.iter().all(|e| e["allowed"] == false));
    assert!(
        denied
            .iter()
            .all(|e| e["reason"]["code"] == "secret_rule"
                && e["reason"]["field"] == "secrets.*.allow"),
        "{denied:?}"
    );
    // The CLI says the flag and the rule that would allow the request.
    assert!(
        stderr(&out)
            .contains("(`--secret-rule 'GET api.secret.test/repos/other/widget'` would allow it)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn secrets_work_for_an_unprivileged_user_too() {
    if !egress_available() {
        return;
    }
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let ca = TestCa::new();
    let up = Echo::start(&ca, &["api.secret.test"], false);
    let value = token();
    let port = up.port.to_string();
    let out = who
        .command(who.bin.to_str().unwrap())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@api.secret.test:{port}"))
        .args([
            "--add-host",
            "api.secret.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
            "--",
            "sh",
            "-c",
            &format!(
                r#"curl -sS --noproxy '*' -H "Authorization: Bearer $TOKEN" "https://api.secret.test:{port}/rootless""#
            ),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TOKEN", &value)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(
        s.contains("authorization: Bearer warden-secret-"),
        "{s}\n{}",
        stderr(&out)
    );
    assert!(!s.contains(&value));
    assert_eq!(
        up.requests()[0].header("authorization"),
        Some(format!("Bearer {value}").as_str())
    );
}

#[test]
fn a_silent_terminated_connection_is_closed_after_the_idle_timeout() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], false) else {
        return;
    };
    let port = up.port;
    let started = std::time::Instant::now();
    let out = run_with_secret(
        "value-unused",
        &ca,
        port,
        &["--egress-idle-timeout", "1s"],
        &format!(
            r#"python3 -c '
import socket, ssl
ctx = ssl.create_default_context()
s = ctx.wrap_socket(socket.create_connection(("api.secret.test", {port})), server_hostname="api.secret.test")
print("handshake ok")
s.settimeout(20)
try:
    print("read", s.recv(10))
except Exception as e:
    print("read", type(e).__name__)
'"#
        ),
    );
    let s = stdout(&out);
    assert!(s.contains("handshake ok"), "{s}\n{}", stderr(&out));
    assert!(s.contains("read "), "{s}");
    assert!(!s.contains("TimeoutError") && !s.contains("timeout"), "{s}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_request_for_another_host_on_a_terminated_connection_is_refused() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], true) else {
        return;
    };
    let value = token();
    let port = up.port.to_string();
    let out = run_with_secret(
        &value,
        &ca,
        &port,
        &[],
        &format!(
            r#"for v in --http1.1 --http2; do
curl -sS $v --noproxy '*' -o /dev/null -w "fronted %{{http_code}}\n" -H "Host: tenant.example" -H "Authorization: Bearer $TOKEN" "https://api.secret.test:{port}/"
done
"#
        ),
    );
    let s = stdout(&out);
    assert_eq!(s.matches("fronted 421").count(), 2, "{s}\n{}", stderr(&out));
    assert!(up.requests().is_empty(), "{:?}", up.requests());
}

#[test]
fn two_secrets_may_read_the_same_host_variable() {
    let Some((ca, up)) = echo_for(&["a.secret.test", "b.secret.test"], false) else {
        return;
    };
    let value = token();
    let port = up.port.to_string();
    let out = run_with_token(
        &value,
        &[
            "--secret",
            &format!("A=env:TOKEN@a.secret.test:{port}"),
            "--secret",
            &format!("B=env:TOKEN@b.secret.test:{port}"),
            "--add-host",
            "a.secret.test=127.0.0.1",
            "--add-host",
            "b.secret.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
        ],
        &format!(
            r#"[ "$A" != "$B" ] && echo distinct
curl -sS --noproxy '*' -o /dev/null -H "Authorization: Bearer $A" "https://a.secret.test:{port}/a"
curl -sS --noproxy '*' -o /dev/null -H "Authorization: Bearer $B" "https://b.secret.test:{port}/b"
"#
        ),
    );
    assert!(stdout(&out).contains("distinct"), "{}", stderr(&out));
    let seen = up.requests();
    assert_eq!(seen.len(), 2, "{seen:?} {}", stderr(&out));
    for r in &seen {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {value}").as_str())
        );
    }
}

#[test]
fn a_profiles_secrets_section_works_like_the_flags() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], true) else {
        return;
    };
    let value = token();
    let port = up.port;
    let dir = TempDir::new("secrets-profile");
    let profile = dir.path().join("agent.yaml");
    std::fs::write(
        &profile,
        format!(
            r#"name: agent
egress:
  hosts: {{ api.secret.test: 127.0.0.1 }}
secrets:
  GH:
    from_env: TOKEN
    hosts: ["api.secret.test:{port}"]
    allow: ["GET api.secret.test/repos/acme/*"]
"#
        ),
    )
    .unwrap();
    let validate = Command::new(warden_bin())
        .args(["profile", "validate", profile.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(validate.status.success(), "{}", stderr(&validate));
    let url = format!("https://api.secret.test:{port}");
    let out = run_with_token(
        &value,
        &[
            "-P",
            profile.to_str().unwrap(),
            "--upstream-ca",
            &ca.pem_path(),
        ],
        &format!(
            r#"case "$GH" in warden-secret-*) echo placeholder-ok;; esac
curl -sS --noproxy '*' -o /dev/null -w 'acme %{{http_code}}\n' -H "Authorization: Bearer $GH" "{url}/repos/acme/x"
curl -sS --noproxy '*' -o /dev/null -w 'other %{{http_code}}\n' -H "Authorization: Bearer $GH" "{url}/repos/other/x"
"#
        ),
    );
    let s = stdout(&out);
    assert!(s.contains("placeholder-ok"), "{s}\n{}", stderr(&out));
    assert!(s.contains("acme 200"), "{s}\n{}", stderr(&out));
    assert!(s.contains("other 403"), "{s}");
    let seen = up.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {value}").as_str())
    );
    // Two sources for one secret: refused, at the second source's line in
    // the profile and naming the profile's keys (not the flag).
    std::fs::write(
        &profile,
        "secrets:\n  GH:\n    from_env: TOKEN\n    from_file: /etc/hostname\n    hosts: [a.test]\n",
    )
    .unwrap();
    let out = run_with_token(&value, &["-P", profile.to_str().unwrap()], "true");
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert!(
        err.contains("agent.yaml:4:16: error: secret `GH` has a second source: `from_file` here and `from_env` at line 3"),
        "{err}"
    );
    assert!(!err.contains("--secret "), "{err}");
}

#[test]
fn the_real_value_echoed_in_a_trailer_comes_back_scrubbed() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], true) else {
        return;
    };
    let value = token();
    let port = up.port.to_string();
    let url = format!("https://api.secret.test:{port}");
    let out = run_with_secret(
        &value,
        &ca,
        &port,
        &[],
        &format!(
            r#"curl -sv --http2 --noproxy '*' -H "Authorization: Bearer $TOKEN" -o /dev/null "{url}/trailer" 2>&1"#
        ),
    );
    let s = stdout(&out);
    let seen = up.requests();
    assert_eq!(
        seen.first().and_then(|r| r.header("authorization")),
        Some(format!("Bearer {value}").as_str()),
        "{s}"
    );
    assert!(
        s.contains("x-echo-trailer: Bearer warden-secret-"),
        "the trailer did not come back: {s}"
    );
    assert!(
        !s.contains(&value),
        "the real value reached the sandbox in a trailer: {s}"
    );
}

#[test]
fn echoed_spellings_of_the_value_and_compressed_bodies_come_back_scrubbed() {
    let Some((ca, up)) = echo_for(&["api.secret.test"], true) else {
        return;
    };
    let value = format!("sk-live/{}+xyz", token());
    let port = up.port.to_string();
    let url = format!("https://api.secret.test:{port}");
    let out = run_with_secret(
        &value,
        &ca,
        &port,
        &[],
        &format!(
            r#"curl -sS --noproxy '*' -H "Authorization: Bearer $TOKEN" "{url}/forms"
curl -sS --noproxy '*' -w 'gzip %{{http_code}}\n' -H "Authorization: Bearer $TOKEN" "{url}/gzip"
curl -sS --noproxy '*' -w 'not-gzip %{{http_code}}\n' -H "Authorization: Bearer $TOKEN" "{url}/not-gzip"
"#
        ),
    );
    let s = stdout(&out);
    assert!(
        s.contains("json=") && s.contains("hex="),
        "{s}\n{}",
        stderr(&out)
    );
    // A compressed answer is decoded and scrubbed; one that does not
    // decode is cut off, never passed on.
    assert!(s.contains("gzip 200"), "{s}");
    assert!(s.contains("authorization: Bearer warden-secret-"), "{s}");
    assert!(!s.contains("not-gzip 200"), "{s}");
    let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
    for form in [value.clone(), value.replace('/', "\\/"), hex] {
        assert!(!s.contains(&form), "{form} came back: {s}");
    }
    assert!(!s.to_lowercase().contains("sk-live%2f"), "{s}");
}

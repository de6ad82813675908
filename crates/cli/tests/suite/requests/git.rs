//! git's smart HTTP through a request-rule preset: real `git clone` and
//! `git push` inside a sandbox against `git http-backend` behind a local
//! HTTPS server for github.com (its certificate from a test authority),
//! which records each request it gets. Under `--preset github-readonly`
//! the clone works and the push never reaches the server; without the
//! preset the same push does (so the refusal is warden's, not the
//! server's).

use crate::common::upstream::{tls_server, TestCa};
use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// A smart-HTTP git server on `IP:443` (the presets are for port 443; a
/// loopback address of its own keeps tests apart) serving the bare
/// repositories under `root` through `git http-backend` as CGI.
struct GitServer {
    ip: Ipv4Addr,
    seen: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl GitServer {
    /// `None` (said) when this user may not listen on port 443.
    fn start(ca: &TestCa, name: &str, root: PathBuf) -> Option<GitServer> {
        static NEXT: AtomicU8 = AtomicU8::new(1);
        let ip = Ipv4Addr::new(
            127,
            77,
            (std::process::id() % 250) as u8,
            NEXT.fetch_add(1, Ordering::Relaxed),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, root) = (seen.clone(), Arc::new(root));
        let serve = move |tls| {
            let (s, root) = (s.clone(), root.clone());
            async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (s, root) = (s.clone(), root.clone());
                        async move { Ok::<_, std::convert::Infallible>(cgi(&root, &s, req).await) }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            }
        };
        let runtime = match tls_server(ca, &[name], &[b"http/1.1"], (ip, 443), serve) {
            Ok((_, runtime)) => runtime,
            Err(e) => {
                skip(&format!(
                    "cannot listen on {ip}:443 for the git server: {e}"
                ));
                return None;
            }
        };
        Some(GitServer {
            ip,
            seen,
            _runtime: runtime,
        })
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// One request answered by `git http-backend`, recorded as `METHOD
/// path?query` once its body has arrived.
async fn cgi(
    root: &Path,
    seen: &Mutex<Vec<String>>,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let query = parts.uri.query().unwrap_or("").to_string();
    seen.lock().unwrap().push(format!(
        "{} {}{}",
        parts.method,
        parts.uri.path(),
        if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        }
    ));
    let header = |h: &str| {
        parts
            .headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let mut child = Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REMOTE_USER", "tester")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", &query)
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feed = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let out = child.wait_with_output().unwrap();
    let _ = feed.join();
    // CGI: headers, a blank line, the body.
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4))
        .or_else(|| {
            out.stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|at| (at, 2))
        });
    let Some((at, sep)) = split else {
        let mut r = hyper::Response::new(Full::new(Bytes::from("no CGI headers\n")));
        *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        return r;
    };
    let head = String::from_utf8_lossy(&out.stdout[..at]).into_owned();
    let mut r = hyper::Response::new(Full::new(Bytes::copy_from_slice(&out.stdout[at + sep..])));
    for line in head.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k.eq_ignore_ascii_case("status") {
            if let Some(code) = v.split_whitespace().next().and_then(|c| c.parse().ok()) {
                *r.status_mut() = hyper::StatusCode::from_u16(code).unwrap();
            }
        } else if let (Ok(k), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(k.as_bytes()),
            hyper::header::HeaderValue::from_str(v),
        ) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

/// A bare repository `acme/w.git` under a new directory, with one commit,
/// that accepts pushes.
fn forge_root() -> TempDir {
    let root = TempDir::new("git-forge");
    let bare = root.path().join("acme/w.git");
    let work = root.path().join("work");
    let git = |dir: &Path, args: &[&str]| {
        let out = Command::new("git")
            .args([
                "-c",
                "init.defaultBranch=main",
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    };
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    git(&bare, &["init", "--bare", "-q"]);
    git(&bare, &["config", "http.receivepack", "true"]);
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("README"), "hello from the forge\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-q", "-m", "first"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    root
}

/// Clone, commit and push from inside a sandbox with `args`; the script
/// prints what each step did.
/// `trust`: the authority file git verifies the server with inside the
/// sandbox (git's TLS library may know no default bundle).
fn clone_and_push(
    ca: &TestCa,
    server: &GitServer,
    args: &[&str],
    trust: &str,
) -> std::process::Output {
    let script = r#"export HOME=/tmp GIT_TERMINAL_PROMPT=0 GIT_SSL_CAINFO="$1"
cd /tmp
if git clone -q https://github.com/acme/w.git w 2>/tmp/clone.err; then echo CLONED; cat w/README; else echo CLONE-FAILED; cat /tmp/clone.err; fi
cd w || exit 0
echo more >> README
git -c user.name=a -c user.email=a@a commit -q -am second
if git push -q origin HEAD:main 2>/tmp/push.err; then echo PUSHED; else echo PUSH-REFUSED; cat /tmp/push.err; fi
"#;
    Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args(["--add-host", &format!("github.com={}", server.ip)])
        .args(["--upstream-ca", &ca.pem_path()])
        .args(["--ro", &ca.dir.path().display().to_string()])
        .args(args)
        .args(["--", "sh", "-c", script, "sh", trust])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn the_forge_preset_lets_a_clone_through_and_never_lets_a_push_reach_the_server() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let root = forge_root();
    let Some(server) = GitServer::start(&ca, "github.com", root.path().to_path_buf()) else {
        return;
    };
    // Under the preset the proxy terminates TLS with the sandbox's own
    // authority.
    let out = clone_and_push(
        &ca,
        &server,
        &["--preset", "github-readonly"],
        "/run/warden/ca.crt",
    );
    let s = stdout(&out);
    assert!(
        s.contains("CLONED\nhello from the forge"),
        "{s}\n{}",
        stderr(&out)
    );
    assert!(s.contains("PUSH-REFUSED"), "{s}\n{}", stderr(&out));
    assert!(s.contains("403"), "the client sees the refusal: {s}");
    let seen = server.requests();
    assert!(
        seen.iter()
            .any(|r| r.starts_with("POST /acme/w.git/git-upload-pack")),
        "the clone reached the server: {seen:?}"
    );
    assert!(
        !seen.iter().any(|r| r.contains("receive-pack")),
        "nothing of the push reached the server: {seen:?}"
    );
    // Both halves: the same push without the preset reaches the server
    // and is accepted there.
    let out = clone_and_push(
        &ca,
        &server,
        &["--allow-domain", "github.com"],
        &ca.pem_path(),
    );
    let s = stdout(&out);
    assert!(s.contains("PUSHED"), "{s}\n{}", stderr(&out));
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.starts_with("POST /acme/w.git/git-receive-pack")),
        "{:?}",
        server.requests()
    );
}

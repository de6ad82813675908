//! A typed client of `warden serve`'s API, over its Unix socket or TCP,
//! with the request and response bodies of [`warden_api`] (the daemon's
//! own types). Blocking: each call runs on a small runtime of the client's
//! own, so a command-line program can use it without one.
//!
//! ```text
//! let c = Client::new("unix:/run/user/1000/warden/daemon.sock", None)?;
//! let sb = c.create(&CreateSandbox { profile: Some("python".into()), ..Default::default() })?;
//! let status = c.exec_stream(&sb.id, &ExecRequest { argv: Some(vec!["true".into()]), ..Default::default() }, |e| { ... })?;
//! ```

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
pub use warden_api as api;
use warden_api::{CreateSandbox, ExecEvent, ExecRequest, Problem, SandboxInfo, SandboxList};

/// Why a call to the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot use {host:?} as the daemon's address: {why}")]
    BadHost { host: String, why: &'static str },
    #[error("cannot start the client's runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot connect to the daemon at {target}; is `warden serve` running there?")]
    Connect {
        target: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the connection to the daemon at {target} failed")]
    Http {
        target: String,
        #[source]
        source: hyper::Error,
    },
    #[error("cannot build the request to {path}")]
    Request {
        path: String,
        #[source]
        source: hyper::http::Error,
    },
    /// The daemon answered with a problem.
    #[error("the daemon refused {method} {path} ({status}, {}): {}{}", .problem.code, .problem.message, .problem.field.as_deref().map(|f| format!(" (at {f})")).unwrap_or_default())]
    Refused {
        method: Method,
        path: String,
        status: StatusCode,
        /// Boxed: a problem can carry details, and every call's error
        /// would otherwise be as large.
        problem: Box<Problem>,
    },
    #[error("the daemon's answer to {path} is not what this client understands: {detail}")]
    Decode { path: String, detail: String },
}

/// Where the daemon listens.
#[derive(Debug, Clone)]
enum Target {
    Unix(PathBuf),
    Tcp(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Tcp(a) => write!(f, "http://{a}"),
        }
    }
}

/// Parse `unix:PATH`, `unix://PATH`, an absolute path, or
/// `http://HOST:PORT` (with an optional trailing `/`).
fn parse_host(host: &str) -> Result<Target, ClientError> {
    let bad = |why| ClientError::BadHost {
        host: host.to_string(),
        why,
    };
    if let Some(rest) = host.strip_prefix("unix:") {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        if !path.starts_with('/') {
            return Err(bad(
                "a Unix socket is given by its absolute path (unix:/path/to/daemon.sock)",
            ));
        }
        return Ok(Target::Unix(PathBuf::from(path)));
    }
    if host.starts_with('/') {
        return Ok(Target::Unix(PathBuf::from(host)));
    }
    if host.starts_with("https://") {
        return Err(bad("the daemon speaks plain HTTP; reach a remote one through a TLS-terminating proxy or an SSH tunnel to its socket"));
    }
    let Some(rest) = host.strip_prefix("http://") else {
        return Err(bad(
            "expected unix:/path/to/daemon.sock, an absolute socket path, or http://HOST:PORT",
        ));
    };
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') || !authority.contains(':') {
        return Err(bad("expected http://HOST:PORT with no path"));
    }
    Ok(Target::Tcp(authority.to_string()))
}

/// A connection to one daemon. Every call opens its own HTTP/1.1
/// connection (the daemon is local: the cost is a socket).
pub struct Client {
    target: Target,
    token: Option<String>,
    runtime: tokio::runtime::Runtime,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// HTTP/1.1 over `io`, its connection driven by a task of its own.
async fn handshake<I>(io: I) -> Result<Sender, hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl Client {
    /// A client of the daemon at `host` (see the module's docs for the
    /// forms), sending `token` as a bearer token when given.
    pub fn new(host: &str, token: Option<String>) -> Result<Client, ClientError> {
        let target = parse_host(host)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(ClientError::Runtime)?;
        Ok(Client {
            target,
            token,
            runtime,
        })
    }

    /// Where this client sends its requests.
    pub fn target(&self) -> String {
        self.target.to_string()
    }

    async fn connect(&self) -> Result<Sender, ClientError> {
        let err = |source| ClientError::Connect {
            target: self.target.to_string(),
            source,
        };
        let http = |source| ClientError::Http {
            target: self.target.to_string(),
            source,
        };
        match &self.target {
            Target::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p).await.map_err(err)?;
                handshake(TokioIo::new(s)).await.map_err(http)
            }
            Target::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a.as_str())
                    .await
                    .map_err(err)?;
                handshake(TokioIo::new(s)).await.map_err(http)
            }
        }
    }

    /// Send one request; the answer's status and body stream.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
        let http = |source| ClientError::Http {
            target: self.target.to_string(),
            source,
        };
        let mut sender = self.connect().await?;
        let host = match &self.target {
            Target::Unix(_) => "localhost".to_string(),
            Target::Tcp(a) => a.clone(),
        };
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header("host", host)
            .header("accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|source| ClientError::Request {
                path: path.to_string(),
                source,
            })?;
        let resp = sender.send_request(req).await.map_err(http)?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let bytes = resp.into_body().collect().await.map_err(http)?.to_bytes();
        let problem = serde_json::from_slice::<Problem>(&bytes).unwrap_or_else(|_| Problem {
            code: "unknown".into(),
            message: String::from_utf8_lossy(&bytes).trim().to_string(),
            field: None,
            reason: None,
            details: None,
        });
        Err(ClientError::Refused {
            method,
            path: path.to_string(),
            status,
            problem: Box::new(problem),
        })
    }

    /// A request whose whole answer is one JSON value.
    fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        self.runtime.block_on(async {
            let resp = self.send(method, path, body).await?;
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|source| ClientError::Http {
                    target: self.target.to_string(),
                    source,
                })?
                .to_bytes();
            decode(path, &bytes)
        })
    }

    /// A request whose answer is lines (NDJSON, or server-sent events'
    /// `data:` lines); `on_line` gets each and says whether to go on.
    fn lines(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        mut on_line: impl FnMut(&[u8]) -> Result<bool, ClientError>,
    ) -> Result<(), ClientError> {
        self.runtime.block_on(async {
            let resp = self.send(method, path, body).await?;
            let mut body = resp.into_body();
            let mut pending: Vec<u8> = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|source| ClientError::Http {
                    target: self.target.to_string(),
                    source,
                })?;
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                pending.extend_from_slice(data);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let line = line.strip_suffix(b"\n").unwrap_or(&line);
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if line.is_empty() {
                        continue;
                    }
                    if !on_line(line)? {
                        return Ok(());
                    }
                }
            }
            if !pending.is_empty() {
                on_line(&pending)?;
            }
            Ok(())
        })
    }

    /// `GET /v1/health`.
    pub fn health(&self) -> Result<warden_api::Health, ClientError> {
        self.call(Method::GET, "/v1/health", None)
    }

    /// `POST /v1/sandboxes`.
    pub fn create(&self, req: &CreateSandbox) -> Result<SandboxInfo, ClientError> {
        self.call(Method::POST, "/v1/sandboxes", Some(json_body(req)?))
    }

    /// `GET /v1/sandboxes`.
    pub fn list(&self) -> Result<Vec<SandboxInfo>, ClientError> {
        let l: SandboxList = self.call(Method::GET, "/v1/sandboxes", None)?;
        Ok(l.sandboxes)
    }

    /// `GET /v1/sandboxes/{id}`.
    pub fn get(&self, id: &str) -> Result<SandboxInfo, ClientError> {
        self.call(Method::GET, &format!("/v1/sandboxes/{}", segment(id)), None)
    }

    /// `POST /v1/sandboxes/{id}/stop`.
    pub fn stop(&self, id: &str, grace_seconds: Option<u64>) -> Result<SandboxInfo, ClientError> {
        let body = warden_api::StopSandbox { grace_seconds };
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{}/stop", segment(id)),
            Some(json_body(&body)?),
        )
    }

    /// `POST /v1/sandboxes/{id}/pause`: its processes frozen in place.
    pub fn pause(&self, id: &str) -> Result<SandboxInfo, ClientError> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{}/pause", segment(id)),
            None,
        )
    }

    /// `POST /v1/sandboxes/{id}/resume`: a paused sandbox goes on.
    pub fn resume(&self, id: &str) -> Result<SandboxInfo, ClientError> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{}/resume", segment(id)),
            None,
        )
    }

    /// `PATCH /v1/sandboxes/{id}/egress`: the running sandbox's allowlist
    /// changed live (`remove` off, then `allow` on); the list as it is now.
    pub fn egress(
        &self,
        id: &str,
        patch: &warden_api::EgressPatch,
    ) -> Result<Vec<String>, ClientError> {
        let list: warden_api::EgressList = self.call(
            Method::PATCH,
            &format!("/v1/sandboxes/{}/egress", segment(id)),
            Some(json_body(patch)?),
        )?;
        Ok(list.allow)
    }

    /// `DELETE /v1/sandboxes/{id}`; without `force`, a running sandbox is
    /// refused (409) rather than stopped.
    pub fn remove(&self, id: &str, force: bool) -> Result<(), ClientError> {
        self.runtime.block_on(async {
            self.send(
                Method::DELETE,
                &format!("/v1/sandboxes/{}?force={force}", segment(id)),
                None,
            )
            .await
            .map(drop)
        })
    }

    /// `POST /v1/sandboxes/{id}/exec`, streamed: `on_event` gets every
    /// event as it comes; the exit (status, signal, timed out) is returned.
    pub fn exec_stream(
        &self,
        id: &str,
        req: &ExecRequest,
        on_event: impl FnMut(&ExecEvent),
    ) -> Result<ExecEvent, ClientError> {
        let mut req = req.clone();
        req.stream = true;
        req.background = false;
        let path = format!("/v1/sandboxes/{}/exec", segment(id));
        self.until_exit(Method::POST, path, Some(json_body(&req)?), on_event)
    }

    /// `GET /v1/sandboxes/{id}/execs/{exec}/output`: a command's kept
    /// output from its start, each event to `on_event` as it comes, until
    /// the command's end, which is returned.
    pub fn exec_output(
        &self,
        id: &str,
        exec: &str,
        on_event: impl FnMut(&ExecEvent),
    ) -> Result<ExecEvent, ClientError> {
        let path = format!(
            "/v1/sandboxes/{}/execs/{}/output",
            segment(id),
            segment(exec)
        );
        self.until_exit(Method::GET, path, None, on_event)
    }

    /// A command's events, each to `on_event` as it comes, until its exit,
    /// which is returned; a stream that ends before it is an error.
    fn until_exit(
        &self,
        method: Method,
        path: String,
        body: Option<Vec<u8>>,
        mut on_event: impl FnMut(&ExecEvent),
    ) -> Result<ExecEvent, ClientError> {
        let mut exit = None;
        self.lines(method, &path, body, |line| {
            let event: ExecEvent = decode(&path, line)?;
            on_event(&event);
            if matches!(event, ExecEvent::Exited { .. }) {
                exit = Some(event);
                return Ok(false);
            }
            Ok(true)
        })?;
        exit.ok_or_else(|| ClientError::Decode {
            path,
            detail: "the stream ended before the command's exit".into(),
        })
    }

    /// `POST /v1/sandboxes/{id}/exec` with `background`: the command's
    /// record as soon as it runs.
    pub fn exec_background(
        &self,
        id: &str,
        req: &ExecRequest,
    ) -> Result<warden_api::ExecInfo, ClientError> {
        let mut req = req.clone();
        req.stream = false;
        req.background = true;
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{}/exec", segment(id)),
            Some(json_body(&req)?),
        )
    }

    /// `POST /v1/sandboxes/{id}/execs/{exec}/stdin`.
    pub fn stdin(&self, id: &str, exec: &str, data: &[u8], close: bool) -> Result<(), ClientError> {
        use base64::Engine;
        let body = warden_api::StdinRequest {
            data: None,
            data_base64: (!data.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(data)),
            close,
        };
        let path = format!(
            "/v1/sandboxes/{}/execs/{}/stdin",
            segment(id),
            segment(exec)
        );
        self.runtime.block_on(async {
            self.send(Method::POST, &path, Some(json_body(&body)?))
                .await
                .map(drop)
        })
    }

    /// `GET /v1/sandboxes/{id}/changes`: the sandbox's changes to its
    /// workspace (what a later commit may apply).
    pub fn changes(&self, id: &str) -> Result<warden_api::ChangesAnswer, ClientError> {
        self.call(
            Method::GET,
            &format!("/v1/sandboxes/{}/changes", segment(id)),
            None,
        )
    }

    /// `GET /v1/sandboxes/{id}/changes?content=true`: the changes with
    /// each one's content (a unified diff for text). Read with the
    /// owner's or a token's own credential, this is a review a later
    /// commit by the same caller counts.
    pub fn changes_with_content(&self, id: &str) -> Result<warden_api::ChangesAnswer, ClientError> {
        self.call(
            Method::GET,
            &format!("/v1/sandboxes/{}/changes?content=true", segment(id)),
            None,
        )
    }

    /// `POST /v1/sandboxes/{id}/commit`.
    pub fn commit(
        &self,
        id: &str,
        req: &warden_api::CommitRequest,
    ) -> Result<warden_api::CommitAnswer, ClientError> {
        self.call(
            Method::POST,
            &format!("/v1/sandboxes/{}/commit", segment(id)),
            Some(json_body(req)?),
        )
    }

    /// `GET /v1/sandboxes/{id}/events` as server-sent events from record
    /// `from`: `on_event` gets each event (JSON) and says whether to go on;
    /// without `follow`, the call returns once the recorded ones are read.
    pub fn events(
        &self,
        id: &str,
        from: u64,
        follow: bool,
        mut on_event: impl FnMut(serde_json::Value) -> bool,
    ) -> Result<(), ClientError> {
        let path = format!(
            "/v1/sandboxes/{}/events?from={from}&follow={follow}",
            segment(id)
        );
        self.lines(Method::GET, &path, None, |line| {
            let Some(data) = line.strip_prefix(b"data:") else {
                // `id:`, `event:`, comments (keep-alives).
                return Ok(true);
            };
            let value: serde_json::Value = decode(&path, data.trim_ascii())?;
            Ok(on_event(value))
        })
    }
}

/// The bytes of an output chunk of an exec's stream (text, or base64 when
/// they were not UTF-8).
pub fn output_bytes(data: &Option<String>, data_base64: &Option<String>) -> Vec<u8> {
    use base64::Engine;
    match (data, data_base64) {
        (Some(d), _) => d.as_bytes().to_vec(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .unwrap_or_default(),
        (None, None) => Vec::new(),
    }
}

fn json_body<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, ClientError> {
    serde_json::to_vec(v).map_err(|e| ClientError::Decode {
        path: "(request)".into(),
        detail: e.to_string(),
    })
}

fn decode<T: serde::de::DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::Decode {
        path: path.to_string(),
        detail: e.to_string(),
    })
}

/// A path segment: ids are plain names, but nothing a caller passes may
/// change the route.
fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_a_socket_path_or_plain_http_with_a_port() {
        assert!(
            matches!(parse_host("unix:/run/d.sock"), Ok(Target::Unix(p)) if p == std::path::Path::new("/run/d.sock"))
        );
        assert!(matches!(
            parse_host("unix:///run/d.sock"),
            Ok(Target::Unix(_))
        ));
        assert!(matches!(parse_host("/run/d.sock"), Ok(Target::Unix(_))));
        assert!(
            matches!(parse_host("http://127.0.0.1:7070/"), Ok(Target::Tcp(a)) if a == "127.0.0.1:7070")
        );
        for bad in [
            "unix:rel.sock",
            "https://h:1",
            "h:1",
            "http://h",
            "http://h:1/v1",
            "",
        ] {
            assert!(parse_host(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn an_id_cannot_change_the_route() {
        assert_eq!(segment("ab-1.c_d"), "ab-1.c_d");
        assert_eq!(segment("../tokens"), "..%2Ftokens");
        assert_eq!(segment("a?b#c"), "a%3Fb%23c");
    }
}

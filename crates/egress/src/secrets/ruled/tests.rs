//! Request rules on a real terminated connection: a recording HTTPS server
//! upstream, the terminator between, and a client that speaks raw
//! HTTP/1.1 (so that it can try to smuggle) or HTTP/2 through it.

use super::super::session::serve;
use super::super::{Recorder, Terminator};
use crate::decision::{Decision, Reason};
use crate::requests::{RequestAction, RequestRule};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{PrivateKeyDer, ServerName};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Seen = Arc<Mutex<Vec<String>>>;
/// Each request's `METHOD target` with the headers it arrived with.
pub(super) type Heads = Arc<Mutex<Vec<(String, http::HeaderMap)>>>;

/// An HTTPS server for `name` on 127.0.0.1 (HTTP/1.1, and HTTP/2 when
/// `h2`) that records `METHOD target` of every request it gets (and its
/// headers) and answers `ok`; its authority's PEM.
async fn recorder(name: &str, h2: bool) -> (u16, String, Seen, Heads) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    config.alpn_protocols = if h2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let heads: Heads = Arc::new(Mutex::new(Vec::new()));
    let (s, h) = (seen.clone(), heads.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, s, h) = (acceptor.clone(), s.clone(), h.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (s, h) = (s.clone(), h.clone());
                    async move {
                        let target = req.uri().path_and_query().map(|p| p.to_string());
                        let line = format!("{} {}", req.method(), target.unwrap_or_default());
                        h.lock()
                            .unwrap()
                            .push((line.clone(), req.headers().clone()));
                        let _ = req.into_body().collect().await;
                        s.lock().unwrap().push(line);
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            "ok",
                        ))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, ca.pem(), seen, heads)
}

/// A terminator for `rules` (and no secret) in front of the recorder; the
/// port the sandbox's side connects to, the terminator, what the upstream
/// saw and what was recorded.
pub(super) struct Rig {
    front: u16,
    /// The upstream's port, which the connection's authority carries.
    pub(super) port: u16,
    term: Arc<Terminator>,
    seen: Seen,
    pub(super) heads: Heads,
    pub(super) decisions: Arc<Mutex<Vec<Decision>>>,
}

async fn rig(rules: &[(RequestAction, &str)]) -> Rig {
    rig_asking(rules, None).await
}

/// [`rig`], with `asker` asked about the requests ask rules hold.
async fn rig_asking(
    rules: &[(RequestAction, &str)],
    asker: Option<Arc<dyn crate::ask::Asker>>,
) -> Rig {
    let rules: Vec<(RequestAction, String)> =
        rules.iter().map(|(a, e)| (*a, e.to_string())).collect();
    rig_made(true, move |ca_file, port| {
        let rules = rules
            .iter()
            .map(|(a, e)| RequestRule::parse(*a, &e.replace("PORT", &port.to_string())).unwrap())
            .collect();
        Terminator::new(Vec::new(), std::slice::from_ref(&ca_file.to_path_buf()))
            .unwrap()
            .with_requests(rules)
            .with_asker(asker)
    })
    .await
}

/// A terminator `make` makes (given the upstream's authority file and
/// port) in front of the recorder, which speaks HTTP/2 when `h2`.
pub(super) async fn rig_made(
    h2: bool,
    make: impl FnOnce(&std::path::Path, u16) -> Terminator,
) -> Rig {
    let (port, pem, seen, heads) = recorder("api.test", h2).await;
    let dir = std::env::temp_dir().join(format!("warden-ruled-ca-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, pem).unwrap();
    let term = Arc::new(make(&ca_file, port));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(term.terminates("api.test", port));
    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front_port = front.local_addr().unwrap().port();
    let decisions = Arc::new(Mutex::new(Vec::<Decision>::new()));
    let (d, t) = (decisions.clone(), term.clone());
    tokio::spawn(async move {
        while let Ok((conn, _)) = front.accept().await {
            let upstream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let d = d.clone();
            let record: Recorder = Arc::new(move |dec| d.lock().unwrap().push(dec));
            tokio::spawn(serve(
                t.clone(),
                conn,
                Vec::new(),
                upstream,
                "api.test".into(),
                port,
                record,
                std::time::Duration::from_secs(10),
                None,
            ));
        }
    });
    Rig {
        front: front_port,
        port,
        term,
        seen,
        heads,
        decisions,
    }
}

impl Rig {
    /// A TLS connection to the terminator, trusting its authority, that
    /// offers `alpn`.
    async fn connect(&self, alpn: &[&[u8]]) -> tokio_rustls::client::TlsStream<TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut self.term.ca_pem().as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        client.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = TcpStream::connect(("127.0.0.1", self.front)).await.unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from("api.test").unwrap(), tcp)
            .await
            .unwrap()
    }

    /// Send `raw` (`HOST` standing for the connection's own authority) on
    /// a connection of its own and read what comes back until the
    /// terminator closes it or 2 s pass.
    pub(super) async fn raw(&self, raw: &str) -> String {
        let raw = raw.replace("HOST", &format!("api.test:{}", self.port));
        let mut tls = self.connect(&[b"http/1.1"]).await;
        tls.write_all(raw.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), tls.read_to_end(&mut out))
            .await;
        String::from_utf8_lossy(&out).into_owned()
    }

    pub(super) fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// The upstream's port is only known once it runs: rules name it `PORT`.
const READ_ONLY: &[(RequestAction, &str)] = &[
    (RequestAction::Allow, "GET api.test:PORT/repos/**"),
    (RequestAction::Deny, "* api.test:PORT/repos/*/private/**"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_of_a_kept_alive_connection_is_decided_on_its_own() {
    let rig = rig(READ_ONLY).await;
    let h = "Host: HOST\r\n";
    let answer = rig
        .raw(&format!(
            "GET /repos/a HTTP/1.1\r\n{h}\r\nDELETE /repos/a HTTP/1.1\r\n{h}\r\nGET /repos/a/private/k HTTP/1.1\r\n{h}\r\nGET /repos/b HTTP/1.1\r\n{h}Connection: close\r\n\r\n"
        ))
        .await;
    assert_eq!(answer.matches("HTTP/1.1 200").count(), 2, "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 403").count(), 2, "{answer}");
    assert!(
        answer.contains("x-warden-reason: no_request_rule"),
        "{answer}"
    );
    assert!(
        answer.contains("x-warden-reason: request_denied"),
        "{answer}"
    );
    assert!(
        answer.contains("x-warden-denied: denied by the request rule"),
        "{answer}"
    );
    assert_eq!(rig.seen(), ["GET /repos/a", "GET /repos/b"]);
    let d = rig.decisions.lock().unwrap().clone();
    let allowed: Vec<&Decision> = d.iter().filter(|d| d.allowed).collect();
    assert_eq!(allowed.len(), 2, "{d:?}");
    assert!(allowed.iter().all(|d| d.bytes_in == 2), "{allowed:?}");
    assert_eq!(
        d.iter()
            .filter(|d| d.reason.as_ref().map(|c| c.reason) == Some(Reason::NoRequestRule))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_smuggled_behind_another_is_decided_as_what_the_upstream_sees() {
    let rig = rig(READ_ONLY).await;
    // Length headers that disagree: the body is read as chunked, the
    // connection closed after the answer, and what hid behind it never
    // read.
    let answer = rig
        .raw("GET /repos/a HTTP/1.1\r\nHost: HOST\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nDELETE /repos/a HTTP/1.1\r\nHost: HOST\r\n\r\n")
        .await;
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");
    let answer = rig
        .raw("GET /repos/a HTTP/1.1\r\nHost: HOST\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(rig.seen(), ["GET /repos/a"]);
    rig.seen.lock().unwrap().clear();
    // A second request hidden in the first's body by its Content-Length
    // stays the body, and the first is decided (and refused) on its own.
    let hidden = format!(
        "DELETE /repos/a/x HTTP/1.1\r\nHost: api.test:{}\r\n\r\n",
        rig.port
    );
    let answer = rig
        .raw(&format!(
            "POST /repos/a HTTP/1.1\r\nHost: HOST\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{hidden}",
            hidden.len()
        ))
        .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    // An absolute-form target naming another host.
    let answer = rig
        .raw("GET https://other.test/repos/a HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    // Encoded and dot segments: decided on the path the upstream gets.
    let answer = rig
        .raw("GET /repos/x/../a/%70rivate/./k HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let answer = rig
        .raw("GET /other/..%2F..%2Frepos/a HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(
        rig.seen(),
        Vec::<String>::new(),
        "nothing reached the upstream"
    );
    // What is allowed still goes, as the upstream reads it.
    let answer = rig
        .raw("GET /repos/x/../%61 HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(rig.seen(), ["GET /repos/a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_carries_one_allowed_and_one_refused_stream() {
    let rig = rig(READ_ONLY).await;
    let tls = rig.connect(&[b"h2"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let get = |path: &str, method: &str| {
        let mut s = sender.clone();
        let req = Request::builder()
            .method(method)
            .uri(format!("https://api.test:{}{path}", rig.port))
            .body(Full::new(Bytes::new()))
            .unwrap();
        async move { s.send_request(req).await.unwrap() }
    };
    let (a, b) = tokio::join!(get("/repos/a", "GET"), get("/repos/a", "PUT"));
    assert_eq!(a.status(), 200);
    assert_eq!(b.status(), 403);
    assert_eq!(b.headers()["x-warden-reason"], "no_request_rule");
    assert_eq!(rig.seen(), ["GET /repos/a"]);
}

/// A body the request rules must read (a JSON-RPC call) while the proxy's
/// memory budget has no room for its start: refused at once with a 503
/// naming the budget and recorded, never decided as unreadable nor held
/// waiting, and nothing of it reaches the upstream; once the budget has
/// room, the same call goes, and everything paid is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_the_budget_cannot_pay_to_read_is_refused_at_once_and_never_reaches_the_upstream() {
    let rig = rig(&[(
        RequestAction::Allow,
        "POST api.test:PORT/mcp rpc:tools/list",
    )])
    .await;
    let pool = rig.term.decode_memory.clone();
    let all = pool.available_permits();
    // Room for the request's own cost (its head and 96 KiB), not for the
    // 64 KiB start of its body.
    let taken = pool
        .clone()
        .try_acquire_many_owned((all - 120) as u32)
        .unwrap();
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: HOST\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{call}",
        call.len()
    );
    let answer = rig.raw(&req).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("x-warden-reason: memory_budget"),
        "{answer}"
    );
    assert!(answer.contains("read the start of its body"), "{answer}");
    assert_eq!(rig.seen(), Vec::<String>::new());
    let d = rig.decisions.lock().unwrap().clone();
    assert!(
        d.iter().any(
            |d| !d.allowed && d.reason.as_ref().map(|c| c.reason) == Some(Reason::MemoryBudget)
        ),
        "{d:?}"
    );
    drop(taken);
    let answer = rig.raw(&req).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(rig.seen(), ["POST /mcp"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while pool.available_permits() != all && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        pool.available_permits(),
        all,
        "everything paid is given back"
    );
}

/// A WebSocket's upgrade while the proxy's memory budget has no room for
/// its relay's buffers: refused at once with a 503 naming the budget,
/// recorded, and the upgrade never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_the_budget_cannot_pay_to_relay_is_refused_before_its_upgrade_goes_upstream() {
    let rig = rig(&[(RequestAction::Allow, "GET api.test:PORT/ws")]).await;
    let pool = rig.term.decode_memory.clone();
    let all = pool.available_permits();
    // Room for the request's own cost, not for the relay's.
    let _taken = pool
        .clone()
        .try_acquire_many_owned((all - 150) as u32)
        .unwrap();
    let answer = rig
        .raw("GET /ws HTTP/1.1\r\nHost: HOST\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        .await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("x-warden-reason: memory_budget"),
        "{answer}"
    );
    assert!(answer.contains("relay a WebSocket"), "{answer}");
    assert_eq!(rig.seen(), Vec::<String>::new());
    let d = rig.decisions.lock().unwrap().clone();
    assert!(
        d.iter().any(
            |d| !d.allowed && d.reason.as_ref().map(|c| c.reason) == Some(Reason::MemoryBudget)
        ),
        "{d:?}"
    );
}

/// An asker that answers "once" when it is let go (or after 10 s).
struct Waiting(Mutex<std::sync::mpsc::Receiver<()>>);

impl crate::ask::Asker for Waiting {
    fn ask(&self, _: &crate::ask::Question) -> crate::ask::Answer {
        if let Ok(rx) = self.0.lock() {
            let _ = rx.recv_timeout(std::time::Duration::from_secs(10));
        }
        crate::ask::Answer::Once
    }
}

/// A request an ask rule holds stays paid for while it waits for its
/// answer (its head, its body's pieces in hand), and everything is given
/// back once it has been answered and relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_for_an_answer_stays_paid_for_until_it_is_answered_and_done() {
    let (let_go, rx) = std::sync::mpsc::channel();
    let rig = Arc::new(
        rig_asking(
            &[(RequestAction::Ask, "POST api.test:PORT/hold")],
            Some(Arc::new(Waiting(Mutex::new(rx)))),
        )
        .await,
    );
    let pool = rig.term.decode_memory.clone();
    let all = pool.available_permits();
    let body = "x".repeat(1000);
    let req = format!(
        "POST /hold HTTP/1.1\r\nHost: HOST\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let r = rig.clone();
    let answer = tokio::spawn(async move { r.raw(&req).await });
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while pool.available_permits() == all && std::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let held = all - pool.available_permits();
    assert!(
        held >= super::super::paid::REQUEST_SLACK / 1024,
        "held for an answer, it is paid for: {held} KiB"
    );
    assert_eq!(rig.seen(), Vec::<String>::new());
    let_go.send(()).unwrap();
    let answer = answer.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(rig.seen(), ["POST /hold"]);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while pool.available_permits() != all && std::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(pool.available_permits(), all, "all given back");
}

/// An asker that gives `answers` in turn (then "deny"), as the owner, and
/// keeps each question's request line.
struct Scripted {
    answers: Mutex<std::collections::VecDeque<crate::ask::Answer>>,
    asked: Mutex<Vec<String>>,
}

impl Scripted {
    fn new(answers: &[crate::ask::Answer]) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers: Mutex::new(answers.iter().copied().collect()),
            asked: Mutex::new(Vec::new()),
        })
    }

    /// The lines asked, each without what follows its calls (its body
    /// and digest: see `shown_questions`).
    fn asked(&self) -> Vec<String> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .map(|l| {
                let cut = [" [body: ", " [request sha256 "]
                    .iter()
                    .filter_map(|m| l.find(m))
                    .min()
                    .unwrap_or(l.len());
                l[..cut].to_string()
            })
            .collect()
    }
}

impl crate::ask::Asker for Scripted {
    fn ask(&self, q: &crate::ask::Question) -> crate::ask::Answer {
        let line = q.request.as_ref().map(|r| r.line()).unwrap_or_default();
        self.asked.lock().unwrap().push(line);
        let next = self.answers.lock().unwrap().pop_front();
        next.unwrap_or(crate::ask::Answer::Deny)
    }
}

/// A JSON-RPC tool call to `/mcp?n` (the query tells the upstream's
/// record apart; no rule looks at it) on a connection of its own.
fn tool_call(n: u32, tool: &str) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
    );
    format!(
        "POST /mcp?{n} HTTP/1.1\r\nHost: HOST\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The reviewer's attack, below the doors: "always" about one tool call
/// an ask rule holds (`rpc:tools/call:*`) used to let every other tool of
/// the same method and path through unasked (the grant was keyed on the
/// method and path, and kept as `POST NAME/mcp`); the question never named
/// the tool. Now the question names it, the grant is that call, and
/// another tool is asked about again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_always_answer_about_one_tool_call_covers_that_call_and_another_tool_is_asked_again() {
    use crate::ask::Answer;
    let asker = Scripted::new(&[Answer::Always, Answer::Deny]);
    let rig = rig_asking(
        &[(
            RequestAction::Ask,
            "POST api.test:PORT/mcp rpc:tools/call:*",
        )],
        Some(asker.clone()),
    )
    .await;
    assert!(rig
        .raw(&tool_call(1, "search"))
        .await
        .starts_with("HTTP/1.1 200"));
    assert!(rig
        .raw(&tool_call(2, "search"))
        .await
        .starts_with("HTTP/1.1 200"));
    let refused = rig.raw(&tool_call(3, "delete_repo")).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert_eq!(
        asker.asked(),
        [
            "POST /mcp?1 (JSON-RPC \"tools/call:search\")",
            "POST /mcp?3 (JSON-RPC \"tools/call:delete_repo\")"
        ],
        "the second search went by the answer, delete_repo was asked about"
    );
    assert_eq!(rig.seen(), ["POST /mcp?1", "POST /mcp?2"]);
    let kept: Vec<String> = rig
        .decisions
        .lock()
        .unwrap()
        .iter()
        .filter(|d| d.rule.as_deref() == Some(super::ASKED_ALWAYS))
        .filter_map(|d| d.reason.as_ref().and_then(|c| c.entry.clone()))
        .collect();
    assert_eq!(
        kept,
        [format!(
            "POST api.test:{}/mcp rpc:tools/call:search",
            rig.port
        )],
        "the rule kept states the call asked about"
    );
}

/// The same for a query condition: "run" about `?action=read` covers
/// that value (whatever else the query holds), not `action=delete`, nor
/// a second `action` key a server may read instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_answer_about_a_query_value_covers_that_value_only() {
    use crate::ask::Answer;
    let asker = Scripted::new(&[Answer::ForRun]);
    let rig = rig_asking(
        &[(RequestAction::Ask, "GET api.test:PORT/ok?action=*")],
        Some(asker.clone()),
    )
    .await;
    let get = |q: &str| format!("GET /ok?{q} HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n");
    for (q, status) in [
        ("action=read", "200"),
        ("action=read&page=2", "200"),
        ("action=delete", "403"),
        ("action=read&Action=delete", "403"),
        ("action=read&action[]=delete", "403"),
    ] {
        let answer = rig.raw(&get(q)).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{q}: {answer}"
        );
    }
    assert_eq!(
        asker.asked(),
        [
            "GET /ok?action=read",
            "GET /ok?action=delete",
            "GET /ok?action=read&Action=delete",
            "GET /ok?action=read&action[]=delete"
        ],
        "the question shows the values the request sends"
    );
    // The records keep them redacted.
    let details: Vec<String> = rig
        .decisions
        .lock()
        .unwrap()
        .iter()
        .map(|d| d.detail.clone())
        .collect();
    assert!(details.iter().all(|d| !d.contains("delete")), "{details:?}");
    assert_eq!(
        rig.seen(),
        ["GET /ok?action=read", "GET /ok?action=read&page=2"]
    );
}

/// What a refusal for want of a rule proposes is the request alone: a
/// tool call no rule allows proposes the rule naming that call, never
/// the method and path alone (which would allow every tool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_no_rule_allows_proposes_the_rule_for_that_call_only() {
    let rig = rig(&[(
        RequestAction::Allow,
        "POST api.test:PORT/mcp rpc:tools/list",
    )])
    .await;
    let refused = rig.raw(&tool_call(1, "delete_repo")).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert_eq!(rig.seen(), Vec::<String>::new());
    let proposed: Vec<Option<String>> = rig
        .decisions
        .lock()
        .unwrap()
        .iter()
        .filter_map(|d| d.reason.as_ref())
        .filter(|c| c.reason == Reason::NoRequestRule)
        .map(|c| c.entry.clone())
        .collect();
    assert_eq!(
        proposed,
        [Some(format!(
            "POST api.test:{}/mcp rpc:tools/call:delete_repo",
            rig.port
        ))]
    );
}

/// A held request whose body is too large to read whole cannot be shown
/// to a person (its digest is of all of it): it is refused with 413,
/// never asked about blind, and never reaches the server; one within the
/// bound is asked about with its length, digest and start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_body_too_large_to_show_is_refused_unasked_and_one_within_is_shown() {
    use crate::ask::Answer;
    let asker = Scripted::new(&[Answer::Once]);
    let rig = rig_asking(
        &[(RequestAction::Ask, "POST api.test:PORT/upload")],
        Some(asker.clone()),
    )
    .await;
    let post = |body: &str| {
        format!(
            "POST /upload HTTP/1.1\r\nHost: HOST\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let large = "x".repeat(super::ask::MAX_HELD_BODY + 1);
    let refused = rig.raw(&post(&large)).await;
    assert!(refused.starts_with("HTTP/1.1 413"), "{refused:.300}");
    assert!(refused.contains("held_body_too_large"), "{refused:.300}");
    assert!(asker.asked().is_empty(), "{:?}", asker.asked());
    let small = rig.raw(&post("hello\x1b[2J")).await;
    assert!(small.starts_with("HTTP/1.1 200"), "{small}");
    let full = asker.asked.lock().unwrap().clone();
    assert_eq!(full.len(), 1, "{full:?}");
    assert!(
        full[0].starts_with("POST /upload [body: 9 bytes, text/plain, sha256 "),
        "{full:?}"
    );
    assert!(
        full[0].contains(": hello%1B[2J] [request sha256 "),
        "{full:?}"
    );
    assert_eq!(rig.seen(), ["POST /upload"]);
}

//! Attacks through a secret's host that spells back what it was sent
//! (outside review 28a, F3 to F7): a real TLS upstream that echoes the
//! value as ordinary servers do (a login redirect quoting its own target,
//! a Markdown escaper, quoted-printable at 76 columns, a gzip'd echo with
//! no Content-Encoding, an encoding four levels deep) and records the
//! bodies it is sent; a real terminator between it and a client that
//! trusts only the sandbox's authority. The sandbox's side must never
//! hold the value, and no compressed body carrying it may arrive.

use super::super::{placeholder, Secret};
use super::*;
use hyper::body::Incoming;
use hyper::Request;
use std::io::Write;
use std::sync::Mutex;
use warden_policy::DomainRule;

/// A value with the reserved and punctuation characters real keys have.
const VALUE: &str = "ghp_Real-Secret/Value+1234567890=abcdefXY";

/// Every byte but the unreserved ones as `%XX`, as Python's
/// `quote(s, safe="")` writes it.
fn quote(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

/// What the upstream answers to `path`, given the bearer value it got.
fn answer(path_and_query: &str, bearer: &str) -> Response<Full<Bytes>> {
    let path = path_and_query.split('?').next().unwrap_or_default();
    let ok = |body: Vec<u8>| Response::new(Full::new(Bytes::from(body)));
    if path.starts_with("/data") {
        // The commonest redirect to a login: the target quoted again.
        return Response::builder()
            .status(302)
            .header(
                "location",
                format!("https://api.test/login?next={}", quote(path_and_query)),
            )
            .body(Full::new(Bytes::new()))
            .unwrap();
    }
    match path {
        "/md" => ok(bearer
            .chars()
            .map(|c| {
                if "_-+=.!*#/".contains(c) {
                    format!("\\{c}")
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into_bytes()),
        "/qp" => {
            // Quoted-printable: `=` as `=3D`, soft breaks at 75 columns,
            // the value placed across one by what comes before it.
            let text = format!("{} note: {}", "x".repeat(50), bearer.replace('=', "=3D"));
            let mut out = String::new();
            for (i, c) in text.chars().enumerate() {
                if i > 0 && i % 75 == 0 {
                    out.push_str("=\r\n");
                }
                out.push(c);
            }
            ok(out.into_bytes())
        }
        "/gz" => {
            let mut r = ok(gzip(
                format!("authorization: Bearer {bearer}\r\n").as_bytes(),
            ));
            r.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("application/octet-stream"),
            );
            r
        }
        // Each byte percent-encoded four times over.
        "/deep" => ok(bearer
            .bytes()
            .map(|b| format!("%252525{b:02X}"))
            .collect::<String>()
            .into_bytes()),
        _ => ok(b"ok".to_vec()),
    }
}

/// An HTTPS upstream for `api.test` answering by [`answer`], recording
/// every request body it reads.
async fn upstream(seen: Arc<Mutex<Vec<Vec<u8>>>>) -> (u16, String) {
    let (config, ca_pem) = crate::secrets::test_tls::server_config("api.test");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let bearer = req
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Bearer "))
                            .unwrap_or_default()
                            .to_string();
                        let target = req.uri().to_string();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        if let Ok(b) = body {
                            if !b.is_empty() {
                                seen.lock().unwrap().push(b.to_vec());
                            }
                        }
                        Ok::<_, std::convert::Infallible>(answer(&target, &bearer))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, ca_pem)
}

/// A terminator for one secret of `api.test` on the upstream's port,
/// the upstream, and what it saw.
struct Setup {
    term: Arc<Terminator>,
    port: u16,
    placeholder: String,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

async fn setup(in_bodies: bool) -> Setup {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (port, upstream_pem) = upstream(seen.clone()).await;
    let dir =
        std::env::temp_dir().join(format!("warden-echo-attacks-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, upstream_pem).unwrap();
    let ph = placeholder().unwrap();
    let rule = DomainRule::parse(&format!("api.test:{port}")).unwrap();
    let term = Arc::new(
        Terminator::new(
            vec![Secret::new(
                "T".into(),
                ph.clone(),
                VALUE.as_bytes().to_vec(),
                vec![rule],
                in_bodies,
            )],
            std::slice::from_ref(&ca_file),
        )
        .unwrap(),
    );
    #[allow(clippy::disallowed_methods)] // the test's own temporary directory
    let _ = std::fs::remove_dir_all(&dir);
    Setup {
        term,
        port,
        placeholder: ph,
        seen,
    }
}

/// One request through a fresh terminated connection: the status, the
/// headers and the body as the sandbox gets them (`Err` where it ends
/// with an error, cut, or the connection ends before an answer).
async fn fetch(
    s: &Setup,
    req: Request<Full<Bytes>>,
) -> (StatusCode, http::HeaderMap, Result<Bytes, String>) {
    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front_port = front.local_addr().unwrap().port();
    let (t, port) = (s.term.clone(), s.port);
    tokio::spawn(async move {
        let (conn, _) = front.accept().await.unwrap();
        let upstream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let record: Recorder = Arc::new(|_| {});
        let _ = serve(
            t,
            conn,
            Vec::new(),
            upstream,
            "api.test".into(),
            port,
            record,
            std::time::Duration::from_secs(10),
            None,
        )
        .await;
    });
    let client = crate::secrets::test_tls::client_config(s.term.ca_pem());
    let tcp = TcpStream::connect(("127.0.0.1", front_port)).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(client)
        .connect(ServerName::try_from("api.test").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let target = req.uri().to_string();
    let resp = match sender.send_request(req).await {
        Ok(r) => r,
        // Ended before a head came: nothing of the answer reached it.
        Err(e) => {
            return (
                StatusCode::BAD_GATEWAY,
                http::HeaderMap::new(),
                Err(format!("{target}: {e}")),
            )
        }
    };
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| e.to_string());
    (parts.status, parts.headers, body)
}

fn get(s: &Setup, target: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .uri(target)
        .header("host", format!("api.test:{}", s.port))
        .header("authorization", format!("Bearer {}", s.placeholder))
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_spelled_back_by_an_ordinary_server_never_reaches_the_sandbox() {
    let s = setup(false).await;
    // F3: the value in the query, percent-encoded by warden, quoted again
    // in a login redirect's next=.
    let (status, headers, _) =
        fetch(&s, get(&s, &format!("/data?api_key={}", s.placeholder))).await;
    assert_eq!(status, StatusCode::FOUND);
    let location = headers["location"].to_str().unwrap().to_string();
    assert!(!location.contains(&quote(&quote(VALUE))), "{location}");
    assert!(location.contains(&s.placeholder), "{location}");
    // F4: a Markdown escaper's echo.
    let (_, _, body) = fetch(&s, get(&s, "/md")).await;
    let body = String::from_utf8(body.unwrap().to_vec()).unwrap();
    assert!(!body.replace('\\', "").contains(VALUE), "{body}");
    assert!(body.contains(&s.placeholder), "{body}");
    // F5: quoted-printable with a soft line break inside the value.
    let (_, _, body) = fetch(&s, get(&s, "/qp")).await;
    let body = String::from_utf8(body.unwrap().to_vec()).unwrap();
    let decoded = body.replace("=\r\n", "").replace("=3D", "=");
    assert!(!decoded.contains(VALUE), "{body}");
    // F6: the request's header echoed gzip'd, with no Content-Encoding,
    // from a host the secret goes to in headers only (read through a
    // decoded copy: cut) and from one it goes to in bodies too (decoded
    // and scrubbed). Before the copy, the headers-only host's gzip came
    // back as it was sent, the value inside.
    for in_bodies in [false, true] {
        let sb = setup(in_bodies).await;
        // (A body cut before its first byte may end the connection
        // before its head is written: no answer at all.)
        let (_, _, body) = fetch(&sb, get(&sb, "/gz")).await;
        let got = match &body {
            Ok(b) => b.to_vec(),
            Err(e) => e.clone().into_bytes(),
        };
        let mut plain = Vec::new();
        let _ = std::io::Read::read_to_end(
            &mut flate2::read::MultiGzDecoder::new(&got[..]),
            &mut plain,
        );
        let all = [&got[..], &plain[..]].concat();
        assert!(
            !String::from_utf8_lossy(&all).contains(VALUE),
            "in bodies {in_bodies}: {}",
            String::from_utf8_lossy(&all)
        );
        if in_bodies {
            let text = String::from_utf8(body.unwrap().to_vec()).unwrap();
            assert!(text.contains(&sb.placeholder), "{text}");
        } else {
            assert!(body.is_err(), "a cut body ended as a whole one");
        }
    }
    // Past the depth the scrub reads: withheld, not passed.
    let (_, _, body) = fetch(&s, get(&s, "/deep")).await;
    if let Ok(body) = body {
        let text = String::from_utf8_lossy(&body).into_owned();
        assert!(!text.contains("%252525"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_value_in_a_compressed_request_body_never_leaves() {
    // F7: code inside holds the real value and sends it compressed with
    // no Content-Encoding (and declared), towards a terminated host.
    let s = setup(false).await;
    let plain = format!("x={VALUE}").into_bytes();
    for (what, body, declared) in [
        ("gzip", gzip(&plain), None),
        ("zlib", zlib(&plain), None),
        ("declared gzip", gzip(&plain), Some("gzip")),
        ("gzip of gzip", gzip(&gzip(&plain)), None),
    ] {
        let mut req = Request::builder()
            .method("POST")
            .uri("/up")
            .header("host", format!("api.test:{}", s.port))
            .header("content-type", "application/octet-stream");
        if let Some(c) = declared {
            req = req.header("content-encoding", c);
        }
        let (status, _, _) = fetch(&s, req.body(Full::new(Bytes::from(body))).unwrap()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{what}");
    }
    assert!(
        s.seen.lock().unwrap().is_empty(),
        "nothing of a blocked body arrives"
    );
    // A compressed body without the value goes as it came.
    let clean = gzip(b"x=nothing secret here");
    let req = Request::builder()
        .method("POST")
        .uri("/up")
        .header("host", format!("api.test:{}", s.port))
        .body(Full::new(Bytes::from(clean.clone())))
        .unwrap();
    let (status, _, _) = fetch(&s, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(s.seen.lock().unwrap().as_slice(), &[clean]);
    // Compressed data warden cannot read is refused.
    let zstd = b"\x28\xb5\x2f\xfd\x04\x58\x19\x00\x00\x68more".to_vec();
    let req = Request::builder()
        .method("POST")
        .uri("/up")
        .header("host", format!("api.test:{}", s.port))
        .body(Full::new(Bytes::from(zstd)))
        .unwrap();
    let (status, headers, _) = fetch(&s, req).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(headers["x-warden-reason"], "packed_body");
}

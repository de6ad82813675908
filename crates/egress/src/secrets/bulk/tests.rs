//! Bulk reads on a real terminated connection: an HTTPS server upstream
//! that writes its answer in timed pieces, the terminator between, and a
//! client that trusts the sandbox's authority; and the gathering layer
//! on a real TLS session over an in-memory pipe.

use super::super::session::serve;
use super::super::test_tls::{client_config, server_config};
use super::super::{placeholder, Recorder, Secret, Terminator};
use super::Gathered;
use crate::decision::Decision;
use crate::requests::{RequestAction, RequestRule};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use warden_policy::DomainRule;

/// An HTTPS server for api.test on 127.0.0.1 that answers the first
/// request of each connection with a 200 whose body is `pieces`, each
/// written and flushed on its own, `gap` apart (so that each is a TLS
/// record or several of its own, and arrives at the proxy apart). Its
/// port and authority's PEM.
async fn upstream(pieces: Vec<Vec<u8>>, gap: Duration) -> (u16, String) {
    let (config, pem) = server_config("api.test");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let pieces = Arc::new(pieces);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, pieces) = (acceptor.clone(), pieces.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tls.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let length: usize = pieces.iter().map(Vec::len).sum();
                let status = format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n");
                let _ = tls.write_all(status.as_bytes()).await;
                for piece in pieces.iter() {
                    let _ = tls.write_all(piece).await;
                    let _ = tls.flush().await;
                    tokio::time::sleep(gap).await;
                }
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, pem)
}

/// The terminator `term` in front of the upstream on `port`, one
/// connection served; what was recorded.
async fn front(term: Arc<Terminator>, port: u16) -> (u16, Arc<Mutex<Vec<Decision>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap().port();
    let decisions = Arc::new(Mutex::new(Vec::<Decision>::new()));
    let d = decisions.clone();
    tokio::spawn(async move {
        let (conn, _) = listener.accept().await.unwrap();
        let upstream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let record: Recorder = Arc::new(move |dec| d.lock().unwrap().push(dec));
        let _ = serve(
            term,
            conn,
            Vec::new(),
            upstream,
            "api.test".into(),
            port,
            record,
            Duration::from_secs(20),
            None,
        )
        .await;
    });
    (front, decisions)
}

/// A terminator for `secrets` and `rules` that trusts the upstream's
/// authority `pem`.
fn terminator(secrets: Vec<Secret>, rules: Vec<RequestRule>, pem: &str) -> Arc<Terminator> {
    let file = std::env::temp_dir().join(format!(
        "warden-bulk-ca-{}-{}.pem",
        std::process::id(),
        unique()
    ));
    std::fs::write(&file, pem).unwrap();
    let term = Terminator::new(secrets, std::slice::from_ref(&file))
        .unwrap()
        .with_requests(rules);
    let _ = std::fs::remove_file(&file);
    Arc::new(term)
}

/// A name part no other test of this process uses at the same time.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// GET / through the terminator on `front` as the sandbox would: the
/// status and the whole body.
async fn download(term: &Terminator, front: u16, port: u16) -> (u16, Vec<u8>) {
    let tcp = TcpStream::connect(("127.0.0.1", front)).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_config(term.ca_pem()))
        .connect(ServerName::try_from("api.test").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .uri("/file")
        .header("host", format!("api.test:{port}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, body.to_vec())
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_split_across_the_pieces_of_a_bulk_download_is_still_scrubbed() {
    let value = b"real-token-0123456789abcdef".to_vec();
    let filler = |n: usize| vec![b'a'; n];
    // The value cut between two writes a moment apart (two records, two
    // reads at the proxy), across the 16 KiB of a TLS record inside one
    // large write, across the 64 KiB of the proxy's read buffer, and cut
    // after its first byte.
    let mut first = filler(300 * 1024);
    first.extend_from_slice(&value[..10]);
    let mut second = value[10..].to_vec();
    second.extend(filler(16384 - second.len() - 5));
    second.extend_from_slice(&value);
    second.extend(filler(65536 - second.len() - 7));
    second.extend_from_slice(&value);
    second.extend(filler(200 * 1024));
    second.push(value[0]);
    let mut third = value[1..].to_vec();
    third.extend_from_slice(b" end");
    let pieces = vec![first, second, third];
    let whole: Vec<u8> = pieces.concat();
    let (port, pem) = upstream(pieces, Duration::from_millis(50)).await;
    let ph = placeholder().unwrap();
    let rule = DomainRule::parse(&format!("api.test:{port}")).unwrap();
    let secret = Secret::new("T".into(), ph.clone(), value.clone(), vec![rule], false);
    let term = terminator(vec![secret], Vec::new(), &pem);
    let (front, decisions) = front(term.clone(), port).await;
    let (status, body) = download(&term, front, port).await;
    assert_eq!(status, 200);
    assert_eq!(count(&whole, &value), 4);
    assert_eq!(count(&body, &value), 0, "the value reached the sandbox");
    assert_eq!(count(&body, ph.as_bytes()), 4);
    // Everything else arrived as it was sent.
    let mut expected = whole.clone();
    while let Some(at) = expected.windows(value.len()).position(|w| w == value) {
        expected.splice(at..at + value.len(), ph.bytes());
    }
    assert!(
        body == expected,
        "the body differs from the scrubbed answer"
    );
    assert!(decisions
        .lock()
        .unwrap()
        .iter()
        .any(|d| d.detail == "scrubbed from a response body"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_download_on_a_ruled_name_arrives_byte_for_byte() {
    // Pieces of odd sizes around a record's 16 KiB and the read buffer's
    // 64 KiB, several MB in all.
    let sizes = [1, 16383, 16385, 65535, 65537, 100_000, 1 << 20, 3 << 20, 7];
    let mut at = 0u64;
    let pieces: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| {
                    at += 1;
                    (at * 7 % 251) as u8
                })
                .collect()
        })
        .collect();
    let whole: Vec<u8> = pieces.concat();
    let (port, pem) = upstream(pieces, Duration::from_millis(5)).await;
    let rule =
        RequestRule::parse(RequestAction::Allow, &format!("GET api.test:{port}/**")).unwrap();
    let term = terminator(Vec::new(), vec![rule], &pem);
    let (front, _) = front(term.clone(), port).await;
    let (status, body) = download(&term, front, port).await;
    assert_eq!(status, 200);
    assert_eq!(body.len(), whole.len());
    assert!(body == whole, "the body differs from what the server sent");
}

/// A TLS session over an in-memory pipe: the client's stream, and the
/// server's (whose transport a test can write raw bytes to).
async fn session() -> (
    tokio_rustls::client::TlsStream<tokio::io::DuplexStream>,
    tokio_rustls::server::TlsStream<tokio::io::DuplexStream>,
) {
    let (config, pem) = server_config("api.test");
    let (a, b) = tokio::io::duplex(1 << 20);
    let accept = tokio_rustls::TlsAcceptor::from(Arc::new(config)).accept(b);
    let connect = tokio_rustls::TlsConnector::from(client_config(&pem))
        .connect(ServerName::try_from("api.test").unwrap(), a);
    let (server, client) = tokio::join!(accept, connect);
    (client.unwrap(), server.unwrap())
}

/// The largest plaintext of one TLS record.
const RECORD: usize = 16 * 1024;

/// One read of at most 64 KiB.
async fn read_once<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Vec<u8>> {
    let mut space = vec![0u8; 64 * 1024];
    let mut buf = ReadBuf::new(&mut space);
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_read(cx, &mut buf)).await?;
    Ok(buf.filled().to_vec())
}

/// Three records of 16 KiB, the largest TLS has (`a`, `b`, `c`), already
/// in the pipe when the client reads; what was sent.
async fn three_records(
    server: &mut tokio_rustls::server::TlsStream<tokio::io::DuplexStream>,
) -> Vec<u8> {
    let sent: Vec<u8> = [b'a', b'b', b'c']
        .iter()
        .flat_map(|&c| vec![c; RECORD])
        .collect();
    for piece in sent.chunks(RECORD) {
        server.write_all(piece).await.unwrap();
        server.flush().await.unwrap();
    }
    sent
}

#[tokio::test]
async fn one_read_takes_every_record_already_there() {
    let (client, mut server) = session().await;
    let sent = three_records(&mut server).await;
    let mut gathered = Gathered::new(client);
    let all = read_once(&mut gathered).await.unwrap();
    assert_eq!(all.len(), sent.len());
    assert!(all == sent);
}

#[tokio::test]
async fn an_error_after_some_records_comes_at_the_next_read_never_as_an_end() {
    let (client, mut server) = session().await;
    // The first records are read and decrypted before the bad bytes are.
    let sent = three_records(&mut server).await;
    // Bytes that are no TLS record: the client's session fails on them.
    server
        .get_mut()
        .0
        .write_all(b"\x17\x03\x03\x00\x10not a record....")
        .await
        .unwrap();
    let mut gathered = Gathered::new(client);
    let first = read_once(&mut gathered).await.unwrap();
    assert!(!first.is_empty() && sent.starts_with(&first));
    let next = read_once(&mut gathered).await;
    assert!(
        next.is_err(),
        "the failure became {:?}",
        next.map(|v| v.len())
    );
}

//! What reading a body through its decoded copy costs, against the same
//! bytes passed as they are (not measured by default: run with
//! `--release --ignored --nocapture`; `docs/performance.md` has figures).

use super::*;
use crate::secrets::rewrite::{Place, RewriteBody};
use crate::secrets::{Secret, Terminator};
use http_body_util::{BodyExt, StreamBody};
use std::io::Write;
use warden_policy::DomainRule;

const HOST: &str = "api.test";

/// A session of a host its one secret is sent to in headers only, with
/// no upstream (the body is handed in).
fn session() -> Arc<Session> {
    let rule = DomainRule::parse(HOST).unwrap();
    let secret = Secret::new(
        "T".into(),
        crate::secrets::placeholder().unwrap(),
        b"ghp_Real-Secret/Value+1234567890=abcdefXY".to_vec(),
        vec![rule],
        false,
    );
    let term = Arc::new(Terminator::new(vec![secret], &[]).unwrap());
    Arc::new(Session {
        sni: None,
        peer: None,
        upgraded: std::sync::Mutex::new(None),
        head: term.request_patterns(HOST, 443, Place::Header),
        target: term.request_patterns(HOST, 443, Place::Target),
        body: term.request_patterns(HOST, 443, Place::Body),
        scrub: term.scrub.clone(),
        body_substitution: false,
        term,
        name: HOST.into(),
        port: 443,
        upstream: Err("no upstream".into()),
        record: Arc::new(|_| {}),
    })
}

/// A package's tarball, `mb` MiB of it: 512-byte headers before files of
/// source-like text (words, numbers and punctuation, packing four to
/// five times as source does), none of it a value.
fn tarball(mb: usize) -> Vec<u8> {
    let words = [
        "function", "return", "const", "left", "pad", "string", "length", "while", "if", "else",
        "module", "exports", "var", "ch", "len", "=", "+", "(", ")", "{", "}", ";", "\n",
    ];
    let mut seed = 0x2545f4914f6cdd1du64;
    let mut out = Vec::with_capacity((mb << 20) + (64 << 10));
    let mut file = 0;
    while out.len() < mb << 20 {
        let mut header = format!("package/lib/f{file}.js").into_bytes();
        header.resize(512, 0);
        out.extend_from_slice(&header);
        let end = out.len() + (256 << 10);
        while out.len() < end {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            out.extend_from_slice(words[(seed % words.len() as u64) as usize].as_bytes());
            out.extend_from_slice(format!(" {} ", seed % 997).as_bytes());
        }
        file += 1;
    }
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// `data` through [`Copied`] and the scrub of the body's own bytes after
/// it, as a headers-only host's response goes: the bytes that came out,
/// and the seconds it took.
async fn through(data: &Bytes) -> (usize, f64) {
    let s = session();
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = (0..data.len())
        .step_by(16 << 10)
        .map(|at| {
            Ok(Frame::data(
                data.slice(at..(at + (16 << 10)).min(data.len())),
            ))
        })
        .collect();
    let inner: OutBody = StreamBody::new(futures_util::stream::iter(frames)).boxed();
    let start = std::time::Instant::now();
    let copied = Copied::new(inner, s.clone(), Arc::new(Budget::new(None)), true).boxed();
    let mut body = RewriteBody::new(copied, s.scrub.clone(), false, None, None);
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(d) = frame.expect("the body was cut").into_data() {
            n += d.len();
        }
    }
    (n, start.elapsed().as_secs_f64())
}

#[tokio::test]
#[ignore]
async fn copy_scan_throughput_of_a_gzip_d_tarball() {
    let tar = tarball(128);
    let tgz = Bytes::from(gzip(&tar));
    // The same bytes that do not start like gzip pass as they are, the
    // scrub after the copy reading them as any body.
    let mut unsniffed = b"X".to_vec();
    unsniffed.extend_from_slice(&tgz);
    let unsniffed = Bytes::from(unsniffed);
    println!(
        "a tarball of {} MB, gzip'd to {} MB",
        tar.len() / 1_000_000,
        tgz.len() / 1_000_000
    );
    for round in 0..3 {
        let (n, passed) = through(&unsniffed).await;
        assert_eq!(n, unsniffed.len());
        let (n, copied) = through(&tgz).await;
        assert_eq!(n, tgz.len());
        println!(
            "round {round}: passed as it is {passed:.2} s ({:.0} MB/s), read in a decoded copy {copied:.2} s ({:.0} MB/s of gzip, {:.0} MB/s decoded): {:.2}x",
            unsniffed.len() as f64 / passed / 1e6,
            tgz.len() as f64 / copied / 1e6,
            tar.len() as f64 / copied / 1e6,
            copied / passed
        );
    }
    // Of which the scrub of what it decodes to, alone.
    let start = std::time::Instant::now();
    let mut rw = Rewriter::new(session().scrub.clone());
    for piece in tar.chunks(64 << 10) {
        rw.push(piece).unwrap();
    }
    rw.finish().unwrap();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "the scrub alone of the {} MB it decodes to: {secs:.2} s ({:.0} MB/s)",
        tar.len() / 1_000_000,
        tar.len() as f64 / secs / 1e6
    );
    // The most one layer may stand for: zeros gzip'd once, read whole.
    let zeros = vec![0u8; 1 << 30];
    let gz = Bytes::from(gzip(&zeros));
    let (n, secs) = through(&gz).await;
    assert_eq!(n, gz.len());
    println!(
        "1 GiB of zeros gzip'd to {} KB, read in a decoded copy: {secs:.2} s ({:.0} MB/s decoded)",
        gz.len() / 1000,
        zeros.len() as f64 / secs / 1e6
    );
}

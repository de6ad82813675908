//! A secret's host that stores what the sandbox sends (the placeholder
//! substituted with the real value on the way) and hands it back inside
//! encodings the scrub once read at one alignment, from one stream, of
//! two kinds of compression only (outside review 31, F1 F2 F3 F7 F8): a
//! prefix glued to base64 of gzip, `0x` before hexadecimal of zlib, zlib
//! with a small window, a second zlib stream after a first, xz, and gzip
//! in a run longer than the scrub's window. Through a real proxy and a
//! real terminator to a real TLS store; the value must never come back.

use super::secret_ports::{Other, Run, VALUE};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::io::Write;

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// The kinds, by the path a load asks for: the run the store answers
/// around the note it keeps.
const KINDS: [&str; 6] = [
    "/load/prefix-gzip",
    "/load/0x-zlib",
    "/load/zlib-small-window",
    "/load/zlib-then-zlib",
    "/load/xz",
    "/load/long-gzip",
];

/// The note in the shape `path` names, inside a JSON body.
fn shape(path: &str, note: &[u8]) -> Vec<u8> {
    let doc = [note, b" ", note].concat();
    let run = match path {
        "/load/prefix-gzip" => format!("v1{}", STANDARD.encode(gzip(&doc))),
        "/load/0x-zlib" => format!("0x{}", hex(&zlib(&doc))),
        "/load/zlib-small-window" => {
            // A writer with a 1 KiB window: CINFO 2, the check again.
            let mut z = zlib(&doc);
            z[0] = 0x28;
            z[1] = (0x80u8..0xa0)
                .find(|f| (0x2800u16 | u16::from(*f)).is_multiple_of(31))
                .unwrap();
            STANDARD.encode(z)
        }
        "/load/zlib-then-zlib" => STANDARD.encode([zlib(b"{}"), zlib(&doc)].concat()),
        "/load/xz" => {
            STANDARD.encode([&b"\xfd7zXZ\x00\x00\x04\xe6\xd6\xb4\x46"[..], &deflate(&doc)].concat())
        }
        "/load/long-gzip" => {
            // Seven random bits a byte: Huffman-coded, a little more
            // than the scrub's window of base64 in all.
            let mut seed = 0x2545f4914f6cdd1du64;
            let filler: Vec<u8> = (0..(230 << 10))
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8 & 0x7f
                })
                .collect();
            STANDARD.encode(gzip(&[&filler[..], &doc].concat()))
        }
        _ => return note.to_vec(),
    };
    format!("{{\"stored\":\"{run}\"}}").into_bytes()
}

#[test]
fn a_value_stored_and_served_back_inside_a_run_the_scrub_once_could_not_read_never_comes_back() {
    let run = Run::shaped(Other::Nothing, shape);
    let own = run.own();
    let (answer, _) = run
        .store(&own, "Content-Type: text/plain\r\n")
        .expect("stored");
    assert!(answer.contains("stored"), "{answer}");
    let stored = format!("note={VALUE}");
    let mut leaked = Vec::new();
    for kind in KINDS {
        let sent = String::from_utf8(shape(kind, stored.as_bytes())).unwrap();
        let inner = &sent["{\"stored\":\"".len()..sent.len() - 2];
        // (A response withheld before its head reaches the sandbox ends
        // the connection with nothing.)
        let answer = run.get(&own, kind).map(|(a, _)| a).unwrap_or_default();
        // The run came back replaced by the placeholder, or the answer
        // was withheld: never as the store sent it.
        if answer.contains(VALUE) || answer.contains(inner) {
            leaked.push(kind);
        }
    }
    assert!(
        leaked.is_empty(),
        "came back as the store sent them: {leaked:?}"
    );
    assert!(run.decided_code("response_withheld"));
}

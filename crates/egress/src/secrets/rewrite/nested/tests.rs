use super::super::{scrub_patterns, Patterns, Rewriter};
use super::read::{read_run, runs_in};
use super::*;
use crate::secrets::coding::bound::{FLOOR, RATIO};
use crate::secrets::coding::Budget;
use crate::secrets::Secret;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use std::io::Write;

const VALUE: &str = "sk-Real/Secret+Value=1234567890abcdefXYZ";
const PLACEHOLDER: &str = "warden-secret-00112233445566778899aabbccddeeff";

/// A large PNG, as a camera or a chart library writes one: its pixels a
/// zlib stream inside it that inflates to 1 MiB, then a second one of
/// `noise` (compressed again: more than a window of a run).
fn big_png(noise: &[u8]) -> Vec<u8> {
    let pixels: Vec<u8> = (0u32..1 << 20)
        .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
        .collect();
    [
        &b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x02\x00\x00\x00\x02\x00\x08\x06\x00\x00\x00\xf4\x78\xd4\xfa"[..],
        b"\x00\x01\x00\x00IDAT",
        &zlib(&pixels),
        b"\x00\x00\x00\x00\x00\x04\x00\x00IDAT",
        &zlib(noise),
        b"\x00\x00\x00\x00IEND\xaeB`\x82",
    ]
    .concat()
}

fn scrub() -> Arc<Patterns> {
    let secrets = [Secret::new(
        "TOKEN".into(),
        PLACEHOLDER.into(),
        VALUE.as_bytes().to_vec(),
        Vec::new(),
        true,
    )];
    Arc::new(Patterns::new(scrub_patterns(&secrets)))
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn hex(data: &[u8]) -> Vec<u8> {
    data.iter()
        .flat_map(|b| format!("{b:02x}").into_bytes())
        .collect()
}

fn b64(data: &[u8]) -> Vec<u8> {
    STANDARD.encode(data).into_bytes()
}

fn pct(data: &[u8]) -> Vec<u8> {
    data.iter()
        .flat_map(|&b| {
            if b.is_ascii_alphanumeric() {
                vec![b]
            } else {
                format!("%{b:02X}").into_bytes()
            }
        })
        .collect()
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

/// Compressed forms of the value as Python's `gzip` and `zlib` write
/// them (Huffman-coded: the value's bytes are not in them as they
/// are, where a store-only encoder would leave them).
const GZIP_OF_VALUE: &str =
    "H4sIAFLtDWsC/yvO1g1KTczRD05NLkot0Q5LzClNtTU0MjYxNTO3sDRITEpOSU2LiIwCAIDD+mcoAAAA";
const ZLIB_OF_VALUE: &str =
    "78da2bced60d4a4dccd10f4e4d2e4a2dd10e4bcc294db535343236313533b7b034484c4a4e494d8b888c020010b60cf7";
const DEFLATE_OF_VALUE: &str =
    "2bced60d4a4dccd10f4e4d2e4a2dd10e4bcc294db535343236313533b7b034484c4a4e494d8b888c0200";
const GZIP_OF_B64_OF_VALUE: &str = "1f8b08000000000002034b362a2e09cd0dcb4872b60c890af7ab8c8a082c0acb752b4e090fb5f40df1acf2730935f2ab4a37f57577cb8c340aca89cac9880a4fb7b50500ec4797dd38000000";
/// A Flask session cookie's payload: URL-safe base64 of zlib of
/// `{"token":VALUE,"user":"someone"}`.
const FLASK_SESSION: &str = "eNqrVirJz07NU7JSKs7WDUpNzNEPTk0uSi3RDkvMKU21NTQyNjE1M7ewNEhMSk5JTYuIjFLSUSotTi0C6cjPTc3PS1WqBQATNRZ1";

/// The value inside two encodings of different kinds, or compressed
/// and encoded, each as a server that stored it echoes it.
fn nestings() -> Vec<(&'static str, Vec<u8>)> {
    let v = VALUE.as_bytes();
    let gz = STANDARD.decode(GZIP_OF_VALUE).unwrap();
    let json_u: Vec<u8> = v
        .iter()
        .flat_map(|b| format!("\\u{b:04x}").into_bytes())
        .collect();
    let cookie = format!("session=.{FLASK_SESSION}.ZxYzAb.c2lnbmF0dXJlLW9mLWl0");
    let wrapped: Vec<String> = b64(&gz)
        .chunks(20)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let json_escaped: Vec<u8> = b64(&gz)
        .iter()
        .flat_map(|&c| if c == b'/' { b"\\/".to_vec() } else { vec![c] })
        .collect();
    vec![
        ("b64_of_gzip", b64(&gz)),
        ("hex_of_gzip", hex(&gz)),
        ("b64_of_zlib", b64(&unhex(ZLIB_OF_VALUE))),
        ("b64_of_deflate", b64(&unhex(DEFLATE_OF_VALUE))),
        ("b64_of_pct", b64(&pct(v))),
        ("pct_b64_of_pct", pct(&b64(&pct(v)))),
        ("b64_of_json_u", b64(&json_u)),
        ("b64_hex", b64(&hex(v))),
        ("hex_b64", hex(&b64(v))),
        ("b64_b64_b64", b64(&b64(&b64(v)))),
        ("b64_of_gzip_of_b64", b64(&unhex(GZIP_OF_B64_OF_VALUE))),
        (
            "urlsafe_b64_of_gzip",
            URL_SAFE_NO_PAD.encode(&gz).into_bytes(),
        ),
        ("flask_cookie", cookie.into_bytes()),
        ("b64_of_gzip_wrapped", wrapped.join("\\r\\n").into_bytes()),
        ("b64_of_gzip_json_escaped", json_escaped),
        // A spelling among bytes that are not text.
        (
            "b64_of_pct_among_bytes",
            b64(&[&b"\x00\x9f\xfe\x01"[..], &pct(v), b"\xff\x00\x10"].concat()),
        ),
        // Compressed by this crate's encoder too.
        ("b64_of_flate2_gzip", b64(&gzip(v))),
        ("b64_of_flate2_zlib_of_b64", b64(&zlib(&b64(v)))),
        ("b64_of_flate2_deflate_of_hex", b64(&deflate(&hex(v)))),
    ]
}

fn frame(inner: &[u8]) -> Vec<u8> {
    [&b"{\"stored\": \""[..], inner, b"\", \"more\": 1}"].concat()
}

/// `text` through a scrub's rewriter in pieces of `piece` bytes.
fn scrubbed(p: &Arc<Patterns>, text: &[u8], piece: usize) -> Result<Vec<u8>, Blocked> {
    let mut r = Rewriter::new(p.clone());
    let mut out = Vec::new();
    for chunk in text.chunks(piece.max(1)) {
        out.extend(r.push(chunk)?);
    }
    out.extend(r.finish()?);
    Ok(out)
}

/// Whether `text` holds the value anywhere in its runs' decodings.
fn holds(text: &[u8]) -> bool {
    let p = scrub();
    let mut found = Rewriter::flat(&p, text).unwrap_or(Some(0)).is_some();
    runs_in(text, &mut |chars, _| {
        found |= read_run(&p, chars) != Verdict::Clean;
    });
    found
}

/// Outside review 31: every run had a budget of its own (about
/// 512 KiB) and nothing bounded them together, so a 1 MiB body of
/// short runs that each inflate far (base64 of gzip of base64 of
/// gzip of 180 KiB) made the proxy decode and scan some 1.8 GB: 204 s
/// of CPU in a debug build. The runs of one stream share the bound of
/// what a body may decode to; past it the body is withheld.
#[test]
fn many_short_runs_that_each_inflate_far_are_withheld_at_the_streams_bound() {
    let p = scrub();
    let inner = b64(&gzip(&vec![b'A'; 180 << 10]));
    let run = b64(&gzip(&inner));
    assert!(run.len() < 1024, "{}", run.len());
    // A body whose runs together would decode to far more than its
    // bound (16 MiB and 64 times its bytes).
    let mut body = Vec::new();
    while body.len() < 96 << 10 {
        body.extend_from_slice(&run);
        body.push(b' ');
    }
    let runs = body.len() / (run.len() + 1);
    assert!(runs * (360 << 10) > (16 << 20) + 64 * body.len(), "{runs}");
    let err = scrubbed(&p, &body, 16 << 10).unwrap_err();
    assert!(matches!(err.violation, Violation::Nested), "{err:?}");
    // One such run alone is read and passes.
    let one = [&b"x "[..], &run, b" y"].concat();
    assert_eq!(scrubbed(&p, &one, 1 << 10).unwrap(), one);
}

/// The runs' bound was a ratio of the text they are read in, the body
/// as its codings gave it: a body gzip'd once may give a thousand times
/// its bytes, so a small gzip'd body of text whose runs each inflate
/// made the proxy decode some 64 thousand times what the server sent.
/// The runs' work is counted in the body's one bound, in coded bytes:
/// the gzip'd body is withheld once its runs have cost that bound.
#[test]
fn a_small_gzip_d_body_of_runs_that_cost_far_more_than_its_coded_bytes_is_withheld() {
    let p = scrub();
    // Runs that each inflate to 2 KiB, far apart: reading them costs
    // tens of times the text's bytes, under the bound of the text sent
    // as it is, and thousands of times what its gzip weighs.
    let run = b64(&gzip(&vec![b'A'; 2 << 10]));
    let gap = vec![b' '; 200];
    let mut text = Vec::new();
    while text.len() < 1 << 20 {
        text.extend_from_slice(&run);
        text.extend_from_slice(&gap);
    }
    let coded = gzip(&text);
    assert!(coded.len() < 8 << 10, "{}", coded.len());
    // As a body's codings count it: its coded bytes as they came, what
    // they decode to as the stage gives it.
    let body = Arc::new(Budget::new(None));
    body.coded(coded.len());
    body.decoded(text.len()).unwrap();
    let mut r = Rewriter::within(p.clone(), body.clone(), false);
    let start = std::time::Instant::now();
    let mut err = None;
    for chunk in text.chunks(16 << 10) {
        if let Err(e) = r.push(chunk) {
            err = Some(e);
            break;
        }
    }
    let err = match err {
        Some(e) => e,
        None => r.finish().unwrap_err(),
    };
    let spent = start.elapsed();
    assert!(matches!(err.violation, Violation::Nested), "{err:?}");
    // Within the runs' share of the body's bound, in coded bytes (the
    // text's length would have allowed them 80 MiB).
    let share = FLOOR + RATIO * coded.len() as u64;
    assert!(
        body.runs() <= share && share < 40 << 20,
        "the runs cost {} bytes of decoding in {spent:?} of CPU, past their share {share}",
        body.runs()
    );
    println!(
        "a gzip'd body of {} coded bytes withheld after {} bytes of decoding its runs, {spent:?} of CPU",
        coded.len(),
        body.runs()
    );
}

#[test]
fn a_value_inside_two_encodings_or_compressed_and_encoded_is_scrubbed_in_any_pieces() {
    let p = scrub();
    for (kind, inner) in nestings() {
        let text = frame(&inner);
        // The patterns alone (the scrub before) let it through.
        if !kind.contains("flate2") {
            let mut flat = Rewriter::flat_stream(p.clone());
            let mut before = flat.push(&text).unwrap();
            before.extend(flat.finish().unwrap());
            assert_eq!(before, text, "{kind}: the patterns alone read it");
        }
        for piece in [1, 7, 64, text.len()] {
            let out = scrubbed(&p, &text, piece).unwrap();
            let s = String::from_utf8_lossy(&out);
            // (A store-only encoder leaves the value's bytes as they
            // are: the patterns replace it inside the base64.)
            assert!(
                s.contains(PLACEHOLDER) || kind.contains("flate2"),
                "{kind} in {piece}: {s}"
            );
            assert!(
                s.starts_with("{\"stored\": \"") && s.ends_with("\", \"more\": 1}"),
                "{kind}: {s}"
            );
            assert!(!holds(&out), "{kind} in {piece}: {s}");
        }
    }
}

#[test]
fn a_run_that_ends_the_text_with_a_line_break_is_read() {
    let p = scrub();
    let gz = STANDARD.decode(GZIP_OF_VALUE).unwrap();
    for end in ["\n", "\r\n", "\\n", "\n  "] {
        let text = [&b64(&gz)[..], end.as_bytes()].concat();
        for piece in [1, 5, text.len()] {
            let out = scrubbed(&p, &text, piece).unwrap();
            assert_eq!(out, [PLACEHOLDER.as_bytes(), end.as_bytes()].concat());
        }
        let clean = [&b"plain words, no run here"[..], end.as_bytes()].concat();
        assert_eq!(scrubbed(&p, &clean, 3).unwrap(), clean);
    }
}

#[test]
fn ordinary_encoded_content_passes_unchanged() {
    let p = scrub();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let random: Vec<u8> = (0..30_000).map(|_| next() as u8).collect();
    let png = [&b"\x89PNG\r\n\x1a\n"[..], &random].concat();
    let header = URL_SAFE_NO_PAD.encode(b"{\"alg\":\"HS256\",\"typ\":\"JWT\"}");
    let claims = URL_SAFE_NO_PAD.encode(
        b"{\"sub\":\"1234567890\",\"name\":\"John Doe\",\"iat\":1516239022,\"scope\":\"repo read:org\"}",
    );
    let text = format!(
        "{{\"avatar\":\"data:image/png;base64,{}\",\"jwt\":\"{header}.{claims}.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c\",\
         \"integrity\":\"sha512-{}\",\"sha\":\"{}\",\"doc\":\"{}\",\"packed\":\"{}\",\
         \"prose\":\"The internationalization of configuration-management is straightforward.\"}}",
        STANDARD.encode(&png),
        STANDARD.encode(&random[..64]),
        String::from_utf8_lossy(&hex(&random[..20])),
        String::from_utf8_lossy(&b64(&b64(b"a readme that says nothing secret"))),
        String::from_utf8_lossy(&b64(&gzip(b"{\"name\":\"left-pad\",\"version\":\"1.3.0\"}"))),
    );
    // A large image (over a window): its pixels a zlib stream inside it
    // that inflates far past the bound, then a stream of coded bytes
    // that a window's end cuts.
    let noise: Vec<u8> = (0..300_000).map(|_| next() as u8).collect();
    // And a run of one letter longer than a window (filler, padding):
    // its decodings at other alignments read as deflate's fixed codes
    // for a long way.
    let text = format!(
        "{text}\n{{\"photo\":\"data:image/png;base64,{}\",\"fill\":\"{}\"}}",
        STANDARD.encode(big_png(&noise)),
        "a".repeat(300 << 10),
    );
    for piece in [16 << 10, 100] {
        assert_eq!(
            scrubbed(&p, text.as_bytes(), piece).unwrap(),
            text.as_bytes()
        );
    }
}

#[test]
fn nesting_past_the_bound_with_text_inside_is_withheld_and_binary_is_not() {
    let p = scrub();
    // Base64 applied again and again: read up to the bound, withheld
    // past it rather than passed unread.
    let mut inner = VALUE.as_bytes().to_vec();
    for times in 1..=9 {
        inner = b64(&inner);
        let r = scrubbed(&p, &frame(&inner), 1000);
        match r {
            Ok(out) => {
                assert!(times <= DEPTH + 1, "{times} times passed");
                assert!(!holds(&out), "{times}: {}", String::from_utf8_lossy(&out));
            }
            Err(b) => {
                assert!(times > DEPTH, "{times} times withheld");
                assert_eq!(b.violation, Violation::Nested);
            }
        }
    }
    // Hashes of hashes are bytes: nothing to hide a value in.
    let mut inner = vec![0x5a_u8; 32];
    for _ in 0..9 {
        inner = hex(&inner[..32]).iter().map(|b| b ^ 0x80).collect();
    }
    let text = frame(&b64(&inner));
    assert_eq!(scrubbed(&p, &text, 1000).unwrap(), text);
}

#[test]
fn a_compressed_run_that_inflates_past_the_bound_is_withheld() {
    let p = scrub();
    let bomb = gzip(&vec![b'a'; INFLATE_MOST + 1]);
    assert!(scrubbed(&p, &frame(&b64(&bomb)), 4096).is_err());
    let fine = gzip(&vec![b'a'; INFLATE_MOST / 2]);
    let text = frame(&b64(&fine));
    assert_eq!(scrubbed(&p, &text, 4096).unwrap(), text);
}

#[test]
fn a_long_run_is_read_a_window_at_a_time_and_a_value_inside_is_withheld() {
    let p = scrub();
    let mut seed = 0x2545f4914f6cdd1du64;
    let random: Vec<u8> = (0..(HELD_MOST * 2))
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    let text = frame(&b64(&random));
    assert_eq!(scrubbed(&p, &text, 16 << 10).unwrap(), text);
    // The value hidden far into a long run (a document holding the
    // value's base64-of-gzip, base64'd again with megabytes of data
    // around it): past the first window.
    let doc = [
        &random[..HELD_MOST],
        b" \"x\": \"",
        &b64(&gzip(VALUE.as_bytes())),
        b"\" ",
        &random[..HELD_MOST],
    ]
    .concat();
    assert!(scrubbed(&p, &frame(&b64(&doc)), 16 << 10).is_err());
}

/// Not a timed test: how fast a realistic JSON body with a lot of
/// base64 is scrubbed with and without reading inside runs (run with
/// `--ignored --nocapture`; `docs/performance.md` has figures).
#[test]
#[ignore]
fn scrub_throughput_of_json_with_base64() {
    let p = scrub();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut body = b"[".to_vec();
    let mut i = 0u64;
    while body.len() < 10 << 20 {
        let image: Vec<u8> = (0..(next() % 6000 + 500)).map(|_| next() as u8).collect();
        let digest: Vec<u8> = (0..64).map(|_| next() as u8).collect();
        let claims = URL_SAFE_NO_PAD.encode(format!("{{\"sub\":\"user-{i}\",\"iat\":{i}}}"));
        body.extend_from_slice(
            format!(
                "{{\"id\":\"{}\",\"name\":\"package-number-{i}\",\"description\":\"A library that does one thing well, \
                 version {i}.\",\"integrity\":\"sha512-{}\",\"token\":\"eyJhbGciOiJIUzI1NiJ9.{claims}.{}\",\
                 \"icon\":\"data:image/png;base64,{}\"}},\n",
                String::from_utf8_lossy(&hex(&digest[..20])),
                STANDARD.encode(&digest),
                URL_SAFE_NO_PAD.encode(&digest[..32]),
                STANDARD.encode(&image),
            )
            .as_bytes(),
        );
        i += 1;
    }
    body.push(b']');
    for (what, nested) in [
        ("patterns alone (before)", false),
        ("with runs read (after)", true),
    ] {
        let mut r = if nested {
            Rewriter::new(p.clone())
        } else {
            Rewriter::flat_stream(p.clone())
        };
        let start = std::time::Instant::now();
        let mut n = 0;
        for chunk in body.chunks(16 << 10) {
            n += r.push(chunk).unwrap().len();
        }
        n += r.finish().unwrap().len();
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(n, body.len());
        println!(
            "scrub {} MB of JSON with base64, {what}: {:.1} MB/s",
            body.len() >> 20,
            body.len() as f64 / secs / 1e6
        );
    }
}

/// A short document that holds the value, as a store keeps it.
fn stored() -> Vec<u8> {
    format!("{{\"token\":\"{VALUE}\",\"again\":\"{VALUE}\"}}").into_bytes()
}

/// Asserts that the scrub withholds the response holding the run
/// `inner` (fed `piece` bytes at a time) as one it cannot read inside.
fn assert_withheld(p: &Arc<Patterns>, inner: &[u8], piece: usize, what: &str) {
    let r = scrubbed(p, &frame(inner), piece);
    assert!(
        matches!(&r, Err(b) if b.violation == Violation::Nested),
        "{what}: {r:?}"
    );
}

/// Whether the scrub kept `inner` (a run a server built around the
/// value) from coming back, in any pieces: the response withheld, or
/// the run replaced by the placeholder.
fn kept_out(p: &Arc<Patterns>, inner: &[u8]) -> Result<(), String> {
    let text = frame(inner);
    for piece in [7, 16 << 10, text.len()] {
        match scrubbed(p, &text, piece) {
            Err(b) if b.violation == Violation::Nested => {}
            Err(b) => return Err(format!("in {piece}: {b:?}")),
            Ok(out) => {
                if out.windows(inner.len()).any(|w| w == inner) {
                    return Err(format!("in {piece}: the run came back as it was"));
                }
                if !out
                    .windows(PLACEHOLDER.len())
                    .any(|w| w == PLACEHOLDER.as_bytes())
                {
                    return Err(format!("in {piece}: no placeholder"));
                }
            }
        }
    }
    Ok(())
}

/// Each of `cases` kept out; the ones that came back, named.
fn all_kept_out(p: &Arc<Patterns>, cases: &[(String, Vec<u8>)]) {
    let leaked: Vec<String> = cases
        .iter()
        .filter_map(|(name, inner)| kept_out(p, inner).err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(leaked.is_empty(), "{leaked:#?}");
}

/// `zlib` of `data` with its header saying a window of `2^(8 + cinfo)`
/// bytes (the stream is small enough for any), as a writer with a small
/// window (zlib's `wbits` below 15) makes it.
fn zlib_window(data: &[u8], cinfo: u8) -> Vec<u8> {
    let mut z = zlib(data);
    let cmf = cinfo << 4 | 8;
    let flg = (0u8..32)
        .map(|c| 0x80 | c)
        .find(|f| (u16::from(cmf) << 8 | u16::from(*f)).is_multiple_of(31));
    z[0] = cmf;
    z[1] = flg.unwrap();
    z
}

/// A zlib stream whose header names a preset dictionary (FDICT): what
/// the scrub cannot read, since the dictionary is not in the response.
fn zlib_with_dictionary(data: &[u8]) -> Vec<u8> {
    let flg = (0u8..32)
        .map(|c| 0xa0 | c)
        .find(|f| (0x7800u16 | u16::from(*f)).is_multiple_of(31));
    [
        &[0x78, flg.unwrap()][..],
        b"\x1d\x09\x04\xc1",
        &deflate(data),
        b"\x00\x00\x00\x00",
    ]
    .concat()
}

/// Outside review 31, F8: a run was decoded from its first character at
/// one alignment only, so a prefix glued to the encoding (`v1`, `0x`, a
/// letter) hid the value, as did base64 glued to base64 that was not
/// padded. Each alignment is read now.
#[test]
fn a_value_behind_letters_glued_to_its_encoding_is_read_at_every_alignment() {
    let p = scrub();
    let doc = stored();
    let mut cases = Vec::new();
    for prefix in ["v1", "x", "abc", "abcd", "abcde", "version1", "v1_2024_"] {
        for (kind, inner) in [
            ("b64(gzip)", b64(&gzip(&doc))),
            ("b64(zlib)", b64(&zlib(&doc))),
            (
                "urlsafe(zlib)",
                URL_SAFE_NO_PAD.encode(zlib(&doc)).into_bytes(),
            ),
            ("b64(deflate)", b64(&deflate(&doc))),
        ] {
            if kind == "b64(deflate)" && prefix.len() >= 4 {
                // Raw deflate has no signature to find inside decoded
                // bytes: read from the start of each alignment only.
                continue;
            }
            cases.push((
                format!("{prefix}+{kind}"),
                [prefix.as_bytes(), &inner].concat(),
            ));
        }
    }
    for prefix in ["0x", "x", "v1", "sha1"] {
        cases.push((
            format!("{prefix}+hex(gzip)"),
            [prefix.as_bytes(), &hex(&gzip(&doc))].concat(),
        ));
        cases.push((
            format!("{prefix}+hex(zlib)"),
            [prefix.as_bytes(), &hex(&zlib(&doc))].concat(),
        ));
    }
    // Base64 joined to base64, padded and not.
    for first in [&b"ab"[..], b"abc", b"abcd", b"a padded piece first"] {
        cases.push((
            format!("b64({}) + b64(gzip)", first.len()),
            [&b64(first)[..], &b64(&gzip(&doc))].concat(),
        ));
        cases.push((
            format!("unpadded b64({}) + b64(gzip)", first.len()),
            [STANDARD_NO_PAD.encode(first).as_bytes(), &b64(&gzip(&doc))].concat(),
        ));
    }
    all_kept_out(&p, &cases);
}

/// Outside review 31, F1: a zlib stream with a window below 32 KiB was
/// not read, and one with a preset dictionary neither read nor withheld.
/// One with a dictionary is read with the dictionary unknown (what it
/// codes as literals), and withheld past a short length.
#[test]
fn zlib_with_a_small_window_is_read_and_with_a_preset_dictionary_read_or_withheld() {
    let p = scrub();
    let doc = stored();
    let mut cases = Vec::new();
    for cinfo in 0..=7 {
        cases.push((
            format!("b64(zlib window {cinfo})"),
            b64(&zlib_window(&doc, cinfo)),
        ));
        cases.push((
            format!("hex(zlib window {cinfo})"),
            hex(&zlib_window(&doc, cinfo)),
        ));
    }
    cases.push((
        "b64(zlib with a dictionary)".into(),
        b64(&zlib_with_dictionary(&doc)),
    ));
    cases.push((
        "hex(zlib with a dictionary)".into(),
        hex(&zlib_with_dictionary(&doc)),
    ));
    all_kept_out(&p, &cases);
    // A longer stream with a dictionary is withheld: what it copies from
    // the dictionary, which is not in the response, cannot be read.
    let mut seed = 0x2545f4914f6cdd1du64;
    let long: Vec<u8> = (0..4096)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8 & 0x7f
        })
        .collect();
    for inner in [
        b64(&zlib_with_dictionary(&long)),
        hex(&zlib_with_dictionary(&long)),
    ] {
        assert_withheld(&p, &inner, 64, "a preset dictionary's stream");
    }
}

/// Outside review 31, F2: compressed data of a kind the scrub does not
/// read passed inside a run, though the same bytes as a body are
/// withheld. Inside a run (base64 or hexadecimal, at any alignment) the
/// body's signatures withhold too.
#[test]
fn compressed_data_of_a_kind_not_read_inside_a_run_is_withheld_as_in_a_body() {
    let p = scrub();
    // What follows each head is what the format would code: bytes the
    // scrub cannot read.
    let coded: Vec<u8> = (0u32..300)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for (name, head) in [
        ("zstd", &b"\x28\xb5\x2f\xfd\x04\x58"[..]),
        ("xz", b"\xfd7zXZ\x00\x00\x04\xe6\xd6\xb4\x46"),
        ("bzip2", b"BZh91AY&SY\x1d\x5e"),
        ("lzma", b"\x5d\x00\x00\x80\x00\xff\xff\xff\xff"),
        ("lzip", b"LZIP\x01\x0c"),
        ("lz4", b"\x04\x22\x4d\x18\x64\x40"),
        ("compress", b"\x1f\x9d\x90"),
        ("zip", b"PK\x03\x04\x14\x00\x00\x00\x08\x00"),
        ("7z", b"7z\xbc\xaf\x27\x1c\x00\x04"),
        ("rar", b"Rar!\x1a\x07\x01\x00"),
        ("git pack", b"PACK\x00\x00\x00\x02\x00\x00"),
    ] {
        let data = [head, &coded].concat();
        for (how, inner) in [
            ("b64", b64(&data)),
            ("hex", hex(&data)),
            ("x+b64", [&b"x"[..], &b64(&data)].concat()),
            ("urlsafe", URL_SAFE_NO_PAD.encode(&data).into_bytes()),
        ] {
            if name == "compress" && how == "x+b64" {
                // Two bytes and flags are met too often in random
                // bytes to be taken anywhere but at a run's start.
                continue;
            }
            assert_withheld(&p, &inner, 4096, &format!("{name} in {how}"));
        }
    }
}

/// Outside review 31, F3: what followed the first zlib stream (or gzip
/// member) in decoded bytes passed unread.
#[test]
fn what_follows_the_first_compressed_stream_in_a_run_is_read() {
    let p = scrub();
    let doc = stored();
    let clean = b"{\"name\":\"left-pad\",\"version\":\"1.3.0\"}";
    let cases: Vec<(String, Vec<u8>)> = [
        ("zlib+zlib", [zlib(clean), zlib(&doc)].concat()),
        ("gzip+zlib", [gzip(clean), zlib(&doc)].concat()),
        ("zlib+gzip", [zlib(clean), gzip(&doc)].concat()),
        ("gzip+gzip", [gzip(clean), gzip(&doc)].concat()),
        (
            "zlib+zlib window 1",
            [zlib(clean), zlib_window(&doc, 1)].concat(),
        ),
        (
            "zlib+text+gzip",
            [&zlib(clean)[..], b"--", &gzip(&doc)].concat(),
        ),
        (
            "gzip+bytes+zlib",
            [&gzip(clean)[..], b"\x00\xff\x10", &zlib(&doc)].concat(),
        ),
    ]
    .into_iter()
    .flat_map(|(name, data)| {
        [
            (format!("b64({name})"), b64(&data)),
            (format!("hex({name})"), hex(&data)),
        ]
    })
    .collect();
    all_kept_out(&p, &cases);
}

/// Outside review 31, F7: compressed data in a run longer than one
/// window was read in its first window only; the rest passed. A stream
/// that runs on past a window's end is withheld (it cannot be read
/// whole), at the run's start or inside it.
#[test]
fn compressed_data_in_a_run_longer_than_a_window_is_withheld() {
    let p = scrub();
    let mut seed = 0x2545f4914f6cdd1du64;
    // Bytes of seven random bits: compressed, a little over a window of
    // base64, and Huffman-coded (not stored as they are, as random
    // bytes would be, where the value's own bytes would stand in it).
    let random: Vec<u8> = (0..(HELD_MOST * 7 / 8))
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8 & 0x7f
        })
        .collect();
    let doc = [&random[..], &stored()].concat();
    let cases: Vec<(String, Vec<u8>)> = vec![
        ("b64(gzip)".into(), b64(&gzip(&doc))),
        ("b64(zlib)".into(), b64(&zlib(&doc))),
        ("b64(deflate)".into(), b64(&deflate(&doc))),
        (
            "v1+b64(zlib)".into(),
            [&b"v1"[..], &b64(&zlib(&doc))].concat(),
        ),
        ("hex(gzip)".into(), hex(&gzip(&doc))),
        // Random bytes first, then the stream: it starts inside the
        // run, and the window ends inside it.
        (
            "b64(random+gzip)".into(),
            b64(&[&random[..HELD_MOST / 2], &gzip(&doc)].concat()),
        ),
    ];
    for (name, inner) in &cases {
        assert!(inner.len() > HELD_MOST, "{name}: {}", inner.len());
    }
    all_kept_out(&p, &cases);
}

/// Hashes and tokens are random bytes: read at every alignment, none of
/// the signatures the scrub withholds is met by chance in thousands of
/// them.
#[test]
fn many_random_hashes_pass_at_every_alignment() {
    let p = scrub();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut text = Vec::new();
    for i in 0..6000 {
        let digest: Vec<u8> = (0..[20, 32, 64][i % 3]).map(|_| next() as u8).collect();
        text.extend_from_slice(b"{\"sha\":\"");
        text.extend_from_slice(&hex(&digest));
        text.extend_from_slice(b"\",\"integrity\":\"sha512-");
        text.extend_from_slice(&b64(&digest));
        text.extend_from_slice(b"\",\"id\":\"");
        text.extend_from_slice(URL_SAFE_NO_PAD.encode(&digest).as_bytes());
        text.extend_from_slice(b"\"}\n");
    }
    assert_eq!(scrubbed(&p, &text, 16 << 10).unwrap(), text);
}

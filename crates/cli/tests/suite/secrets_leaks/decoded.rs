//! What a secret's host's compressed answers decode to, through a real
//! sandbox and a real raw server: a bomb (zeros gzip'd three times over,
//! a few KiB standing for 256 MiB) is cut at the bound of what one body
//! may decode to, from a host sent the secret in bodies (decoded and
//! scrubbed) and from one sent it in headers only (read in a decoded
//! copy); the request's head echoed gzip'd with no Content-Encoding from
//! a headers-only host never comes back with the value (outside review
//! 28a F6); a headers-only host's tarballs, zips and wheels reach the
//! sandbox byte for byte; and a sparse image gzip'd once, far past 64
//! times, arrives whole (outside review 31, F10).

use super::*;
use sha2::Digest;
use std::path::Path;
use std::sync::OnceLock;

/// Zeros gzip'd three times over, with no Content-Encoding: 256 MiB.
const BOMB_ZEROS: u64 = 256 << 20;

/// What one body may decode to, every coding counted: the proxy's bound
/// (16 MiB, and past that 1,032 times its coded bytes, as far as one gzip
/// can pack anything).
fn bound(coded: usize) -> u64 {
    (16 << 20) + 1032 * coded as u64
}

fn bomb() -> &'static [u8] {
    static BOMB: OnceLock<Vec<u8>> = OnceLock::new();
    BOMB.get_or_init(|| {
        // 256 members of a MiB of zeros each (one member compressed once),
        // then gzip'd twice more.
        let member = gzip(&vec![0u8; 1 << 20]);
        let inner = member.repeat((BOMB_ZEROS >> 20) as usize);
        gzip(&gzip(&inner))
    })
}

/// `data` as one answer of `application/octet-stream`, with its length
/// and no Content-Encoding.
fn octets(data: Vec<u8>) -> Vec<Vec<u8>> {
    head_and(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            data.len()
        ),
        data,
    )
}

/// Files by route, served as [`octets`]; `/gz` is the request's head
/// gzip'd (the value the proxy put in its Authorization inside).
fn store(files: Vec<(String, Vec<u8>)>) -> impl Fn(&RawRequest) -> Vec<Vec<u8>> + Send + Sync {
    move |req: &RawRequest| match req.target.as_str() {
        "/bomb" => octets(bomb().to_vec()),
        "/gz" => {
            let head: String = req
                .headers
                .iter()
                .map(|(k, v)| format!("{k}: {v}\r\n"))
                .collect();
            octets(gzip(head.as_bytes()))
        }
        t => match files.iter().find(|(r, _)| r == t) {
            Some((_, data)) => octets(data.clone()),
            None => octets(b"unknown route\n".to_vec()),
        },
    }
}

/// The details of the secret events the run recorded as blocked.
fn blocked(ev: &Path) -> Vec<String> {
    events(ev)
        .iter()
        .filter(|e| e["event"] == "secret" && e["action"] == "blocked")
        .filter_map(|e| e["detail"].as_str().map(str::to_string))
        .collect()
}

/// A line `key=N` of the run's output, as a number.
fn figure(out: &str, key: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .and_then(|n| n.trim().parse().ok())
}

#[test]
fn a_bomb_from_a_secrets_host_is_cut_at_the_bound_of_what_a_body_decodes_to() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], store(Vec::new()));
    let coded = bomb().len();
    assert!(coded < 64 * 1024, "{coded}");
    let url = format!("https://{HOST}:{}/bomb", up.port);
    for in_bodies in [true, false] {
        let dir = TempDir::new("bomb-ev");
        let ev = dir.path().join("events.jsonl");
        let mut args = vec![
            "--upstream-ca".to_string(),
            ca.pem_path(),
            "--json-events".into(),
            ev.display().to_string(),
        ];
        if in_bodies {
            args.extend(["--secret-in-body".into(), "TOKEN".into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // What the sandbox got, and what it decodes to by every gzip in it
        // (a headers-only host's answer is passed coded).
        let script = format!(
            r#": > /tmp/bomb; curl -s -o /tmp/bomb "{url}"; echo curl=$?
echo got=$(wc -c < /tmp/bomb)
echo unpacked=$( (gunzip -c < /tmp/bomb | gunzip -c | gunzip -c) 2>/dev/null | wc -c)
"#
        );
        let start = std::time::Instant::now();
        let out = run_secret(&token(), up.port, &args, &script);
        let took = start.elapsed();
        let s = stdout(&out);
        let got = figure(&s, "got").unwrap_or_else(|| panic!("{s}\n{}", stderr(&out)));
        let unpacked = figure(&s, "unpacked").unwrap_or(0);
        let most = bound(coded);
        eprintln!(
            "bomb of {coded} bytes, in bodies {in_bodies}: the sandbox got {got} bytes ({unpacked} unpacked) in {took:?}"
        );
        // Before: 256 MiB reached the sandbox (4 GiB in the review's
        // attack, 168 s of the proxy's work).
        assert!(got <= most && unpacked <= most, "{s}");
        assert_ne!(figure(&s, "curl"), Some(0), "a cut body was whole: {s}");
        // Recorded with why (the decision's reason: decoded_too_large).
        let b = blocked(&ev);
        assert!(
            b.iter()
                .any(|d| d.contains("decoded to") && d.contains("warden reads of a body")),
            "in bodies {in_bodies}: {b:?}"
        );
    }
}

#[test]
fn a_value_in_undeclared_gzip_from_a_headers_only_host_never_comes_back() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], store(Vec::new()));
    let value = token();
    let dir = TempDir::new("gz-ev");
    let ev = dir.path().join("events.jsonl");
    let url = format!("https://{HOST}:{}/gz", up.port);
    let out = run_secret(
        &value,
        up.port,
        &[
            "--upstream-ca",
            &ca.pem_path(),
            "--json-events",
            ev.to_str().unwrap(),
        ],
        &format!(
            r#"curl -s "{url}" -H "Authorization: Bearer $TOKEN" > /tmp/gz; echo curl=$?
gunzip -c < /tmp/gz 2>/dev/null; echo
echo ---
cat /tmp/gz | base64
"#
        ),
    );
    let s = stdout(&out);
    let seen = up.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(bearer(&seen[0]), value, "the value went upstream");
    // Before: gunzip inside printed `Authorization: Bearer <value>`.
    output_holds_no_value(&out, &value);
    let raw = s
        .split("---\n")
        .nth(1)
        .unwrap_or_default()
        .replace('\n', "");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(raw.trim())
        .unwrap_or_default();
    if let Some(how) = sniffed_holds(&raw, &value) {
        panic!("the value came back ({how}): {s}");
    }
    assert_ne!(figure(&s, "curl"), Some(0), "a cut body was whole: {s}");
    // Recorded with why (the decision's reason: packed_value).
    let b = blocked(&ev);
    assert!(
        b.iter()
            .any(|d| d.contains("compressed data") && d.contains("value of secret TOKEN")),
        "{b:?}\n{s}\n{}\n{}",
        stderr(&out),
        std::fs::read_to_string(&ev).unwrap_or_default()
    );
    assert_no_value("the events", &std::fs::read_to_string(&ev).unwrap(), &value);
}

/// Whether `data`, gzip'd or not, holds `value`.
fn sniffed_holds(data: &[u8], value: &str) -> Option<&'static str> {
    use std::io::Read;
    if String::from_utf8_lossy(data).contains(value) {
        return Some("as it is");
    }
    let mut out = Vec::new();
    let _ = flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .contains(value)
        .then_some("gzip")
}

/// A program of the host's run over `dir` (`tar`, `python3`); `None`
/// when it is missing or fails.
fn made(program: &str, args: &[&str], dir: &Path) -> Option<Vec<u8>> {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

/// A package's files: `mb` MiB of text that compresses as source does
/// (four to five times), none of it the value.
fn package(dir: &Path, mb: usize) {
    let src = dir.join("package");
    std::fs::create_dir_all(src.join("lib")).unwrap();
    std::fs::write(
        src.join("package.json"),
        b"{\"name\": \"left-pad\", \"version\": \"1.3.0\"}\n",
    )
    .unwrap();
    let mut seed = 0x2545f4914f6cdd1du64;
    let words = [
        "function", "return", "const", "left", "pad", "string", "length", "while", "if", "else",
        "module", "exports", "var", "ch", "len", "=", "+", "(", ")", "{", "}", ";", "\n",
    ];
    // One MiB of text, written under a header of its own in each file
    // (gzip's window is 32 KiB: a file a MiB back is nothing to it).
    let mut text = String::with_capacity(1 << 20);
    while text.len() < 1 << 20 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        text.push_str(words[(seed % words.len() as u64) as usize]);
        text.push_str(&format!(" {} ", seed % 997));
    }
    for f in 0..mb {
        std::fs::write(
            src.join("lib").join(format!("f{f}.js")),
            format!("// file {f}\n{text}"),
        )
        .unwrap();
    }
}

const ZIP_DIR: &str = "import io, os, sys, zipfile\nb = io.BytesIO()\nwith zipfile.ZipFile(b, 'w', zipfile.ZIP_DEFLATED) as z:\n    for root, _, files in os.walk('package'):\n        for f in files:\n            z.write(os.path.join(root, f))\nsys.stdout.buffer.write(b.getvalue())";

#[test]
fn tarballs_zips_and_wheels_from_a_headers_only_host_arrive_byte_for_byte() {
    if !egress_available() {
        return;
    }
    let dir = TempDir::new("packages");
    package(dir.path(), 6);
    let (Some(tgz), Some(zip)) = (
        made("tar", &["czf", "-", "package"], dir.path()),
        made("python3", &["-c", ZIP_DIR], dir.path()),
    ) else {
        skip("tar with gzip and python3 are needed to make the packages");
        return;
    };
    // A tarball npm serves (gzip, as application/octet-stream), a zip, a
    // wheel (a zip by another name), and the tarball's tar gzip'd again.
    let tar = made("tar", &["cf", "-", "package"], dir.path()).unwrap_or_default();
    let files = vec![
        ("/left-pad-1.3.0.tgz".to_string(), tgz.clone()),
        ("/archive.zip".to_string(), zip.clone()),
        ("/left_pad-1.3.0-py3-none-any.whl".to_string(), zip.clone()),
        ("/twice.tgz.gz".to_string(), gzip(&tgz)),
        ("/plain.tar".to_string(), tar),
    ];
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], store(files.clone()));
    let mut script = String::new();
    for (route, _) in &files {
        script.push_str(&format!(
            "curl -s -H \"Authorization: Bearer $TOKEN\" -o /tmp/f \"https://{HOST}:{}{route}\"; echo \"{route} curl=$? $(sha256sum < /tmp/f | cut -d' ' -f1)\"\n",
            up.port
        ));
    }
    let out = run_secret(
        &token(),
        up.port,
        &["--upstream-ca", &ca.pem_path()],
        &script,
    );
    let s = ok(&out);
    let mut failed = Vec::new();
    for (route, data) in &files {
        let want = format!("{route} curl=0 {:x}", sha2::Sha256::digest(data));
        if !s.lines().any(|l| l == want) {
            failed.push(format!("{route}: not byte for byte ({} bytes)", data.len()));
        }
    }
    assert!(failed.is_empty(), "{}\n{s}", failed.join("\n"));
}

/// A sparse disk image: `mb` MiB of zeros with a few KiB of log text
/// every 4 MiB, as a file system's used blocks stand among its empty ones.
/// gzip'd once it is about a thousandth of its size, as far as one gzip
/// can pack anything.
fn sparse_image(mb: usize) -> Vec<u8> {
    let mut image = vec![0u8; mb << 20];
    let mut seed = 0x9e3779b97f4a7c15u64;
    for block in image.chunks_mut(4 << 20) {
        let mut log = String::new();
        while log.len() < 4000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            log.push_str(&format!(
                "2026-12-01T02:{:02}:{:02}Z INFO GET /api/v1/items/{} 200 {} ms\n",
                seed % 60,
                (seed >> 8) % 60,
                seed % 100_000,
                (seed >> 16) % 900
            ));
        }
        block[..log.len()].copy_from_slice(log.as_bytes());
    }
    image
}

/// Outside review 31, F10: a legitimate `.gz` packed once far past 64
/// times (a sparse disk image, a log of one line repeated) from a secret's
/// host arrived cut (0 bytes to the sandbox): one body's bound was 64
/// times its coded bytes, which one gzip passes alone. Undeclared, from a
/// host sent the secret in headers only, it reaches the sandbox byte for
/// byte (its decoded copy read whole); declared `Content-Encoding: gzip`,
/// it is decoded whole, from a host sent the secret in headers only or in
/// bodies.
#[test]
fn a_sparse_image_gzip_d_once_from_a_secrets_host_arrives_whole() {
    if !egress_available() {
        return;
    }
    let image = sparse_image(40);
    let packed = gzip(&image);
    // Past the bound of 64 times the coded bytes that one body's decoding
    // had before, within what one gzip can reach.
    assert!(
        (image.len() as u64) > (16 << 20) + 64 * packed.len() as u64
            && (image.len() as u64) < bound(packed.len()),
        "{} bytes packed to {}",
        image.len(),
        packed.len()
    );
    let declared = head_and(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            packed.len()
        ),
        packed.clone(),
    );
    let files = vec![("/disk.img.gz".to_string(), packed.clone())];
    let serve = store(files);
    let answer = move |req: &RawRequest| match req.target.as_str() {
        "/disk.img" => declared.clone(),
        _ => serve(req),
    };
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], answer);
    let want_gz = format!("{:x}", sha2::Sha256::digest(&packed));
    let want_img = format!("{:x}", sha2::Sha256::digest(&image));
    for in_bodies in [false, true] {
        let mut args = vec!["--upstream-ca".to_string(), ca.pem_path()];
        if in_bodies {
            args.extend(["--secret-in-body".into(), "TOKEN".into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut script = String::new();
        // Undeclared from a host sent secrets in bodies is decoded for the
        // scrub (its bytes are not the server's): only the declared route.
        let routes: &[&str] = if in_bodies {
            &["/disk.img"]
        } else {
            &["/disk.img.gz", "/disk.img"]
        };
        for route in routes {
            script.push_str(&format!(
                "curl -s -o /tmp/f \"https://{HOST}:{}{route}\"; echo \"{route} curl=$? $(wc -c < /tmp/f) $(sha256sum < /tmp/f | cut -d' ' -f1)\"\n",
                up.port
            ));
        }
        let start = std::time::Instant::now();
        let out = run_secret(&token(), up.port, &args, &script);
        let s = ok(&out);
        eprintln!("in bodies {in_bodies}, {:?}:\n{s}", start.elapsed());
        for route in routes {
            let (len, sum) = if *route == "/disk.img.gz" {
                (packed.len(), &want_gz)
            } else {
                (image.len(), &want_img)
            };
            // Before: undeclared, `curl=92` and nothing (cut before its
            // first byte); declared, 18 MB of the image's 40 MiB.
            let want = format!("{route} curl=0 {len} {sum}");
            assert!(
                s.lines().any(|l| l == want),
                "in bodies {in_bodies}: {route} not whole\n{s}\n{}",
                stderr(&out)
            );
        }
    }
}

/// Not a timed test: what reading an undeclared gzip download of a
/// headers-only host through its decoded copy costs, against the same
/// bytes that do not start like gzip (which pass as they did before the
/// copy). Run with `--ignored --nocapture`.
#[test]
#[ignore]
fn copy_scan_cost_of_a_large_undeclared_gzip_download() {
    if !egress_available() {
        return;
    }
    let dir = TempDir::new("large-package");
    package(dir.path(), 400);
    let Some(tgz) = made("tar", &["czf", "-", "package"], dir.path()) else {
        skip("tar with gzip is needed");
        return;
    };
    let mut unsniffed = b"X".to_vec();
    unsniffed.extend_from_slice(&tgz);
    let files = vec![
        ("/big.tgz".to_string(), tgz.clone()),
        ("/big.bin".to_string(), unsniffed),
    ];
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], store(files));
    let script = format!(
        r#"for r in big.bin big.tgz big.bin big.tgz; do
s=$(date +%s%N); curl -s -o /tmp/f "https://{HOST}:{}/$r"; e=$(date +%s%N)
echo "$r $(wc -c < /tmp/f) $(( (e - s) / 1000000 )) ms"
done
"#,
        up.port
    );
    let out = run_secret(
        &token(),
        up.port,
        &["--upstream-ca", &ca.pem_path()],
        &script,
    );
    println!("{} bytes of gzip:\n{}", tgz.len(), ok(&out));
}

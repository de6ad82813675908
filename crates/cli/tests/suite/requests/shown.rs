//! What a run says of the requests its sandbox made is the sandbox's
//! choice of text: its end-of-run summary (the refusals, the request
//! rules proposed from them) shows a path's controls as escapes, never
//! raw, so a path cannot recolour, move or reorder the terminal's lines
//! (a C1 CSI, NEL, the line and paragraph separators, direction
//! overrides and isolates). Through the real binary, with a raw client
//! that puts the characters in the request line as they are.

use crate::common::forge::Forge;
use crate::common::*;

/// The program inside: `raw.py PORT`, a request for each path (written
/// raw, UTF-8, in the request line) on its own TLS connection; prints
/// each answer's status.
const RAW: &str = r#"
import os, re, socket, ssl, sys
port = int(sys.argv[1])
TAIL = "\u009b31mRED\u009b0m\u0085NEL\u2028FAKE\u2029\u202egnp.exe\u202a\u2066x\u2069"
# Without C1 controls (no rule can name one: refused before any rule) and
# Unicode's whitespace: denied by a rule, or proposed at exit.
BIDI = "RED\u2028FAKE\u2029\u202egnp.exe\u202a\u2066x\u2069"
WORD = "RED\u202egnp.exe\u202a\u2066x\u2069"
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
for path in ["/denied/" + TAIL, "/denied/" + BIDI, "/proposed/" + WORD + "?token=abc"]:
    s = ctx.wrap_socket(socket.create_connection(("forge.test", port), timeout=10), server_hostname="forge.test")
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: forge.test:{port}\r\nConnection: close\r\n\r\n".encode())
    s.settimeout(5)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except (socket.timeout, ConnectionError, ssl.SSLError):
        pass
    s.close()
    print(" ".join(c.decode() for c in re.findall(rb"HTTP/1\.1 (\d{3}) ", got)), flush=True)
"#;

#[test]
fn the_end_of_run_summary_shows_a_paths_controls_escaped_and_never_raw() {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    let python = std::process::Command::new("python3")
        .args(["-c", "import ssl"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        skip("python3 with ssl is needed for the raw client inside the sandbox");
        return;
    }
    let out = super::run(
        &ca,
        &up,
        &[
            "--allow-request",
            "GET forge.test:PORT/ok/**",
            "--deny-request",
            "* forge.test:PORT/denied/**",
        ],
        &format!("cat > /tmp/raw.py <<'EOF'\n{RAW}\nEOF\npython3 /tmp/raw.py PORT\n"),
    );
    let s = stdout(&out);
    let err = stderr(&out);
    assert!(out.status.success(), "{s}\n{err}");
    // The C1 path is refused before any rule (no rule can name it), the
    // others are refused by the rules, and nothing went upstream.
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["400", "403", "403"],
        "{s}\n{err}"
    );
    assert!(up.requests().is_empty(), "{:?}", up.requests());
    // The summary names the first refusal and proposes a rule for the
    // request no rule allowed: each path is there, escaped (the refused
    // one as its characters, the proposed one in the escaped spelling
    // every path is read and written in).
    assert!(err.contains("no rule can name it"), "{err}");
    let proposed = format!(
        "--allow-request 'GET forge.test:{}/proposed/RED%E2%80%AEgnp.exe%E2%80%AA%E2%81%A6x%E2%81%A9'",
        up.port
    );
    assert!(err.contains(&proposed), "{proposed} is not in: {err}");
    for escaped in [
        "\\u{9b}31mRED",
        "\\u{85}NEL",
        "\\u{2028}FAKE",
        "\\u{2029}",
        "\\u{202e}gnp.exe",
        "\\u{202a}",
        "\\u{2066}x\\u{2069}",
    ] {
        assert!(err.contains(escaped), "{escaped} is not in: {err}");
    }
    assert!(err.contains("/denied/"), "{err}");
    assert!(err.contains("/proposed/"), "{err}");
    let raw: Vec<char> = err
        .chars()
        .filter(|c| {
            let n = u32::from(*c);
            (n < 0x20 && *c != '\n' && *c != '\t')
                || (0x7f..=0x9f).contains(&n)
                || matches!(n, 0x2028 | 0x2029 | 0x202a..=0x202e | 0x2066..=0x2069)
        })
        .collect();
    assert!(raw.is_empty(), "raw controls {raw:?} in: {err:?}");
}

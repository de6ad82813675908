//! A sandbox that makes the secret proxy decode brotli: each `br` stage
//! holds the window its stream declares (up to 16 MiB) once it has
//! decoded that much, so many stacked `br` codings, or many connections
//! each with a `br` body, could grow the supervisor far past its memory
//! budget. The test runs the real `warden` binary against a real upstream
//! on the host's loopback and judges from the host (`/proc/PID/status`).

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Bits written least significant first, as brotli reads them.
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u64, bits: u32) {
        self.acc |= value << self.n;
        self.n += bits;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }
    fn pad(&mut self) {
        if self.n > 0 {
            self.put(0, 8 - self.n);
        }
    }
}

/// `data` as a brotli stream declaring a 16 MiB window, in stored
/// (uncompressed) meta-blocks of 64 KiB: as large as what it holds, and
/// made at once, however large.
fn brotli_stored(data: &[u8]) -> Vec<u8> {
    let mut b = Bits::default();
    // WBITS = 24: a 1, then 7 in three bits.
    b.put(1, 1);
    b.put(7, 3);
    for chunk in data.chunks(64 * 1024) {
        b.put(0, 1); // ISLAST
        b.put(0, 2); // MNIBBLES: 4
        b.put(chunk.len() as u64 - 1, 16); // MLEN - 1
        b.put(1, 1); // ISUNCOMPRESSED
        b.pad();
        b.out.extend_from_slice(chunk);
    }
    b.put(1, 1); // ISLAST
    b.put(1, 1); // ISLASTEMPTY
    b.pad();
    b.out
}

/// Bytes no coding shrinks, so that every stage of a stack outputs (and
/// its window holds) as much as the sandbox reads.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A sandbox asks a secret's host for bodies whose brotli windows fill:
/// two with `br` stacked four deep, four more with one `br` each, read
/// as far as each window and then held open. The supervisor must not grow
/// by what the windows would hold (about 200 MiB): a body whose codings
/// could need more than the proxy's memory budget keeps for decoding is
/// withheld with a 502, and the others decode only as the budget pays for
/// their windows. A body the budget can pay for still decodes whole.
#[test]
fn brotli_windows_cannot_grow_the_supervisor_beyond_its_budget() {
    use crate::common::upstream::{RawUpstream, TestCa};
    use sha2::Digest;
    if !egress_available() {
        return;
    }
    const HOST: &str = "api.secret.test";
    const LEN: usize = 16 * 1024 * 1024 + 64 * 1024;
    let data = noise(LEN);
    let digest = format!("{:x}", sha2::Sha256::digest(&data));
    let single = std::sync::Arc::new(brotli_stored(&data));
    let mut stacked = data.clone();
    for _ in 0..4 {
        stacked = brotli_stored(&stacked);
    }
    let stacked = std::sync::Arc::new(stacked);
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], move |req| {
        let (coding, body) = if req.target.starts_with("/stacked") {
            ("br, br, br, br", stacked.clone())
        } else {
            ("br", single.clone())
        };
        vec![
            format!(
                "HTTP/1.1 200 OK\r\nContent-Encoding: {coding}\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes(),
            body.to_vec(),
        ]
    });
    let port = up.port;
    let script = format!(
        r#"import hashlib, os, socket, ssl, threading, time
ctx = ssl.create_default_context()
tok = os.environ["TOKEN"]
def ask(path):
    s = ctx.wrap_socket(socket.create_connection(("{HOST}", {port}), timeout=60), server_hostname="{HOST}")
    s.sendall(("GET " + path + " HTTP/1.0\r\nHost: {HOST}:{port}\r\nAuthorization: Bearer " + tok + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(4096)
        if not d:
            break
        head += d
    head, _, rest = head.partition(b"\r\n\r\n")
    return s, head.split(b"\r\n")[0].decode().split(" ")[1], rest
def read_all(s, rest, limit):
    h = hashlib.sha256(rest)
    n = len(rest)
    try:
        while n < limit:
            d = s.recv(262144)
            if not d:
                break
            h.update(d)
            n += len(d)
    except Exception as e:
        pass
    return n, h.hexdigest()
# One body alone: decoded whole.
s, status, rest = ask("/single")
n, digest = read_all(s, rest, {LEN})
s.close()
print("whole", status, n, digest, flush=True)
held = []
got = []
lock = threading.Lock()
def hold(path):
    try:
        s, status, rest = ask(path)
    except Exception as e:
        with lock:
            got.append((path, "failed " + repr(e), 0))
        return
    n = 0
    if status == "200":
        s.settimeout(8)
        n, _ = read_all(s, rest, {LEN})
    with lock:
        held.append(s)
        got.append((path, status, n))
threads = [threading.Thread(target=hold, args=(p,)) for p in ["/stacked"] * 2 + ["/single"] * 4]
for t in threads:
    t.start()
for t in threads:
    t.join()
for path, status, n in sorted(got):
    print("held", path, status, n, flush=True)
time.sleep(3)
print("done", flush=True)
"#,
    );
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--no-audit-log", "--secret"])
        .arg(format!("TOKEN@{HOST}:{port}"))
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--upstream-ca", &ca.pem_path()])
        .args(["--", "python3", "-c", &script])
        .env("TOKEN", "ghp_brotliwindowsTOKEN0123456789abcd")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (baseline, peak) = memory_growth(&mut child, Duration::from_secs(240));
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    let grown_mib = peak.saturating_sub(baseline) / 1024;
    eprintln!("baseline {baseline} kB, peak {peak} kB, grown {grown_mib} MiB; {text}");
    let whole = text
        .lines()
        .find(|l| l.starts_with("whole "))
        .unwrap_or_else(|| panic!("no answer came: {text} {}", stderr(&out)));
    assert_eq!(
        whole,
        format!("whole 200 {LEN} {digest}"),
        "a body the budget can pay for did not decode whole"
    );
    assert!(text.contains("done"), "{text} {}", stderr(&out));
    assert!(
        grown_mib < 64,
        "the supervisor grew by {grown_mib} MiB holding brotli windows"
    );
    // Withheld for its codings (502), or, when the singles' windows hold
    // the budget as its answer comes, refused before it is read at all
    // (503, as under a loaded machine's order of arrival): never decoded.
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("held /stacked 502 0") || l.starts_with("held /stacked 503 0"))
            .count(),
        2,
        "stacked brotli bodies were not withheld: {text}"
    );
}

//! The audit log against a sandbox that tries to fill the host's disk
//! with it: random denied names (each one news to aggregation) and
//! refused requests with long random paths (each detail quoting its
//! path). Measured before the bound: about 190 KB/s of log from names and
//! 3 MB/s from paths, lines of 120 KB for 60 KB paths, without end. Now
//! every chosen string is cut, and past the sandbox's byte budget its
//! decisions are only counted; the log stays within the budget, says how
//! many of each kind were left out, keeps its lifecycle, and verifies.

use crate::common::forge::{reach, Recorder};
use crate::common::upstream::TestCa;
use crate::common::*;
use std::process::{Command, Stdio};

/// Random A queries to the sandbox's resolver: `argv[1]` of them, or as
/// many as `argv[2]` seconds allow (a loaded machine sends fewer).
const NAMES: &str = r#"
import random, socket, string, struct, sys, time
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setblocking(False)
want = int(sys.argv[1]); end = time.time() + float(sys.argv[2]); n = 0
def q(name):
    h = struct.pack(">HHHHHH", random.randrange(65536), 0x100, 1, 0, 0, 0)
    return h + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
while n < want and time.time() < end:
    name = ".".join("".join(random.choices(string.ascii_lowercase, k=60)) for _ in range(2)) + ".example"
    try: s.sendto(q(name), (ns, 53)); n += 1
    except BlockingIOError: time.sleep(0.001)
    try:
        while True: s.recv(512)
    except BlockingIOError: pass
print("names", n)
"#;

/// Pipelined GETs of random 7,000-byte paths no rule allows: until
/// `argv[1]` were refused, or `argv[2]` seconds have passed.
const PATHS: &str = r#"
import random, socket, ssl, string, sys, time
ctx = ssl.create_default_context()
want = int(sys.argv[1]); end = time.time() + float(sys.argv[2]); port = int(sys.argv[3]); n = 0
# Resolved once: the names flood may crowd the resolver out later.
addr = None
while addr is None and time.time() < end:
    try: addr = socket.gethostbyname("forge.test")
    except OSError: time.sleep(0.05)
while addr is not None and n < want and time.time() < end:
    # A loaded machine may time a connection out: the next one is tried.
    try: t = ctx.wrap_socket(socket.create_connection((addr, port), timeout=4), server_hostname="forge.test")
    except OSError: continue
    reqs = b""
    for i in range(20):
        p = "/nope/" + "".join(random.choices(string.ascii_letters, k=7000))
        reqs += b"GET " + p.encode() + b" HTTP/1.1\r\nHost: forge.test:" + str(port).encode() + b"\r\n\r\n"
    try: t.sendall(reqs)
    except OSError: t.close(); continue
    got = b""
    try:
        while got.count(b"HTTP/1.1 403") < 20:
            d = t.recv(65536)
            if not d: break
            got += d
    except Exception: pass
    n += got.count(b"HTTP/1.1 403"); t.close()
print("refused", n)
"#;

/// Small enough that either flood alone passes it well before the other
/// ends (on a loaded machine the name flood once fitted whole under 256K,
/// leaving no count of denied names to find).
const BUDGET: u64 = 64 * 1024;

#[test]
fn a_sandbox_flooding_random_names_and_long_paths_leaves_a_log_within_its_budget_that_verifies() {
    if !egress_available() {
        return;
    }
    let dir = TempDir::new("audit-budget");
    std::fs::write(dir.path().join("names.py"), NAMES).unwrap();
    std::fs::write(dir.path().join("paths.py"), PATHS).unwrap();
    let log = dir.path().join("audit.jsonl");
    let ca = TestCa::new();
    let up = Recorder::start(&ca, "forge.test");
    let port = up.port.to_string();
    let d = dir.str();
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--audit-log", log.to_str().unwrap()])
        .args(["--audit-budget", "64K"])
        .args(reach(&ca, &port))
        .args([
            "--allow-request",
            &format!("GET forge.test:{port}/public/**"),
            "--ro",
            d,
            "--",
            "sh",
            "-c",
            &format!("python3 {d}/names.py 30000 40 & python3 {d}/paths.py 200 40 {port}; wait"),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = stdout(&out);
    assert!(out.status.success(), "{said}\n{}", stderr(&out));
    let names: u64 = said
        .lines()
        .find_map(|l| l.strip_prefix("names "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let refused: u64 = said
        .lines()
        .find_map(|l| l.strip_prefix("refused "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        names > 2000 && refused >= 40,
        "the flood was too weak to tell: {said}\n{}",
        stderr(&out)
    );

    let size = std::fs::metadata(&log).unwrap().len();
    let text = std::fs::read_to_string(&log).unwrap();
    eprintln!(
        "{names} names and {refused} refused requests left {size} bytes in {} lines",
        text.lines().count()
    );
    // The budget, and the records that outlive it: the lifecycle and a
    // few counts.
    assert!(
        size <= BUDGET + 32 * 1024,
        "the log took {size} bytes with a budget of {BUDGET}"
    );
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest <= 4096, "a line of {longest} bytes");
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"created"), "{kinds:?}");
    assert!(kinds.contains(&"exited"), "the end is in the log");
    // What was left out is counted, by kind, protocol and verdict.
    let counted = |protocol: &str| -> u64 {
        events
            .iter()
            .filter(|e| e["event"] == "events_over_budget" && e["protocol"] == protocol)
            .filter(|e| e["allowed"] == false)
            .filter_map(|e| e["count"].as_u64())
            .sum()
    };
    assert!(
        counted("dns") > 0,
        "no count of the denied names past the budget"
    );
    assert!(
        counted("request") > 0,
        "no count of the refused requests past the budget"
    );
    let verify = Command::new(warden_bin())
        .args(["audit", "verify", log.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", stdout(&verify));
    assert!(stdout(&verify).contains("intact"), "{}", stdout(&verify));
}

/// A token's sandboxes' audit logs are on the host's disk: what they hold
/// counts against the token's disk quota with their disk budgets, so a
/// token cannot make sandbox after sandbox whose logs its quota never saw.
/// (A log grown to 250M is planted as a sparse file: growing one for real
/// takes a flood of minutes.)
#[test]
fn a_tokens_audit_logs_count_against_its_disk_quota() {
    use crate::common::daemon::*;
    let Some((_state, d)) = with_config(
        "audit-quota",
        "quotas:\n  sandboxes: 4\n  disk: 300M\n",
        &[],
        &[],
    ) else {
        return;
    };
    let token = api_token(&d, "q", &["sandboxes:read", "sandboxes:write"], None);
    let create = |name: &str| {
        let body =
            format!(r#"{{"name":"{name}","start":false,"spec":{{"resources":{{"disk":"64M"}}}}}}"#);
        call_on(&d, true, "POST", "/v1/sandboxes", Some(&body), Some(&token))
    };
    let (s, b) = create("a");
    assert_eq!(s, 201, "{b}");
    let log = sandbox_dir(&d.state, "a").join("audit.jsonl");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    f.set_len(250 << 20).unwrap();
    // 64M + 250M of log + 64M > 300M.
    let (s, b) = create("b");
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["field"], "/spec/resources/disk", "{b}");
    // Once the log is gone (the sandbox removed), the quota has room.
    let (s, b) = call_on(&d, true, "DELETE", "/v1/sandboxes/a", None, Some(&token));
    assert!(s == 200 || s == 204, "{s} {b}");
    let (s, b) = create("b");
    assert_eq!(s, 201, "{b}");
    let _ = call_on(&d, true, "DELETE", "/v1/sandboxes/b", None, Some(&token));
}

/// The same bound on a daemon's sandbox, whose supervisor writes its log:
/// a flood of random names through the API's exec leaves the sandbox's
/// log within the budget its creator set, with the count of what was left
/// out, and the log verifies.
/// A short flood (its budget reached well under the one second the first
/// counts wait): the counts are in the log when the command's answer
/// comes, not a second later (CI, loaded, read the log in between).
#[test]
fn a_daemon_sandboxs_log_stays_within_its_budget_under_a_flood_of_names() {
    use crate::common::daemon::*;
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return;
    }
    let state = TempDir::new("audit-budget-d");
    let d = Daemon::start(state.path(), false);
    let (s, b) = json_call(
        &d,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"loud","spec":{"audit_budget":"128K","egress":{"domains":["x.test"]}}}"#,
    );
    assert_eq!(s, 201, "{b}");
    let body = serde_json::json!({
        "argv": ["python3", "-c", NAMES, "3000", "40"],
        "timeout_seconds": 60,
    })
    .to_string();
    let (s, b) = json_call(&d, "POST", "/v1/sandboxes/loud/exec", &body);
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("names "), "{b}");
    let log = sandbox_dir(&d.state, "loud").join("audit.jsonl");
    let size = std::fs::metadata(&log).unwrap().len();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(size <= 128 * 1024 + 32 * 1024, "the log took {size} bytes");
    assert!(
        text.contains("\"event\":\"events_over_budget\""),
        "no count past the budget"
    );
    let verify = warden(&d.state, &["audit", "verify", log.to_str().unwrap()]);
    assert!(stdout(&verify).contains("intact"), "{}", stdout(&verify));
    let _ = call(&d, "DELETE", "/v1/sandboxes/loud", None, None);
}

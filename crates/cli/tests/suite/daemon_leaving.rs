//! What the daemon keeps doing for a caller that left (outside review 26's
//! residuals): a review of a large layer asked for and hung up on stops
//! soon after, and gives its thread, its CPU and its token's place back;
//! through the real daemon over real HTTP.

use crate::common::daemon::*;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// CPU time the process `pid` has used so far (all its threads), in
/// clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's name: utime and stime are the 12th
    // and 13th of them.
    let rest = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// CPU the daemon uses over `span`, in ticks (100 a second per core).
fn cpu_over(pid: i32, span: Duration) -> u64 {
    let before = cpu_ticks(pid);
    std::thread::sleep(span);
    cpu_ticks(pid) - before
}

/// Files of the layer reviewed: enough that one review takes the debug
/// daemon seconds (a review of 100,000 takes it minutes; planting them
/// takes this host's disk a minute).
const FILES: usize = 20_000;

/// `files` small text files planted in the layer `upper`, in directories
/// of a thousand: what a sandbox that wrote them leaves to review.
fn plant(upper: &Path, files: usize) {
    for d in 0..files.div_ceil(1000) {
        let dir = upper.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..1000.min(files - d * 1000) {
            std::fs::write(dir.join(format!("f{f:04}.txt")), format!("line {f}\n")).unwrap();
        }
    }
}

/// A request sent on its own connection, hung up on after `after`.
fn ask_and_leave(addr: &str, token: &str, path: &str, after: Duration) {
    let mut c = TcpStream::connect(addr).unwrap();
    let head =
        format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {token}\r\n\r\n");
    c.write_all(head.as_bytes()).unwrap();
    std::thread::sleep(after);
    let _ = c.shutdown(std::net::Shutdown::Both);
}

#[test]
fn a_review_hung_up_on_stops_and_gives_back_its_thread_and_its_tokens_place() {
    let Some((state, d)) = with_config("leaving-review", "sessions:\n  per_token: 4\n", &[], &[])
    else {
        return;
    };
    let t = worker_with_sandbox(&d, "asker", "big");
    stop_as(&d, &t, "big");
    let upper = state.path().join("warden/sandboxes/big/upper");
    assert!(upper.is_dir(), "the sandbox has a layer");
    let planted = Instant::now();
    plant(&upper, FILES);
    eprintln!("{FILES} files planted in {:?}", planted.elapsed());
    let addr = d.tcp.clone().unwrap();
    let review = "/v1/sandboxes/big/changes?content=true";
    // Ten reviews of the layer, each left after 100 ms.
    for _ in 0..10 {
        ask_and_leave(&addr, &t, review, Duration::from_millis(100));
    }
    // Within a second or two of the last, the daemon walks for nobody:
    // the token's places are its own again (a review of one file is
    // answered, not refused busy), and its CPU is back to idle.
    let began = Instant::now();
    let one = "/v1/sandboxes/big/changes?path=d000/f0001.txt";
    let answered = loop {
        let (s, b) = call_on(&d, true, "GET", one, None, Some(&t));
        if s == 200 || began.elapsed() > Duration::from_secs(8) {
            break (s, b);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let freed = began.elapsed();
    assert_eq!(answered.0, 200, "after {freed:?}: {}", answered.1);
    assert_eq!(
        json(&answered.1)["changes"].as_array().map(Vec::len),
        Some(1),
        "{}",
        answered.1
    );
    assert!(
        freed < Duration::from_secs(2),
        "the token's places came back only {freed:?} after its callers left"
    );
    let busy = cpu_over(d.pid(), Duration::from_secs(1));
    eprintln!("places back after {freed:?}; the daemon's CPU then: {busy} ticks in 1 s");
    assert!(
        busy < 10,
        "the daemon still burns {busy} ticks a second after its callers left"
    );
}

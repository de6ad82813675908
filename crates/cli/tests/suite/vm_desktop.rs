//! A desktop in a VM sandbox (`--isolation vm` with the shipped `desktop`
//! profile), and the path the daemon reaches its screen and DevTools by:
//! the supervisor's "connect inside", which for a VM sandbox the guest's
//! init makes from inside the guest and relays over the VM's channel.
//! Attacked with real listeners that record whether anything arrived: the
//! host's loopback, another VM sandbox's guest and addresses off the
//! guest's loopback must stay out of reach.
//!
//! Every test here boots a VM (slow under emulation): `#[ignore]`d, run by
//! `.ci/run` with `-- --ignored`, each skipping with its reason when the
//! host has no QEMU, no guest kernel or no desktop programs.

use crate::common;
use crate::common::daemon::{call, curl, json, Daemon};
use crate::common::rfb::{connect, read_bytes, rfb_handshake, runtime};
use crate::common::sockets::{raw_connect, tcp_port_listens};
use crate::common::vm::*;
use crate::common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};
use warden_jail::connect::Target;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::protocol::Reply;

/// How long an emulated desktop VM may take to boot and bring up its X
/// server, VNC server and Chromium (measured: see the test's output).
const DESKTOP_UP_WITHIN: Duration = Duration::from_secs(420);

/// Stops sandbox `.1` of state `.0` when dropped.
struct Stopper(std::path::PathBuf, String);

impl Drop for Stopper {
    fn drop(&mut self) {
        let _ = vm_warden(&self.0, &["stop", "--time", "1s", &self.1], None);
    }
}

fn control(state: &Path, name: &str) -> std::path::PathBuf {
    sandbox_dir(state, name).join("control.sock")
}

#[test]
#[ignore = "boots a desktop VM (slow under emulation): run with -- --ignored"]
fn a_desktop_vm_sandbox_is_watched_and_shot_through_the_daemon() {
    let Some(release) = guest_release() else {
        return;
    };
    if let Some(why) = common::desktop::unavailable() {
        return skip(&why);
    }
    if !common::daemon::curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("vm-desktop");
    let vm = vm_dir();
    let d = Daemon::start_with(state.path(), false, &[], &[("WARDEN_VM_DIR", &vm)]);
    let before_host = (tcp_port_listens(5900), tcp_port_listens(9222));
    let began = Instant::now();
    common::desktop::create(&d, "vmdesk", serde_json::json!({ "isolation": "vm" }));
    let info = common::desktop::wait_up_within(&d, "vmdesk", DESKTOP_UP_WITHIN);
    eprintln!("the desktop VM was up in {:?}", began.elapsed());
    assert_eq!(info["screen"], true, "{info}");
    assert_eq!(info["devtools"], true, "{info}");
    // It is a VM: the guest's own kernel runs the desktop.
    let kernel = common::desktop::sh(&d, "vmdesk", "uname -r");
    assert_eq!(kernel.trim(), release, "not the guest's kernel");
    assert_ne!(kernel.trim(), host_release());
    // A screenshot action: a PNG of the whole screen.
    let (s, png) = curl(&d, "GET", "/v1/sandboxes/vmdesk/desktop/screenshot", &[]);
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&png));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG: {} bytes",
        png.len()
    );
    // The screen through the daemon's route: an RFB greeting, then the
    // profile's screen size at the end of the handshake.
    runtime().block_on(async {
        let mut ws = connect(&d, "/v1/sandboxes/vmdesk/desktop/vnc", None)
            .await
            .unwrap();
        let mut greeting = Vec::new();
        assert!(read_bytes(&mut ws, &mut greeting, 12).await);
        assert!(
            greeting.starts_with(b"RFB 003."),
            "no RFB greeting: {greeting:?}"
        );
        drop(ws);
        let mut ws = connect(&d, "/v1/sandboxes/vmdesk/desktop/vnc", None)
            .await
            .unwrap();
        let (w, h, _, _) = rfb_handshake(&mut ws).await;
        assert_eq!((w, h), (1280, 800), "the profile's screen");
    });
    // DevTools through the daemon answer from the guest's browser (which,
    // emulated, may still be starting its DevTools server, or restarting).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (s, b) = call(
            &d,
            "GET",
            "/v1/sandboxes/vmdesk/desktop/cdp/json/version/",
            None,
            None,
        );
        if s == 200 {
            assert!(
                json(&b)["Browser"].as_str().unwrap_or("").contains("Chrom"),
                "{b}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "DevTools never answered: {s} {b}; the desktop: {}",
            common::desktop::info(&d, "vmdesk")
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    // Nothing of it listens on the host.
    assert_eq!(
        (tcp_port_listens(5900), tcp_port_listens(9222)),
        before_host,
        "the guest's VNC or DevTools port listens on the host"
    );
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/vmdesk", None, None);
    assert!(s < 300, "{s} {b}");
}

/// A server in a guest, on 127.0.0.1:`port`: appends a line to
/// `/tmp/arrivals` for each connection, greets naming the peer,
/// then echoes everything back until the caller's end.
fn guest_server(port: u16) -> String {
    format!(
        r#"import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', {port})); s.listen()
open('/tmp/ready', 'w').close()
def serve(c, peer):
    with open('/tmp/arrivals', 'a') as f: f.write(str(peer) + '\n')
    c.sendall(('hello from the guest, you are ' + str(peer) + '\n').encode())
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
while True:
    c, peer = s.accept()
    threading.Thread(target=serve, args=(c, peer)).start()
"#
    )
}

/// A VM sandbox `name` running [`guest_server`] on `port`.
fn vm_with_server(state: &Path, name: &str, port: u16) -> Stopper {
    ok(&vm_warden(
        state,
        &["create", "--isolation", "vm", "--start", name],
        None,
    ));
    let stop = Stopper(state.to_path_buf(), name.to_string());
    ok(&vm_warden(
        state,
        &[
            "exec",
            "-d",
            name,
            "--",
            "python3",
            "-c",
            &guest_server(port),
        ],
        None,
    ));
    let deadline = Instant::now() + Duration::from_secs(120);
    while code(&vm_warden(
        state,
        &["exec", name, "--", "test", "-e", "/tmp/ready"],
        None,
    )) != 0
    {
        assert!(
            Instant::now() < deadline,
            "the guest's server never started"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    stop
}

/// What the guest's server of sandbox `name` wrote down of its arrivals.
fn arrivals(state: &Path, name: &str) -> String {
    stdout(&vm_warden(
        state,
        &[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            "cat /tmp/arrivals 2>/dev/null; true",
        ],
        None,
    ))
}

/// A listener on the host that records whether any connection arrived.
struct Recorder(std::net::TcpListener);

impl Recorder {
    fn on(addr: &str) -> Recorder {
        let l = std::net::TcpListener::bind(addr).unwrap();
        l.set_nonblocking(true).unwrap();
        Recorder(l)
    }
    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }
    fn reached(&self) -> bool {
        self.0.accept().is_ok()
    }
}

fn refused(err: &ClientError) -> bool {
    matches!(
        err,
        ClientError::Connect {
            source: nix::errno::Errno::ECONNREFUSED,
            ..
        }
    )
}

#[test]
#[ignore = "boots two VMs (slow under emulation): run with -- --ignored"]
fn connect_inside_a_vm_reaches_the_guests_own_ports_and_nothing_else() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-connect");
    // Ports free on the host, each used once: the guest's own, the other
    // guest's, and a host listener on its loopback.
    let host = Recorder::on("127.0.0.1:0");
    let everywhere = Recorder::on("0.0.0.0:0");
    let free: Vec<u16> = (47100..47999)
        .filter(|p| !tcp_port_listens(*p))
        .take(2)
        .collect();
    let (port_a, port_b) = (free[0], free[1]);
    // Neither VM has egress: no network device at all in the guests.
    let _a = vm_with_server(state.path(), "va", port_a);
    let _b = vm_with_server(state.path(), "vb", port_b);
    let ctl = control(state.path(), "va");

    // The guest's own listener: reached, from the guest's own loopback,
    // with a megabyte each way intact.
    let fd = Connection::open(&ctl)
        .unwrap()
        .connect(&Target::loopback(port_a))
        .unwrap();
    let mut stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the greeting ended");
        line.push(byte[0]);
    }
    let greeting = String::from_utf8_lossy(&line);
    assert!(
        greeting.starts_with("hello from the guest, you are ('127.0.0.1'"),
        "{greeting}"
    );
    let sent: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let writer = {
        let mut w = stream.try_clone().unwrap();
        let sent = sent.clone();
        std::thread::spawn(move || {
            w.write_all(&sent).unwrap();
            w.shutdown(std::net::Shutdown::Write).unwrap();
        })
    };
    let mut back = Vec::new();
    stream.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    assert_eq!(back.len(), sent.len(), "the echo came back short");
    assert!(back == sent, "the echo came back changed");

    // The host's loopback: the same address inside is the guest's own,
    // where nothing listens on that port.
    let err = Connection::open(&ctl)
        .unwrap()
        .connect(&Target::loopback(host.port()))
        .unwrap_err();
    assert!(refused(&err), "{err:?}");
    assert!(!host.reached(), "the host's loopback listener was reached");

    // Another VM sandbox's guest listens on port_b: not from this one.
    let err = Connection::open(&ctl)
        .unwrap()
        .connect(&Target::loopback(port_b))
        .unwrap_err();
    assert!(refused(&err), "{err:?}");
    assert_eq!(
        arrivals(state.path(), "vb"),
        "",
        "the other guest's server was reached"
    );

    // Addresses off the guest's loopback, asked of the supervisor without
    // the client's check: the VM's network side (10.0.2.2, where the
    // proxy's sockets are), the guest's own network address, the host's
    // listener on every address, documentation space.
    for addr in [
        std::net::SocketAddr::from(([10, 0, 2, 2], 15001)),
        std::net::SocketAddr::from(([10, 0, 2, 15], port_a)),
        std::net::SocketAddr::from(([10, 255, 255, 1], everywhere.port())),
        std::net::SocketAddr::from(([192, 0, 2, 1], 80)),
        "[::]:80".parse().unwrap(),
    ] {
        let (reply, fds) = raw_connect(&ctl, Target::Tcp { addr });
        assert!(fds.is_empty(), "a descriptor came back for {addr}");
        match reply {
            Reply::Refused { message, .. } => assert!(message.contains("loopback"), "{message}"),
            other => panic!("{addr} was not refused: {other:?}"),
        }
    }
    assert!(!everywhere.reached(), "a host listener was reached");
    assert!(!host.reached(), "the host's loopback listener was reached");

    // A Unix socket path names the guest's file tree, not the host's.
    let path = format!("/tmp/{}.sock", unique("vm-svc"));
    let planted = std::os::unix::net::UnixListener::bind(&path).unwrap();
    planted.set_nonblocking(true).unwrap();
    let err = Connection::open(&ctl)
        .unwrap()
        .connect(&Target::Unix { path: path.clone() })
        .unwrap_err();
    assert!(err.to_string().contains("no such socket"), "{err}");
    assert!(
        planted.accept().is_err(),
        "the host's Unix socket was reached"
    );
    let _ = std::fs::remove_file(&path);

    // Only this test's one connection reached the guest's server.
    let seen = arrivals(state.path(), "va");
    assert_eq!(seen.lines().count(), 1, "{seen}");
}

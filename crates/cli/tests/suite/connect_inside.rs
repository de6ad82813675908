//! Connections into a running sandbox from outside it, made from inside
//! (`Request::Connect`): a listener a sandboxed process opened on the
//! sandbox's own loopback (or a Unix socket in its file tree) is reached
//! through the supervisor's control socket, with nothing listening on the
//! host; a port nobody listens on is "connection refused"; an address off
//! the sandbox's loopback is refused before anything is opened.

use crate::common::sockets::{listening_of, raw_connect, tcp_port_listens};
use crate::common::*;
use std::io::{Read, Write};
use std::time::Duration;
use warden_jail::connect::Target;
use warden_runtime::client::{ClientError, Connection};

fn control(state: &std::path::Path, name: &str) -> std::path::PathBuf {
    sandbox_dir(state, name).join("control.sock")
}

/// A connection to `target`, retried while the sandboxed server starts.
fn connect_when_up(sock: &std::path::Path, target: &Target) -> std::os::fd::OwnedFd {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match Connection::open(sock).unwrap().connect(target) {
            Ok(fd) => return fd,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("never connected to {target}: {e}"),
        }
    }
}

/// A server in the sandbox: greets, then answers one line with its
/// reverse, naming the address it saw the connection come from.
fn server(listen: &str) -> String {
    format!(
        "import socket\n{listen}\ns.listen()\nwhile True:\n    c, peer = s.accept()\n    c.sendall(('hello from inside, you are ' + str(peer) + '\\n').encode())\n    line = c.recv(100)\n    c.sendall(line[::-1])\n    c.close()\n"
    )
}

#[test]
fn a_listener_on_the_sandboxs_loopback_is_reached_without_a_host_socket() {
    let state = TempDir::new("connect-tcp");
    ok(&warden(state.path(), &["create", "cn", "--start"]));
    let _stop = Stopper(state.path(), "cn");
    let supervisor = supervisor_pid(state.path(), "cn");
    // A port no host process uses, so that the host's table can be asked
    // about it by number.
    let port = (47000..47999)
        .find(|p| !tcp_port_listens(*p))
        .expect("a free port");
    // The supervisor's sockets (this test process's own are not compared:
    // the other tests of this file open listeners in it meanwhile).
    let before = listening_of(&[supervisor]);
    let listen = format!(
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port}))"
    );
    ok(&warden(
        state.path(),
        &["exec", "-d", "cn", "--", "python3", "-c", &server(&listen)],
    ));
    let fd = connect_when_up(&control(state.path(), "cn"), &Target::loopback(port));
    let mut stream = std::net::TcpStream::from(fd);
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut greeting = [0u8; 128];
    let n = stream.read(&mut greeting).unwrap();
    let greeting = String::from_utf8_lossy(&greeting[..n]).into_owned();
    assert!(greeting.starts_with("hello from inside"), "{greeting}");
    // The connection came from the sandbox's own loopback, made inside.
    assert!(greeting.contains("'127.0.0.1'"), "{greeting}");
    stream.write_all(b"olleh\n").unwrap();
    let mut back = String::new();
    stream.read_to_string(&mut back).unwrap();
    assert_eq!(back, "\nhello");
    // Nothing listens on the host for it, loopback included: not on the
    // sandbox's port, and no socket the supervisor holds listens that
    // did not before.
    assert!(
        !tcp_port_listens(port),
        "port {port} listens on the host: the sandbox's listener leaked out"
    );
    let after = listening_of(&[supervisor]);
    assert_eq!(before, after, "a new listening socket appeared on the host");
}

#[test]
fn a_unix_socket_in_the_sandbox_is_reached_by_its_path_there() {
    let state = TempDir::new("connect-unix");
    ok(&warden(state.path(), &["create", "cu", "--start"]));
    let _stop = Stopper(state.path(), "cu");
    // /tmp of the sandbox is its own: the path means nothing on the host.
    let path = format!("/tmp/{}.sock", unique("svc"));
    let listen = format!("s = socket.socket(socket.AF_UNIX); s.bind('{path}')");
    ok(&warden(
        state.path(),
        &["exec", "-d", "cu", "--", "python3", "-c", &server(&listen)],
    ));
    let target = Target::Unix { path: path.clone() };
    let fd = connect_when_up(&control(state.path(), "cu"), &target);
    assert!(
        !std::path::Path::new(&path).exists(),
        "the sandbox's socket is on the host's /tmp"
    );
    let mut stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut greeting = [0u8; 128];
    let n = stream.read(&mut greeting).unwrap();
    assert!(greeting[..n].starts_with(b"hello from inside"));
}

#[test]
fn a_port_nobody_listens_on_is_connection_refused() {
    let state = TempDir::new("connect-refused");
    ok(&warden(state.path(), &["create", "cr", "--start"]));
    let _stop = Stopper(state.path(), "cr");
    // A listener on the host's loopback at that port must not answer for
    // the sandbox's.
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();
    let err = Connection::open(&control(state.path(), "cr"))
        .unwrap()
        .connect(&Target::loopback(port))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Connect {
                source: nix::errno::Errno::ECONNREFUSED,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("connection refused"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(
        host.accept().is_err(),
        "the host's listener on the same port was reached"
    );
    let missing = Target::Unix {
        path: "/tmp/nobody-here.sock".into(),
    };
    let err = Connection::open(&control(state.path(), "cr"))
        .unwrap()
        .connect(&missing)
        .unwrap_err();
    assert!(err.to_string().contains("no such socket"), "{err}");
}

#[test]
fn an_address_off_the_sandboxs_loopback_is_refused_before_anything_is_opened() {
    use warden_runtime::protocol::Reply;
    let state = TempDir::new("connect-far");
    ok(&warden(state.path(), &["create", "cf", "--start"]));
    let _stop = Stopper(state.path(), "cf");
    let host = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    let far = Target::Tcp {
        addr: std::net::SocketAddr::from(([10, 255, 255, 1], port)),
    };
    // The client refuses it...
    let err = Connection::open(&control(state.path(), "cf"))
        .unwrap()
        .connect(&far)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not on the sandbox's own loopback"),
        "{err}"
    );
    // ...and so does the supervisor, asked directly without the client's
    // check.
    for addr in [
        std::net::SocketAddr::from(([10, 255, 255, 1], port)),
        std::net::SocketAddr::from(([192, 0, 2, 1], port)),
        "[::]:80".parse().unwrap(),
    ] {
        let (reply, fds) = raw_connect(&control(state.path(), "cf"), Target::Tcp { addr });
        assert!(fds.is_empty(), "a descriptor came back for {addr}");
        match reply {
            Reply::Refused { message, .. } => {
                assert!(message.contains("loopback"), "{message}")
            }
            other => panic!("{addr} was not refused: {other:?}"),
        }
    }
    assert!(host.accept().is_err(), "a host listener was reached");
}

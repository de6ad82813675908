//! The jail's namespace wiring on its own: in a fresh user + network
//! namespace, a TCP connection to any outside address arrives at the proxy's
//! socket with its original destination (as the proxy reads it), and nothing
//! else gets anywhere.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::FromRawFd;
use warden_egress::socket::original_destination;
use warden_jail::netns;

#[test]
fn tcp_to_any_address_reaches_the_proxy_socket_with_its_original_destination() {
    let mut fds = [0; 2];
    // SAFETY: pipe into a valid array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fork; the child only runs the probe and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let result = std::panic::catch_unwind(|| {
            // SAFETY: getuid/getgid have no preconditions.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            // SAFETY: unshare in this forked, single-threaded child only
            // changes the child's own namespaces.
            if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
                return format!(
                    "skip: cannot create user and network namespaces: {}",
                    std::io::Error::last_os_error()
                );
            }
            let _ = std::fs::write("/proc/self/setgroups", "deny");
            std::fs::write("/proc/self/uid_map", format!("0 {uid} 1")).unwrap();
            std::fs::write("/proc/self/gid_map", format!("0 {gid} 1")).unwrap();
            netns::bring_loopback_up().unwrap();
            let (tcp, udp) = match netns::configure_namespace() {
                Ok(x) => x,
                Err(e) => return format!("skip: {e}"),
            };
            let listener = TcpListener::from(tcp);
            let _dns = UdpSocket::from(udp);
            let mut client = TcpStream::connect("203.0.113.7:443").unwrap();
            client.write_all(b"hello").unwrap();
            let (mut conn, _) = listener.accept().unwrap();
            let dst = original_destination(&conn).unwrap();
            let mut buf = [0u8; 5];
            conn.read_exact(&mut buf).unwrap();
            let v6 = TcpStream::connect("[2001:db8::1]:443")
                .map(|_| "connected")
                .unwrap_or("refused");
            format!("dst={dst} data={} v6={v6}", String::from_utf8_lossy(&buf))
        });
        let out = result.unwrap_or_else(|_| "panicked".into());
        // SAFETY: write our report and leave.
        unsafe {
            libc::write(fds[1], out.as_ptr().cast(), out.len());
            libc::_exit(0);
        }
    }
    // SAFETY: close our write end; read the report; reap.
    unsafe { libc::close(fds[1]) };
    let mut out = String::new();
    // SAFETY: the read end is ours and owned by nothing else.
    let mut reader = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    reader.read_to_string(&mut out).unwrap();
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if let Some(reason) = out.strip_prefix("skip: ") {
        eprintln!("skipped: {reason}");
        return;
    }
    let expected_dst: SocketAddrV4 = "203.0.113.7:443".parse().unwrap();
    assert_eq!(out, format!("dst={expected_dst} data=hello v6=refused"));
}

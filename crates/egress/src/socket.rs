//! The proxy's view of a redirected socket, on the host: the address a
//! connection from the sandbox was made to before the sandbox's redirect
//! rule (`warden_jail::netns`) sent it to the proxy.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;

/// The destination a redirected connection was made to (`SO_ORIGINAL_DST`).
pub fn original_destination(fd: &impl AsRawFd) -> std::io::Result<SocketAddrV4> {
    const SO_ORIGINAL_DST: libc::c_int = 80;
    // SAFETY: `sockaddr_in` is plain old data; zeroed is a valid value.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `addr`, which is
    // that large and lives across the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_IP,
            SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)),
        u16::from_be(addr.sin_port),
    ))
}

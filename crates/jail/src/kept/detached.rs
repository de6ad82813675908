//! A tmpfs of a sandbox's disk budget made detached (`fsopen`,
//! `fsmount`) by its supervisor, for a backend whose file server runs
//! outside the sandbox's own mount namespace (runsc's, a VM's VMM or
//! virtiofsd): it is in no mount namespace of the host's, so nothing is
//! left mounted should warden be killed, and it is reached only through
//! the descriptor returned (or a view cloned from it). Making one takes
//! `CAP_SYS_ADMIN` over the caller's mount namespace: root only here.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A detached tmpfs of `size` bytes and the process backend's inode bound,
/// owner-only, `nosuid`, `nodev`: a descriptor of its root.
pub fn tmpfs(size: u64) -> std::io::Result<OwnedFd> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSCONFIG_SET_STRING: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    // SAFETY: fsopen takes a NUL-terminated name; the descriptor it
    // returns is owned here at once.
    let ctx = unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) };
    if ctx < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `ctx` is a descriptor fsopen just returned, owned by no one else.
    let ctx = unsafe { OwnedFd::from_raw_fd(ctx as libc::c_int) };
    let size_text = std::ffi::CString::new(size.to_string()).unwrap_or_default();
    let inodes = std::ffi::CString::new(crate::kept::inodes(size).to_string()).unwrap_or_default();
    let set = |key: &CStr, value: &CStr| -> std::io::Result<()> {
        // SAFETY: fsconfig reads the NUL-terminated key and value, which
        // outlive the call, on the context descriptor owned here.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                ctx.as_raw_fd(),
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    set(c"size", &size_text)?;
    set(c"nr_inodes", &inodes)?;
    set(c"mode", c"0700")?;
    // SAFETY: no pointers; the context descriptor is owned here.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            ctx.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: no pointers; the mount descriptor returned is owned at once.
    let m = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            ctx.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            (crate::sys::MOUNT_ATTR_NOSUID | crate::sys::MOUNT_ATTR_NODEV) as libc::c_uint,
        )
    };
    if m < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `m` is a descriptor fsmount just returned.
    Ok(unsafe { OwnedFd::from_raw_fd(m as libc::c_int) })
}

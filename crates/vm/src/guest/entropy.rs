//! A guest restored from a template snapshot is a copy of one guest's
//! memory, its kernel's random generator included: until that generator is
//! reseeded, two restored guests hand their programs the same "random"
//! bytes (keys, nonces, TLS secrets). The guest init, still privileged,
//! mixes the host's fresh bytes into the kernel's pool with credit and
//! forces a reseed before it starts anything, and sets the wall clock,
//! which stopped at the snapshot.
//!
//! The one place of the vm crate that makes system calls nix does not wrap
//! (`RNDADDENTROPY`, `RNDRESEEDCRNG`, `clock_settime`); it runs only in the
//! guest, as its PID 1, before any of the sandbox's processes exist.

#![allow(unsafe_code)]

use nix::libc;
use std::os::fd::AsRawFd;

/// `_IOW('R', 0x03, int[2])`: add entropy, with credit, to the input pool.
const RNDADDENTROPY: libc::c_ulong = 0x4008_5203;
/// `_IO('R', 0x07)`: reseed the generator from the input pool now.
const RNDRESEEDCRNG: libc::c_ulong = 0x5207;

/// Mix `seed` into the guest kernel's pool (credited at 8 bits a byte) and
/// reseed its generator from it, so that every byte read from now on
/// depends on `seed`.
pub(super) fn reseed(seed: &[u8]) -> Result<(), nix::errno::Errno> {
    let random = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/urandom")
        .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    // struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
    let mut info: Vec<u32> = Vec::with_capacity(2 + seed.len().div_ceil(4));
    info.push((seed.len() * 8) as u32);
    info.push(seed.len() as u32);
    for chunk in seed.chunks(4) {
        let mut word = [0u8; 4];
        word[..chunk.len()].copy_from_slice(chunk);
        info.push(u32::from_ne_bytes(word));
    }
    // SAFETY: `info` is a live, properly aligned rand_pool_info whose
    // buf_size (seed.len()) bytes of buffer follow its two ints within the
    // allocation; the kernel only reads it during the call.
    let rc = unsafe { libc::ioctl(random.as_raw_fd(), RNDADDENTROPY, info.as_ptr()) };
    nix::errno::Errno::result(rc)?;
    // SAFETY: RNDRESEEDCRNG takes no argument.
    let rc = unsafe { libc::ioctl(random.as_raw_fd(), RNDRESEEDCRNG) };
    nix::errno::Errno::result(rc).map(drop)
}

/// Set the guest's wall clock to the host's (`secs`, `nanos` since the
/// epoch).
pub(super) fn set_clock(secs: i64, nanos: u32) -> Result<(), nix::errno::Errno> {
    let ts = libc::timespec {
        tv_sec: secs as libc::time_t,
        tv_nsec: nanos.min(999_999_999) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec that outlives the call.
    let rc = unsafe { libc::clock_settime(libc::CLOCK_REALTIME, &ts) };
    nix::errno::Errno::result(rc).map(drop)
}

//! Capability sets of a host helper (the VMM, virtiofsd, the image
//! builder), set between fork and exec: which capabilities survive its
//! exec, and the kernel structures of capget(2)/capset(2) that the
//! sandbox's own final drop (`crate::privileges`) uses as well.
//!
//! Everything here runs in a forked child of a process that may have
//! threads: plain system calls on the stack, nothing allocated. (The
//! `caps` crate keeps its sets in a `HashSet`, which allocates, so it
//! cannot be used there.)

/// capget(2)/capset(2)'s header, by the kernel's structure.
#[repr(C)]
pub(crate) struct CapHeader {
    pub(crate) version: u32,
    pub(crate) pid: libc::c_int,
}

/// One word of capget(2)/capset(2)'s sets (version 3 takes two).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CapData {
    pub(crate) effective: u32,
    pub(crate) permitted: u32,
    pub(crate) inheritable: u32,
}

impl CapData {
    /// A word of empty sets.
    pub(crate) const EMPTY: CapData = CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
}

impl CapHeader {
    /// `_LINUX_CAPABILITY_VERSION_3`, for the calling thread.
    pub(crate) fn v3() -> CapHeader {
        CapHeader {
            version: 0x2008_0522,
            pid: 0,
        }
    }
}

/// Capabilities a version 3 set can name; numbers past what the running
/// kernel knows answer EINVAL, which ends the walk of the bounding set.
const CAP_SLOTS: u32 = 64;

const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;

/// Keep exactly `kept` (capability numbers) across the coming exec, as
/// ambient capabilities, and nothing else:
///
/// 1. root's exec-time powers off for good (`SECBIT_NOROOT`, locked), and,
///    when nothing is kept, the ambient set closed for good as well
///    (`SECBIT_NO_CAP_AMBIENT_RAISE`, locked);
/// 2. the inheritable set becomes `kept`;
/// 3. the ambient set is cleared, then `kept` raised in it (each must be
///    permitted: inside a new user namespace, all are);
/// 4. every other capability leaves the bounding set, so no file grants
///    one back.
///
/// The effective and permitted sets stay as they are until an ID change
/// or the exec recomputes them. Needs `CAP_SETPCAP`. Async-signal-safe:
/// call it between fork and exec.
pub(crate) fn keep_capabilities(kept: &[u32]) -> std::io::Result<()> {
    let mask: u64 = kept
        .iter()
        .filter(|c| **c < CAP_SLOTS)
        .fold(0u64, |m, c| m | (1u64 << c));
    let mut bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED;
    if kept.is_empty() {
        bits |= SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    }
    prctl(libc::PR_SET_SECUREBITS, bits, 0)?;

    let mut data = capget()?;
    data[0].inheritable = mask as u32;
    data[1].inheritable = (mask >> 32) as u32;
    capset(&data)?;

    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
    )?;
    for cap in kept {
        prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            libc::c_ulong::from(*cap),
        )?;
    }
    for cap in (0..CAP_SLOTS).filter(|c| mask & (1u64 << c) == 0) {
        match prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
            other => other?,
        }
    }
    Ok(())
}

/// The calling thread's sets, by capget(2) version 3 (two words).
/// Async-signal-safe.
fn capget() -> nix::Result<[CapData; 2]> {
    let mut header = CapHeader::v3();
    let mut data = [CapData::EMPTY; 2];
    // SAFETY: `header` and `data` live on this frame, laid out as
    // capget(2) version 3 expects (one header, two data words); the
    // kernel writes only within them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            std::ptr::addr_of_mut!(header),
            data.as_mut_ptr(),
        )
    };
    nix::errno::Errno::result(rc).map(|_| data)
}

/// Sets the calling thread's sets, by capset(2) version 3 (two words).
/// Async-signal-safe.
pub(crate) fn capset(data: &[CapData; 2]) -> nix::Result<()> {
    let mut header = CapHeader::v3();
    // SAFETY: `header` and `data` are laid out as capset(2) version 3
    // expects and live across the call; the kernel reads `data` and may
    // write the header's version back, on this frame.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capset,
            std::ptr::addr_of_mut!(header),
            data.as_ptr(),
        )
    };
    nix::errno::Errno::result(rc).map(drop)
}

/// prctl(2) with integer arguments, as an `io::Result`.
fn prctl(op: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only; no memory is passed, and
    // it is async-signal-safe.
    if unsafe { libc::prctl(op, a, b, 0 as libc::c_ulong, 0 as libc::c_ulong) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capability sets (`CapInh`, `CapAmb`, `CapBnd`, ...) of a program
    /// exec'd after `keep_capabilities(kept)` in a user namespace of its own
    /// (where it starts with every capability), as the kernel reports them
    /// in its /proc status; `None` where this host has no unprivileged user
    /// namespace.
    fn after_exec(kept: &'static [u32]) -> Option<std::collections::HashMap<String, u64>> {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("cat");
        cmd.arg("/proc/self/status");
        // SAFETY: the closure runs in the forked child (one thread) before
        // exec and makes system calls only: unshare and
        // `keep_capabilities`, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::unshare(libc::CLONE_NEWUSER) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                keep_capabilities(kept)
            });
        }
        let out = cmd.output().ok().filter(|o| o.status.success())?;
        Some(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    let v = u64::from_str_radix(v.trim(), 16).ok()?;
                    k.starts_with("Cap").then(|| (k.to_string(), v))
                })
                .collect(),
        )
    }

    #[test]
    fn only_the_kept_capabilities_survive_the_exec() {
        let Some(s) = after_exec(&[0, 1, 21]) else {
            eprintln!("skipped: no unprivileged user namespace here");
            return;
        };
        let mask = (1u64 << 0) | (1 << 1) | (1 << 21);
        assert_eq!(s["CapInh"], mask);
        assert_eq!(s["CapAmb"], mask);
        assert_eq!(s["CapBnd"], mask);
        // Ambient capabilities are what the program holds after its exec.
        assert_eq!(s["CapPrm"], mask);
        assert_eq!(s["CapEff"], mask);
    }

    #[test]
    fn keeping_nothing_leaves_the_program_no_capability_at_all() {
        let Some(s) = after_exec(&[]) else {
            eprintln!("skipped: no unprivileged user namespace here");
            return;
        };
        for set in ["CapInh", "CapAmb", "CapBnd", "CapPrm", "CapEff"] {
            assert_eq!(s[set], 0, "{set}");
        }
    }
}

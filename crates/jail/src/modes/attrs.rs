//! Extended attributes, judged because one kind of them is a mode: a POSIX
//! ACL (`system.posix_acl_access`) sets the file's mode bits and can give
//! named users and groups more, and a default ACL
//! (`system.posix_acl_default`) on a directory sets the modes of every
//! file made in it later, root's included, whatever root's umask. Through
//! the owner swap the kernel asks only that the sandbox own the file, so
//! without this an ACL made root's `0600` file `0666`.
//!
//! The filter cannot read an attribute's name (a string in the caller's
//! memory), so every `setxattr`, `lsetxattr`, `fsetxattr`, `removexattr`,
//! `lremovexattr` and `fremovexattr` comes here, and the supervisor makes
//! the change itself on the file it found, as for a mode: letting the
//! call through after reading the name would let another thread of the
//! sandbox rewrite it in between.
//!
//! The rule, by name:
//! - `user.*`: made as asked (it opens nothing);
//! - an access ACL on a file born in this run: made as asked; on any
//!   other file only an ACL that is a plain mode (owner, group and other
//!   entries, no named user or group, no mask), judged as a `chmod` to
//!   that mode ([`super::rule::may_set`], group and other write refused as
//!   the main filter refuses them);
//! - a default ACL, or the removal of an ACL (which can widen the group's
//!   bits to the mask's, or free later files from a default), only on a
//!   file born in this run;
//! - `security.*` and `trusted.*`: refused. The sandbox holds no
//!   capability, so the kernel would refuse them to it; the supervisor may
//!   hold them, and must not lend them (`security.capability` is a file
//!   capability root would run with);
//! - any other name: `EOPNOTSUPP`, as the kernel answers an unknown one.
//!
//! `setxattrat` and `removexattrat` (Linux 6.13) answer `ENOSYS`, as on an
//! older kernel: libc has no wrapper for them, and programs fall back.

use super::caller::Caller;
use super::walk::{self, Base, Named};
use super::{rule, valid, Apply, Judge};
use libseccomp::ScmpNotifReq;
use rustix::fs::XattrFlags;
use rustix::io::Errno;
use std::os::fd::{AsRawFd, OwnedFd};

/// `setxattrat`'s and `removexattrat`'s numbers, the same on x86_64 and
/// aarch64.
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;
/// The kernel's limits: `XATTR_NAME_MAX`, `XATTR_SIZE_MAX`.
const NAME_MAX: usize = 255;
const SIZE_MAX: u64 = 65_536;

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";

/// Whether `nr` is a call of this module.
pub(super) fn handles(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_setxattr
            | libc::SYS_lsetxattr
            | libc::SYS_fsetxattr
            | libc::SYS_removexattr
            | libc::SYS_lremovexattr
            | libc::SYS_fremovexattr
            | SYS_SETXATTRAT
            | SYS_REMOVEXATTRAT
    )
}

/// How the name sorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    AccessAcl,
    DefaultAcl,
    Privileged,
    Unknown,
}

fn kind(name: &[u8]) -> Kind {
    if name.starts_with(b"user.") {
        Kind::User
    } else if name == ACCESS {
        Kind::AccessAcl
    } else if name == DEFAULT {
        Kind::DefaultAcl
    } else if name.starts_with(b"security.") || name.starts_with(b"trusted.") {
        Kind::Privileged
    } else {
        Kind::Unknown
    }
}

impl Judge {
    /// Judge and make one attribute call of the caller's.
    pub(super) fn attribute(
        &mut self,
        listener: &OwnedFd,
        req: &ScmpNotifReq,
        caller: &Caller,
    ) -> Result<(), Errno> {
        let nr = i64::from(req.data.syscall.as_raw_syscall());
        let args = req.data.args;
        if nr == SYS_SETXATTRAT || nr == SYS_REMOVEXATTRAT {
            return Err(Errno::NOSYS);
        }
        let by_fd = nr == libc::SYS_fsetxattr || nr == libc::SYS_fremovexattr;
        let set = matches!(
            nr,
            libc::SYS_setxattr | libc::SYS_lsetxattr | libc::SYS_fsetxattr
        );
        let name = caller.read_path(args[1])?;
        if name.is_empty() || name.len() > NAME_MAX {
            return Err(Errno::RANGE);
        }
        let (value, flags) = if set {
            let flags = args[4] as u32;
            let flags = XattrFlags::from_bits(flags).ok_or(Errno::INVAL)?;
            if args[3] > SIZE_MAX {
                return Err(Errno::TOOBIG);
            }
            let len = usize::try_from(args[3]).map_err(|_| Errno::TOOBIG)?;
            let value = match len {
                0 => Vec::new(),
                _ => caller.read_bytes(args[2], len)?,
            };
            (Some(value), flags)
        } else {
            (None, XattrFlags::empty())
        };
        let (target, apply) = if by_fd {
            (caller.take_fd(args[0])?, Apply::Open)
        } else {
            let path = caller.read_path(args[0])?;
            let named = Named {
                base: Base::Cwd,
                path: &path,
                follow: nr == libc::SYS_setxattr || nr == libc::SYS_removexattr,
                empty_is_base: false,
            };
            (walk::resolve(caller, &named)?, Apply::Path)
        };
        valid(listener, req.id)?;
        let kind = kind(&name);
        let mut value = value;
        match kind {
            Kind::User => {}
            Kind::Privileged => return Err(Errno::PERM),
            Kind::Unknown => return Err(Errno::OPNOTSUPP),
            Kind::AccessAcl | Kind::DefaultAcl => {
                let (seen, key) = self.seen(&target)?;
                if !seen.own {
                    let mode = match (kind, value.as_deref()) {
                        (Kind::AccessAcl, Some(v)) => plain_mode(v)?,
                        _ => return Err(Errno::PERM),
                    };
                    let requested = (seen.mode & 0o7000) | mode;
                    if mode & SHARED_WRITE != 0 || !rule::may_set(seen, requested) {
                        return Err(Errno::PERM);
                    }
                    self.remember(key, seen.mode, requested);
                } else if let Some(v) = value.as_mut() {
                    // A default ACL decides the modes of files made in the
                    // directory later, by anyone: root's, whatever its
                    // umask. No creation mode of the sandbox's could give
                    // that, so on its own directory too a default ACL may
                    // only take away (nothing for group, other, a mask or
                    // a named entry).
                    if kind == Kind::DefaultAcl && !only_takes_away(v)? {
                        return Err(Errno::PERM);
                    }
                    // Named entries' IDs are the caller's; the kernel reads
                    // them in the supervisor's namespace.
                    to_outside(v, caller)?;
                }
            }
        }
        make(&target, apply, &name, value.as_deref(), flags)
    }
}

/// Group and other write: refused in any mode by the main filter.
const SHARED_WRITE: u32 = 0o022;

/// Make the call on `target`, as the supervisor: on the caller's open
/// file, or on the file a path led to through the supervisor's own table
/// (a path nobody else can change; a link found without following stays
/// the link).
fn make(
    target: &OwnedFd,
    apply: Apply,
    name: &[u8],
    value: Option<&[u8]>,
    flags: XattrFlags,
) -> Result<(), Errno> {
    match (apply, value) {
        (Apply::Open, Some(v)) => rustix::fs::fsetxattr(target, name, v, flags),
        (Apply::Open, None) => rustix::fs::fremovexattr(target, name),
        (Apply::Path, v) => {
            let path = format!("/proc/self/fd/{}", target.as_raw_fd());
            match v {
                Some(v) => rustix::fs::setxattr(path.as_str(), name, v, flags),
                None => rustix::fs::removexattr(path.as_str(), name),
            }
        }
    }
}

/// The ACL's tags (`include/uapi/linux/posix_acl.h`).
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// `POSIX_ACL_XATTR_VERSION`.
const VERSION: u32 = 2;

/// The ACL's entries as (tag, permissions, ID), from its attribute form.
fn entries(value: &[u8]) -> Result<Vec<(u16, u16, u32)>, Errno> {
    let (head, body) = value.split_at_checked(4).ok_or(Errno::INVAL)?;
    if u32::from_le_bytes([head[0], head[1], head[2], head[3]]) != VERSION || body.len() % 8 != 0 {
        return Err(Errno::INVAL);
    }
    Ok(body
        .chunks_exact(8)
        .map(|e| {
            (
                u16::from_le_bytes([e[0], e[1]]),
                u16::from_le_bytes([e[2], e[3]]),
                u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            )
        })
        .collect())
}

/// The mode an access ACL amounts to, when it is no more than a mode: one
/// owner, one group and one other entry, nothing named, no mask. Anything
/// else gives someone more than the mode shows: `EPERM`.
fn plain_mode(value: &[u8]) -> Result<u32, Errno> {
    let mut bits = [None::<u32>; 3];
    for (tag, perm, _) in entries(value)? {
        let slot = match tag {
            USER_OBJ => 0,
            GROUP_OBJ => 1,
            OTHER => 2,
            USER | GROUP | MASK => return Err(Errno::PERM),
            _ => return Err(Errno::INVAL),
        };
        if perm & !7 != 0 || bits[slot].replace(u32::from(perm)).is_some() {
            return Err(Errno::INVAL);
        }
    }
    match bits {
        [Some(u), Some(g), Some(o)] => Ok(u << 6 | g << 3 | o),
        _ => Err(Errno::INVAL),
    }
}

/// Whether a default ACL gives nobody but the owner any permission: its
/// group, other, mask and named entries carry none.
fn only_takes_away(value: &[u8]) -> Result<bool, Errno> {
    Ok(entries(value)?
        .into_iter()
        .all(|(tag, perm, _)| tag == USER_OBJ || perm == 0))
}

/// Rewrite the named entries' IDs from the caller's namespace to the
/// supervisor's, through the caller's ID maps; an ID the caller's
/// namespace does not map is `EINVAL`, as the kernel answers.
fn to_outside(value: &mut [u8], caller: &Caller) -> Result<(), Errno> {
    let list = entries(value)?;
    if !list.iter().any(|(tag, _, _)| *tag == USER || *tag == GROUP) {
        return Ok(());
    }
    let (uids, gids) = (caller.id_map("uid_map")?, caller.id_map("gid_map")?);
    for (i, (tag, _, id)) in list.into_iter().enumerate() {
        let map = match tag {
            USER => &uids,
            GROUP => &gids,
            _ => continue,
        };
        let outside = map_id(map, id).ok_or(Errno::INVAL)?;
        let at = 4 + i * 8 + 4;
        value
            .get_mut(at..at + 4)
            .ok_or(Errno::INVAL)?
            .copy_from_slice(&outside.to_le_bytes());
    }
    Ok(())
}

fn map_id(map: &[(u32, u32, u32)], id: u32) -> Option<u32> {
    map.iter().find_map(|&(inside, outside, count)| {
        let offset = id.checked_sub(inside)?;
        (offset < count)
            .then(|| outside.checked_add(offset))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for (tag, perm, id) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    const NONE: u32 = u32::MAX;

    #[test]
    fn a_default_acl_may_only_take_away() {
        let narrow = acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 0, NONE), (OTHER, 0, NONE)]);
        assert_eq!(only_takes_away(&narrow), Ok(true));
        for open in [
            acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 0, NONE), (OTHER, 6, NONE)]),
            acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 0, NONE)]),
            acl(&[
                (USER_OBJ, 7, NONE),
                (USER, 6, 1000),
                (GROUP_OBJ, 0, NONE),
                (MASK, 6, NONE),
                (OTHER, 0, NONE),
            ]),
        ] {
            assert_eq!(only_takes_away(&open), Ok(false));
        }
    }

    #[test]
    fn an_acl_of_owner_group_and_other_is_the_mode_it_spells() {
        let v = acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 4, NONE)]);
        assert_eq!(plain_mode(&v), Ok(0o644));
        let v = acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 7, NONE), (OTHER, 7, NONE)]);
        assert_eq!(plain_mode(&v), Ok(0o777));
    }

    #[test]
    fn named_entries_or_a_mask_are_more_than_a_mode() {
        let base = [(USER_OBJ, 6, NONE), (GROUP_OBJ, 0, NONE), (OTHER, 0, NONE)];
        for extra in [(USER, 4, 12345), (GROUP, 4, 12345), (MASK, 4, NONE)] {
            let mut e = base.to_vec();
            e.push(extra);
            assert_eq!(plain_mode(&acl(&e)), Err(Errno::PERM), "{extra:?}");
        }
    }

    #[test]
    fn a_malformed_acl_is_invalid() {
        assert_eq!(plain_mode(b"\x02\x00"), Err(Errno::INVAL));
        let mut v = acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 4, NONE)]);
        v[0] = 1;
        assert_eq!(plain_mode(&v), Err(Errno::INVAL));
        let v = acl(&[(USER_OBJ, 6, NONE), (OTHER, 4, NONE)]);
        assert_eq!(plain_mode(&v), Err(Errno::INVAL));
        let v = acl(&[(USER_OBJ, 6, NONE), (USER_OBJ, 7, NONE), (OTHER, 4, NONE)]);
        assert_eq!(plain_mode(&v), Err(Errno::INVAL));
    }

    #[test]
    fn names_sort_into_what_may_be_lent() {
        assert_eq!(kind(b"user.mime_type"), Kind::User);
        assert_eq!(kind(ACCESS), Kind::AccessAcl);
        assert_eq!(kind(DEFAULT), Kind::DefaultAcl);
        assert_eq!(kind(b"security.capability"), Kind::Privileged);
        assert_eq!(kind(b"trusted.overlay.opaque"), Kind::Privileged);
        assert_eq!(kind(b"system.posix_acl_accessx"), Kind::Unknown);
    }

    #[test]
    fn ids_map_through_the_callers_ranges_only() {
        let map = [(0, 100_000, 65_536), (65_536, 1000, 1)];
        assert_eq!(map_id(&map, 0), Some(100_000));
        assert_eq!(map_id(&map, 1000), Some(101_000));
        assert_eq!(map_id(&map, 65_536), Some(1000));
        assert_eq!(map_id(&map, 65_537), None);
    }
}

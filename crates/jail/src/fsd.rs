//! The jail of a VM sandbox's `virtiofsd`: the host process that serves
//! the workspace to the guest over virtio-fs. It answers requests the guest
//! makes, so it is confined at least as the VMM is (`crate::vmm`), and in
//! some ways more:
//!
//! 1. as root, no root: the capability sets emptied (as the VMM's), then
//!    the IDs it is given (the workspace owner's where they are an
//!    ordinary account's, nobody's otherwise: `crate::identity`; a
//!    workspace of another owner's it is then handed as an idmapped view),
//!    with no supplementary group (rootless, it is warden's own user,
//!    which has no capability);
//! 2. a user namespace of its own that maps that one user and that one
//!    group to themselves (nothing else of the host's IDs exists there),
//!    and an empty network namespace of its own;
//! 3. inside, only the capabilities virtiofsd needs for serving files
//!    (`CHOWN`, `DAC_OVERRIDE`, `FOWNER`, `SETUID`, `SETGID`, plus
//!    `SETPCAP` to drop the rest itself and `SYS_CHROOT` for its `chroot`
//!    sandbox; never `SETFCAP`, `FSETID` or `MKNOD`: see [`KEPT`]), passed through exec as
//!    ambient ones: each holds only over the namespace's objects, i.e.
//!    files owned by the workspace owner; the bounding set is cut to
//!    those;
//! 4. `no_new_privs`;
//! 5. Landlock: write only beneath the share it serves, read only its own
//!    binary and libraries, no TCP, and (where the kernel can) no signal
//!    to and no abstract Unix socket of anything outside;
//! 6. the VMM's seccomp filter (no `socket(2)`, no `io_uring`, no
//!    `openat2`, no set-ID mode, no extended attribute written, and
//!    serving a swapped view no `chmod` adding group or other write): it
//!    has only the listening socket it was handed.
//!
//! virtiofsd then adds its own sandbox (`-o sandbox=chroot`, `--sandbox
//! chroot`: every path it resolves starts at the share) and its own
//! seccomp allow-list, and drops every capability but those of step 3.

use crate::vmm::{VmmAccess, VmmJailError};
use std::os::fd::{AsRawFd, OwnedFd};

/// The capabilities virtiofsd keeps inside its namespace (see the module's
/// documentation), by number: kept through exec as ambient ones, the
/// bounding set cut to them, root's exec-time powers locked off (the one
/// mapped user may be root). Each holds only over files whose owner is
/// the one user the namespace maps (through a swapped view, root's files
/// of the share), which is why only these stay:
/// - `CHOWN`, `SETUID`, `SETGID`: virtiofsd takes each request's caller's
///   IDs and may give a file to them; the namespace maps one user and one
///   group, so none of these reaches another ID;
/// - `DAC_OVERRIDE`, `FOWNER`: it serves a file whatever its mode says
///   (the guest's kernel checks permissions), as its owner;
/// - `SETPCAP`: to drop the others itself; `SYS_CHROOT`: its own sandbox.
///
/// Dropped, with `-o modcaps`/`--modcaps` telling virtiofsd not to ask for
/// them (`crate::vmm`'s filter refuses what they would serve besides):
/// - `SETFCAP`: a v3 `security.capability` whose root ID is the mapped
///   user resolves, through a swapped view, to the host's root: a file
///   capability every host process honours. Without xattrs (warden's
///   virtiofsd runs `no_xattr`) it serves nothing;
/// - `FSETID`: a write keeping a set-ID bit, a set-group-ID bit for a
///   group not the caller's;
/// - `MKNOD`: a device node needs it in the host's initial namespace; in
///   the helper's it only names what no request may do.
const KEPT: &[u32] = &[
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    8,  // CAP_SETPCAP
    18, // CAP_SYS_CHROOT
];

/// virtiofsd's own names of the capabilities it asks for by default and
/// [`KEPT`] leaves out, for its `modcaps` option (`-name` each).
pub const DROPPED_NAMES: &[&str] = &["fsetid", "mknod", "setfcap"];

/// The `modcaps` value that has virtiofsd keep only [`KEPT`]: it raises
/// each capability it wants and stops if it cannot.
pub fn modcaps() -> String {
    DROPPED_NAMES
        .iter()
        .map(|n| format!("-{n}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// virtiofsd's jail, prepared: apply it to its `Command` with
/// [`FsdJail::apply`] and keep it alive until virtiofsd has been spawned.
pub struct FsdJail {
    /// As root: the IDs to take before entering the namespace.
    switch: Option<(u32, u32)>,
    /// `setgroups`, `uid_map`, `gid_map` of its user namespace.
    maps: [Vec<u8>; 3],
    ruleset: OwnedFd,
    filter: Vec<libc::sock_filter>,
    /// Where its mode changes are judged ([`FsdJail::judge_modes`]).
    modes: Option<crate::gvisor::modes::Judged>,
}

impl FsdJail {
    /// Prepare the jail. `access`: what it may read and write (its share
    /// writable, or readable only); `ids`: as root, the user and group it
    /// runs as (rootless, it stays warden's own user).
    pub fn prepare(access: &VmmAccess, ids: (u32, u32)) -> Result<FsdJail, VmmJailError> {
        let root = crate::host::is_root();
        let (uid, gid) = if root {
            ids
        } else {
            (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        };
        Ok(FsdJail {
            switch: root.then_some((uid, gid)),
            maps: [
                b"deny".to_vec(),
                format!("{uid} {uid} 1\n").into_bytes(),
                format!("{gid} {gid} 1\n").into_bytes(),
            ],
            ruleset: crate::vmm::ruleset(access)?,
            // Its xattr writes stay refused by the filter even where judged:
            // it runs `no_xattr` and sets none.
            filter: crate::vmm::filter(root && uid == crate::NOBODY, false)?,
            modes: None,
        })
    }

    /// Have virtiofsd's mode changes, ACLs and hard links judged by the
    /// supervisor with the process backend's one rule ([`crate::modes`]),
    /// as the VMM's ([`crate::vmm::VmmJail::judge_modes`]): it changes the
    /// host's files for a guest whose kernel may be the sandbox's own. It
    /// names a file through its own `/proc/self/fd` directory
    /// (`fchmodat(proc_self_fd, "N")`), which the judge's walk takes as its
    /// descriptor N. Only where it runs as nobody over a view that swaps
    /// the share's owner with it (as root): there a guest could make root's
    /// `0600` file `0644`. virtiofsd loads the notifying filter last; the
    /// caller starts the judge with [`FsdJail::watch_modes`] once it is
    /// spawned. `budget`: the sandbox's CPU account, which the judging is
    /// held to (shared with the VMM's judge: [`crate::modes::pace`]).
    pub fn judge_modes(
        &mut self,
        budget: Option<&crate::modes::pace::Budget>,
    ) -> Result<(), VmmJailError> {
        if self.switch.is_none_or(|(uid, _)| uid != crate::NOBODY) {
            return Ok(());
        }
        let judged = crate::gvisor::modes::Judged::new(budget.cloned())
            .map_err(|e| VmmJailError::Seccomp(e.to_string()))?;
        self.modes = Some(judged);
        Ok(())
    }

    /// Start judging the spawned virtiofsd's mode changes (see
    /// [`FsdJail::judge_modes`]). Nothing to do where none was asked for.
    pub fn watch_modes(&self) -> std::io::Result<()> {
        match &self.modes {
            Some(m) => m.watch(),
            None => Ok(()),
        }
    }

    /// Have `cmd`'s program (virtiofsd) start inside the jail.
    pub fn apply(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let switch = self.switch;
        let maps = self.maps.clone();
        let ruleset = self.ruleset.as_raw_fd();
        let filter = self.filter.clone();
        let modes = self.modes.as_ref().map(|m| m.filter());
        // SAFETY: the closure runs in the child between fork and exec. It
        // calls only async-signal-safe system calls (prctl, capget, capset,
        // setgroups, setres[ug]id, unshare, open, write, close,
        // landlock_restrict_self, seccomp, sendmsg) on memory the closure owns,
        // prepared before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let check = crate::sys::check_rc;
                if let Some((uid, gid)) = switch {
                    // Root's: rootless, there is no capability to drop
                    // (nor the right to change securebits) before the
                    // namespace.
                    crate::caps::keep_capabilities(&[])?;
                    // No supplementary group at all: virtiofsd drops
                    // them itself, which the namespace (setgroups
                    // denied) would refuse.
                    check(libc::setgroups(0, std::ptr::null()).into())?;
                    check(libc::setresgid(gid, gid, gid).into())?;
                    check(libc::setresuid(uid, uid, uid).into())?;
                    // A change of IDs made the process undumpable, and
                    // its /proc files root's: it could not write its own
                    // maps below.
                    check(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0).into())?;
                }
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET).into())?;
                let files: [&[u8]; 3] = [
                    b"/proc/self/setgroups\0",
                    b"/proc/self/uid_map\0",
                    b"/proc/self/gid_map\0",
                ];
                for (file, line) in files.iter().zip(maps.iter()) {
                    crate::vmm::write_file(file, line)?;
                }
                crate::caps::keep_capabilities(KEPT)?;
                crate::vmm::lock_down(Some(ruleset), &filter)?;
                // Last: no_new_privs is set, and its own filter below lets
                // the listener be handed over.
                match &modes {
                    Some(m) => m.in_child(),
                    None => Ok(()),
                }
            })
        };
    }
}

//! The guest's init: PID 1 of the VM's own kernel (`/init` of the
//! initramfs, no systemd). It loads the modules of the guest's devices,
//! builds the guest's file tree (the host's `/usr` read-only and the
//! workspace read-write over 9p, fresh tmpfs `/tmp` and home, a minimal
//! `/dev` that does not show the channel's device, `lo` up and, when the host
//! gave it a network device, that device's address, its one route and the
//! resolver), opens its channel to the
//! host (the `warden.0` virtio-serial port), takes the workspace owner's
//! IDs, applies rlimits, Landlock (read beneath `/`, write beneath the
//! workspace, `/tmp` and home), drops every capability with `no_new_privs`
//! and loads warden's seccomp filter: every process it starts inherits all
//! of it, as in the process backend. Then it serves spawn requests
//! ([`crate::wire`]) until the host says shut down or goes away, and ends,
//! which ends the guest (`panic=-1` with QEMU's `-no-reboot`).

mod connect;
mod entropy;
mod keeper;
mod launch;
mod params;
mod serve;
mod setup;
mod shares;

pub use launch::{launch, LaunchError, LAUNCH};

use crate::wire::{Frame, Kind};
use std::io::Write;

/// Why the guest could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("cannot {what} {path}")]
    Fs {
        what: &'static str,
        path: String,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("cannot load the kernel module {path}")]
    Module {
        path: String,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("no virtio-serial port named {0} appeared")]
    NoPort(&'static str),
    #[error("cannot open the channel {path}")]
    Channel {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot reseed the guest's random generator")]
    Reseed(#[source] nix::errno::Errno),
    #[error("cannot set the guest's clock")]
    Clock(#[source] nix::errno::Errno),
    #[error("cannot start the keeper of the guest's shares")]
    Keeper(#[source] nix::errno::Errno),
    #[error("the host gave the guest a network device, but none appeared")]
    NoNetworkDevice,
    #[error(transparent)]
    Network(#[from] warden_jail::netns::NetnsError),
    #[error(transparent)]
    Privileges(#[from] warden_jail::privileges::PrivilegeError),
    #[error(transparent)]
    Landlock(#[from] warden_jail::landlock::LandlockError),
    #[error(transparent)]
    Seccomp(#[from] warden_jail::seccomp::SeccompError),
}

/// A failed file-tree step on `path` as the guest's error (for `map_err`).
fn fs_err<'a>(
    what: &'static str,
    path: &'a str,
) -> impl FnOnce(nix::errno::Errno) -> GuestError + 'a {
    move |source| GuestError::Fs {
        what,
        path: path.to_string(),
        source,
    }
}

/// Mount `src` at `target` (made first), as every step of the guest's
/// file tree does.
fn mount_fs(
    src: &str,
    target: &str,
    fstype: &str,
    flags: nix::mount::MsFlags,
    data: &str,
) -> Result<(), GuestError> {
    let _ = std::fs::create_dir_all(target);
    nix::mount::mount(Some(src), target, Some(fstype), flags, Some(data))
        .map_err(fs_err("mount", target))
}

/// Say something on the guest's console (the host keeps it in the VM's
/// console log).
fn console(msg: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open("/dev/console") {
        let _ = writeln!(f, "warden-guest-init: {msg}");
    }
}

/// The guest init's `main`: never returns; its end is the guest's.
pub fn main() -> ! {
    match setup::prepare() {
        Ok((port, ready, held)) => {
            let mut w = match port.try_clone() {
                Ok(w) => w,
                Err(e) => {
                    console(&format!("cannot share the channel: {e}"));
                    std::process::exit(1)
                }
            };
            if let Err(e) = Frame::json(Kind::Ready, 0, &ready).write_to(&mut w) {
                console(&format!("cannot reach the host: {e}"));
                std::process::exit(1)
            }
            serve::serve(port, w, held);
            std::process::exit(0)
        }
        Err((port, e)) => {
            let msg = warden_jail::chain_str(&e);
            console(&msg);
            if let Some(mut p) = port {
                let _ = Frame::json(Kind::Fatal, 0, &msg).write_to(&mut p);
            }
            std::process::exit(1)
        }
    }
}

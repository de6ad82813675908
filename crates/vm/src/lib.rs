//! The microVM backend: a sandbox inside its own kernel.
//!
//! The VMM is QEMU's `microvm` machine (the distribution's
//! `qemu-system-x86`), under KVM when a bounded probe boot shows that
//! `/dev/kvm` boots the guest kernel, otherwise under software emulation
//! ([`accel`]). The guest kernel is a distribution kernel found by
//! [`kernel`]; the guest's first root is an initramfs built here
//! ([`image`]) holding warden's guest init ([`guest`]), which mounts the
//! host's `/usr` read-only and the workspace read-write over 9p, restricts
//! itself like the process backend's init and serves spawn requests over a
//! virtio-serial port ([`wire`]). A `--rootfs` tree becomes a read-only
//! disk image the guest mounts as its root ([`rootimage`]). With egress, the guest's one network
//! device is a TAP in a network namespace of the sandbox's own
//! (`warden_jail::vmnet`), whose every connection and query meets the
//! process backend's egress proxy. [`backend::run`] has the process
//! backend's contract (`warden_jail::run`), so the runtime's supervisor,
//! control socket, events and API serve VM sandboxes unchanged.

// Denied everywhere but the guest init's reseeding of its random generator
// (`guest/entropy.rs`), which must make two ioctls nix does not wrap, and
// the fork of its keeper (`guest/keeper.rs`).
#![deny(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod accel;
pub mod backend;
mod channel;
mod contents;
pub mod control;
pub mod disk;
pub mod fsd;
pub mod guest;
pub mod image;
mod initmemo;
mod inside;
pub mod kernel;
pub mod machine;
pub mod pause;
pub mod qmp;
pub mod ram;
pub mod report;
pub mod rootimage;
pub mod settings;
pub mod shares;
pub mod snapshot;
mod tail;
pub mod template;
pub mod wire;

pub use backend::{run, VmError};
pub use kernel::GuestKernel;
pub use settings::Settings;

/// warden's state directory (the runtime's rule: `WARDEN_STATE_DIR`, else
/// `/var/lib/warden` for root, else the XDG state directory), as the
/// binary read it into the [`Settings`].
pub(crate) fn state_dir() -> Option<std::path::PathBuf> {
    Settings::current().state_dir.clone()
}

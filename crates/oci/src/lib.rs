//! warden as an OCI runtime: the command line containerd's runc shim
//! (`io.containerd.runc.v2` with `BinaryName`) calls, taken as runc takes
//! it, onto warden's sandbox lifecycle. A thin front door: the bundle's
//! `config.json` becomes a request in `warden-policy` (`oci.rs`), the
//! sandbox is created, started, signalled and removed by
//! `warden-runtime`, and nothing here holds sandbox logic or prints.
//!
//! One container is one named sandbox in a warden state store under
//! `--root`; its supervisor is the process whose PID goes in `--pid-file`
//! (containerd's shim reaps it for the container's exit), and the
//! container's first process is held by that supervisor from `create`
//! (with the stdio `create` was given) until `start`.

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod args;
pub mod cgroups;
pub mod cgroups_path;
pub mod console;
pub mod container;
pub mod create;
pub mod exec;
pub mod hooks;
pub mod pod;
pub mod secrets;
pub mod verbs;

pub use container::OciError;

//! One sandbox's life, whatever the backend: create (a spec kept in the
//! state directory), start (a supervisor process of its own), exec (any
//! number, concurrent), signal, stop, wait, and the live event stream.
//!
//! The Linux process backend is `warden-jail`; this crate plugs the egress
//! proxy and published ports into it ([`net`]), carries events live to
//! every sink ([`events`]), and owns the per-sandbox supervisor ([`supervisor`])
//! with its control socket ([`protocol`], [`client`]). Front doors (the CLI,
//! later the daemon and the OCI verbs) parse and wire; nothing here prints.

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

mod aggregate;
pub mod allowlist;
pub mod approvals;
mod ask;
mod ask_programs;
pub mod backend;
mod budget;
pub mod client;
pub mod daemon_roots;
pub mod desktop;
pub mod events;
pub mod grants;
pub mod lifecycle;
pub mod net;
pub mod once;
pub mod output;
pub mod owner;
pub mod owners_files;
mod pathwalk;
pub mod peer;
pub mod procs;
pub mod programs;
pub mod protocol;
pub mod resolve;
pub mod review;
pub mod secret_programs;
pub mod settings;
pub mod state;
pub mod supervisor;
pub mod teach;

pub use once::{run_once, run_once_asking, Finished};
/// Unix sockets in the state at any path length, for the doors (which
/// depend on this crate, never on `warden-jail`).
pub use warden_jail::sockname;

//! The vocabulary shared across warden's process boundaries: what a caller
//! asks a sandbox's supervisor over its control socket ([`control`]), what
//! a supervisor asks the sandbox's init over the spawn channel ([`spawn`]),
//! the file operations the init does in the workspace ([`files`]), the
//! services inside a sandbox a caller may be connected to ([`connect`]),
//! and how a state file is replaced whole ([`replace`]).
//!
//! Front doors (the daemon, the OCI verbs) depend on this crate for the
//! words, and on `warden-runtime` for the deeds, never on `warden-jail`.
//! Nothing here opens a socket or serves a request: the framing, the
//! descriptors and the serving stay with the mechanism (`warden-runtime`'s
//! `protocol` and `client`, `warden-jail`'s `spawn`, `files`, `connect`).
//! The JSON shapes are wire formats (the Python client, the E2B door and
//! older supervisors read them): a change here is a protocol change.

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod connect;
pub mod control;
pub mod files;
pub mod replace;
pub mod spawn;

pub use replace::replace_file;

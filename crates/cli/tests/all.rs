//! The integration tests of the `warden` command, one binary: each area is a
//! module of `suite/` (what it proves is said at its top; a new area is a
//! file there and a line in `suite/mod.rs`), the set-up they share is in
//! `common/`. One binary links the crate's world once instead of once per
//! area. Its tests run as threads of one process: a test changes nothing
//! that belongs to the whole process (its environment, working directory,
//! resource limits, child reaping), and one that must be alone in its
//! process runs itself in one of its own (`common::alone_in_a_process`).
//!
//! `cargo test -p warden-cli --test all -- suite::AREA::` runs one area. The
//! VM backend's full set is `#[ignore]`d (each test boots a VM); `.ci/run`
//! runs it as `-- --ignored suite::vm:: suite::vm_rootimage::
//! suite::vm_shares:: suite::vm_fs::`, then `-- --ignored --test-threads 1
//! suite::vm_desktop::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Tests remove their own temporary directories (and a host's `rm -r`) with std's.
#![allow(clippy::disallowed_methods)]

mod common;
mod suite;

//! The integration tests of the `warden` command, one binary: each area is a
//! module of `suite/` (what it proves is said at its top), the set-up they
//! share is in `common/`. One binary links the crate's world once instead of
//! once per area; its tests run as threads of one process, so a test that
//! must be alone in its process says so and runs itself in one of its own
//! (`common::alone_in_a_process`).
//!
//! `cargo test -p warden-cli --test all -- suite::AREA` runs one area. The
//! VM backend's full set is `#[ignore]`d (each test boots a VM):
//! `-- --ignored suite::vm --skip suite::vm_desktop::`, then
//! `-- --ignored --test-threads 1 suite::vm_desktop::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod suite;

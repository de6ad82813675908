//! The workspace layers' tests, one binary: each area is a module of
//! `suite/` (what it proves is said at its top), the set-up they share is
//! in `common/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Tests remove their own temporary directories (and a host's `rm -r`) with std's.
#![allow(clippy::disallowed_methods)]

mod common;
mod suite;

//! The workspace layers' tests, one binary: each area is a module of
//! `suite/` (what it proves is said at its top), the set-up they share is
//! in `common/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod suite;

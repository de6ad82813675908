//! The egress crate's integration tests, one binary: a real proxy on
//! loopback, real clients, and upstream servers that record what arrived.
//! Each area is a module of `suite/`.

// Test set-up fails loudly: a panic is the test's failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod suite;

//! The vm crate's integration tests: real VMs (QEMU under KVM or
//! emulation, the guest kernel unpacked under `<state>/vm/kernel`, the
//! guest init built beside `warden`). Each VM test is `#[ignore]`d, as the
//! CLI's are (a guest boots in seconds under emulation): run them with
//! `cargo test -p warden-vm --test all -- --ignored`. A test that finds no
//! VMM or kernel says so and passes nothing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

mod common;
mod suite;

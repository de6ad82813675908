//! The jail's mechanism against the real kernel, one test binary: each
//! layer is a module of `suite/` (what it proves is said at its top). The
//! tests run as threads of one process; the probes that change what a
//! process may do (Landlock, seccomp, namespaces) run in forked children.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod suite;

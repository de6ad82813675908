//! The jail's mechanism against the real kernel, one test binary: each
//! layer is a module of `suite/` (what it proves is said at its top). The
//! tests run as threads of one process; the probes that change what a
//! process may do (Landlock, seccomp, namespaces) run in forked children.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Tests remove their own temporary directories (and a host's `rm -r`) with std's.
#![allow(clippy::disallowed_methods)]

mod suite;

//! Linux isolation for warden.
//!
//! This crate enforces a [`warden_policy::SandboxSpec`]: it spawns the sandbox
//! into new namespaces, assembles its root file tree, restricts it with
//! Landlock, seccomp, capabilities and rlimits, confines it in a cgroup, runs
//! the in-sandbox init (which wires the network namespace: `netns`), relays
//! a terminal, and reports what happened as [`warden_audit::Event`]s. It never reads CLI flags or profile files.
//!
//! All `unsafe` of the project lives here or in the egress crate; every block
//! states the invariant that makes it sound.

// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod cache;
mod caps;
pub mod cgroup;
pub mod confine;
pub mod connect;
mod error;
pub mod exec_rules;
pub mod fdpass;
pub mod files;
pub mod fsd;
pub mod gvisor;
pub mod host;
pub mod identity;
mod init;
pub mod kept;
pub mod landlock;
pub mod landlock_audit;
pub mod layer;
pub mod modes;
pub mod mounts;
pub mod netns;
pub mod privileges;
pub mod probes;
pub mod pty;
pub mod quotas;
mod report;
pub mod resident;
mod sandbox;
pub mod seccomp;
pub mod secrets;
pub mod settings;
pub mod sockname;
pub mod spawn;
pub mod stdio;
mod sys;
pub mod vmm;
pub mod vmnet;

pub use error::chain_str;
pub use nix::unistd::Pid;
pub use sandbox::{
    open_host_path, open_workspace, run, Attach, Desk, JailError, Network, Outcome, Program,
    SingleThreaded, SocketSource, NOBODY,
};

/// The seccomp filter of [`seccomp::RULES`] for the target architecture,
/// compiled by the build script (empty where warden has no filter). The init
/// loads this program; `seccomp_program_matches_the_rule_table` proves it is
/// what libseccomp builds from the table.
pub const SECCOMP_PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/seccomp.bpf"));

/// A landmark of a sandbox's start and end (`bench/phases.sh` times the
/// phases between them): a trace-level event of target `warden::phase`
/// with the monotonic clock in nanoseconds, printed only under
/// `WARDEN_LOG=trace`. Otherwise it costs a disabled event's check: the
/// clock is read only when the event is recorded.
pub fn phase(name: &'static str) {
    tracing::trace!(
        target: "warden::phase",
        phase = name,
        monotonic_ns = monotonic_ns()
    );
}

fn monotonic_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u128::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u128::try_from(t.tv_nsec).unwrap_or(0)
}

/// Layers a *test* may switch off, to prove that `warden selftest` notices:
/// from the binary's [`warden_policy::TestHooks`] (`WARDEN_TEST_WEAKEN`,
/// read by debug builds only). A release build has no way to weaken a
/// sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Weakened {
    pub seccomp: bool,
    pub landlock: bool,
}

impl Weakened {
    /// What the binary's test hooks switched off; nothing in a release
    /// build.
    pub fn current() -> Weakened {
        let hooks = warden_policy::TestHooks::current();
        Weakened {
            seccomp: hooks.weaken_seccomp,
            landlock: hooks.weaken_landlock,
        }
    }
}

//! `warden selftest`: a catalogue of real attacks, each made from inside a
//! real sandbox on this host, and judged by what the attempt returned *and*
//! by instruments on the host: listeners that record every connection and
//! datagram that reaches them, planted files, host processes, the host's
//! hostname, the process table after the run.
//!
//! Every attack runs `warden run ... -- warden __probe NAME ARGS` (the
//! binary is bound read-only into the sandbox), so it meets every layer a
//! real program meets. An attack is *contained* only when the probe says
//! so and no instrument saw anything; it is *skipped*, with the reason,
//! when this host lacks what it needs (never counted as contained).

//!
//! Each attack's two halves live together in `attacks/`, one file per
//! category: the judge, which plants files, starts listeners and reads
//! them on the host, and the probe, the attempt itself, which runs inside
//! the sandbox as `warden __probe NAME ARGS` and is dispatched by
//! [`probes::run`]. The few attempts that need raw system calls without a
//! safe wrapper call `warden_jail::probes`, so that this crate holds no
//! `unsafe`.

// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![forbid(unsafe_code)]

use serde::Serialize;
use std::net::IpAddr;
use std::path::PathBuf;

#[macro_use]
mod lab;
mod attacks;
pub mod probes;

pub use lab::Lab;
use lab::{Attack, Verdict};

/// The line a probe prints its finding on.
pub const RESULT_PREFIX: &str = "warden-probe-result ";

/// Groups of attacks, as the report shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Filesystem,
    Process,
    Kernel,
    Network,
    Resources,
    Persistence,
    Secrets,
    CrossSandbox,
}

impl Category {
    pub fn label(self) -> &'static str {
        match self {
            Category::Filesystem => "filesystem escape",
            Category::Process => "process and IPC escape",
            Category::Kernel => "privilege escalation via kernel interfaces",
            Category::Network => "network exfiltration",
            Category::Resources => "resource exhaustion",
            Category::Persistence => "persistence after exit",
            Category::Secrets => "secret theft",
            Category::CrossSandbox => "cross-sandbox access",
        }
    }
}

/// What became of one attack.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub id: &'static str,
    pub category: Category,
    pub attack: &'static str,
    /// `contained`, `escaped` or `skipped`.
    pub result: &'static str,
    pub detail: String,
}

impl Outcome {
    pub fn escaped(&self) -> bool {
        self.result == "escaped"
    }
}

/// Why the suite could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    #[error("cannot find warden's own executable to run inside the sandboxes")]
    Exe(#[source] std::io::Error),
    #[error("cannot prepare the selftest's files in {path}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Every attack's id, category and description, in report order.
pub fn list() -> Vec<(&'static str, Category, &'static str)> {
    catalogue()
        .into_iter()
        .map(|(id, c, a, _)| (id, c, a))
        .collect()
}

/// The catalogue, in report order: the categories' attacks one after the
/// other.
fn catalogue() -> Vec<Attack> {
    [
        attacks::fs::attacks(),
        attacks::process::attacks(),
        attacks::kernel::attacks(),
        attacks::net::attacks(),
        attacks::resources::attacks(),
        attacks::persistence::attacks(),
        attacks::secrets::attacks(),
        attacks::secret_proxy::attacks(),
        attacks::secret_routes::attacks(),
        attacks::cross::attacks(),
        attacks::exec::attacks(),
    ]
    .concat()
}

/// Run the catalogue (or the attacks whose id starts with `only`), calling
/// `progress` after each.
pub fn run(lab: &Lab, only: Option<&str>, progress: &mut dyn FnMut(&Outcome)) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for (id, category, attack, f) in catalogue() {
        if only.is_some_and(|o| !id.starts_with(o) && category.label() != o) {
            continue;
        }
        let _ = lab::take_refusal();
        let verdict = f(lab);
        // A probe that refused to run means the attack was not tried: not
        // an escape (exit status 1 is for real ones), not containment.
        let verdict = match lab::take_refusal() {
            Some(why) => Verdict::Skipped(format!("not tried: {why}")),
            None => verdict,
        };
        let (result, detail) = match verdict {
            Verdict::Contained(d) => ("contained", d),
            Verdict::Escaped(d) => ("escaped", d),
            Verdict::Skipped(d) => ("skipped", d),
        };
        let o = Outcome {
            id,
            category,
            attack,
            result,
            detail,
        };
        progress(&o);
        outcomes.push(o);
    }
    outcomes
}

/// `IpAddr` of the lab's host address, for reports.
pub fn host_address(lab: &Lab) -> Option<IpAddr> {
    lab.host_ip.map(IpAddr::V4)
}

//! One file per command (or family of commands); each parses nothing
//! itself (clap did) and prints only what the command answers.

pub mod audit;
pub mod doctor;
pub mod egress;
pub mod flags;
pub mod lifecycle;
pub mod manual;
pub mod profile;
pub mod remote;
pub mod resolution;
pub mod rows;
pub mod run;
pub mod sandboxes;
pub mod selftest;
pub mod units;
pub mod vm;

use anyhow::Context;
use std::path::PathBuf;
use warden_policy::compose::Catalog;
use warden_policy::HostFacts;

/// Library text as the command line says it: the options it names by
/// their profile keys (`` `resources.disk` ``) become flags (`--disk`).
pub fn worded(text: &str) -> String {
    warden_policy::word(text, warden_policy::Door::Cli)
}

pub fn host_facts() -> HostFacts {
    warden_runtime::resolve::host_facts()
}

pub fn sandbox_id() -> String {
    let mut bytes = [0u8; 6];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !ok {
        let n = std::process::id() as u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
        bytes.copy_from_slice(&n.to_le_bytes()[..6]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A path from the command line made absolute against the working
/// directory, lexically (`-w .` works; links are the jail's to judge).
pub fn absolute(p: PathBuf) -> anyhow::Result<PathBuf> {
    std::path::absolute(&p).with_context(|| format!("cannot make {} absolute", p.display()))
}

/// Where profiles and presets are found, from the caller's environment.
pub fn catalog() -> Catalog {
    warden_runtime::resolve::catalog(|v| std::env::var_os(v))
}

/// warden's state directory, from this process's environment (see
/// `warden_workspace::default_state_dir` for the order).
pub fn state_dir() -> anyhow::Result<PathBuf> {
    warden_runtime::state::default_dir()
    .context("warden has no state directory: set WARDEN_STATE_DIR, XDG_STATE_HOME or HOME to an absolute path (or pass --audit-log FILE or --no-audit-log)")
}

/// The store under warden's state directory.
pub fn store(state: PathBuf) -> anyhow::Result<warden_workspace::Store> {
    warden_workspace::Store::open(state).context("cannot open warden's state directory")
}

pub fn audit_dir() -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join("audit"))
}

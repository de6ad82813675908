//! `warden snapshots` (save a sandbox's state, list, delete), `warden
//! create NAME --from-snapshot SNAP` and `warden fork NAME --count N`: new
//! sandboxes from a sandbox's files (its workspace layer and home) and its
//! options. The process backend carries files, not processes: a new
//! sandbox runs nothing until asked.

use super::{open, running, start_supervisor};
use clap::Subcommand;
use std::time::Duration;
use warden_runtime::lifecycle::{self, Owner};
use warden_runtime::state::{self, Stored};

#[derive(Subcommand)]
pub enum SnapshotsCommand {
    /// Save sandbox SANDBOX's files (its workspace layer and home) and
    /// options as snapshot SNAP; a running sandbox is paused for the copy
    Create { sandbox: String, snap: String },
    /// List the snapshots
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Delete snapshots
    Rm {
        #[arg(required = true)]
        snaps: Vec<String>,
    },
}

/// A refusal of a copy, worded for the command line: a sandbox whose last
/// supervisor ended before saving its layer is told how to copy what it
/// saved.
fn worded(e: lifecycle::LifecycleError) -> anyhow::Error {
    match &e {
        lifecycle::LifecycleError::ChangesLost { name } => anyhow::anyhow!(
            "{e}. To copy what it saved, `warden start {name}` and `warden stop {name}` first"
        ),
        // The runtime's error carries the store's transparently: opened
        // here, as its `source` skips it.
        lifecycle::LifecycleError::Saved(s) => with_code(copy_code(s), e),
        lifecycle::LifecycleError::Store(s) => with_code(copy_code(s), e),
        _ => e.into(),
    }
}

/// The reason code of a copy refused for what its tree holds, if `e` is one.
fn copy_code(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    warden_workspace::refused_copy(e).and_then(|f| f.code())
}

fn with_code<E: std::error::Error + Send + Sync + 'static>(
    code: Option<&'static str>,
    e: E,
) -> anyhow::Error {
    let e = anyhow::Error::new(e);
    match code {
        Some(code) => e.context(format!("refused ({code})")),
        None => e,
    }
}

/// A copy refused for what the tree holds carries its reason code, the
/// same the API answers: `refused (too_many_links): ...`.
pub(crate) fn copy_refused<E: std::error::Error + Send + Sync + 'static>(e: E) -> anyhow::Error {
    with_code(copy_code(&e), e)
}

pub fn snapshots(cmd: SnapshotsCommand) -> anyhow::Result<u8> {
    let store = super::store(super::state_dir()?)?;
    match cmd {
        SnapshotsCommand::Create { sandbox, snap } => {
            let (_, sb) = open(&sandbox)?;
            let info = lifecycle::snapshot(
                &store,
                &sb,
                &snap,
                Owner::Machine,
                &warden_workspace::saved::unbounded,
            )
            .map_err(worded)?;
            println!("{}", info.name);
            eprintln!(
                "warden: snapshot {} of sandbox {sandbox} ({} bytes, memory: {}): `warden create NAME --from-snapshot {0}` makes a sandbox from it",
                info.name, info.bytes, info.memory
            );
        }
        SnapshotsCommand::Ls { json } => {
            let list = lifecycle::snapshots(&store, Owner::Machine)?;
            if json {
                println!("{}", warden_audit::json::to_string_pretty(&list)?);
                return Ok(0);
            }
            println!(
                "{:<24} {:<20} {:>10} {:<14}  WORKSPACE",
                "NAME", "FROM", "BYTES", "OWNER"
            );
            for s in list {
                println!(
                    "{:<24} {:<20} {:>10} {:<14}  {}",
                    warden_workspace::printable(&s.name),
                    warden_workspace::printable(&s.source),
                    s.bytes,
                    warden_workspace::printable(&s.owner),
                    warden_workspace::printable_path(&s.workspace)
                );
            }
        }
        SnapshotsCommand::Rm { snaps } => {
            for s in snaps {
                lifecycle::delete_snapshot(&store, &s, Owner::Machine)?;
                println!("{s}");
            }
        }
    }
    Ok(0)
}

/// Options of `create` that a snapshot's own options replace.
fn other_options() -> Vec<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(at) = args.iter().position(|a| a == "create") else {
        return Vec::new();
    };
    let mut skip_value = false;
    let mut out = Vec::new();
    for a in &args[at + 1..] {
        if skip_value {
            skip_value = false;
            continue;
        }
        match a.as_str() {
            "--from-snapshot" | "--ttl" => skip_value = true,
            "--start" => {}
            s if s.starts_with("--from-snapshot=") || s.starts_with("--ttl=") => {}
            s if s.starts_with('-') => out.push(s.to_string()),
            _ => {}
        }
    }
    out
}

/// `warden create NAME --from-snapshot SNAP [--ttl D] [--start]`.
pub fn create_from(
    store: &warden_workspace::Store,
    name: &str,
    snap: &str,
    ttl: Option<Duration>,
    start: bool,
) -> anyhow::Result<u8> {
    let others = other_options();
    if !others.is_empty() {
        anyhow::bail!(
            "a sandbox made --from-snapshot runs under the options its snapshot was saved with; leave out {}",
            others.join(", ")
        );
    }
    let sb = lifecycle::create_from_snapshot(store, name, snap, Owner::Machine, &|| u64::MAX)?;
    if let Some(t) = ttl {
        let path = sb.dir().join(state::STORED);
        let mut stored: Stored = state::read_json(&path)?;
        stored.ttl_ms = Some(t.as_millis() as u64);
        state::write_json(&path, &stored)?;
    }
    if start {
        start_supervisor(&sb)?;
        println!("{name}");
    } else {
        println!(
            "created sandbox {name} from snapshot {snap}: `warden start {name}`, then `warden exec {name} -- CMD`"
        );
    }
    Ok(0)
}

/// `warden fork NAME --count N`: N new sandboxes from NAME's current
/// files (and a VM's memory, where it can be paused to disk), started
/// when NAME runs; their names, one a line. Whether the memory was
/// carried is said on stderr, with why not.
pub fn fork(name: &str, count: usize) -> anyhow::Result<u8> {
    if count == 0 || count > 64 {
        anyhow::bail!("--count {count}: fork into 1 to 64 sandboxes at once");
    }
    let (store, sb) = open(name)?;
    let live = running(&sb);
    let forked = lifecycle::fork_with_memory(&store, &sb, count).map_err(worded)?;
    match &forked.memory {
        Ok(()) => eprintln!("warden: memory: true (each fork goes on from {name}'s processes)"),
        Err(why) => eprintln!("warden: memory: false ({why}); the forks carry {name}'s files only"),
    }
    let made = forked.made;
    for m in &made {
        if live {
            start_supervisor(m)?;
        }
        println!("{}", m.name());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_workspace::fsutil::FsError;

    #[test]
    fn a_copy_refused_for_its_trees_links_or_growth_leads_with_its_reason_code() {
        let e = worded(lifecycle::LifecycleError::Saved(
            warden_workspace::saved::SavedError::Fs(FsError::TooManyLinks { slack: 1 }),
        ));
        assert!(
            format!("{e:#}").starts_with("refused (too_many_links): "),
            "{e:#}"
        );
        let e = copy_refused(warden_workspace::LayerError::Fs(FsError::PastSize {
            size: 1,
            limit: 2,
        }));
        assert!(
            format!("{e:#}").starts_with("refused (copy_past_size): "),
            "{e:#}"
        );
        // Any other failure is said as it was.
        let e = worded(lifecycle::LifecycleError::Refused("no".into()));
        assert_eq!(format!("{e:#}"), "no");
    }
}

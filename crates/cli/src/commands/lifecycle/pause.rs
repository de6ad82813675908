//! `warden pause` and `warden resume`: a running sandbox's processes
//! frozen in place (their memory kept, no CPU used, its TTL and timeout
//! standing still) and let go on where they were.

use super::{open, running};
use warden_runtime::client::ClientError;
use warden_runtime::lifecycle::{self, LifecycleError};
use warden_runtime::protocol::Refusal;

/// Who asks, as the audit log records it.
const BY: &str = "the owner (cli)";

pub fn pause(names: &[String], to_disk: bool) -> anyhow::Result<u8> {
    for name in names {
        let (_, sb) = open(name)?;
        if !running(&sb) {
            anyhow::bail!("sandbox {name} is not running: only a running sandbox can be paused (`warden start {name}` starts it)");
        }
        let paused = if to_disk {
            lifecycle::pause_to_disk(&sb, BY)
        } else {
            lifecycle::pause(&sb, BY)
        };
        paused.map_err(|e| worded(name, e))?;
        println!("{name}");
    }
    Ok(0)
}

pub fn resume(names: &[String]) -> anyhow::Result<u8> {
    for name in names {
        let (_, sb) = open(name)?;
        if !running(&sb) {
            if lifecycle::on_disk(&sb) {
                // Paused to disk by a supervisor that is gone: a new one
                // restores it.
                super::start_supervisor(&sb)?;
                println!("{name}");
                continue;
            }
            anyhow::bail!("sandbox {name} is not running, so it is not paused (`warden start {name}` starts it)");
        }
        lifecycle::resume(&sb, BY).map_err(|e| match e {
            // A share the restore of a VM paused to disk refused: named
            // by its code and its bind's option and flag, as a start's
            // refusal of the same bind is.
            LifecycleError::Client(ClientError::Rejected {
                message,
                reason: Some(refusal),
                ..
            }) => {
                let stored =
                    warden_runtime::state::read_json(&sb.dir().join(warden_runtime::state::STORED))
                        .ok();
                let at = super::refused_at(&refusal, stored.as_ref(), &sb);
                anyhow::anyhow!("sandbox {name}: refused ({}{at}): {message}", refusal.code)
            }
            e => worded(name, e),
        })?;
        println!("{name}");
    }
    Ok(0)
}

/// A refusal as the command line says it.
fn worded(name: &str, e: LifecycleError) -> anyhow::Error {
    match e {
        LifecycleError::Client(ClientError::Rejected {
            code: Refusal::Conflict,
            message,
            ..
        }) => anyhow::anyhow!("{message} (`warden ls` shows its state)"),
        LifecycleError::Client(ClientError::Unsupported(_)) => anyhow::anyhow!(
            "sandbox {name}'s supervisor predates pause and resume: stop and start it (`warden stop {name}; warden start {name}`) to pause it"
        ),
        e => e.into(),
    }
}

/// An exec refused because the sandbox is paused, or because its
/// supervisor serves as many connections as it may, as the command line
/// says it.
pub fn exec_refused(name: &str, e: ClientError) -> anyhow::Error {
    match e {
        ClientError::Rejected {
            code: Refusal::Paused,
            message,
            ..
        } => anyhow::anyhow!("{message} (`warden resume {name}`)"),
        e if e.is_busy() => super::busy(name),
        e => e.into(),
    }
}

/// `warden --host H pause|resume NAME...`: through a daemon's API.
pub fn remote(host: &str, names: &[String], pause: bool) -> anyhow::Result<u8> {
    let c = super::super::remote::client(host)?;
    for name in names {
        if pause {
            c.pause(name)?;
        } else {
            c.resume(name)?;
        }
        println!("{name}");
    }
    Ok(0)
}

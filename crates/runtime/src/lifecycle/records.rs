//! A sandbox's own audit log written from outside the sandbox: what was
//! done to its workspace or state (made, snapshotted, forked, committed,
//! ...). While the sandbox runs its supervisor holds the log (one writer
//! per log): the record goes to it over the control socket, and it
//! appends it through its own writer and live sinks (`warden logs -f`,
//! the API's events see it too). Otherwise the record is appended here.
//! A record is never dropped in silence: its caller gets why it is not
//! in the log, and decides whether what it did stands.

use super::control;
use crate::client::{ClientError, Connection};
use crate::protocol::Refusal;
use std::path::PathBuf;
use warden_audit::chain::{ChainError, ChainedLog};
use warden_audit::{Event, EventKind, WorkspaceAction};
use warden_workspace::Sandbox;

/// Why a record is not in a sandbox's audit log.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The sandbox runs, and its supervisor did not append the record (it
    /// refused, could not write it, or predates such records).
    #[error("its supervisor did not record it")]
    Supervisor(#[source] ClientError),
    #[error("cannot open its audit log {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: ChainError,
    },
    #[error("cannot write the {action} record to its audit log {path}")]
    Write {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot finish its audit log {path}")]
    Close {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Record `action` on sandbox `sb` in its own audit log: through its
/// supervisor while it runs, appended here otherwise; `Ok` once the log
/// has it.
pub fn record(
    sb: &Sandbox,
    action: WorkspaceAction,
    paths: Vec<PathBuf>,
    detail: String,
) -> Result<(), RecordError> {
    let socket = control(sb);
    // Twice at most: a sandbox that starts between the look at its socket
    // and the append holds its log by then, and takes the record itself.
    let mut tries = 0;
    loop {
        tries += 1;
        if socket.exists() {
            let asked = Connection::open(&socket)
                .and_then(|c| c.record(action, paths.clone(), detail.clone()));
            match asked {
                Ok(()) => return Ok(()),
                // No supervisor listens (it ended), or it is ending and has
                // closed its log (its lock with it): appended here.
                Err(ClientError::NotRunning { .. })
                | Err(ClientError::Rejected {
                    code: Refusal::Conflict,
                    ..
                }) => {}
                Err(e) => return Err(RecordError::Supervisor(e)),
            }
        }
        match append(sb, action, paths.clone(), detail.clone()) {
            Err(RecordError::Open {
                source: ChainError::Busy { .. },
                ..
            }) if tries < 2 && socket.exists() => {}
            r => return r,
        }
    }
}

/// Append the record to the log itself (no supervisor holds it).
fn append(
    sb: &Sandbox,
    action: WorkspaceAction,
    paths: Vec<PathBuf>,
    detail: String,
) -> Result<(), RecordError> {
    let path = sb.dir().join("audit.jsonl");
    let mut log = ChainedLog::open(&path).map_err(|source| RecordError::Open {
        path: path.clone(),
        source,
    })?;
    log.append(&Event::now(
        sb.name(),
        EventKind::Workspace {
            action,
            name: sb.name().to_string(),
            paths,
            detail,
        },
    ))
    .map_err(|source| RecordError::Write {
        action: action.as_str(),
        path: path.clone(),
        source,
    })?;
    log.close()
        .map_err(|source| RecordError::Close { path, source })
}

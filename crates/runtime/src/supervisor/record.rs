//! The supervisor's record (`supervisor.json`) while it runs: written
//! whole at start and at each change a caller reads without asking the
//! supervisor (a pause, the phase of its stop), and never again once the
//! supervisor has removed it on its way out. A change that came after the
//! removal would leave a record of a supervisor that is gone, which the
//! next look at the sandbox would report as died.

use crate::state::{self, StopPhase, SupervisorRecord};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub(super) struct Keeper {
    path: PathBuf,
    /// The record as last written; `None` before the start and after the
    /// removal.
    current: Mutex<Option<SupervisorRecord>>,
}

impl Keeper {
    pub(super) fn new(path: PathBuf) -> Keeper {
        Keeper {
            path,
            current: Mutex::new(None),
        }
    }

    /// The record written at start.
    pub(super) fn start(&self, rec: SupervisorRecord) {
        if let Ok(mut cur) = self.current.lock() {
            let _ = state::write_json(&self.path, &rec);
            *cur = Some(rec);
        }
    }

    /// Change the record and write it, unless it is not (or no longer)
    /// there.
    pub(super) fn update(&self, change: impl FnOnce(&mut SupervisorRecord)) {
        if let Ok(mut cur) = self.current.lock() {
            if let Some(rec) = cur.as_mut() {
                change(rec);
                let _ = state::write_json(&self.path, rec);
            }
        }
    }

    /// Where the stop is now. A stop only goes forward: the init may be
    /// gone (its end said) before a stop asked meanwhile says it begins.
    pub(super) fn stop_phase(&self, phase: StopPhase) {
        if let Ok(mut cur) = self.current.lock() {
            if let Some(rec) = cur.as_mut() {
                if rec.stopping.is_some_and(|p| rank(p) >= rank(phase)) {
                    return;
                }
                rec.stopping = Some(phase);
                // A stopping sandbox is thawed first.
                rec.paused_ms = None;
                write_unsynced(&self.path, rec);
            }
        }
    }

    /// The record removed, for good.
    pub(super) fn remove(&self) {
        let cur = self.current.lock();
        let _ = std::fs::remove_file(&self.path);
        if let Ok(mut cur) = cur {
            *cur = None;
        }
    }
}

/// Write the record whole (a reader sees the old one or the new one) but
/// not to the disk before going on: a phase of a stop is news for whoever
/// waits for it now, and the record is gone by the stop's end; two syncs
/// each time would make every stop wait for the disk.
fn write_unsynced(path: &Path, rec: &SupervisorRecord) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(bytes) = serde_json::to_vec_pretty(rec) else {
        return;
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".phase");
    let tmp = PathBuf::from(tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The order of a stop's phases.
fn rank(p: StopPhase) -> u8 {
    match p {
        StopPhase::Terminating => 0,
        StopPhase::Ending => 1,
        StopPhase::Saving | StopPhase::Closing => 2,
    }
}

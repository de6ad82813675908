//! A VM's memory and devices saved to a file of warden's state, and read
//! back: the one mechanism under the template snapshots
//! ([`crate::template`]) and pause to disk ([`crate::pause`]).
//!
//! QEMU writes the snapshot (its migration stream) to a descriptor passed
//! over its control channel, so it needs no right on warden's state; a
//! restoring QEMU reads it from an inherited read-only descriptor. Each
//! snapshot has a record beside it (its size and SHA-256): a file whose
//! size differs is refused before QEMU sees it, and one whose digest
//! differs is refused after QEMU has loaded it but before the guest runs
//! (the digest is computed while QEMU loads), so a damaged snapshot is
//! never half-restored. Files are the owner's alone (0600, in 0700
//! directories); their names are written once, by rename.

use crate::machine::{Machine, MachineError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a snapshot could not be taken or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot {what} the snapshot {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the VMM cannot save this VM: {0}")]
    Refused(String),
    #[error("the snapshot {path} is damaged ({why}); it is not used")]
    Damaged { path: PathBuf, why: String },
    #[error(transparent)]
    Machine(#[from] MachineError),
}

/// What is kept beside a snapshot: enough to know it is whole, and what
/// it was taken of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The key of the VM's shape (see [`crate::template::key`]).
    pub key: String,
    pub size: u64,
    /// SHA-256 of the whole file, hex.
    pub sha256: String,
}

/// The record's path beside `state`.
pub fn record_path(state: &Path) -> PathBuf {
    state.with_extension("json")
}

pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let path = path.to_path_buf();
    move |source| SnapshotError::Io { what, path, source }
}

/// Make `dir` (and its parents), owner-only.
pub fn private_dir(dir: &Path) -> Result<(), SnapshotError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("create the directory of", dir))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("protect the directory of", dir))
}

/// How long saving may take (QEMU writes a few hundred MB a second).
const SAVE_TIMEOUT: Duration = Duration::from_secs(120);

/// Save `machine`'s memory and devices to `state` (with its record, under
/// `key`); the VMM ends once the snapshot is whole. When QEMU refuses
/// (a mounted share blocks it), the VM runs on as before and the refusal
/// is returned.
pub fn save(machine: &mut Machine, state: &Path, key: &str) -> Result<Record, SnapshotError> {
    save_with(machine, state, key, &mut || Ok(()))
}

/// [`save`], running `before_quit` once QEMU has written the state but
/// before it ends: where that fails, the guest runs on (nothing of it is
/// lost to a step that comes after the save) and its error is returned.
pub fn save_with(
    machine: &mut Machine,
    state: &Path,
    key: &str,
    before_quit: &mut dyn FnMut() -> Result<(), SnapshotError>,
) -> Result<Record, SnapshotError> {
    let dir = state.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        state.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io("create", &tmp))?;
    let result = save_to(machine, &file, before_quit);
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    file.sync_all().map_err(io("write", &tmp))?;
    drop(file);
    let (size, sha256) = digest(&tmp)?;
    let record = Record {
        key: key.to_string(),
        size,
        sha256,
    };
    let rec_tmp = tmp.with_extension("json.tmp");
    let bytes = serde_json::to_vec(&record).unwrap_or_default();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&rec_tmp)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, &bytes)?;
            f.sync_all()
        })
        .map_err(io("write the record of", &rec_tmp))?;
    // The state first: a record never names a state not yet in place.
    std::fs::rename(&tmp, state).map_err(io("place", state))?;
    std::fs::rename(&rec_tmp, record_path(state)).map_err(io("place the record of", state))?;
    Ok(record)
}

/// Stop the guest, have QEMU write its state to `file`, and end QEMU; on
/// a refusal or failure the guest goes on running.
fn save_to(
    machine: &mut Machine,
    file: &File,
    before_quit: &mut dyn FnMut() -> Result<(), SnapshotError>,
) -> Result<(), SnapshotError> {
    let qmp = machine.qmp()?;
    let control = |e| SnapshotError::Machine(MachineError::Control(e));
    qmp.execute("stop", None).map_err(control)?;
    let resume = |m: &mut Machine| {
        if let Ok(q) = m.qmp() {
            let _ = q.execute("cont", None);
        }
    };
    let started = (|| {
        let qmp = machine.qmp()?;
        crate::machine::set_capabilities(qmp).map_err(MachineError::Control)?;
        qmp.pass_fd("snapshot", file.as_fd())
            .map_err(MachineError::Control)?;
        qmp.execute("migrate", Some(serde_json::json!({ "uri": "fd:snapshot" })))
            .map_err(MachineError::Control)
    })();
    match started {
        Ok(_) => {}
        Err(MachineError::Control(crate::qmp::QmpError::Refused { reason, .. })) => {
            resume(machine);
            return Err(SnapshotError::Refused(reason));
        }
        Err(e) => {
            resume(machine);
            return Err(e.into());
        }
    }
    let deadline = Instant::now() + SAVE_TIMEOUT;
    loop {
        let (status, why) = machine.qmp()?.migration().map_err(control)?;
        match status.as_str() {
            "completed" => break,
            "failed" | "cancelled" => {
                resume(machine);
                return Err(SnapshotError::Refused(why.unwrap_or(status)));
            }
            _ if Instant::now() > deadline => {
                let _ = machine.qmp()?.execute("migrate_cancel", None);
                resume(machine);
                return Err(SnapshotError::Refused("saving took too long".into()));
            }
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    if let Err(e) = before_quit() {
        resume(machine);
        return Err(e);
    }
    let _ = machine.qmp()?.execute("quit", None);
    if !machine.wait_gone(Duration::from_secs(5)) {
        machine.stop(Duration::ZERO);
    }
    Ok(())
}

/// The size and SHA-256 of the file at `path`.
pub fn digest(path: &Path) -> Result<(u64, String), SnapshotError> {
    let f = File::open(path).map_err(io("read", path))?;
    digest_of(f, path)
}

fn digest_of(mut f: File, path: &Path) -> Result<(u64, String), SnapshotError> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io("read", path))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((size, hex))
}

/// A snapshot opened for a restore: its descriptor for QEMU, and a check
/// of its digest running meanwhile.
pub struct Opened {
    pub fd: std::sync::Arc<std::os::fd::OwnedFd>,
    check: std::thread::JoinHandle<Result<(u64, String), SnapshotError>>,
    record: Record,
    path: PathBuf,
}

/// Open the snapshot at `state` whose record says `key`: refused at once
/// when the record is missing, unreadable, of another key, or of another
/// size than the file.
pub fn open(state: &Path, key: &str) -> Result<Opened, SnapshotError> {
    let damaged = |why: String| SnapshotError::Damaged {
        path: state.to_path_buf(),
        why,
    };
    let rec_path = record_path(state);
    let bytes = std::fs::read(&rec_path).map_err(io("read the record of", state))?;
    let record: Record = serde_json::from_slice(&bytes)
        .map_err(|e| damaged(format!("its record is unreadable: {e}")))?;
    if record.key != key {
        return Err(damaged("its record names another VM's shape".into()));
    }
    let file = File::open(state).map_err(io("open", state))?;
    let size = file.metadata().map_err(io("read", state))?.len();
    if size != record.size {
        return Err(damaged(format!(
            "{size} bytes where {} were written",
            record.size
        )));
    }
    let reader = file.try_clone().map_err(io("open", state))?;
    let p = state.to_path_buf();
    // The digest is read through a descriptor of its own (its own offset);
    // QEMU reads the other one meanwhile.
    let reader = File::open(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&reader)
    ))
    .map_err(io("open", state))?;
    let check = std::thread::spawn(move || digest_of(reader, &p));
    Ok(Opened {
        fd: std::sync::Arc::new(file.into()),
        check,
        record,
        path: state.to_path_buf(),
    })
}

impl Opened {
    /// Wait for the digest: `Err` with why, when the file is not what was
    /// written.
    pub fn verify(self) -> Result<(), String> {
        let damaged = |why: String| {
            SnapshotError::Damaged {
                path: self.path.clone(),
                why,
            }
            .to_string()
        };
        match self.check.join() {
            Ok(Ok((size, sha))) if size == self.record.size && sha == self.record.sha256 => Ok(()),
            Ok(Ok(_)) => Err(damaged("its digest differs from the one recorded".into())),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(damaged("its check failed".into())),
        }
    }
}

//! Pause to disk: a running VM sandbox's memory and devices saved to a
//! directory of warden's state, so that its RAM is freed (the VMM ends),
//! and resumed later by a new VMM restoring them, from another process
//! (a restarted daemon or supervisor) as well.
//!
//! What it cannot save: a 9p share the guest has mounted (QEMU keeps the
//! guest's open files of it, which no snapshot can carry, and refuses to
//! save: "Migration is disabled when VirtFS export path ... is mounted"),
//! and virtio-fs at all. The supervisor's hold on the VM
//! ([`crate::control`]) has the guest's keeper freeze its processes and
//! unmount its 9p shares (workspace, binds, trust files) before the save
//! and mount them again after the restore; a guest whose system
//! directories are a 9p share (the host's `/usr`, or a root tree not
//! made an image) can never unmount them and is refused up front
//! ([`unsaveable`]), as is one whose processes hold a share: each goes on
//! running, untouched. docs/microvm.md says what this costs.

use crate::machine::{Config, Machine, MachineError, Start, Then};
use crate::snapshot::{self, Record, SnapshotError};
use crate::wire::Ready;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a VM could not be paused to disk or resumed.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    #[error("this VM cannot be paused to disk: {0} (it goes on running)")]
    Refused(String),
    #[error("the paused VM in {dir} was saved for another shape of VM; resume it with the settings it was paused with")]
    OtherShape { dir: PathBuf },
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Machine(#[from] MachineError),
    /// A share or the root tree is refused (`share_link`, `share_changed`,
    /// `share_unreadable`: every error of the check has a code) before
    /// anything of the saved state was read or taken, nor any VMM
    /// started: the state is as it was, and resumes once the share is
    /// back.
    #[error(transparent)]
    Share(crate::shares::ShareError),
}

/// Why a VM of `cfg` can never be saved, whatever its guest does: its
/// system directories or its workspace reach it in a way QEMU cannot
/// save. `None`: it can, once its guest has unmounted its 9p shares.
pub fn unsaveable(cfg: &Config) -> Option<String> {
    // A root tree is either an image (`root_image`) or a 9p share
    // (`rootfs`); neither: the host's `/usr` over 9p.
    if cfg.root_image.is_none() && cfg.rootfs.is_none() {
        return Some("its system directories are the host's /usr, mounted in the guest over 9p, from which every program of the guest runs (only a guest whose root is a read-only image can be saved)".into());
    }
    if cfg.root_image.is_none() {
        return Some("its root tree is mounted in the guest over 9p, from which every program of the guest runs (only a guest whose root is a read-only image can be saved)".into());
    }
    if cfg.workspace.is_some()
        && matches!(cfg.workspace_fs, crate::fsd::WorkspaceFs::VirtioFs { .. })
    {
        return Some("its workspace is mounted over virtio-fs, which this VMM cannot save".into());
    }
    None
}

/// The RAM a VM of `cfg` runs with when it boots or starts from a
/// template: a file of its own in its run directory when it can be saved,
/// anonymous memory otherwise.
pub fn ram_for(cfg: &Config) -> crate::ram::Ram {
    let mut shape = cfg.clone();
    if let crate::fsd::WorkspaceFs::VirtioFs { forced: false, .. } = shape.workspace_fs {
        // Merely preferred: a template's start serves the workspace over
        // 9p, and where virtio-fs does serve it the VMM keeps anonymous
        // memory whatever this says.
        shape.workspace_fs = crate::fsd::WorkspaceFs::NineP;
    }
    if unsaveable(&shape).is_some() {
        crate::ram::Ram::Anonymous
    } else {
        crate::ram::Ram::Shared(cfg.run_dir.join(crate::ram::BASE))
    }
}

/// Whether the guest of `cfg` has 9p shares to give back before a save.
pub fn has_shares(cfg: &Config) -> bool {
    cfg.workspace.is_some() || cfg.trust.is_some() || !cfg.shares.is_empty()
}

/// What a paused VM's directory holds beside its state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PausedVm {
    /// What the guest's init said when it first served.
    pub ready: Ready,
    /// The snapshot's record (key, size, digest).
    pub record: Record,
    /// The guest's RAM is the file beside the stream
    /// ([`crate::ram::BASE`]), not in it.
    #[serde(default)]
    pub ram: bool,
    /// The digest of the guest's RAM in that file
    /// ([`crate::ram::digest`]), checked before a VMM maps it again: a
    /// state without one, or whose file differs, is refused as damaged.
    #[serde(default)]
    pub ram_sha256: Option<String>,
    /// What each share and the root tree was when the VM was paused: a
    /// new supervisor (which checks the paths anew) restores it only over
    /// those very files, as the supervisor that paused it does.
    #[serde(default)]
    pub shared: Shared,
}

/// What a paused VM's shares were ([`PausedVm::shared`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Shared {
    /// Each bind by its path and mode: whether a single file, and its
    /// identity.
    pub binds: Vec<(PathBuf, bool, bool, crate::shares::Identity)>,
    pub rootfs: Option<crate::shares::Identity>,
}

impl Shared {
    fn of(cfg: &Config) -> Shared {
        Shared {
            binds: cfg
                .shares
                .iter()
                .map(|s| (s.path.clone(), s.writable, s.file, s.id))
                .collect(),
            rootfs: cfg.rootfs_id,
        }
    }

    /// `cfg` with the identities its shares had at the pause: checked
    /// against those, not against what a new supervisor found at the
    /// paths now.
    fn onto(&self, cfg: &Config) -> Config {
        let mut cfg = cfg.clone();
        for s in &mut cfg.shares {
            let at = self
                .binds
                .iter()
                .find(|b| b.0 == s.path && b.1 == s.writable);
            if let Some((_, _, file, id)) = at {
                (s.file, s.id) = (*file, *id);
            }
        }
        if self.rootfs.is_some() {
            cfg.rootfs_id = self.rootfs;
        }
        cfg
    }
}

const STATE: &str = "vm.vmstate";
const ABOUT: &str = "paused.json";
/// The part of a frame the paused VMM's channel had given the host last
/// (the guest wrote the rest, which the restored VMM's channel brings).
const REST: &str = "channel.rest";

/// Keep `rest` (see [`REST`]) with the state in `dir`; nothing is kept
/// when it is empty.
pub(crate) fn keep_rest(dir: &Path, rest: &[u8]) {
    if rest.is_empty() {
        return;
    }
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join(REST))
        .and_then(|mut f| std::io::Write::write_all(&mut f, rest));
}

/// What [`keep_rest`] kept in `dir`.
pub(crate) fn rest(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join(REST)).unwrap_or_default()
}

/// Whether `e` means the state can never be restored (damaged, or saved
/// for another shape of VM: a changed kernel, guest init or VMM), so that
/// keeping it helps nothing.
pub fn is_useless(e: &PauseError) -> bool {
    matches!(
        e,
        PauseError::OtherShape { .. } | PauseError::Snapshot(SnapshotError::Damaged { .. })
    ) || matches!(e, PauseError::Machine(MachineError::Restore(why)) if why.contains("is damaged"))
}

/// Save `machine` (a VM of `cfg`) into `dir` (made owner-only), and end
/// its VMM. Refused, with the VM running on, when QEMU cannot save it.
pub fn pause_to_disk(
    machine: &mut Machine,
    cfg: &Config,
    dir: &Path,
) -> Result<PausedVm, PauseError> {
    snapshot::private_dir(dir)?;
    // What an earlier pause left (its copies are copies of their own).
    let base = dir.join(crate::ram::BASE);
    let _ = std::fs::remove_file(&base);
    let key = crate::template::key(cfg);
    // The stream holds the devices; the guest's RAM is its file, which
    // becomes the base, moved while the VMM still holds the guest: where
    // the move fails, the guest runs on (it was lost with the VMM
    // before).
    let running = match &machine.ram {
        crate::ram::Ram::Shared(p) => Some(p.clone()),
        _ => None,
    };
    let mut ram_sha256 = None;
    let mut keep = || match &running {
        None => Ok(()),
        Some(running) => {
            crate::ram::keep_as_base(running, &base)
                .map_err(snapshot::io("keep the memory file of", &base))?;
            let sealed = crate::ram::seal(&base).and_then(|()| crate::ram::digest(&base));
            match sealed {
                Ok(d) => {
                    ram_sha256 = Some(d);
                    Ok(())
                }
                Err(e) => {
                    let _ = crate::ram::keep_as_base(&base, running);
                    Err(snapshot::io("keep the memory file of", &base)(e))
                }
            }
        }
    };
    let record = match snapshot::save_with(machine, &dir.join(STATE), &key, &mut keep) {
        Ok(r) => r,
        Err(SnapshotError::Refused(why)) => return Err(PauseError::Refused(why)),
        Err(e) => return Err(e.into()),
    };
    let ram = running.is_some();
    let paused = PausedVm {
        ready: machine.ready.clone(),
        record,
        ram,
        ram_sha256,
        shared: Shared::of(cfg),
    };
    let about = dir.join(ABOUT);
    let bytes = serde_json::to_vec(&paused).unwrap_or_default();
    std::fs::write(&about, bytes).map_err(snapshot::io("write the record of", &about))?;
    Ok(paused)
}

/// Since when the VM in `dir` is paused (ms since the epoch), as its
/// record's time says.
pub fn paused_at(dir: &Path) -> Option<u64> {
    let t = std::fs::metadata(dir.join(ABOUT)).ok()?.modified().ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_millis() as u64)
}

/// Is there a VM paused in `dir`?
pub fn is_paused(dir: &Path) -> bool {
    dir.join(ABOUT).is_file() && dir.join(STATE).is_file()
}

/// Resume the VM paused in `dir` in a new VMM started with `cfg` (the
/// settings it was paused with; its shares, network and run directory may
/// be new ones). The guest runs again only once its state has loaded
/// whole and its digest matched; then the paused state is removed. Its
/// shares are opened and checked first: one refused
/// ([`PauseError::Share`]) leaves the state untouched.
pub fn restore(cfg: &Config, dir: &Path, timeout: Duration) -> Result<Machine, PauseError> {
    let about = dir.join(ABOUT);
    let bytes = std::fs::read(&about).map_err(snapshot::io("read", &about))?;
    let paused: PausedVm = serde_json::from_slice(&bytes).map_err(|e| SnapshotError::Damaged {
        path: about.clone(),
        why: e.to_string(),
    })?;
    let key = crate::template::key(cfg);
    if paused.record.key != key {
        return Err(PauseError::OtherShape {
            dir: dir.to_path_buf(),
        });
    }
    // Its own pause: the shares it had then, whoever restores it.
    let mut cfg = paused.shared.onto(cfg);
    let shares = open_shares(&cfg)?;
    let opened = snapshot::open(&dir.join(STATE), &key)?;
    cfg.start = Start::Restore(opened.fd.clone());
    // Its RAM: the base taken back as its running file again (no copy of
    // this save links it: each has a file of its own).
    let mut taken = None;
    cfg.ram = crate::ram::Ram::Anonymous;
    if paused.ram {
        crate::ram::check_base(dir, cfg.memory_mib).map_err(|why| SnapshotError::Damaged {
            path: dir.join(crate::ram::BASE),
            why,
        })?;
        snapshot::private_dir(&cfg.run_dir)?;
        let running = cfg.run_dir.join(crate::ram::BASE);
        let _ = std::fs::remove_file(&running);
        crate::ram::take(dir, &running).map_err(snapshot::io("take the memory file of", dir))?;
        // What the VMM will map is what was saved, else nothing runs.
        if let Err(why) = crate::ram::check_digest(&running, paused.ram_sha256.as_deref()) {
            crate::ram::give_back(dir, &running);
            return Err(SnapshotError::Damaged {
                path: dir.join(crate::ram::BASE),
                why,
            }
            .into());
        }
        taken = Some(running.clone());
        cfg.ram = crate::ram::Ram::Shared(running);
    }
    let restored = Machine::launch_opened(&cfg, shares).and_then(|l| {
        l.restored(
            &cfg,
            timeout,
            || opened.verify(),
            Then::Serving(paused.ready),
        )
    });
    let m = match restored {
        Ok(m) => m,
        Err(e) => {
            if let Some(running) = taken {
                crate::ram::give_back(dir, &running);
            }
            return Err(e.into());
        }
    };
    for f in [
        dir.join(STATE),
        snapshot::record_path(&dir.join(STATE)),
        dir.join(crate::ram::BASE),
        about,
    ] {
        let _ = std::fs::remove_file(f);
    }
    Ok(m)
}

/// A VM paused to disk (by a supervisor now gone) that could not be
/// brought back; `kept` says whether its saved state stays for another
/// try.
#[derive(Debug, thiserror::Error)]
#[error("the VM paused to disk could not be resumed: {why}{}", if *kept { "; its saved state is kept for another try" } else { "; its saved state cannot be used and is removed (the next start boots the VM anew)" })]
pub struct Unresumed {
    pub why: String,
    pub kept: bool,
    /// The share refused at the restore with a reason code (`share_link`,
    /// `share_changed`), when that is why: each door words it by its code
    /// and the bind it is about, as a boot's.
    pub share: Option<crate::shares::ShareError>,
}

/// The share refused with a reason code that made a restore fail, taken
/// out of its error, if that is why it failed.
pub fn refused_share(e: PauseError) -> Option<crate::shares::ShareError> {
    match e {
        PauseError::Share(s) | PauseError::Machine(MachineError::Share(s))
            if s.reason().is_some() =>
        {
            Some(s)
        }
        _ => None,
    }
}

/// The shares and root tree of `cfg` opened and checked for a restore's
/// VMM, before the restore reads or takes anything of its saved state: a
/// share refused ([`PauseError::Share`]) changes nothing of it, and the
/// VMM is handed these very descriptors (no second lookup a swap could
/// slip between).
fn open_shares(cfg: &Config) -> Result<crate::machine::OpenedShares, PauseError> {
    crate::machine::OpenedShares::open(cfg).map_err(PauseError::Share)
}

/// Restore the VM paused to disk in `dir` by a supervisor that is gone,
/// into a VMM started with `config` (this start's shares, network, cgroup
/// and run directory, behind the devices the VM was saved with). A state
/// that can never be restored (damaged, truncated, or of another shape of
/// VM) is removed; one that failed otherwise is kept for another try.
pub(crate) fn restore_paused(
    config: &mut Config,
    dir: &Path,
    timeout: Duration,
) -> Result<Machine, Unresumed> {
    // As a template's copy (every VM that can be paused to disk is one).
    config.workspace_fs = crate::fsd::WorkspaceFs::NineP;
    restore(config, dir, timeout).map_err(|e| {
        let kept = !is_useless(&e);
        if !kept {
            let _ = warden_workspace::fsutil::remove_tree(dir);
        }
        Unresumed {
            why: warden_jail::chain_str(&e),
            kept,
            share: refused_share(e),
        }
    })
}

/// Restore, as a copy with its own identity (`hostname`, a fresh seed,
/// the host's clock), the VM saved in `dir` (a fork's or a snapshot's
/// copy of another VM's state), into a VMM started with `config`. The
/// state is this sandbox's own copy: once tried, it is not tried again
/// (the next start boots anew), except when a share was refused before
/// anything of it was touched ([`PauseError::Share`]): it is kept whole
/// for a start once the share is back.
pub(crate) fn restore_as_copy(
    config: &mut Config,
    dir: &Path,
    timeout: Duration,
    hostname: &str,
) -> Result<Machine, Unresumed> {
    config.workspace_fs = crate::fsd::WorkspaceFs::NineP;
    copy_of(config, dir, timeout, hostname, true).map_err(|e| {
        let kept = matches!(e, PauseError::Share(_));
        if !kept {
            let _ = warden_workspace::fsutil::remove_tree(dir);
        }
        Unresumed {
            why: warden_jail::chain_str(&e),
            kept,
            share: refused_share(e),
        }
    })
}

/// Restore a copy of the VM paused in `dir` into a VMM started with
/// `cfg`, leaving the state in place (one save, any number of copies).
/// The copy takes an identity of its own before any of its processes
/// runs again: 64 fresh random bytes reseed its generator (two copies
/// never draw the same numbers from the one saved pool), its clock is
/// stepped to the host's, and it takes `hostname`; its shares, given back
/// before the save, are mounted again from `cfg`'s. A guest that cannot
/// is ended, never left half-restored. Its RAM is a sparse copy of the
/// saved base, a file of its own in its run directory.
pub fn restore_copy(
    cfg: &Config,
    dir: &Path,
    timeout: Duration,
    hostname: &str,
) -> Result<Machine, PauseError> {
    copy_of(cfg, dir, timeout, hostname, false)
}

/// [`restore_copy`], the saved base taken (moved) as the copy's own file
/// where `take` (a state made for this copy alone), else copied.
fn copy_of(
    cfg: &Config,
    dir: &Path,
    timeout: Duration,
    hostname: &str,
    take: bool,
) -> Result<Machine, PauseError> {
    let about = dir.join(ABOUT);
    let bytes = std::fs::read(&about).map_err(snapshot::io("read", &about))?;
    let paused: PausedVm = serde_json::from_slice(&bytes).map_err(|e| SnapshotError::Damaged {
        path: about.clone(),
        why: e.to_string(),
    })?;
    let key = crate::template::key(cfg);
    if paused.record.key != key {
        return Err(PauseError::OtherShape {
            dir: dir.to_path_buf(),
        });
    }
    let shares = open_shares(cfg)?;
    let mut seed = vec![0u8; 64];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").map_err(snapshot::io(
            "read randomness for",
            Path::new("/dev/urandom"),
        ))?,
        &mut seed,
    )
    .map_err(snapshot::io(
        "read randomness for",
        Path::new("/dev/urandom"),
    ))?;
    let opened = snapshot::open(&dir.join(STATE), &key)?;
    let mut cfg = cfg.clone();
    cfg.start = Start::Restore(opened.fd.clone());
    // A file of its own, mapped shared (this copy can be saved in turn):
    // no other VMM holds it, and it holds no other VMM's file.
    cfg.ram = if paused.ram {
        let base =
            crate::ram::check_base(dir, cfg.memory_mib).map_err(|why| SnapshotError::Damaged {
                path: dir.join(crate::ram::BASE),
                why,
            })?;
        snapshot::private_dir(&cfg.run_dir)?;
        let own = cfg.run_dir.join(crate::ram::BASE);
        let _ = std::fs::remove_file(&own);
        if take {
            crate::ram::take(dir, &own)
        } else {
            crate::ram::copy_sparse(&base, &own)
        }
        .map_err(snapshot::io("copy the memory file of", dir))?;
        // What the VMM will map is what was saved (a copy made while the
        // source ran on is refused too), else nothing runs.
        if let Err(why) = crate::ram::check_digest(&own, paused.ram_sha256.as_deref()) {
            let _ = std::fs::remove_file(&own);
            return Err(SnapshotError::Damaged {
                path: dir.join(crate::ram::BASE),
                why,
            }
            .into());
        }
        crate::ram::Ram::Shared(own)
    } else {
        crate::ram::Ram::Anonymous
    };
    let mut m = Machine::launch_opened(&cfg, shares)?.restored(
        &cfg,
        timeout,
        || opened.verify(),
        Then::Serving(paused.ready),
    )?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let r = crate::wire::Reattach {
        clock: (now.as_secs() as i64, now.subsec_nanos()),
        seed: Some(seed),
        hostname: Some(hostname.to_string()),
    };
    match reidentify(&m, &r, &rest(dir), timeout) {
        None => Ok(m),
        Some(why) => {
            m.stop(Duration::ZERO);
            Err(PauseError::Refused(format!(
                "the copy could not take its own identity: {why}"
            )))
        }
    }
}

/// Tell the restored guest of `m` its new identity (`r`) and wait for its
/// answer, reading its channel from `rest` on: `None` when it took it.
fn reidentify(
    m: &Machine,
    r: &crate::wire::Reattach,
    rest: &[u8],
    timeout: Duration,
) -> Option<String> {
    use crate::wire::{Frame, Kind};
    let (mut w, mut rd) = match (m.stream.try_clone(), m.stream.try_clone()) {
        (Ok(w), Ok(r)) => (w, r),
        (Err(e), _) | (_, Err(e)) => return Some(e.to_string()),
    };
    if let Err(e) = Frame::json(Kind::Reattach, 0, r).write_to(&mut w) {
        return Some(format!("cannot reach the guest ({e})"));
    }
    let _ = rd.set_read_timeout(Some(timeout));
    let mut buf = rest.to_vec();
    let mut chunk = vec![0u8; crate::wire::CHUNK + 64];
    loop {
        match crate::channel::frames(&mut buf) {
            Ok(frames) => {
                if let Some(f) = frames.into_iter().find(|f| f.kind == Kind::Reattached) {
                    return f
                        .parse::<Option<String>>()
                        .unwrap_or_else(|e| Some(format!("the guest answered garbled ({e})")));
                }
            }
            Err(_) => return Some("the guest's channel is garbled".into()),
        }
        match std::io::Read::read(&mut rd, &mut chunk) {
            Ok(0) => return Some("the guest went away".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Some(format!("the guest did not answer ({e})")),
        }
    }
}

#[cfg(test)]
mod tests;

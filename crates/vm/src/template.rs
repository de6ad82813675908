//! Template snapshots: a VM sandbox starts from a guest that booted once
//! to the template's point (kernel up, modules loaded, channel open,
//! nothing of any sandbox attached: no share mounted, no address, no
//! hostname, no settings) and was saved to a file, instead of booting its
//! kernel again (seconds under emulation).
//!
//! A template is kept per VM shape: the VMM binary, the guest kernel, the
//! initramfs (the guest init and its modules), the acceleration, the
//! guest's memory and CPUs and its devices (which shares, read-only or
//! not; a `--rootfs` image; a network device; the trust files); the key is
//! a SHA-256 of all of it, files identified by path, device, inode, size
//! and times, so that a changed kernel, init or QEMU makes a new
//! template. A restored copy gets its own shares behind the same devices,
//! its own network behind the same device, and through the channel
//! ([`crate::wire::Attach`]) its settings, fresh random bytes from the host
//! (mixed into its kernel's pool and reseeded before anything runs: two
//! copies never share the randomness of the one boot) and the host's
//! clock.
//!
//! A template that fails its checks (see [`crate::snapshot`]) is removed
//! and the sandbox boots cold: the template is a cache, and losing it
//! makes a start slower, never weaker. virtio-fs cannot be saved by QEMU
//! 7.2 (vhost-user-fs has no migration), so a VM whose workspace must be
//! virtio-fs (`WARDEN_VM_FS=virtiofs`) boots cold; one where virtio-fs was
//! merely available gets its workspace over 9p with the template.
//! `WARDEN_VM_TEMPLATE=off` turns templates off.

use crate::machine::{Accel, Config, Machine, MachineError, Start};
use crate::snapshot::{self, SnapshotError};
use crate::wire::{Attach, Kind};
use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bumped when what a template holds changes meaning.
// 2: the guest's RAM is a file beside the stream (`crate::ram`), and the
// stream is written with `x-ignore-shared`.
const FORMAT: &str = "warden-vm-template-2";
/// Templates kept at most (the least recently used go first).
const KEEP: usize = 8;

static BUILDS: AtomicU64 = AtomicU64::new(0);

/// How a VM was started, for the events and the benchmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// Restored from an existing template.
    Template,
    /// The template was made now (a cold boot and a save), then restored.
    Built,
    /// Booted cold: `why` when a template was wanted but could not be used.
    Cold { why: Option<String> },
}

/// Are templates on (`WARDEN_VM_TEMPLATE`, on unless `off`)?
pub fn enabled() -> bool {
    crate::Settings::current().templates
}

/// Can a VM of `cfg` start from a template? Not when its workspace must
/// be virtio-fs (which QEMU cannot save).
pub fn eligible(cfg: &Config) -> bool {
    !matches!(
        (&cfg.workspace, &cfg.workspace_fs),
        (
            Some(_),
            crate::fsd::WorkspaceFs::VirtioFs { forced: true, .. }
        )
    )
}

/// The identity of a file for the key: path, device, inode, size, times
/// (a kernel or VMM replaced in place is a new one).
fn file_id(h: &mut Sha256, label: &str, path: &Path) {
    h.update(label.as_bytes());
    h.update(path.as_os_str().as_encoded_bytes());
    if let Ok(m) = std::fs::metadata(path) {
        for v in [
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime() as u64,
            m.mtime_nsec() as u64,
            m.ctime() as u64,
            m.ctime_nsec() as u64,
        ] {
            h.update(v.to_le_bytes());
        }
    }
    h.update([0]);
}

/// The key of `cfg`'s shape: everything a restored copy must have in
/// common with its template.
pub fn key(cfg: &Config) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    file_id(&mut h, "vmm", &cfg.vmm);
    file_id(&mut h, "kernel", &cfg.kernel);
    // The initramfs and a root image are named by their content's digest
    // (their times change: each boot marks them used).
    h.update(b"initramfs");
    h.update(cfg.initramfs.as_os_str().as_encoded_bytes());
    if let Some(img) = &cfg.root_image {
        h.update(b"root-image");
        h.update(img.as_os_str().as_encoded_bytes());
    }
    if let Some(tree) = &cfg.rootfs {
        h.update(b"root-share");
        h.update(tree.as_os_str().as_encoded_bytes());
    }
    h.update(match cfg.accel {
        Accel::Kvm => b"kvm".as_slice(),
        Accel::Tcg => b"tcg".as_slice(),
    });
    h.update(cfg.memory_mib.to_le_bytes());
    h.update(cfg.cpus.to_le_bytes());
    h.update([
        cfg.workspace.is_some() as u8,
        cfg.trust.is_some() as u8,
        cfg.net.is_some() as u8,
    ]);
    for s in &cfg.shares {
        h.update(s.tag.as_bytes());
        h.update([s.writable as u8, 0]);
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Where templates are kept: `<vm dir>/templates`.
pub fn dir() -> Option<PathBuf> {
    crate::kernel::vm_dir().map(|d| d.join("templates"))
}

fn state_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("template-{key}.vmstate"))
}

/// The template's RAM (its base, see [`crate::ram`]) beside its stream.
pub fn ram_path(state: &Path) -> PathBuf {
    state.with_extension("ram")
}

/// What the base was when it was made ([`crate::ram::Stamp`]).
fn stamp_path(state: &Path) -> PathBuf {
    state.with_extension("stamp")
}

/// Remove the template whose stream is `state`, with all beside it.
fn remove(state: &Path) {
    for p in [
        snapshot::record_path(state),
        ram_path(state),
        stamp_path(state),
        state.to_path_buf(),
    ] {
        let _ = std::fs::remove_file(p);
    }
}

/// Is the template at `state` whole (its stream, record, base and stamp)?
fn whole(state: &Path) -> bool {
    [
        state.to_path_buf(),
        snapshot::record_path(state),
        ram_path(state),
        stamp_path(state),
    ]
    .iter()
    .all(|p| p.exists())
}

/// Start the VM of `cfg`: from its template (made first when there is
/// none), else cold. `cfg.start` must be [`Start::Cold`].
pub fn start(cfg: &Config, timeout: Duration) -> Result<(Machine, Started), MachineError> {
    if !enabled() || !eligible(cfg) {
        return Ok((Machine::boot(cfg, timeout)?, Started::Cold { why: None }));
    }
    let Some(dir) = dir() else {
        return Ok((Machine::boot(cfg, timeout)?, Started::Cold { why: None }));
    };
    let mut cfg = cfg.clone();
    // virtio-fs cannot be saved; it was only a preference here.
    cfg.workspace_fs = crate::fsd::WorkspaceFs::NineP;
    let key = key(&cfg);
    let state = state_path(&dir, &key);
    let mut how = Started::Template;
    if !whole(&state) {
        if let Err(e) = build(&cfg, &dir, &key) {
            let why = format!("no template could be made: {}", warden_jail::chain_str(&e));
            return Ok((
                Machine::boot(&cfg, timeout)?,
                Started::Cold { why: Some(why) },
            ));
        }
        how = Started::Built;
    }
    match restore(&cfg, &state, &key, timeout) {
        Ok(m) => {
            touch(&state);
            Ok((m, how))
        }
        Err(e) => {
            // Damaged, truncated, written, or refused by the VMM: never
            // used again.
            remove(&state);
            let why = warden_jail::chain_str(&e);
            Ok((
                Machine::boot(&cfg, timeout)?,
                Started::Cold { why: Some(why) },
            ))
        }
    }
}

/// Restore `cfg`'s VM from the snapshot at `state` (key `key`), and hand
/// it its settings, seed and clock.
pub fn restore(
    cfg: &Config,
    state: &Path,
    key: &str,
    timeout: Duration,
) -> Result<Machine, SnapshotError> {
    let opened = snapshot::open(state, key)?;
    let mut cfg = cfg.clone();
    cfg.start = Start::Restore(opened.fd.clone());
    cfg.ram = ram_for(&cfg, state)?;
    let attach = attach_for(&cfg)?;
    let launched = Machine::launch(&cfg)?;
    Ok(launched.restored(
        &cfg,
        timeout,
        || opened.verify(),
        crate::machine::Then::Attach(&attach),
    )?)
}

/// The RAM a VM restored from the template at `state` runs with: a sparse
/// copy of the template's base in its own run directory (no VMM ever
/// holds the base itself, see [`crate::ram`]), mapped shared by a VM that
/// can be saved from it ([`crate::pause::ram_for`]), privately by one
/// that cannot. A base changed since it was made is refused.
fn ram_for(cfg: &Config, state: &Path) -> Result<crate::ram::Ram, SnapshotError> {
    let base = ram_path(state);
    let damaged = |why: String| SnapshotError::Damaged {
        path: base.clone(),
        why,
    };
    let stamp_file = stamp_path(state);
    let bytes = std::fs::read(&stamp_file).map_err(snapshot::io("read the stamp of", &base))?;
    let made: crate::ram::Stamp = serde_json::from_slice(&bytes)
        .map_err(|e| damaged(format!("its stamp is unreadable: {e}")))?;
    let now = crate::ram::Stamp::of(&base).map_err(snapshot::io("read", &base))?;
    if now != made {
        return Err(damaged(
            "its memory file was changed since the template was made".into(),
        ));
    }
    if now.size != cfg.memory_mib << 20 {
        return Err(damaged("its memory file is not of the guest's size".into()));
    }
    snapshot::private_dir(&cfg.run_dir)?;
    let own = cfg.run_dir.join(crate::ram::BASE);
    let _ = std::fs::remove_file(&own);
    crate::ram::copy_sparse(&base, &own).map_err(snapshot::io("copy", &base))?;
    Ok(match &cfg.ram {
        crate::ram::Ram::Shared(_) => crate::ram::Ram::Shared(own),
        _ => crate::ram::Ram::Private(own),
    })
}

/// Make the saved guest's RAM file `running` the base of the template at
/// `state`, root's and owner-only (no VMM opens it: each VM maps a copy
/// of its own), with its stamp.
fn place_base(running: &Path, state: &Path) -> Result<(), SnapshotError> {
    let base = ram_path(state);
    crate::ram::keep_as_base(running, &base).map_err(snapshot::io("keep the memory of", &base))?;
    crate::ram::seal(&base).map_err(snapshot::io("seal", &base))?;
    let stamp = crate::ram::Stamp::of(&base).map_err(snapshot::io("read", &base))?;
    let at = stamp_path(state);
    std::fs::write(&at, serde_json::to_vec(&stamp).unwrap_or_default())
        .map_err(snapshot::io("write the stamp of", &base))
}

/// What a copy is told: its settings, 64 fresh random bytes, the clock.
fn attach_for(cfg: &Config) -> Result<Attach, SnapshotError> {
    use std::io::Read;
    let mut seed = vec![0u8; 64];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed))
        .map_err(snapshot::io(
            "read randomness for",
            Path::new("/dev/urandom"),
        ))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(Attach {
        params: cfg.params.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        seed,
        clock: (now.as_secs() as i64, now.subsec_nanos()),
    })
}

/// Boot a template of `cfg`'s shape (nothing of its sandbox in it: empty
/// directories behind its shares, no network behind its device, no
/// settings) to the guest init's parking point and save it.
pub fn build(cfg: &Config, dir: &Path, key: &str) -> Result<snapshot::Record, SnapshotError> {
    snapshot::private_dir(dir)?;
    let n = BUILDS.fetch_add(1, Ordering::Relaxed);
    let runs = crate::kernel::vm_dir()
        .unwrap_or_else(|| dir.to_path_buf())
        .join("run")
        .join(BUILDERS);
    sweep_runs(&runs);
    let run = runs.join(format!("template-{}-{n}", std::process::id()));
    let empty = run.join("empty");
    snapshot::private_dir(&run)?;
    std::fs::create_dir_all(&empty).map_err(snapshot::io("create", &empty))?;
    if warden_jail::host::is_root() {
        // The VMM of a template runs as nobody: it may read the empty
        // directory it shares, and nothing else of root's.
        let nobody = Some(warden_jail::NOBODY);
        std::os::unix::fs::chown(&empty, nobody, nobody)
            .map_err(snapshot::io("prepare", &empty))?;
    }
    let mut t = cfg.clone();
    t.start = Start::Park {
        net: cfg.net.is_some(),
    };
    t.params = Vec::new();
    t.workspace = cfg.workspace.as_ref().map(|_| empty.clone());
    t.workspace_id = None;
    t.trust = cfg.trust.as_ref().map(|_| empty.clone());
    for s in &mut t.shares {
        s.path = empty.clone();
        s.file = false;
    }
    t.net = None;
    t.netns = None;
    t.run_dir = run.join("vm");
    t.ram = crate::ram::Ram::Shared(t.run_dir.join(crate::ram::BASE));
    let timeout = if cfg.accel == Accel::Kvm {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(90)
    };
    let result = (|| {
        let mut m = Machine::launch(&t)?.until(&t, timeout, Kind::Parked)?;
        let state = state_path(dir, key);
        let record = snapshot::save(&mut m, &state, key)?;
        if let Err(e) = place_base(&t.run_dir.join(crate::ram::BASE), &state) {
            remove(&state);
            return Err(e);
        }
        Ok(record)
    })();
    let _ = warden_workspace::fsutil::remove_tree(&run);
    if result.is_ok() {
        sweep(dir, key);
    }
    result
}

/// The subdirectory of the VMs' run directory that holds the template
/// builders' run directories, and nothing else: a sandbox's run directory
/// (`ID-PID-N`, whatever its ID) is never one of them, so the builders'
/// sweep never reaches a sandbox's.
const BUILDERS: &str = ".templates";

/// Remove the run directories of builders that died mid-build (their VMM
/// ended with them: see `warden_jail::vmm::VmmJail::apply`), named
/// `template-PID-N` in [`BUILDERS`] alone; a live process of that PID
/// keeps its directory.
fn sweep_runs(runs: &Path) {
    for e in std::fs::read_dir(runs).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let pid = name
            .strip_prefix("template-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = warden_workspace::fsutil::remove_tree(&e.path());
        }
    }
}

/// Mark a template used now (its record's time).
fn touch(state: &Path) {
    if let Ok(f) = std::fs::File::options()
        .append(true)
        .open(snapshot::record_path(state))
    {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

/// Keep at most [`KEEP`] templates, the least recently used going first
/// (never `keep`); and half-written ones of dead builders.
fn sweep(dir: &Path, keep: &str) {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') && name.ends_with(".tmp") {
            let pid = name.rsplit('.').nth(1).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_file(e.path());
            }
            continue;
        }
        if name.ends_with(".vmstate") && !name.contains(keep) {
            let used = std::fs::metadata(snapshot::record_path(&e.path()))
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            found.push((used, e.path()));
        }
    }
    found.sort();
    let extra = (found.len() + 1).saturating_sub(KEEP);
    for (_, p) in found.into_iter().take(extra) {
        remove(&p);
    }
}

#[cfg(test)]
mod tests {
    // The tests remove their own temporary directories with std's removal.
    #![allow(clippy::unwrap_used, clippy::disallowed_methods)]
    use super::*;

    fn cfg(dir: &Path) -> Config {
        for f in ["qemu", "vmlinuz", "initramfs-aa.cpio", "initramfs-bb.cpio"] {
            std::fs::write(dir.join(f), f).unwrap();
        }
        Config {
            vmm: dir.join("qemu"),
            kernel: dir.join("vmlinuz"),
            initramfs: dir.join("initramfs-aa.cpio"),
            accel: Accel::Tcg,
            memory_mib: 512,
            cpus: 1,
            workspace: None,
            workspace_id: None,
            workspace_held: None,
            trust: None,
            params: vec![("hostname".into(), "a".into())],
            shares: Vec::new(),
            rootfs: None,
            rootfs_id: None,
            root_image: None,
            run_dir: dir.join("run"),
            cgroup: None,
            cpu_budget: None,
            net: None,
            netns: None,
            workspace_fs: Default::default(),
            start: Default::default(),
            ram: Default::default(),
        }
    }

    #[test]
    fn a_changed_kernel_init_or_vmm_makes_a_new_template_and_a_sandboxs_settings_do_not() {
        let dir = std::env::temp_dir().join(format!("warden-tmpl-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = cfg(&dir);
        let k = key(&base);
        // Settings that come through the channel share the template.
        let mut other = base.clone();
        other.params = vec![("hostname".into(), "b".into())];
        other.run_dir = dir.join("run2");
        assert_eq!(key(&other), k);
        // A new guest init is a new initramfs.
        let mut init = base.clone();
        init.initramfs = dir.join("initramfs-bb.cpio");
        assert_ne!(key(&init), k);
        // A kernel or VMM replaced in place.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.join("vmlinuz"), "a newer kernel").unwrap();
        let k2 = key(&base);
        assert_ne!(k2, k);
        std::fs::write(dir.join("qemu"), "a newer qemu").unwrap();
        assert_ne!(key(&base), k2);
        // The guest's shape.
        let mut bigger = base.clone();
        bigger.memory_mib = 1024;
        assert_ne!(key(&bigger), key(&base));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

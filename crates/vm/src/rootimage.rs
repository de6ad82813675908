//! A `--rootfs` tree as a read-only disk image for the guest: built
//! without root by the host's own tool (`mkfs.erofs` of erofs-utils when
//! present, else `mkfs.ext4 -d` of e2fsprogs), kept in the VM cache under
//! a key derived from the tree, attached to the guest as a read-only
//! virtio-blk drive and mounted read-only (`nosuid,nodev`) by the guest
//! init as its root. The guest's file requests then reach the guest
//! kernel's file system code, not the VMM's 9p server.
//!
//! **The key** is a manifest of the tree, not its contents: for every
//! entry (never following a link) its path, type and mode, owner, size,
//! modification and change times (to the nanosecond), inode and, for a
//! link, its target. Reading every byte of a 500 MB tree at each boot
//! would cost seconds; the manifest costs one `lstat` per entry. A
//! content change that the manifest misses must keep every one of those
//! fields, including the change time, which only the kernel sets (any
//! write, `chmod`, `chown` or `touch` moves it; only a change of the
//! host's clock can put it back): such a change would let the guest run
//! the older contents of the same tree, never anything from outside it.
//!
//! **The build** runs the tool in the VMM's jail (`warden_jail::vmm`: no
//! capabilities, `no_new_privs`, an empty network, seccomp and Landlock
//! reading beneath the tree and the system's libraries only, writing only
//! the image being built), so a link planted in the tree, or a file
//! swapped for one while the tool runs, can never make it copy a host file
//! from outside the tree into the image: links go into the image as links,
//! resolved inside the guest. The image is written to a temporary name
//! (`.rootfs-KEY.PID.N`) and renamed when complete: a half-written image
//! is never used, builders of the same tree at once each write their own
//! and the last rename wins with an equal image, and the cache's sweep
//! removes the half images of builders that died.

use sha2::{Digest, Sha256};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Why a root image could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RootImageError {
    #[error("`filesystem.rootfs` {tree}: cannot read {path} to build the guest's root image")]
    Walk {
        tree: PathBuf,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`filesystem.rootfs` {tree}: {path} cannot be read by the tree's owner (as whom, without any capability, the guest's root image is built), so it cannot go into the image: make it readable to the tree's owner (chmod), remove it, or pass WARDEN_VM_ROOT=share to serve the tree over 9p instead")]
    Unreadable { tree: PathBuf, path: PathBuf },
    #[error("cannot write the guest's root image {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot confine {tool} while it builds the guest's root image")]
    Jail {
        tool: PathBuf,
        #[source]
        source: warden_jail::vmm::VmmJailError,
    },
    #[error("{tool} could not build the guest's root image of {tree} ({status}): {output}")]
    Tool {
        tool: PathBuf,
        tree: PathBuf,
        status: String,
        output: String,
    },
    #[error("WARDEN_VM_ROOT={0:?} is neither `share` nor `image`")]
    BadMode(String),
}

/// The image's file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Erofs,
    Ext4,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Erofs => "erofs",
            Format::Ext4 => "ext4",
        }
    }
}

/// A tool that builds images, found on the host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Tool {
    pub format: Format,
    pub path: PathBuf,
}

/// The guest kernel's modules each format needs beside the block device's
/// (`virtio_blk`), in load order; one the kernel has built in is absent.
pub const BLOCK_MODULES: &[&str] = &["kernel/drivers/block/virtio_blk.ko"];
pub const EXT4_MODULES: &[&str] = &[
    "kernel/lib/crc16.ko",
    "kernel/crypto/crc32c_generic.ko",
    "kernel/fs/mbcache.ko",
    "kernel/fs/jbd2/jbd2.ko",
    "kernel/fs/ext4/ext4.ko",
];
pub const EROFS_MODULES: &[&str] = &[
    "kernel/crypto/crc32c_generic.ko",
    "kernel/lib/libcrc32c.ko",
    "kernel/fs/erofs/erofs.ko",
];

impl Format {
    /// The modules the guest loads for this format, the block device's first.
    pub fn modules(self) -> impl Iterator<Item = &'static str> {
        let own = match self {
            Format::Erofs => EROFS_MODULES,
            Format::Ext4 => EXT4_MODULES,
        };
        BLOCK_MODULES.iter().chain(own.iter()).copied()
    }

    /// The guest kernel has this format's file system and the block
    /// device, as modules of its package or built in.
    pub fn in_kernel(self, modules: &Path) -> bool {
        let builtin = std::fs::read_to_string(modules.join("modules.builtin")).unwrap_or_default();
        let has = |m: &str| modules.join(m).is_file() || builtin.lines().any(|l| l == m);
        let fs = match self {
            Format::Erofs => "kernel/fs/erofs/erofs.ko",
            Format::Ext4 => "kernel/fs/ext4/ext4.ko",
        };
        has(fs) && has(BLOCK_MODULES[0])
    }
}

/// Where host tools are looked for: a test's `vm_tools` hook
/// (directories, `:` separated), else `PATH` and the system's `sbin`
/// directories, which a user's `PATH` often lacks.
fn tool_dirs() -> Vec<PathBuf> {
    if let Some(v) = &warden_policy::TestHooks::current().vm_tools {
        return std::env::split_paths(v).collect();
    }
    let path = crate::Settings::current().path.clone().unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .collect()
}

/// The image tool of this host whose format the guest kernel can mount:
/// `mkfs.erofs`, else `mkfs.ext4`; `None` when neither.
pub fn find_tool(kernel_modules: Option<&Path>) -> Option<Tool> {
    let dirs = tool_dirs();
    let find = |name: &str| dirs.iter().map(|d| d.join(name)).find(|p| p.is_file());
    [(Format::Erofs, "mkfs.erofs"), (Format::Ext4, "mkfs.ext4")]
        .into_iter()
        .filter(|(f, _)| kernel_modules.is_none_or(|m| f.in_kernel(m)))
        .find_map(|(format, name)| find(name).map(|path| Tool { format, path }))
}

/// How the guest gets its `--rootfs` tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootMode {
    /// Over the read-only 9p share.
    Share,
    /// As a read-only image (the default when a tool is found).
    Image,
}

/// `WARDEN_VM_ROOT=share|image`, when set.
pub fn forced_mode() -> Result<Option<RootMode>, RootImageError> {
    match crate::Settings::current().root.as_deref() {
        None | Some("") => Ok(None),
        Some("share") => Ok(Some(RootMode::Share)),
        Some("image") => Ok(Some(RootMode::Image)),
        Some(other) => Err(RootImageError::BadMode(other.to_string())),
    }
}

/// What the CLI is told while an image is built.
#[derive(Debug, Clone)]
pub enum Progress {
    /// Building starts: the tree, its entries and bytes, the format.
    Started {
        tree: PathBuf,
        entries: u64,
        bytes: u64,
        format: Format,
    },
    /// About `done` of `total` bytes are in the image.
    Building { done: u64, total: u64 },
    /// The image is complete.
    Finished {
        image: PathBuf,
        size: u64,
        took: Duration,
    },
}

type Observer = Box<dyn Fn(&Progress) + Send + Sync>;
static OBSERVER: OnceLock<Observer> = OnceLock::new();

/// Have `f` told of every image build of this process (the CLI draws a
/// progress bar with it; nothing here prints). The first call wins.
pub fn observe(f: impl Fn(&Progress) + Send + Sync + 'static) {
    let _ = OBSERVER.set(Box::new(f));
}

fn tell(p: Progress) {
    if let Some(f) = OBSERVER.get() {
        f(&p);
    }
}

/// A tree's manifest: its key and what the image must hold.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub tree: PathBuf,
    pub key: String,
    pub entries: u64,
    /// The bytes of its regular files.
    pub bytes: u64,
    /// An estimate of the space its files, directories and links take in
    /// blocks of 4 KiB.
    pub blocks: u64,
    /// The tree opened once, through no link, and checked
    /// (`crate::shares::check_dir`): what is walked and what the tool's
    /// root binds at `tree` (only where its own lookup finds this very
    /// directory), so that a link swapped into `tree`'s path while the
    /// image is built never puts another directory's files in it. `None`:
    /// walked and bound by path.
    pub source: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

/// Can this process read `m`'s file without any capability (the jail the
/// tool runs in has none, even as root)?
fn readable(m: &std::fs::Metadata, uid: u32, groups: &[u32]) -> bool {
    let mode = m.mode();
    let need = if m.is_dir() { 0o5 } else { 0o4 };
    let bits = if m.uid() == uid {
        mode >> 6
    } else if groups.contains(&m.gid()) {
        mode >> 3
    } else {
        mode
    };
    bits & need == need
}

/// Who the tool runs as: warden's own user rootless; as root, the owner
/// of the tree's top directory (a tree a user extracted is built with that
/// user's rights, never more; a tree root extracted, as root), in either
/// case without any capability.
fn builder(tree: &Path) -> (u32, Vec<u32>) {
    if warden_jail::host::is_root() {
        if let Ok(m) = std::fs::metadata(tree) {
            return (m.uid(), vec![m.gid()]);
        }
    }
    let mut groups: Vec<u32> = nix::unistd::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    groups.push(nix::unistd::getegid().as_raw());
    (nix::unistd::geteuid().as_raw(), groups)
}

/// Walk `tree` (never following a link) into its manifest, refusing an
/// entry the tool could not read.
pub fn manifest(tree: &Path, format: Format) -> Result<Manifest, RootImageError> {
    manifest_of(tree, None, format)
}

/// [`manifest`] of the tree `source` opened and checked (named `tree` in
/// messages), walked through `/proc/self/fd/N`: that very directory,
/// whatever `tree`'s path holds by now.
pub fn manifest_of(
    tree: &Path,
    source: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    format: Format,
) -> Result<Manifest, RootImageError> {
    use std::os::fd::AsRawFd;
    // `/.`: the walk's first entry is the directory the link leads to,
    // not the link in /proc itself.
    let walked = source
        .as_ref()
        .map(|fd| PathBuf::from(format!("/proc/self/fd/{}/.", fd.as_raw_fd())));
    let top = walked.as_deref().unwrap_or(tree);
    let shown = |p: &Path| tree.join(p.strip_prefix(top).unwrap_or(p));
    let (uid, groups) = builder(top);
    let mut h = Sha256::new();
    h.update(format.as_str().as_bytes());
    let (mut entries, mut bytes, mut blocks) = (0u64, 0u64, 0u64);
    let walk = walkdir::WalkDir::new(top)
        .follow_links(false)
        .sort_by_file_name();
    for e in walk {
        let e = e.map_err(|err| {
            let path = shown(err.path().unwrap_or(top));
            RootImageError::Walk {
                tree: tree.to_path_buf(),
                path,
                source: err.into(),
            }
        })?;
        let walk_err = |source| RootImageError::Walk {
            tree: tree.to_path_buf(),
            path: shown(e.path()),
            source,
        };
        let m = e.metadata().map_err(|err| walk_err(err.into()))?;
        let ft = m.file_type();
        if (ft.is_file() || ft.is_dir()) && !readable(&m, uid, &groups) {
            return Err(RootImageError::Unreadable {
                tree: tree.to_path_buf(),
                path: shown(e.path()),
            });
        }
        let rel = e.path().strip_prefix(top).unwrap_or(e.path());
        h.update(rel.as_os_str().as_bytes());
        h.update([0]);
        for n in [
            u64::from(m.mode()),
            u64::from(m.uid()),
            u64::from(m.gid()),
            m.size(),
            m.mtime() as u64,
            m.mtime_nsec() as u64,
            m.ctime() as u64,
            m.ctime_nsec() as u64,
            m.ino(),
            m.rdev(),
        ] {
            h.update(n.to_le_bytes());
        }
        if ft.is_symlink() {
            let target = std::fs::read_link(e.path()).map_err(walk_err)?;
            h.update(target.as_os_str().as_bytes());
            h.update([0]);
        }
        entries += 1;
        if ft.is_file() {
            bytes += m.size();
            blocks += m.size().div_ceil(4096);
        } else if ft.is_dir() || (ft.is_symlink() && m.size() > 59) {
            blocks += m.size().div_ceil(4096).max(1);
        }
    }
    let key: String = h
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Manifest {
        tree: tree.to_path_buf(),
        key,
        entries,
        bytes,
        blocks,
        source,
    })
}

/// The cached image's name for a manifest.
pub fn image_name(m: &Manifest, format: Format) -> String {
    format!("rootfs-{}.{}", m.key, format.as_str())
}

/// Whether a cache entry's name is a root image (for the sweep).
pub fn is_image_name(name: &str) -> bool {
    name.starts_with("rootfs-") && (name.ends_with(".ext4") || name.ends_with(".erofs"))
}

/// A half-written image's writer: `.rootfs-KEY.FORMAT.PID.N`.
pub fn half_image_writer(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(".rootfs-")?;
    let mut parts = rest.rsplitn(3, '.');
    let _n = parts.next()?;
    parts.next()?.parse().ok()
}

/// The image of `m` in `cache`: the cached one (marked used), else one
/// built now with `tool`. Returns the image and whether it was built.
pub fn image(m: &Manifest, tool: &Tool, cache: &Path) -> Result<(PathBuf, bool), RootImageError> {
    let path = cache.join(image_name(m, tool.format));
    if path.is_file() {
        mark_used(&path);
        return Ok((path, false));
    }
    std::fs::create_dir_all(cache).map_err(|source| RootImageError::Write {
        path: cache.to_path_buf(),
        source,
    })?;
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = cache.join(format!(
        ".{}.{}.{n}",
        image_name(m, tool.format),
        std::process::id()
    ));
    // Synced before its name is given: after a crash, a torn image under
    // the name of a good one would be booted as it.
    let result = build(m, tool, &tmp).and_then(|()| {
        warden_protocol::replace::persist(&tmp, &path).map_err(|source| RootImageError::Write {
            path: path.clone(),
            source,
        })
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    mark_used(&path);
    Ok((path, true))
}

/// In use now: the sweep of other processes keeps it.
fn mark_used(path: &Path) {
    let _ = std::fs::File::options()
        .append(true)
        .open(path)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
}

/// The size an ext4 image of `m` is made with: its blocks, an inode of
/// 256 bytes per entry, and room for the file system's own metadata.
fn ext4_size(m: &Manifest) -> u64 {
    let data = m.blocks * 4096 + (m.entries + 64) * 256;
    (data + data / 8 + (16 << 20)).div_ceil(4096) * 4096
}

/// Run the tool on `m`'s tree into `tmp`, in the VMM's jail, telling the
/// observer how far it got.
fn build(m: &Manifest, tool: &Tool, tmp: &Path) -> Result<(), RootImageError> {
    let start = Instant::now();
    let write_err = |source| RootImageError::Write {
        path: tmp.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(tmp).map_err(write_err)?;
    if tool.format == Format::Ext4 {
        file.set_len(ext4_size(m)).map_err(write_err)?;
    }
    let (uid, groups) = match &m.source {
        Some(fd) => {
            use std::os::fd::AsRawFd;
            builder(Path::new(&format!("/proc/self/fd/{}", fd.as_raw_fd())))
        }
        None => builder(&m.tree),
    };
    let gid = groups.first().copied().unwrap_or(uid);
    let root = warden_jail::host::is_root();
    if root {
        // The tool reopens it through `/proc/self/fd/N`, which checks the
        // file's own permissions.
        std::os::unix::fs::fchown(&file, Some(uid), Some(gid)).map_err(write_err)?;
    }
    tell(Progress::Started {
        tree: m.tree.clone(),
        entries: m.entries,
        bytes: m.bytes,
        format: tool.format,
    });
    // `/bin` and `/sbin` too: a tool may be a script whose interpreter
    // is named there (on merged-/usr hosts they are links into `/usr`).
    let mut readable: Vec<PathBuf> = [
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
        "/etc/ld.so.cache",
        "/etc/mke2fs.conf",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect();
    readable.push(tool.path.clone());
    // The tree checked is placed at its own path in the tool's root from
    // its descriptor (never its path followed again); unchecked, by path.
    let placed: Vec<warden_jail::vmm::Placed> = match &m.source {
        Some(fd) => vec![warden_jail::vmm::Placed {
            host: m.tree.clone(),
            source: fd.clone(),
            inside: m.tree.clone(),
            writable: false,
            view: None,
        }],
        None => {
            readable.push(m.tree.clone());
            Vec::new()
        }
    };
    // The tool's own root is built in an empty directory beside the image
    // (a mount point in its own mount namespace only), removed after it.
    let jail_root = JailRoot::make(tmp.with_file_name(format!(
        "{}.root",
        tmp.file_name().unwrap_or_default().to_string_lossy()
    )))
    .map_err(write_err)?;
    let access = warden_jail::vmm::VmmAccess {
        readable_dirs: Vec::new(),
        readable,
        writable: vec![tmp.to_path_buf()],
        writable_dirs: Vec::new(),
        devices: Vec::new(),
        placed,
        root: jail_root.0.clone(),
    };
    let ids = root.then_some((uid, gid));
    let jail = warden_jail::vmm::VmmJail::prepare(&access, None, ids, None).map_err(|source| {
        RootImageError::Jail {
            tool: tool.path.clone(),
            source,
        }
    })?;
    let mut cmd = std::process::Command::new(&tool.path);
    cmd.env_clear().env("LC_ALL", "C");
    // Handed as a descriptor: the cache's directories may be closed to the
    // tool's user.
    let file = std::os::fd::OwnedFd::from(file);
    let handed = PathBuf::from(format!(
        "/proc/self/fd/{}",
        warden_jail::vmnet::inherit(&mut cmd, &file)
    ));
    let tmp_arg = handed.as_path();
    match tool.format {
        Format::Ext4 => {
            let inodes = (m.entries + 64).to_string();
            cmd.args([
                "-q",
                "-F",
                "-b",
                "4096",
                "-m",
                "0",
                "-N",
                &inodes,
                "-L",
                "warden-root",
                "-O",
                "^has_journal,^resize_inode",
                "-d",
            ])
            .arg(&m.tree)
            .arg(tmp_arg);
        }
        Format::Erofs => {
            cmd.arg(tmp_arg).arg(&m.tree);
        }
    }
    jail.apply(&mut cmd);
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|source| RootImageError::Tool {
            tool: tool.path.clone(),
            tree: m.tree.clone(),
            status: "not started".into(),
            output: source.to_string(),
        })?;
    drop((jail, file));
    let out = wait_telling(child, tmp, m.blocks * 4096).map_err(write_err)?;
    drop(jail_root);
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if output.is_empty() {
            output = String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
        return Err(RootImageError::Tool {
            tool: tool.path.clone(),
            tree: m.tree.clone(),
            status: out.status.to_string(),
            output,
        });
    }
    let f = std::fs::File::open(tmp).map_err(write_err)?;
    f.sync_all().map_err(write_err)?;
    let size = f.metadata().map(|md| md.len()).unwrap_or(0);
    tell(Progress::Finished {
        image: tmp.with_file_name(image_name(m, tool.format)),
        size,
        took: start.elapsed(),
    });
    Ok(())
}

/// An empty directory of warden's own for a jailed tool's root, removed
/// on drop.
struct JailRoot(PathBuf);

impl JailRoot {
    fn make(path: PathBuf) -> std::io::Result<JailRoot> {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            // Left by a builder that died: empty, as the jail needs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        Ok(JailRoot(path))
    }
}

impl Drop for JailRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Wait for the tool, telling the observer (about twice a second) how
/// much of the image holds data: its allocated bytes against the tree's.
fn wait_telling(
    mut child: std::process::Child,
    tmp: &Path,
    total: u64,
) -> std::io::Result<std::process::Output> {
    use std::io::Read;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(64 << 10).read_to_end(&mut b);
        }
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(64 << 10).read_to_end(&mut b);
        }
        b
    });
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let done = std::fs::metadata(tmp)
            .map(|m| m.blocks() * 512)
            .unwrap_or(0)
            .min(total);
        tell(Progress::Building { done, total });
        std::thread::sleep(Duration::from_millis(500));
    };
    Ok(std::process::Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_changed_tree_gets_another_key_and_an_unchanged_one_the_same() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/a"), "one").unwrap();
        let a = manifest(dir.path(), Format::Ext4).unwrap();
        let b = manifest(dir.path(), Format::Ext4).unwrap();
        assert_eq!(a.key, b.key);
        assert_ne!(a.key, manifest(dir.path(), Format::Erofs).unwrap().key);
        // Same size, same modification time: the change time still moves.
        let mtime = std::fs::metadata(dir.path().join("etc/a"))
            .unwrap()
            .modified()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.path().join("etc/a"), "two").unwrap();
        std::fs::File::options()
            .append(true)
            .open(dir.path().join("etc/a"))
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_ne!(a.key, manifest(dir.path(), Format::Ext4).unwrap().key);
    }

    /// A `--rootfs` tree whose parent is swapped for a link to a root-only
    /// tree after the tree was checked (the review's 28b swap, on the
    /// tree the image is built from): the walk and the build read the
    /// tree checked, never the victim's. The build needs an image tool
    /// and root (its jail); without them only the walk is shown.
    #[test]
    fn a_tree_swapped_for_a_link_after_its_check_is_neither_walked_nor_built_from() {
        let dir = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(dir.path()).unwrap();
        let tree = top.join("p/sub/tree");
        std::fs::create_dir_all(tree.join("etc")).unwrap();
        std::fs::write(tree.join("etc/os-release"), "NAME=own").unwrap();
        let victim = top.join("victim");
        std::fs::create_dir_all(victim.join("tree/etc")).unwrap();
        std::fs::write(victim.join("tree/etc/shadow"), "VICTIM").unwrap();
        let (_, opened) = crate::shares::check_dir("`filesystem.rootfs`", &tree).unwrap();
        let fd = std::sync::Arc::new(opened.fd);
        let own = manifest_of(&tree, Some(fd.clone()), Format::Ext4).unwrap();
        assert_eq!(own.key, manifest(&tree, Format::Ext4).unwrap().key);
        let tool = find_tool(None).filter(|_| warden_jail::host::is_root());
        if let Some(tool) = &tool {
            // Unswapped, the image is built (the control).
            image(&own, tool, &top.join("cache-own")).unwrap();
        }
        std::os::unix::fs::symlink(&victim, top.join("p/sub.lnk")).unwrap();
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            top.join("p/sub"),
            rustix::fs::CWD,
            top.join("p/sub.lnk"),
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .unwrap();
        // By path, the tree is the victim's now (what was walked before).
        assert!(tree.join("etc/shadow").exists());
        let walked = manifest_of(&tree, Some(fd.clone()), Format::Ext4).unwrap();
        assert_eq!(walked.key, own.key, "the walk read another tree");
        assert_eq!(walked.entries, 3);
        let Some(tool) = tool else {
            eprintln!("skipped the build: no image tool, or not root");
            return;
        };
        let built = image(&walked, &tool, &top.join("cache"));
        eprintln!("the build through the link: {built:?}");
        assert!(
            built.is_err(),
            "an image was built through the link: {built:?}"
        );
    }

    #[test]
    fn a_half_image_names_its_writer() {
        assert_eq!(half_image_writer(".rootfs-abc.ext4.1234.0"), Some(1234));
        assert_eq!(half_image_writer("rootfs-abc.ext4"), None);
        assert!(is_image_name("rootfs-abc.erofs"));
        assert!(!is_image_name(".rootfs-abc.erofs.1.0"));
    }
}

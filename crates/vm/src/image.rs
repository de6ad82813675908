//! The guest's initial root: an initramfs (a `newc` cpio archive) built by
//! warden itself and cached by its content hash in the VM directory. It
//! holds the guest init (`warden-guest-init`, started as `/init`) with the
//! shared libraries it was linked against, the kernel modules the guest
//! needs for its devices (virtio-mmio, the serial port, 9p, virtio-fs,
//! virtio-net; for a `--rootfs` image, the block device and its file
//! system), and a few
//! files of the host's `/etc` that programs need to start (the user
//! database, the dynamic linker's cache, `alternatives` links, the system's
//! trust roots), never its secrets (no `shadow`, no keys).
//!
//! The host's `/usr` and the workspace are not in it: the guest mounts
//! them over 9p (see `docs/architecture.md`).

use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

pub use crate::contents::MODULES;
use crate::contents::{ETC_DIRS, ETC_FILES, ETC_LINK_DIRS};

/// Why the initramfs could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot read {path} for the guest's initramfs")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the guest init {0} is missing: it is built with warden and installed beside it (the README's first command does both; docs/install.md), or set WARDEN_GUEST_INIT")]
    NoInit(PathBuf),
    #[error("cannot write the guest's initramfs {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One entry of the archive.
enum Entry {
    Dir,
    File { data: Vec<u8>, mode: u32 },
    Link(String),
}

/// The archive's entries, in order, by path (without the leading `/`).
#[derive(Default)]
struct Archive {
    entries: Vec<(String, Entry)>,
}

impl Archive {
    fn has(&self, path: &str) -> bool {
        self.entries.iter().any(|(p, _)| p == path)
    }

    fn dir(&mut self, path: &str) {
        let mut sofar = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if !sofar.is_empty() {
                sofar.push('/');
            }
            sofar.push_str(part);
            if !self.has(&sofar) {
                self.entries.push((sofar.clone(), Entry::Dir));
            }
        }
    }

    fn parent(&mut self, path: &str) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
    }

    fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) {
        self.parent(path);
        if !self.has(path) {
            self.entries
                .push((path.to_string(), Entry::File { data, mode }));
        }
    }

    fn link(&mut self, path: &str, target: &str) {
        self.parent(path);
        if !self.has(path) {
            self.entries
                .push((path.to_string(), Entry::Link(target.to_string())));
        }
    }

    /// A host file at the same path, following the links on the way (each
    /// link of the path recorded as a link, so the dynamic linker finds
    /// `/lib64/ld-linux-x86-64.so.2` through `/lib64 -> usr/lib64`).
    fn host_file(&mut self, path: &Path) -> Result<(), ImageError> {
        let mut at = PathBuf::from("/");
        let parts: Vec<_> = path.components().skip(1).collect();
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let rel = at
                .strip_prefix("/")
                .unwrap_or(&at)
                .to_string_lossy()
                .to_string();
            let meta = std::fs::symlink_metadata(&at).map_err(|source| ImageError::Read {
                path: at.clone(),
                source,
            })?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&at).map_err(|source| ImageError::Read {
                    path: at.clone(),
                    source,
                })?;
                self.link(&rel, &target.to_string_lossy());
                let resolved = at.parent().unwrap_or(Path::new("/")).join(&target);
                let rest: PathBuf = parts[i + 1..].iter().collect();
                return self.host_file(&normalize(&resolved.join(rest)));
            }
            if i + 1 == parts.len() {
                let data = std::fs::read(&at).map_err(|source| ImageError::Read {
                    path: at.clone(),
                    source,
                })?;
                self.file(&rel, data, 0o755);
            }
        }
        Ok(())
    }

    /// The `newc` archive.
    fn write(&self) -> Result<Vec<u8>, std::io::Error> {
        let mut out = Vec::new();
        for (ino, (path, entry)) in self.entries.iter().enumerate() {
            let builder = cpio::newc::Builder::new(path)
                .ino(ino as u32 + 1)
                .nlink(1)
                .uid(0)
                .gid(0);
            let (builder, data) = match entry {
                Entry::Dir => (builder.mode(0o040755).nlink(2), Vec::new()),
                Entry::File { data, mode } => (builder.mode(0o100000 | mode), data.clone()),
                Entry::Link(target) => (builder.mode(0o120777), target.as_bytes().to_vec()),
            };
            let mut w = builder.write(&mut out, data.len() as u32);
            w.write_all(&data)?;
            w.finish()?;
        }
        cpio::newc::trailer(&mut out)?;
        Ok(out)
    }
}

/// `a/b/../c` as `a/c`, lexically (for link targets inside the host's
/// system directories only).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The shared libraries this process is linked against, as `/proc/self/maps`
/// lists them: the guest init is built by the same toolchain against a
/// subset of them (the C library, the math library, libgcc's unwinder and
/// the dynamic linker).
/// Copy `/etc/REL`'s files and links into the archive, and `depth - 1`
/// levels of its subdirectories; whatever cannot be read is left out.
fn copy_etc_dir(a: &mut Archive, rel: &str, depth: u32) {
    if depth == 0 {
        return;
    }
    let dir = Path::new("/etc").join(rel);
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let inside = format!("{rel}/{name}");
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_symlink() {
            if let Ok(target) = std::fs::read_link(e.path()) {
                a.link(&format!("etc/{inside}"), &target.to_string_lossy());
            }
        } else if kind.is_dir() {
            copy_etc_dir(a, &inside, depth - 1);
        } else if kind.is_file() {
            if let Ok(data) = std::fs::read(e.path()) {
                a.file(&format!("etc/{inside}"), data, 0o644);
            }
        }
    }
}

fn linked_libraries() -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut libs: Vec<PathBuf> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains(".so"))
        .map(PathBuf::from)
        .collect();
    libs.sort();
    libs.dedup();
    libs
}

/// The dynamic linker an ELF64 executable names (its `PT_INTERP`).
fn interpreter(elf: &[u8]) -> Option<String> {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    };
    if elf.get(..5) != Some(b"\x7fELF\x02") {
        return None;
    }
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    (0..phnum).find_map(|i| {
        let ph = phoff + i * phentsize;
        if u32_at(ph)? != 3 {
            return None;
        }
        let off = u64_at(ph + 8)? as usize;
        let size = u64_at(ph + 32)? as usize;
        let raw = elf.get(off..off + size)?;
        let s = std::str::from_utf8(raw).ok()?.trim_end_matches('\0');
        Some(s.to_string())
    })
}

/// The guest init binary: `$WARDEN_GUEST_INIT`, else `warden-guest-init`
/// beside the running executable.
pub fn guest_init_path() -> PathBuf {
    if let Some(p) = &crate::Settings::current().guest_init {
        return p.clone();
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("warden-guest-init")))
        .unwrap_or_else(|| PathBuf::from("warden-guest-init"))
}

/// Build the initramfs for `kernel` (in memory), and return the path of
/// its cached copy (`<cache>/initramfs-SHA256.cpio`, written once). With
/// `root`, it also holds the modules the guest needs to mount a root
/// image of that format from its block device (see [`crate::rootimage`]);
/// a guest without one does not carry them.
pub fn initramfs(
    kernel: &crate::GuestKernel,
    cache: &Path,
    root: Option<crate::rootimage::Format>,
) -> Result<PathBuf, ImageError> {
    let init = guest_init_path();
    // Named by its inputs' identities first (`crate::initmemo`): the same
    // image as last time is found without reading or hashing it.
    let head = read_head(&init).map_err(|_| ImageError::NoInit(init.clone()))?;
    let libs = linked_libraries();
    let memo = crate::initmemo::key(&init, interpreter(&head).as_deref(), kernel, root, &libs);
    if let Some(found) = crate::initmemo::lookup(cache, &memo) {
        mark_used(&found);
        // Found without building, the cache is still swept at each start:
        // half images of dead builders and images unused for `UNUSED`
        // would otherwise stay for ever on a host that builds no more.
        sweep(cache, &found, UNUSED);
        return Ok(found);
    }
    let init_bytes = std::fs::read(&init).map_err(|_| ImageError::NoInit(init.clone()))?;
    let mut a = Archive::default();
    for d in [
        "dev",
        "proc",
        "sys",
        "tmp",
        "root",
        "usr",
        "workspace",
        "etc",
        "run",
    ] {
        a.dir(d);
    }
    // The merged-/usr links, as the host has them.
    for top in ["bin", "sbin", "lib", "lib64", "lib32", "libx32"] {
        let p = Path::new("/").join(top);
        if let Ok(target) = std::fs::read_link(&p) {
            a.link(top, &target.to_string_lossy());
        }
    }
    let interpreter = interpreter(&init_bytes);
    a.file("init", init_bytes, 0o755);
    if let Some(interp) = interpreter {
        a.host_file(Path::new(&interp))?;
    }
    for lib in &libs {
        a.host_file(lib)?;
    }
    let block = root.into_iter().flat_map(|f| f.modules());
    for (i, m) in MODULES.iter().copied().chain(block).enumerate() {
        let path = kernel.modules.join(m);
        if let Ok(data) = std::fs::read(&path) {
            a.file(&format!("modules/{i:02}.ko"), data, 0o644);
        }
    }
    for f in ETC_FILES {
        let p = Path::new("/etc").join(f);
        if let Ok(data) = std::fs::read(&p) {
            a.file(&format!("etc/{f}"), data, 0o644);
        }
    }
    for d in ETC_LINK_DIRS {
        let dir = Path::new("/etc").join(d);
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if let Ok(target) = std::fs::read_link(e.path()) {
                let name = e.file_name().to_string_lossy().to_string();
                a.link(&format!("etc/{d}/{name}"), &target.to_string_lossy());
            }
        }
    }
    for d in ETC_DIRS {
        copy_etc_dir(&mut a, d, 2);
    }
    let bytes = a.write().map_err(|source| ImageError::Write {
        path: cache.to_path_buf(),
        source,
    })?;
    let hash = Sha256::digest(&bytes);
    let hex: String = hash.iter().take(16).map(|b| format!("{b:02x}")).collect();
    let path = cache.join(format!("initramfs-{hex}.cpio"));
    if !path.exists() {
        let err = |source| ImageError::Write {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(cache).map_err(err)?;
        // Whole or not at all: a torn image under its hash's name would
        // boot (and fail) every later sandbox. Readable by all: a VMM
        // jailed as the workspace's owner reads it.
        warden_protocol::replace_file(&path, &bytes, 0o644).map_err(err)?;
    }
    mark_used(&path);
    sweep(cache, &path, UNUSED);
    crate::initmemo::remember(cache, &memo, &path);
    Ok(path)
}

/// In use now: the sweep of other processes keeps it.
fn mark_used(image: &Path) {
    let _ = std::fs::File::options()
        .append(true)
        .open(image)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
}

/// The first 64 KiB of the guest init: its ELF headers, which name its
/// dynamic linker.
fn read_head(init: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::with_capacity(64 << 10);
    std::fs::File::open(init)?
        .take(64 << 10)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// How long an initramfs no sandbox has started with stays in the cache.
/// Each boot marks its own as used (its modification time); the VMM reads
/// it once, when it starts.
pub const UNUSED: std::time::Duration = std::time::Duration::from_secs(3600);

/// Remove the initramfs and root images of the cache that no sandbox
/// started with for `unused` (other builds of the guest init leave
/// theirs, each changed `--rootfs` tree its own), and the half-written
/// ones of processes that died, keeping `current`: without it the cache
/// grows by one image (tens of MB) per build for ever.
pub fn sweep(cache: &Path, current: &Path, unused: std::time::Duration) {
    let now = std::time::SystemTime::now();
    for e in std::fs::read_dir(cache).into_iter().flatten().flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if path == current {
            continue;
        }
        let stale = if let Some(pid) = warden_protocol::replace::writer_of(&name) {
            // An image being written whole: its writer is gone.
            !Path::new(&format!("/proc/{pid}")).exists()
        } else if let Some(rest) = name.strip_prefix(".initramfs-") {
            // `.initramfs-HASH.PID`, as earlier versions wrote: its writer
            // is gone.
            rest.rsplit_once('.')
                .and_then(|(_, pid)| pid.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        } else if let Some(pid) = crate::rootimage::half_image_writer(&name) {
            // `.rootfs-KEY.FORMAT.PID.N`: a root image its builder left.
            !Path::new(&format!("/proc/{pid}")).exists()
        } else if (name.starts_with("initramfs-") && name.ends_with(".cpio"))
            || crate::rootimage::is_image_name(&name)
        {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age > unused)
        } else {
            false
        };
        if stale {
            let _ = std::fs::remove_file(&path);
        }
    }
    bound_root_images(cache, max_root_images(), now);
}

/// How much disk the cached root images may take together:
/// `WARDEN_VM_CACHE_MAX` bytes, else 4 GiB.
fn max_root_images() -> u64 {
    crate::Settings::current().cache_max
}

/// Keep the root images' disk use (their allocated blocks: ext4 images
/// are sparse) under `max`, removing the least recently used first; an
/// image used in the last minute (a boot starting now) stays whatever
/// its size.
pub fn bound_root_images(cache: &Path, max: u64, now: std::time::SystemTime) {
    use std::os::unix::fs::MetadataExt;
    let mut images: Vec<(std::time::SystemTime, u64, PathBuf)> = std::fs::read_dir(cache)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| crate::rootimage::is_image_name(&e.file_name().to_string_lossy()))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, m.blocks() * 512, e.path()))
        })
        .collect();
    let mut total: u64 = images.iter().map(|(_, size, _)| size).sum();
    images.sort();
    for (used, size, path) in images {
        if total <= max {
            break;
        }
        let recent = now
            .duration_since(used)
            .map_or(true, |age| age < std::time::Duration::from_secs(60));
        if !recent && std::fs::remove_file(&path).is_ok() {
            total -= size;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn root_images_past_the_bound_go_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now();
        let make = |name: &str, age: u64| {
            let p = dir.path().join(name);
            std::fs::write(&p, vec![1u8; 64 << 10]).unwrap();
            std::fs::File::options()
                .append(true)
                .open(&p)
                .unwrap()
                .set_modified(now - std::time::Duration::from_secs(age))
                .unwrap();
            p
        };
        let oldest = make("rootfs-a.ext4", 600);
        let older = make("rootfs-b.erofs", 300);
        let fresh = make("rootfs-c.ext4", 1);
        let other = make("initramfs-d.cpio", 900);
        bound_root_images(dir.path(), 100 << 10, now);
        assert!(!oldest.exists());
        assert!(!older.exists());
        assert!(fresh.exists(), "an image in use now was removed");
        assert!(other.exists(), "not a root image");
    }

    #[test]
    fn a_half_written_image_of_a_dead_writer_is_swept_and_a_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let current = dir.path().join("initramfs-c.cpio");
        std::fs::write(&current, "in use").unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let left = dir.path().join(format!(".initramfs-a.cpio.{dead}.0.tmp"));
        let writing = dir
            .path()
            .join(format!(".initramfs-b.cpio.{}.0.tmp", std::process::id()));
        std::fs::write(&left, "half").unwrap();
        std::fs::write(&writing, "half").unwrap();
        sweep(dir.path(), &current, UNUSED);
        assert!(!left.exists(), "a dead writer's file was kept");
        assert!(writing.exists(), "a live writer's file was removed");
        assert!(current.exists());
    }
}

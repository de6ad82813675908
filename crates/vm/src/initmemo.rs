//! What spares a VM's start the build of its initramfs: the identity of
//! everything the image is made of, and the cached image it made.
//!
//! [`crate::image::initramfs`] reads the guest init (tens of MB), the
//! libraries, modules and files of `/etc` it holds, writes them into an
//! archive in memory and hashes the whole to name its cached copy: about
//! 100 to 200 ms of each start of a debug build here, the same image every
//! time. The memo names that image by the identity of its inputs instead
//! (each file's path, device, inode, size, mode and times, as a
//! template's key names the VMM and the kernel: a file replaced or
//! changed in place is a new identity; the warden binary itself, whose
//! code lays the archive out, is one of them), read with `stat` alone. A
//! memo whose image is gone is built again; the memo is a cache, and its
//! loss makes a start slower, never different.

use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Bumped when what goes into an initramfs changes meaning.
const FORMAT: &str = "warden-initramfs-memo-1";

fn id(h: &mut Sha256, path: &Path) {
    h.update(path.as_os_str().as_encoded_bytes());
    h.update([0]);
    for m in [std::fs::symlink_metadata(path), std::fs::metadata(path)] {
        match m {
            Ok(m) => {
                for v in [
                    m.dev(),
                    m.ino(),
                    m.size(),
                    u64::from(m.mode()),
                    m.mtime() as u64,
                    m.mtime_nsec() as u64,
                    m.ctime() as u64,
                    m.ctime_nsec() as u64,
                ] {
                    h.update(v.to_le_bytes());
                }
            }
            Err(_) => h.update(b"-"),
        }
    }
}

/// Every entry of `/etc/REL` down to `depth` levels, as
/// `image::copy_etc_dir` copies them.
fn etc_dir(h: &mut Sha256, rel: &Path, depth: u32) {
    if depth == 0 {
        return;
    }
    let dir = Path::new("/etc").join(rel);
    id(h, &dir);
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        id(h, &e.path());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            etc_dir(h, &rel.join(e.file_name()), depth - 1);
        }
    }
}

/// The identity of the initramfs `image::initramfs` would build for
/// these inputs: `interpreter` is the guest init's dynamic linker.
pub(crate) fn key(
    init: &Path,
    interpreter: Option<&str>,
    kernel: &crate::GuestKernel,
    root: Option<crate::rootimage::Format>,
    libs: &[PathBuf],
) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    if let Ok(exe) = std::env::current_exe() {
        id(&mut h, &exe);
    }
    id(&mut h, init);
    if let Some(i) = interpreter {
        id(&mut h, Path::new(i));
    }
    for lib in libs {
        id(&mut h, lib);
    }
    for top in ["bin", "sbin", "lib", "lib64", "lib32", "libx32"] {
        id(&mut h, &Path::new("/").join(top));
    }
    h.update(root.map_or("none", |f| f.as_str()).as_bytes());
    let block = root.into_iter().flat_map(|f| f.modules());
    for m in crate::contents::MODULES.iter().copied().chain(block) {
        id(&mut h, &kernel.modules.join(m));
    }
    for f in crate::contents::ETC_FILES {
        id(&mut h, &Path::new("/etc").join(f));
    }
    for d in crate::contents::ETC_LINK_DIRS
        .iter()
        .chain(crate::contents::ETC_DIRS)
    {
        etc_dir(&mut h, Path::new(d), 2);
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn memo_path(cache: &Path, key: &str) -> PathBuf {
    cache.join(format!("memo-{key}"))
}

/// The cached image the memo `key` names, while it is there.
pub(crate) fn lookup(cache: &Path, key: &str) -> Option<PathBuf> {
    let name = std::fs::read_to_string(memo_path(cache, key)).ok()?;
    let name = name.trim();
    let valid = name.starts_with("initramfs-")
        && name.ends_with(".cpio")
        && !name.contains('/')
        && !name.contains("..");
    let image = cache.join(name);
    (valid && image.is_file()).then_some(image)
}

/// Remember that `key` built `image`; memos of images gone are removed.
pub(crate) fn remember(cache: &Path, key: &str, image: &Path) {
    let Some(name) = image.file_name() else {
        return;
    };
    let _ = warden_protocol::replace_file(&memo_path(cache, key), name.as_encoded_bytes(), 0o600);
    for e in std::fs::read_dir(cache).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if let Some(k) = n.strip_prefix("memo-") {
            if k != key && lookup(cache, k).is_none() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_changed_input_is_a_new_key_and_a_memo_of_a_gone_image_is_no_hit() {
        let d = tempfile::tempdir().unwrap();
        let init = d.path().join("warden-guest-init");
        std::fs::write(&init, "one").unwrap();
        let kernel = crate::GuestKernel {
            image: d.path().join("vmlinuz"),
            modules: d.path().join("modules"),
            release: "6.1".into(),
            source: crate::kernel::KernelSource::Given,
        };
        let k = key(&init, None, &kernel, None, &[]);
        assert_eq!(key(&init, None, &kernel, None, &[]), k);
        assert_ne!(
            key(
                &init,
                None,
                &kernel,
                Some(crate::rootimage::Format::Ext4),
                &[]
            ),
            k
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&init, "two").unwrap();
        let k2 = key(&init, None, &kernel, None, &[]);
        assert_ne!(k2, k);
        let image = d.path().join("initramfs-ab.cpio");
        std::fs::write(&image, "cpio").unwrap();
        remember(d.path(), &k2, &image);
        assert_eq!(lookup(d.path(), &k2), Some(image.clone()));
        std::fs::remove_file(&image).unwrap();
        assert_eq!(lookup(d.path(), &k2), None);
    }
}

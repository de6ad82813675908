//! The copy that writes a sandbox's kept state back (its layer, a named
//! sandbox's home) and restores it, on trees as a sandbox can make them:
//! 5,000 nested directories (each made beneath the last one's
//! descriptor, far past PATH_MAX) come through whole, with what overlayfs
//! and a home need kept on the way (a hard link, a symbolic link, a hole,
//! a mode that shuts the owner out).

use rustix::fs::{mkdirat, openat, Mode, OFlags};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Far past PATH_MAX (two bytes a level); deeper chains cost the host's
/// file system minutes to remove, not the copy (see the CLI's home test
/// of 30,000).
const LEVELS: usize = 5_000;

fn scratch(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("warden-deep-layer-{tag}-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// `levels` nested directories `d` below `top`; the deepest one's descriptor.
fn chain(top: &Path, levels: usize) -> OwnedFd {
    let mut fd = openat(rustix::fs::CWD, top, DIR, Mode::empty()).unwrap();
    for _ in 0..levels {
        mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, "d", DIR, Mode::empty()).unwrap();
    }
    fd
}

/// How deep the chain of `d` below `top` goes, and the descriptor there.
fn descend(top: &Path) -> (usize, OwnedFd) {
    let mut fd = openat(rustix::fs::CWD, top, DIR, Mode::empty()).unwrap();
    let mut n = 0;
    while let Ok(next) = openat(&fd, "d", DIR | OFlags::NOFOLLOW, Mode::empty()) {
        fd = next;
        n += 1;
    }
    (n, fd)
}

fn read_at(dir: &OwnedFd, name: &str) -> Vec<u8> {
    let fd = openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
    std::io::Read::bytes(std::fs::File::from(fd))
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_layer_deeper_than_path_max_is_saved_and_restored_whole() {
    let dir = scratch("save");
    let live = dir.join("live");
    let saved = dir.join("saved");
    std::fs::create_dir(&live).unwrap();
    std::fs::create_dir(&saved).unwrap();
    let deep = chain(&live, LEVELS);
    let f = openat(
        &deep,
        "bottom",
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o640),
    )
    .unwrap();
    rustix::io::write(&f, b"the deepest file").unwrap();
    drop(f);
    // Beside the chain: a hard link pair, a symbolic link, a sparse file
    // and a file its owner may not read.
    std::fs::write(live.join("note"), b"note").unwrap();
    std::fs::hard_link(live.join("note"), live.join("note-link")).unwrap();
    std::os::unix::fs::symlink("note", live.join("note-sym")).unwrap();
    let sparse = std::fs::File::create(live.join("sparse")).unwrap();
    sparse.set_len(1 << 30).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"abc", 500_000_000).unwrap();
    drop(sparse);
    std::fs::write(live.join("shut"), b"secret of its own").unwrap();
    std::fs::set_permissions(
        live.join("shut"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();

    warden_jail::layer::save(&live, &saved).unwrap();
    let restored = dir.join("restored");
    warden_jail::layer::copy_layer(&saved, &restored, false).unwrap();

    for tree in [&saved, &restored] {
        let (levels, bottom) = descend(tree);
        assert_eq!(levels, LEVELS, "{}", tree.display());
        assert_eq!(read_at(&bottom, "bottom"), b"the deepest file");
        let note = std::fs::metadata(tree.join("note")).unwrap();
        let link = std::fs::metadata(tree.join("note-link")).unwrap();
        assert_eq!((note.ino(), note.nlink()), (link.ino(), 2));
        assert_eq!(
            std::fs::read_link(tree.join("note-sym")).unwrap(),
            Path::new("note")
        );
        let sparse = std::fs::metadata(tree.join("sparse")).unwrap();
        assert_eq!(sparse.len(), 1 << 30);
        assert!(sparse.blocks() * 512 < 1 << 20, "the holes were filled");
        let shut = std::fs::symlink_metadata(tree.join("shut")).unwrap();
        assert_eq!(shut.mode() & 0o7777, 0);
    }
    warden_workspace::fsutil::remove_tree(&dir).unwrap();
    assert!(!dir.exists());
}

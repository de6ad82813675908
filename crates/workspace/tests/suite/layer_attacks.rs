//! Attacks on the host-side code that reads and changes a sandbox's layer:
//! the sandbox leaves symbolic links in its layer, or swaps a directory for
//! a link to a host directory (`renameat2(RENAME_EXCHANGE)`) while the host
//! walks the layer. Plain directories stand in for the layer (the walk does
//! not care whether an overlay is mounted over it); a planted "host" tree
//! outside the layer holds a marker that must never be read, and victims
//! that must never be removed or written.

use crate::common::TempDir;
use rustix::fs::{renameat_with, RenameFlags, CWD};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use warden_workspace::{fsutil, CreateOptions, DiffOptions, Sandbox, Store};

const MARKER: &str = "HOST-MARKER-only-on-the-host";

struct Ws {
    _state: TempDir,
    _real: TempDir,
    host: TempDir,
    _store: Store,
    sb: Sandbox,
}

/// A sandbox over an empty workspace, and a "host" directory outside the
/// layer holding `root/marker.txt` (0600), a large file, and victims.
fn ws() -> Ws {
    let state = TempDir::new("layer-state");
    let real = TempDir::new("layer-real");
    let host = TempDir::new("layer-host");
    fs::create_dir_all(host.join("root")).unwrap();
    let marker = host.join("root/marker.txt");
    fs::write(&marker, format!("{MARKER}\n")).unwrap();
    fs::set_permissions(&marker, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(host.join("root/big.bin"), vec![7u8; 4 << 20]).unwrap();
    fs::create_dir_all(host.join("victim/tree/deeper")).unwrap();
    fs::write(host.join("victim/important.txt"), "keep me\n").unwrap();
    fs::write(host.join("victim/tree/deeper/file"), "keep me too\n").unwrap();
    let store = Store::open(state.path()).unwrap();
    let sb = store.create("t", &CreateOptions::new(real.path())).unwrap();
    Ws {
        _state: state,
        _real: real,
        host,
        _store: store,
        sb,
    }
}

/// Swap `a` and `b` of `dir` until `stop`, at most `rounds` times.
fn swapper(dir: PathBuf, stop: Arc<AtomicBool>, rounds: usize) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let (a, b) = (dir.join("d"), dir.join("l"));
        let mut n = 0;
        while n < rounds && !stop.load(Ordering::Relaxed) {
            if renameat_with(CWD, &a, CWD, &b, RenameFlags::EXCHANGE).is_err() {
                break;
            }
            n += 1;
        }
        n
    })
}

#[test]
fn a_directory_swapped_for_a_link_during_the_review_never_reads_or_lists_the_host() {
    let w = ws();
    let upper = w.sb.upper();
    // The layer: d/root/marker.txt (a decoy of the host file's name and
    // size class), and l, a link to the host directory; d and l swap.
    fs::create_dir_all(upper.join("d/root")).unwrap();
    fs::write(upper.join("d/root/marker.txt"), "decoy\n").unwrap();
    fs::write(upper.join("d/root/big.bin"), "small\n").unwrap();
    std::os::unix::fs::symlink(w.host.path(), upper.join("l")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = swapper(upper.clone(), stop.clone(), 2_000_000);
    let host = w.host.path().to_string_lossy().into_owned();
    let mut reviews = 0;
    for _ in 0..300 {
        let size = fsutil::tree_size(&upper);
        assert!(
            size < 1 << 20,
            "the layer's size counted host files: {size} bytes"
        );
        match w.sb.diff(&DiffOptions::default()) {
            Ok(changes) => {
                reviews += 1;
                let shown = serde_json::to_string(&changes).unwrap();
                assert!(
                    !shown.contains(MARKER),
                    "the review returned the host's file: {shown}"
                );
                assert!(
                    !shown.contains("important.txt") && !shown.contains("victim"),
                    "the review listed the host's directory: {shown}"
                );
            }
            Err(e) => {
                let e = e.to_string();
                assert!(
                    !e.contains(&host) && !e.contains("/proc/"),
                    "an error names a host path: {e}"
                );
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let n = swaps.join().unwrap();
    assert!(n > 0, "the swap never ran");
    assert!(reviews > 0, "no review completed during the race");
}

#[test]
fn a_device_of_the_host_swapped_in_is_never_read() {
    let w = ws();
    let upper = w.sb.upper();
    // d/zero is a small file; l leads to the host's /dev, so a path walk
    // after the swap would read /dev/zero without end.
    fs::create_dir_all(upper.join("d")).unwrap();
    fs::write(upper.join("d/zero"), "five\n").unwrap();
    std::os::unix::fs::symlink("/dev", upper.join("l")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = swapper(upper.clone(), stop.clone(), 2_000_000);
    for _ in 0..300 {
        if let Ok(changes) = w.sb.diff(&DiffOptions::default()) {
            for c in changes {
                if let Some(warden_workspace::Content::Text { patch, .. }) = &c.content {
                    let len = patch.as_deref().map_or(0, str::len);
                    assert!(len < 4096, "a patch of {len} bytes from a 5-byte file");
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swaps.join().unwrap();
}

/// A stopped sandbox's layer with a real change `x` and links to the
/// host's victims: `vd -> victim`.
fn planted() -> Ws {
    let w = ws();
    let upper = w.sb.upper();
    fs::write(upper.join("x"), "a real change\n").unwrap();
    std::os::unix::fs::symlink(w.host.join("victim"), upper.join("vd")).unwrap();
    w
}

fn victims_intact(host: &Path) {
    assert_eq!(
        fs::read_to_string(host.join("victim/important.txt"))
            .ok()
            .as_deref(),
        Some("keep me\n"),
        "the victim file outside the layer was removed or written"
    );
    assert_eq!(
        fs::read_to_string(host.join("victim/tree/deeper/file"))
            .ok()
            .as_deref(),
        Some("keep me too\n"),
        "the victim tree outside the layer was removed or written"
    );
}

#[test]
fn discarding_a_path_through_a_planted_link_is_refused_and_touches_nothing_outside() {
    let w = planted();
    let lock = w.sb.lock().unwrap();
    for path in ["vd/important.txt", "vd/tree", "vd/tree/deeper/file"] {
        let err = lock
            .discard(&[PathBuf::from(path)])
            .expect_err("a discard through a link of the layer must be refused")
            .to_string();
        assert!(
            err.contains("symbolic link") && err.contains("vd"),
            "the refusal does not say why: {err}"
        );
        assert!(!err.contains(&*w.host.path().to_string_lossy()), "{err}");
        victims_intact(w.host.path());
    }
    assert!(
        w.sb.upper().join("x").exists(),
        "a refused discard changed the layer"
    );
}

#[test]
fn discarding_a_real_change_and_a_path_through_a_link_touches_only_the_real_change() {
    let w = planted();
    let lock = w.sb.lock().unwrap();
    lock.discard(&[PathBuf::from("x"), PathBuf::from("vd/important.txt")])
        .expect("the real change is discarded");
    assert!(
        !w.sb.upper().join("x").exists(),
        "the real change is still there"
    );
    victims_intact(w.host.path());
    // The link itself is a change of its own, and discarding it removes
    // the link, not what it leads to.
    lock.discard(&[PathBuf::from("vd")])
        .expect("discard the link");
    assert!(fs::symlink_metadata(w.sb.upper().join("vd")).is_err());
    victims_intact(w.host.path());
}

#[test]
fn discard_never_writes_through_a_link_below_an_opaque_directory() {
    let w = planted();
    let upper = w.sb.upper();
    // The real workspace holds o/l/owned.txt; the layer made o opaque and
    // put a link o/l -> the victim directory in it.
    let real = w.sb.meta().workspace.clone();
    fs::create_dir_all(real.join("o/l")).unwrap();
    fs::write(real.join("o/l/owned.txt"), "ATTACKER-CONTENT\n").unwrap();
    fs::create_dir_all(upper.join("o")).unwrap();
    let marked = ["trusted.overlay.opaque", "user.overlay.opaque"]
        .iter()
        .any(|a| {
            rustix::fs::lsetxattr(upper.join("o"), *a, b"y", rustix::fs::XattrFlags::empty())
                .is_ok()
        });
    if !marked {
        crate::common::skip("this file system takes no overlay marks");
        return;
    }
    std::os::unix::fs::symlink(w.host.join("victim"), upper.join("o/l")).unwrap();
    let lock = w.sb.lock().unwrap();
    let err = lock.discard(&[PathBuf::from("o/l/owned.txt")]);
    assert!(err.is_err(), "a discard through o/l was not refused");
    assert!(
        !w.host.join("victim/owned.txt").exists(),
        "the discard wrote through the link"
    );
    victims_intact(w.host.path());
}

#[test]
fn a_snapshot_and_its_size_copy_links_as_links_and_never_what_they_lead_to() {
    let w = planted();
    let lock = w.sb.lock().unwrap();
    let info = lock.snapshot(Some("s")).expect("snapshot");
    assert!(
        info.bytes < 1 << 20,
        "the snapshot counted host files: {}",
        info.bytes
    );
    let copied = w.sb.dir().join("snapshots/s/upper/vd");
    assert!(fs::symlink_metadata(&copied)
        .unwrap()
        .file_type()
        .is_symlink());
    lock.restore("s").expect("restore");
    victims_intact(w.host.path());
}

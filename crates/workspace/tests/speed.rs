//! The diff reads the upper layer only: its cost follows the number of
//! changed files, not the size of the workspace.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{session, skip, Mount, TempDir};
use std::time::Instant;
use warden_workspace::{CreateOptions, DiffOptions, Layout, Store};

#[test]
fn a_thousand_changes_in_a_hundred_thousand_files_diff_in_milliseconds() {
    let real = TempDir::new("big");
    // 100 directories of 1,000 files.
    for d in 0..100 {
        let dir = real.join(format!("d{d:03}"));
        std::fs::create_dir(&dir).expect("mkdir");
        for f in 0..1000 {
            std::fs::write(dir.join(format!("f{f:04}.txt")), format!("{d} {f}\n")).expect("write");
        }
    }
    let state = TempDir::new("state");
    let store = Store::open(state.path()).expect("store");
    let sb = store
        .create(
            "big",
            &CreateOptions {
                workspace: real.path().to_path_buf(),
                profile: None,
                layout: Layout::Overlay,
            },
        )
        .expect("create");
    // Ten files in each of the 100 directories.
    let script = "for d in d*; do for f in 0 1 2 3 4 5 6 7 8 9; do echo changed >> $d/f000$f.txt; done; done";
    if let Err(why) = session(&sb, Mount::UserNs, script, None) {
        skip(&why);
        return;
    }
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let changes = sb.diff(&DiffOptions::default()).expect("diff");
        best = best.min(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(changes.len(), 1000);
    }
    eprintln!("diff of 1,000 changes in 100,000 files (with text diffs): {best:.1} ms");
    // Generous for a debug build on a shared machine; the walk itself is
    // tens of milliseconds.
    assert!(best < 1000.0, "{best} ms");
}

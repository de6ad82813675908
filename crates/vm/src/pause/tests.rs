#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use std::os::unix::fs::MetadataExt;

/// A VM's state as a pause to disk leaves it in `dir` for `cfg`: the
/// devices' stream and its record, the guest's RAM file (of its size,
/// sparse) with its digest, and the pause's record.
fn paused_state(cfg: &Config, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let stream = b"the devices".to_vec();
    std::fs::write(dir.join(STATE), &stream).unwrap();
    let record = Record {
        key: crate::template::key(cfg),
        size: stream.len() as u64,
        sha256: String::new(),
    };
    std::fs::write(
        snapshot::record_path(&dir.join(STATE)),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();
    let base = dir.join(crate::ram::BASE);
    std::fs::File::create(&base)
        .unwrap()
        .set_len(cfg.memory_mib << 20)
        .unwrap();
    let paused = PausedVm {
        ready: Ready {
            kernel: "6.1".into(),
            layers: vec![],
        },
        record,
        ram: true,
        ram_sha256: Some(crate::ram::digest(&base).unwrap()),
        shared: Shared::of(cfg),
    };
    std::fs::write(dir.join(ABOUT), serde_json::to_vec(&paused).unwrap()).unwrap();
}

/// Each file in `dir` by name, with its inode, size and time.
fn files(dir: &Path) -> Vec<(String, u64, u64, i64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (
                name,
                m.ino(),
                m.len(),
                m.mtime_nsec() + m.mtime() * 1_000_000_000,
            )
        })
        .collect();
    v.sort();
    v
}

/// A VM paused to disk whose `--rw` bind was moved away and another
/// directory made at its path (or the bind merely moved away): its resume
/// and a copy's restore are refused with `share_changed` before either
/// reads or takes anything of the saved state, so the state's files are
/// the very ones the pause left (its memory file not moved out and back)
/// and no run directory was made. A new supervisor, which checks the
/// path anew and so finds the new directory's identity, is refused the
/// same: the pause kept what its shares were. Before, the restore took
/// the memory file into a new run directory and found the share only
/// when it launched the VMM, and a new supervisor served the new
/// directory.
#[test]
fn a_restore_refused_for_a_changed_share_leaves_the_saved_state_as_the_pause_left_it() {
    let dir = tempfile::tempdir().unwrap();
    let top = std::fs::canonicalize(dir.path()).unwrap();
    let bind = top.join("share");
    std::fs::create_dir(&bind).unwrap();
    let cfg = crate::machine::config_sharing(&bind, &top.join("run"));
    let saved = top.join("vm-paused");
    paused_state(&cfg, &saved);
    let before = files(&saved);
    std::fs::rename(&bind, top.join("aside")).unwrap();
    for (swap, why) in [(false, "is no longer there"), (true, "another file")] {
        if swap {
            std::fs::create_dir(&bind).unwrap();
        }
        // The path checked anew finds what is there now.
        let anew = swap.then(|| crate::machine::config_sharing(&bind, &cfg.run_dir));
        type Try<'a> = Box<dyn Fn() -> Result<Machine, PauseError> + 'a>;
        let t = Duration::from_secs(1);
        let mut tries: Vec<(&str, Try)> = vec![
            ("resume", Box::new(|| restore(&cfg, &saved, t))),
            ("copy", Box::new(|| copy_of(&cfg, &saved, t, "copy", true))),
        ];
        if let Some(anew) = &anew {
            tries.push((
                "a new supervisor's resume",
                Box::new(|| restore(anew, &saved, t)),
            ));
        }
        for (what, r) in tries.iter().map(|(w, f)| (*w, f())) {
            let Err(e) = r else {
                panic!("{what}: restored over a changed share")
            };
            assert!(
                matches!(&e, PauseError::Share(s) if s.reason() == Some(crate::shares::SHARE_CHANGED)),
                "{what}: {e}"
            );
            assert!(e.to_string().contains(why), "{what}: {e}");
            assert!(!is_useless(&e), "{what}: its state would be removed");
            assert_eq!(files(&saved), before, "{what}: the saved state changed");
            assert!(!cfg.run_dir.exists(), "{what}: a run directory was made");
        }
    }
    assert!(is_paused(&saved));
}

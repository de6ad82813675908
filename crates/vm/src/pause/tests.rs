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

/// Takes from the calling thread alone (capabilities are a thread's)
/// what lets root past a directory's mode (`CAP_DAC_OVERRIDE`,
/// `CAP_DAC_READ_SEARCH`), so that a test run as root meets a directory
/// of mode 000 as any other user does; without them it changes nothing.
/// Raw system calls: no safe wrapper in this crate's dependencies.
#[allow(unsafe_code)]
fn without_dac_override_on_this_thread() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // _LINUX_CAPABILITY_VERSION_3: two `Data`, for capabilities 0-63.
    let mut header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget reads the header and writes two `Data` (version 3)
    // into `data`, which holds two; both outlive the call.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "capget: {}", std::io::Error::last_os_error());
    // CAP_DAC_OVERRIDE is 1, CAP_DAC_READ_SEARCH 2 (linux/capability.h).
    let dac = (1 << 1) | (1 << 2);
    data[0].effective &= !dac;
    // SAFETY: capset reads the header and two `Data`, both alive; the raw
    // system call changes the calling thread's capabilities only.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_capset,
            &mut header as *mut Header,
            data.as_ptr(),
        )
    };
    assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
}

/// A VM paused to disk whose share, still there and the same directory,
/// can no longer be opened by its supervisor (its parent made mode 000:
/// `EACCES`; too many open files would be the same): its resume and a
/// copy's restore are refused with a reason code, `share_unreadable`,
/// before either reads or takes anything of the saved state, so the
/// supervisor that paused it keeps it paused (`ControlError::ShareRefused`)
/// and a door words it at the bind. Before, the error had no code, and
/// that supervisor ended the sandbox (outside review 34).
#[test]
fn a_restore_refused_for_a_share_it_cannot_open_leaves_the_pause_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let top = std::fs::canonicalize(dir.path()).unwrap();
    let locked = top.join("locked");
    let bind = locked.join("share");
    std::fs::create_dir_all(&bind).unwrap();
    let cfg = crate::machine::config_sharing(&bind, &top.join("run"));
    let saved = top.join("vm-paused");
    paused_state(&cfg, &saved);
    let before = files(&saved);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let t = Duration::from_secs(1);
    let outcomes = std::thread::scope(|s| {
        s.spawn(|| {
            without_dac_override_on_this_thread();
            [
                ("resume", restore(&cfg, &saved, t)),
                ("copy", copy_of(&cfg, &saved, t, "copy", true)),
            ]
            .map(|(what, r)| {
                let Err(e) = r else {
                    panic!("{what}: restored over a share it cannot open")
                };
                (what, e.to_string(), is_useless(&e), refused_share(e))
            })
        })
        .join()
        .unwrap()
    });
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (what, said, useless, share) in outcomes {
        let share = share.unwrap_or_else(|| panic!("{what}: refused without a code: {said}"));
        assert_eq!(
            share.reason(),
            Some(crate::shares::SHARE_UNREADABLE),
            "{what}: {said}"
        );
        assert!(share.refused().is_some(), "{what}: {said}");
        assert!(!useless, "{what}: its state would be removed");
        assert_eq!(files(&saved), before, "{what}: the saved state changed");
        assert!(!cfg.run_dir.exists(), "{what}: a run directory was made");
    }
    assert!(is_paused(&saved));
}

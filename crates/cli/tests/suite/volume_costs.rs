//! What a writable volume's merge adds to the host is counted as the host
//! pays for it, through the real binary: empty files, directories and long
//! names (free in the sandbox's tmpfs, an inode, a block and a name each on
//! the host) never grow the volume past `--disk`, the tmpfs holding them
//! runs out of inodes inside, what is left out is said by an event, and a
//! tree deeper than any stack is merged without the supervisor dying.

use crate::common::*;
use std::path::Path;
use warden_workspace::fsutil;

fn volume_arg(host: &Path, inside: &str) -> String {
    format!("{}:{inside}", host.display())
}

#[test]
fn empty_files_directories_and_long_names_never_grow_a_volume_past_its_disk_limit() {
    const LIMIT: u64 = 1 << 20;
    let state = TempDir::new("volume-cost");
    let vol = TempDir::new("volume-cost-dir");
    let log = state.path().join("audit.jsonl");
    // The review's reproduction: 40,000 empty files of 240-character
    // names, then 200 directories, under a 1 MiB disk limit.
    let script = r#"mkdir /mnt/v/f; cd /mnt/v/f; p=$(printf "%0240d" 0); i=0
while [ $i -lt 40 ]; do touch $(seq -f "$p%g" $((i*1000)) $((i*1000+999))) 2>/dev/null; i=$((i+1)); done
ls | wc -l >&2
i=0; while [ $i -lt 200 ]; do mkdir /mnt/v/d$i 2>/dev/null; i=$((i+1)); done
df -i /mnt/v >&2; true"#;
    let before = fsutil::tree_size(vol.path());
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--disk",
            "1M",
            "--audit-log",
            log.to_str().unwrap(),
            "--volume",
            &volume_arg(vol.path(), "/mnt/v"),
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let after = fsutil::tree_size(vol.path());
    let entries = walkdir_count(vol.path());
    assert!(
        after <= before + LIMIT,
        "the volume grew from {before} to {after} bytes ({entries} entries) under a 1 MiB limit\n{}",
        stderr(&out)
    );
    // What the host pays at the least: a block per entry.
    assert!(
        entries * fsutil::ENTRY_BYTES <= LIMIT,
        "{entries} entries merged under a 1 MiB limit"
    );
    let records = events(&log);
    let left = records
        .iter()
        .find(|r| r["event"] == "cache_left_out")
        .unwrap_or_else(|| panic!("no event says what was left out: {}", stderr(&out)));
    assert!(left["files"].as_u64().unwrap_or(0) > 0, "{left}");
}

/// Entries below `p`, links not followed.
fn walkdir_count(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            let below = match e.file_type() {
                Ok(t) if t.is_dir() => walkdir_count(&e.path()),
                _ => 0,
            };
            1 + below
        })
        .sum()
}

#[test]
fn a_volume_tree_three_thousand_deep_is_merged_and_the_supervisor_survives() {
    const LEVELS: usize = 3000;
    let state = TempDir::new("volume-deep");
    let vol = TempDir::new("volume-deep-dir");
    // Relative steps: no path inside ever passes PATH_MAX.
    let script = format!(
        "import os\nos.chdir('/mnt/v')\nfor _ in range({LEVELS}):\n    os.mkdir('a')\n    os.chdir('a')\nopen('bottom', 'w').write('down here')\nprint('made')\n"
    );
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--disk",
            "64M",
            "--volume",
            &volume_arg(vol.path(), "/mnt/v"),
            "--",
            "python3",
            "-c",
            &script,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("made"), "{}", stderr(&out));
    // Read back 1,000 levels at a time from the last one's descriptor:
    // the whole path is past PATH_MAX.
    use std::os::fd::AsRawFd;
    let mut dir = std::fs::File::open(vol.path()).unwrap();
    for hop in 0..LEVELS / 1000 {
        let rel = vec!["a"; 1000].join("/");
        dir = std::fs::File::open(format!("/proc/self/fd/{}/{rel}", dir.as_raw_fd()))
            .unwrap_or_else(|e| panic!("levels {}.. were not merged: {e}", hop * 1000));
    }
    let got = std::fs::read(format!("/proc/self/fd/{}/bottom", dir.as_raw_fd())).unwrap();
    assert_eq!(got, b"down here");
}

//! A token is never told the host's free disk space, not even by where
//! its creates start to be refused: the daemon counts the free space in
//! whole GiB for a token, so bisecting the disk budget at which a create
//! gets 507 `no_disk` learns a whole number of GiB, and the owner's disk
//! use moving within one is not seen. Through the real daemon, its state
//! on a tmpfs of a known size.

use crate::common::daemon::{call_on, curl_available, quota_token, Daemon};
use crate::common::*;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

/// A tmpfs mounted over a directory, unmounted when dropped.
struct Mounted(std::path::PathBuf);

impl Mounted {
    fn tmpfs(dir: &Path, size: &str) -> Option<Mounted> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| Mounted(dir.to_path_buf()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The largest disk budget, in MiB, a token's create (not started) is
/// given, bisected between 1 MiB and 100 GB as an attacker would; each
/// sandbox made is removed at once. The number of creates is returned
/// too.
fn bisect(d: &Daemon, token: &str) -> (u64, u32) {
    let (mut lo, mut hi, mut tries) = (1u64, 100_000u64, 0);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let body = format!(
            r#"{{"name":"q2","start":false,"spec":{{"resources":{{"disk":"{mid}M","memory":"8G"}}}}}}"#
        );
        let (s, b) = call_on(d, true, "POST", "/v1/sandboxes", Some(&body), Some(token));
        tries += 1;
        if s == 201 {
            lo = mid;
            let (s, b) = call_on(d, true, "DELETE", "/v1/sandboxes/q2", None, Some(token));
            assert!(s < 300, "{s} {b}");
        } else {
            assert!(!b.contains(" free"), "the free space is told: {b}");
            hi = mid;
        }
    }
    (lo, tries)
}

fn free_mib(dir: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64) / MIB
}

#[test]
fn bisecting_a_tokens_disk_budget_learns_the_hosts_free_space_only_in_whole_gib() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !is_root() {
        return skip("needs root to mount a tmpfs of a known size for the daemon's state");
    }
    let state = TempDir::new("daemon-free-space");
    let Some(_mounted) = Mounted::tmpfs(state.path(), "1536M") else {
        return skip("cannot mount a tmpfs here");
    };
    let d = Daemon::start(state.path(), true);
    let token = quota_token(state.path(), "t", "4");
    let before = free_mib(state.path());
    let (first, tries) = bisect(&d, &token);
    // The owner's disk use grows by 200 MiB, within the same GiB.
    let filler = state.path().join("owners-file");
    std::fs::write(&filler, vec![7u8; 200 * MIB as usize]).unwrap();
    let after = free_mib(state.path());
    let (second, _) = bisect(&d, &token);
    eprintln!(
        "free {before} MiB: largest budget given {first} MiB ({tries} creates); \
         free {after} MiB: {second} MiB"
    );
    // Before, the bound followed the free space to the MiB (free less
    // the kept output a budget allows), and moved by the 200 MiB.
    assert!(
        first <= 1024,
        "a token was given {first} MiB with {before} MiB free: the bound is not whole GiB"
    );
    assert!(
        before - first >= 400,
        "the bound ({first} MiB) is within 400 MiB of the free space ({before} MiB)"
    );
    assert_eq!(
        first, second,
        "the owner's 200 MiB ({before} -> {after} MiB free) moved the bound a token sees"
    );
    let _ = std::fs::remove_file(&filler);
    drop(d);
}

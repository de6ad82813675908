//! Pause to disk: the VMM ends (its memory freed) and a new one, which
//! could be another process's after a daemon restart, resumes the guest
//! with its processes where they were; a VM QEMU cannot save is refused
//! and goes on running.

use crate::common::{config, run, spawn, with_busybox_root, BOOT};
use std::time::{Duration, Instant};
use warden_vm::pause;
use warden_vm::wire::Ended;

fn count(m: &warden_vm::machine::Machine, id: u64) -> u64 {
    let (out, end) = run(m, id, "cat /tmp/n");
    assert_eq!(end, Ended::Exited(0), "{out}");
    out.trim().parse().unwrap_or(0)
}

#[test]
#[ignore]
fn a_vm_paused_to_disk_frees_its_vmm_and_resumes_with_its_counter_running_on() {
    let tree = tempfile::tempdir().unwrap();
    let Some(cfg) = config("pause-disk") else {
        return;
    };
    let Some(cfg) = with_busybox_root(cfg, tree.path()) else {
        return;
    };
    let (mut m, _) = warden_vm::template::start(&cfg, BOOT).unwrap();
    spawn(
        &m,
        1,
        "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done",
    );
    std::thread::sleep(Duration::from_secs(2));
    let before = count(&m, 2);
    assert!(before > 0, "the counter never counted");
    let vmm = m.pid();
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("paused");
    let t = Instant::now();
    let paused = pause::pause_to_disk(&mut m, &cfg, &dir).unwrap();
    let save = t.elapsed();
    // The VMM (its keeper, and QEMU with it) is gone: the guest's memory
    // is on disk only.
    assert!(
        !std::path::Path::new(&format!("/proc/{vmm}")).exists()
            || std::fs::read_to_string(format!("/proc/{vmm}/stat"))
                .is_ok_and(|s| s.contains(") Z")),
        "the VMM still runs after the pause"
    );
    drop(m);
    assert!(pause::is_paused(&dir));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o700,
        "the paused state's directory is not owner-only"
    );
    let t = Instant::now();
    let m = pause::restore(&cfg, &dir, BOOT).unwrap();
    let resume = t.elapsed();
    eprintln!(
        "paused to disk in {save:?} ({} bytes), resumed in {resume:?}",
        paused.record.size
    );
    let after = count(&m, 3);
    assert!(
        after >= before,
        "the counter went back: {before} then {after}"
    );
    std::thread::sleep(Duration::from_secs(2));
    let later = count(&m, 4);
    assert!(
        later > after,
        "the counter stopped after the resume: {after} then {later}"
    );
    assert!(
        !pause::is_paused(&dir),
        "the paused state was kept after the resume"
    );
}

#[test]
#[ignore]
fn a_vm_with_mounted_shares_is_refused_a_pause_to_disk_and_runs_on() {
    let Some(cfg) = config("pause-refused") else {
        return;
    };
    let (mut m, _) = warden_vm::template::start(&cfg, BOOT).unwrap();
    let state = tempfile::tempdir().unwrap();
    let err = pause::pause_to_disk(&mut m, &cfg, &state.path().join("p"))
        .expect_err("a VM with its /usr over 9p was paused to disk");
    assert!(err.to_string().contains("mounted"), "{err}");
    assert!(!m.exited(), "the refused VM ended");
    let (out, end) = run(&m, 1, "echo still here");
    assert_eq!((out.as_str(), end), ("still here\n", Ended::Exited(0)));
}

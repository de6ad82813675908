//! Pause and resume of a VM sandbox through the real command: paused in
//! place, its VMM stops the guest's vCPUs (a counter in a background
//! process stands still and the VMM uses next to no CPU) and resume lets
//! the counter go on from its value; a pause to disk of a VM with a
//! mounted share is refused, saying why, and the VM runs on untouched.
//!
//! Each test boots a VM (seconds under emulation): `#[ignore]`d, run with
//! `cargo test -p warden-cli --test all -- --ignored suite::vm`.

use crate::common::vm::*;
use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// A counter in the guest's `/tmp`, ten steps a second.
const COUNTER: &str = "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done";

/// The counter's value, read by a command in the sandbox (0 before its
/// first step has written it: a busy emulated guest may take a while).
fn count(state: &Path, name: &str) -> u64 {
    let o = vm_warden(
        state,
        &[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            "cat /tmp/n 2>/dev/null || echo 0",
        ],
        None,
    );
    ok(&o).trim().parse().unwrap_or(0)
}

/// The VMM of the sandbox `name` (QEMU names the shared layer in its
/// command line): its PIDs.
fn vmm_pids(state: &Path, name: &str) -> Vec<i32> {
    let layer = sandbox_dir(state, name).join("upper");
    pids_with_marker(layer.to_str().unwrap())
}

/// CPU time (user and system, in clock ticks) of the processes `pids`.
fn cpu_ticks(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|s| {
            let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}

/// A running VM sandbox `name` with the counter started in it.
fn counting(state: &Path, name: &str) -> Option<()> {
    guest_release()?;
    ok(&vm_warden(
        state,
        &["create", "--isolation", "vm", name],
        None,
    ));
    ok(&vm_warden(state, &["start", name], None));
    ok(&vm_warden(
        state,
        &["exec", "-d", name, "--", "sh", "-c", COUNTER],
        None,
    ));
    wait_until("the counter to count", Duration::from_secs(60), || {
        count(state, name) > 0
    });
    Some(())
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_paused_in_place_stops_its_counter_and_its_cpu_and_resume_goes_on_from_its_value() {
    let state = TempDir::new("vm-pause");
    let _stop = VmStopper(state.path(), "box");
    if counting(state.path(), "box").is_none() {
        return;
    }
    let vmm = vmm_pids(state.path(), "box");
    assert!(!vmm.is_empty(), "no VMM runs for the sandbox");
    let before = count(state.path(), "box");
    ok(&vm_warden(state.path(), &["pause", "box"], None));
    let paused_at = Instant::now();
    // Refused while paused, saying how to go on.
    let o = vm_warden(state.path(), &["exec", "box", "--", "true"], None);
    assert_ne!(code(&o), 0, "an exec ran in a paused VM");
    assert!(stderr(&o).contains("warden resume box"), "{}", stderr(&o));
    let ls = ok(&vm_warden(state.path(), &["ls"], None));
    assert!(ls.contains("paused"), "{ls}");
    let cpu = cpu_ticks(&vmm);
    std::thread::sleep(Duration::from_secs(5));
    let used = cpu_ticks(&vmm) - cpu;
    // Running, the emulated guest's counter keeps a vCPU busy: a second of
    // CPU is 100 ticks. Stopped, the VMM only waits.
    assert!(used < 50, "the paused VMM used {used} ticks of CPU in 5 s");
    ok(&vm_warden(state.path(), &["resume", "box"], None));
    let paused_for = paused_at.elapsed();
    let after = count(state.path(), "box");
    assert!(
        after >= before,
        "the counter went back: {before} then {after}"
    );
    // Running all along, it would have counted ten a second.
    assert!(
        after - before < 10 * paused_for.as_secs() / 2,
        "the counter ran while paused for {paused_for:?}: {before} then {after}"
    );
    wait_until(
        "the counter to go on after the resume",
        Duration::from_secs(30),
        || count(state.path(), "box") > after,
    );
    assert_eq!(vmm_pids(state.path(), "box"), vmm, "the VMM was replaced");
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_with_a_mounted_share_is_refused_a_pause_to_disk_and_runs_on_untouched() {
    let state = TempDir::new("vm-pause-disk");
    let _stop = VmStopper(state.path(), "shared");
    if counting(state.path(), "shared").is_none() {
        return;
    }
    let vmm = vmm_pids(state.path(), "shared");
    let o = vm_warden(state.path(), &["pause", "--to-disk", "shared"], None);
    assert_ne!(code(&o), 0, "a VM with its workspace over 9p was saved");
    let said = stderr(&o);
    assert!(said.contains("cannot be paused to disk"), "{said}");
    // QEMU's own reason: the share mounted in the guest.
    assert!(said.contains("mounted"), "{said}");
    let ls = ok(&vm_warden(state.path(), &["ls"], None));
    assert!(!ls.contains("paused"), "{ls}");
    let n = count(state.path(), "shared");
    wait_until("the counter to go on", Duration::from_secs(30), || {
        count(state.path(), "shared") > n
    });
    assert_eq!(
        vmm_pids(state.path(), "shared"),
        vmm,
        "the VMM was replaced"
    );
    // Paused in place, it still can be.
    ok(&vm_warden(state.path(), &["pause", "shared"], None));
    ok(&vm_warden(state.path(), &["resume", "shared"], None));
}

#[test]
fn the_apis_pause_to_disk_is_refused_for_a_process_sandbox_which_runs_on_and_a_bad_body_changes_nothing(
) {
    use crate::common::daemon::*;
    if !curl_available() {
        skip("curl is not installed");
        return;
    }
    let state = TempDir::new("pause-disk-api");
    let s = state.path();
    let d = Daemon::start(s, false);
    let (st, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"p"}"#), None);
    assert_eq!(st, 201, "{b}");
    let _stop = VmStopper(s, "p");
    let path = "/v1/sandboxes/p/pause";
    let (st, b) = call(&d, "POST", path, Some(r#"{"to_disk":true}"#), None);
    assert_eq!(st, 409, "{b}");
    assert_eq!(json(&b)["code"], "unsupported", "{b}");
    assert!(b.contains("to disk"), "{b}");
    let (st, b) = call(&d, "POST", path, Some(r#"{"to_dsk":true}"#), None);
    assert_eq!(st, 400, "{b}");
    let (st, b) = call(&d, "GET", "/v1/sandboxes/p", None, None);
    assert_eq!(st, 200, "{b}");
    assert_ne!(json(&b)["state"], "paused", "{b}");
    ok(&warden(s, &["exec", "p", "--", "true"]));
    // No body, or an empty one: paused in place, as before.
    let (st, b) = call(&d, "POST", path, None, None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(json(&b)["state"], "paused", "{b}");
}

/// The resident memory (kB) of the processes `pids`.
fn rss_kb(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_string();
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum()
}

/// A `--rootfs` tree of busybox with the programs the test runs by name.
fn busybox_tree() -> Option<TempDir> {
    guest_busybox_tree(&["sh", "sleep", "cat", "pidof", "date", "ls"])
}

/// A process whose working directory is the workspace holds it: the pause
/// to disk is refused, naming it, and the VM runs on untouched; the
/// holder is ended after. Returns the VMM's PIDs.
fn refused_while_a_process_holds_the_workspace(s: &Path) -> Vec<i32> {
    // A process whose working directory is the workspace holds it: the
    // pause is refused, naming it, and the VM runs on untouched.
    // Its PID is kept: `pidof sleep` also names the counter's own
    // `sleep 0.1`, which is often gone by the time a `kill` of it runs.
    ok(&vm_warden(
        s,
        &[
            "exec",
            "-d",
            "ws",
            "--",
            "sh",
            "-c",
            "echo $$ > /tmp/holder; exec sleep 1000",
        ],
        None,
    ));
    wait_until("the holder to start", Duration::from_secs(30), || {
        let o = vm_warden(
            s,
            &[
                "exec",
                "ws",
                "--",
                "sh",
                "-c",
                "[ \"$(cat /proc/$(cat /tmp/holder)/comm)\" = sleep ]",
            ],
            None,
        );
        code(&o) == 0
    });
    let vmm = vmm_pids(s, "ws");
    let o = vm_warden(s, &["pause", "--to-disk", "ws"], None);
    assert_ne!(
        code(&o),
        0,
        "a VM whose workspace a process holds was saved"
    );
    let said = stderr(&o);
    assert!(said.contains("cannot be paused to disk"), "{said}");
    assert!(
        said.contains("(sleep) has its working directory in /workspace"),
        "{said}"
    );
    let n = count(s, "ws");
    wait_until(
        "the counter to go on after the refusal",
        Duration::from_secs(30),
        || count(s, "ws") > n,
    );
    assert_eq!(
        vmm_pids(s, "ws"),
        vmm,
        "the VMM was replaced by a refused pause"
    );
    ok(&vm_warden(
        s,
        &[
            "exec",
            "ws",
            "--",
            "sh",
            "-c",
            "echo still > /workspace/still.txt",
        ],
        None,
    ));
    ok(&vm_warden(
        s,
        &["exec", "ws", "--", "sh", "-c", "kill $(cat /tmp/holder)"],
        None,
    ));
    vmm
}

/// The keeper (the init's fork that keeps root's capabilities in the
/// guest) is closed to the sandbox: its descriptors cannot be listed; and
/// the launcher's program cannot be rewritten.
fn the_keeper_and_the_launcher_are_closed_to_the_sandbox(s: &Path) {
    // The keeper (the init's fork that keeps root's capabilities in the
    // guest) is closed to the sandbox: its descriptors cannot be listed;
    // and the launcher's program cannot be rewritten.
    let probe = "for p in $(pidof init); do [ $p = 1 ] && continue; echo seen; \
                 ls /proc/$p/fd >/dev/null 2>&1 && echo opened $p; done; \
                 echo x 2>/dev/null > /run/warden-guest/init && echo rewrote; true";
    let out = ok(&vm_warden(
        s,
        &["exec", "ws", "--", "sh", "-c", probe],
        None,
    ));
    assert!(out.contains("seen"), "no keeper runs in the guest: {out}");
    assert!(
        !out.contains("opened") && !out.contains("rewrote"),
        "a sandbox process reached the keeper or the launcher: {out}"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_with_a_workspace_is_refused_a_pause_to_disk_while_a_process_holds_it_and_once_free_is_paused_to_disk_and_resumed_with_its_counter_files_and_clock(
) {
    let state = TempDir::new("vm-pause-ws");
    let _stop = VmStopper(state.path(), "ws");
    if guest_release().is_none() {
        return;
    }
    let Some(tree) = busybox_tree() else {
        return;
    };
    let s = state.path();
    ok(&vm_warden(
        s,
        &[
            "create",
            "--isolation",
            "vm",
            "--rootfs",
            tree.path().to_str().unwrap(),
            "ws",
        ],
        None,
    ));
    ok(&vm_warden(s, &["start", "ws"], None));
    ok(&vm_warden(
        s,
        &[
            "exec",
            "ws",
            "--",
            "sh",
            "-c",
            "echo before > /workspace/before.txt",
        ],
        None,
    ));
    // The counter leaves the workspace (every exec starts in it).
    let counter = format!("cd /; {COUNTER}");
    ok(&vm_warden(
        s,
        &["exec", "-d", "ws", "--", "sh", "-c", &counter],
        None,
    ));
    wait_until("the counter to count", Duration::from_secs(60), || {
        count(s, "ws") > 0
    });

    let vmm = refused_while_a_process_holds_the_workspace(s);

    // Free: paused to disk, its VMM (and the guest's RAM with it) gone.
    let rss = rss_kb(&vmm);
    let before = count(s, "ws");
    let t = Instant::now();
    ok(&vm_warden(s, &["pause", "--to-disk", "ws"], None));
    let paused_in = t.elapsed();
    assert!(
        vmm_pids(s, "ws").is_empty(),
        "a VMM still runs while paused to disk"
    );
    let ls = ok(&vm_warden(s, &["ls"], None));
    assert!(ls.contains("paused"), "{ls}");
    std::thread::sleep(Duration::from_secs(3));
    let t = Instant::now();
    ok(&vm_warden(s, &["resume", "ws"], None));
    let resumed_in = t.elapsed();
    eprintln!(
        "VMM RSS {rss} kB before, none while paused; pause to disk {paused_in:?}, resume {resumed_in:?} (end to end, with the shares released and taken back)"
    );
    let after = count(s, "ws");
    assert!(
        after >= before,
        "the counter went back: {before} then {after}"
    );
    wait_until(
        "the counter to go on after the resume",
        Duration::from_secs(30),
        || count(s, "ws") > after,
    );
    // The files written before are there, and the workspace takes new ones.
    let o = ok(&vm_warden(
        s,
        &[
            "exec",
            "ws",
            "--",
            "cat",
            "/workspace/before.txt",
            "/workspace/still.txt",
        ],
        None,
    ));
    assert_eq!(o, "before\nstill\n");
    ok(&vm_warden(
        s,
        &[
            "exec",
            "ws",
            "--",
            "sh",
            "-c",
            "echo after > /workspace/after.txt && cat /workspace/after.txt",
        ],
        None,
    ));
    the_keeper_and_the_launcher_are_closed_to_the_sandbox(s);
    // The guest's clock was stepped to the host's, not left behind by the
    // time it spent on disk.
    let guest: i64 = ok(&vm_warden(s, &["exec", "ws", "--", "date", "+%s"], None))
        .trim()
        .parse()
        .unwrap();
    let host = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (host - guest).abs() < 3,
        "the guest's clock is {} s off",
        host - guest
    );
}

/// Pause `name` to disk and SIGKILL its supervisor (what a host reboot
/// does to it): the saved state stays. Returns the supervisor's PID.
fn paused_to_disk_and_orphaned(s: &Path, name: &str) -> i32 {
    let supervisor = supervisor_pid(s, name);
    ok(&vm_warden(s, &["pause", "--to-disk", name], None));
    // SAFETY: a plain signal to the test's own sandbox's supervisor.
    unsafe { libc::kill(supervisor, libc::SIGKILL) };
    wait_until("the supervisor to be gone", Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{supervisor}")).exists()
            || std::fs::read_to_string(format!("/proc/{supervisor}/stat")).is_ok_and(|st| {
                st.rsplit_once(')')
                    .is_some_and(|r| r.1.trim_start().starts_with('Z'))
            })
    });
    assert!(
        sandbox_dir(s, name).join("vm-paused/vm.vmstate").is_file(),
        "the saved state did not outlive its supervisor"
    );
    supervisor
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_paused_to_disk_whose_supervisor_was_killed_is_resumed_by_a_new_one_with_its_counter_going_on_and_a_truncated_state_is_refused_and_removed(
) {
    let state = TempDir::new("vm-pause-orphan");
    let _stop = VmStopper(state.path(), "rb");
    if guest_release().is_none() {
        return;
    }
    let Some(tree) = busybox_tree() else {
        return;
    };
    let s = state.path();
    let rootfs = tree.path().to_str().unwrap();
    ok(&vm_warden(
        s,
        &["create", "--isolation", "vm", "--rootfs", rootfs, "rb"],
        None,
    ));
    ok(&vm_warden(s, &["start", "rb"], None));
    let counter = format!("cd /; {COUNTER}");
    ok(&vm_warden(
        s,
        &["exec", "-d", "rb", "--", "sh", "-c", &counter],
        None,
    ));
    wait_until("the counter to count", Duration::from_secs(60), || {
        let o = vm_warden(s, &["exec", "rb", "--", "cat", "/tmp/n"], None);
        code(&o) == 0
    });
    let before = count(s, "rb");
    // The layer is held in a tmpfs of the disk budget while the VM runs:
    // a pause to disk writes it back with the memory, so a write made
    // before it outlives the supervisor killed afterwards.
    ok(&vm_warden(
        s,
        &[
            "exec",
            "rb",
            "--",
            "sh",
            "-c",
            "echo kept > /workspace/before-pause",
        ],
        None,
    ));
    let old = paused_to_disk_and_orphaned(s, "rb");
    assert_eq!(
        std::fs::read_to_string(sandbox_dir(s, "rb").join("upper/before-pause")).ok(),
        Some("kept\n".to_string()),
        "the layer written before the pause to disk was not saved with it"
    );
    let ls = vm_warden(s, &["ls"], None);
    assert!(
        stderr(&ls).contains("paused to disk, is kept there"),
        "{}",
        stderr(&ls)
    );

    let t = Instant::now();
    ok(&vm_warden(s, &["resume", "rb"], None));
    eprintln!("resumed by a new supervisor in {:?}", t.elapsed());
    assert_ne!(supervisor_pid(s, "rb"), old);
    let after = count(s, "rb");
    assert!(
        after >= before,
        "the counter went back: {before} then {after} (booted anew?)"
    );
    wait_until(
        "the counter to go on after the resume",
        Duration::from_secs(30),
        || count(s, "rb") > after,
    );
    let o = ok(&vm_warden(
        s,
        &["exec", "rb", "--", "cat", "/workspace/before-pause"],
        None,
    ));
    assert_eq!(
        o.trim(),
        "kept",
        "the resumed guest lost its workspace's file"
    );
    // The new supervisor's shares and exec numbers serve new commands.
    let o = ok(&vm_warden(
        s,
        &[
            "exec",
            "rb",
            "--",
            "sh",
            "-c",
            "echo new > /workspace/new.txt && cat /workspace/new.txt",
        ],
        None,
    ));
    assert_eq!(o, "new\n");
    let log = ok(&vm_warden(s, &["logs", "rb"], None));
    assert!(log.contains("new supervisor"), "no resume recorded: {log}");

    // A state truncated on disk is refused before the guest runs, and
    // removed: nothing half-restored runs, and the next start boots anew.
    paused_to_disk_and_orphaned(s, "rb");
    let st = sandbox_dir(s, "rb").join("vm-paused/vm.vmstate");
    let len = std::fs::metadata(&st).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&st)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let o = vm_warden(s, &["resume", "rb"], None);
    assert_ne!(code(&o), 0, "a truncated state was resumed");
    let said = stderr(&o);
    assert!(said.contains("damaged"), "{said}");
    assert!(
        !sandbox_dir(s, "rb").join("vm-paused").exists(),
        "the unusable state was kept"
    );
    assert!(vmm_pids(s, "rb").is_empty(), "a VMM runs after the refusal");
    ok(&vm_warden(s, &["start", "rb"], None));
    assert_eq!(
        code(&vm_warden(s, &["exec", "rb", "--", "cat", "/tmp/n"], None)),
        1,
        "a start after the refusal did not boot anew"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn through_the_api_a_vm_paused_to_disk_outlives_a_daemon_restart_and_its_supervisors_death_and_is_resumed_with_its_counter_going_on(
) {
    use crate::common::daemon::*;
    if !curl_available() {
        skip("curl is not installed");
        return;
    }
    if guest_release().is_none() {
        return;
    }
    let Some(tree) = busybox_tree() else {
        return;
    };
    let state = TempDir::new("vm-pause-api");
    let s = state.path();
    let _stop = VmStopper(s, "api");
    let vm = vm_dir();
    let env = [("WARDEN_VM_DIR", vm.as_path())];
    let mut d = Daemon::start_with(s, false, &[], &env);
    let body = serde_json::json!({
        "name": "api",
        "spec": { "isolation": "vm", "filesystem": { "rootfs": tree.path() } },
    })
    .to_string();
    let (st, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(st, 201, "{b}");
    let counter = format!("cd /; {COUNTER}");
    ok(&vm_warden(
        s,
        &["exec", "-d", "api", "--", "sh", "-c", &counter],
        None,
    ));
    wait_until("the counter to count", Duration::from_secs(60), || {
        code(&vm_warden(s, &["exec", "api", "--", "cat", "/tmp/n"], None)) == 0
    });
    let before = count(s, "api");
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/api/pause",
        Some(r#"{"to_disk":true}"#),
        None,
    );
    assert_eq!(st, 200, "{b}");
    assert!(
        sandbox_dir(s, "api").join("vm-paused/vm.vmstate").is_file(),
        "nothing was saved to disk"
    );
    let o = vm_warden(s, &["exec", "api", "--", "cat", "/tmp/n"], None);
    assert_ne!(code(&o), 0, "a command ran in a VM paused to disk");
    // The daemon restarted, and the supervisor killed meanwhile.
    d.kill9();
    let supervisor = supervisor_pid(s, "api");
    // SAFETY: a plain signal to the test's own sandbox's supervisor.
    unsafe { libc::kill(supervisor, libc::SIGKILL) };
    wait_until("the supervisor to be gone", Duration::from_secs(10), || {
        !alive(supervisor)
            || std::fs::read_to_string(format!("/proc/{supervisor}/stat")).is_ok_and(|st| {
                st.rsplit_once(')')
                    .is_some_and(|r| r.1.trim_start().starts_with('Z'))
            })
    });
    let d = Daemon::start_with(s, false, &[], &env);
    let (st, b) = call(&d, "POST", "/v1/sandboxes/api/resume", None, None);
    assert_eq!(st, 200, "{b}");
    assert_ne!(json(&b)["state"], "paused", "{b}");
    let after = count(s, "api");
    assert!(
        after >= before,
        "the counter went back: {before} then {after}"
    );
    wait_until(
        "the counter to go on after the resume",
        Duration::from_secs(30),
        || count(s, "api") > after,
    );
}

/// `share` moved aside and `with` put at its path (another directory, or
/// a link); [`put_back`] undoes it.
fn swap_share(share: &Path, with: impl FnOnce(&Path)) {
    std::fs::rename(share, share.with_extension("aside")).unwrap();
    with(share);
}

fn put_back(share: &Path) {
    let _ = std::fs::remove_dir(share).or_else(|_| std::fs::remove_file(share));
    std::fs::rename(share.with_extension("aside"), share).unwrap();
}

/// A resume of `name` refused for its `--rw` bind `share` with `code`:
/// the sandbox is still paused to disk (its saved state whole, no VMM,
/// its commands refused), and nothing was served. `live`: its supervisor
/// runs on, and refuses them as a paused sandbox's.
fn refused_and_still_paused(s: &Path, name: &str, share: &Path, code_: &str, live: bool) {
    let o = vm_warden(s, &["resume", name], None);
    let said = stderr(&o);
    eprintln!("the resume said: {said}");
    assert_ne!(code(&o), 0, "resumed over a changed share: {said}");
    assert!(
        said.contains(&format!("refused ({code_}, filesystem.read_write.0, --rw)")),
        "{said}"
    );
    assert!(said.contains(share.to_str().unwrap()), "{said}");
    let saved = sandbox_dir(s, name).join("vm-paused");
    assert!(
        saved.join("vm.vmstate").is_file() && saved.join("paused.json").is_file(),
        "the refused resume took the saved state"
    );
    assert!(vmm_pids(s, name).is_empty(), "a VMM runs after the refusal");
    let ls = vm_warden(s, &["ls"], None);
    let listed = format!("{}{}", stdout(&ls), stderr(&ls));
    assert!(listed.contains("paused"), "no longer paused: {listed}");
    let o = vm_warden(s, &["exec", name, "--", "true"], None);
    assert_ne!(code(&o), 0, "an exec ran after the refused resume");
    if live {
        assert!(stderr(&o).contains("paused"), "{}", stderr(&o));
    }
}

/// A VM paused to disk whose `--rw` bind was replaced meanwhile is
/// refused its resume (`share_link` for a link at the path,
/// `share_changed` for another directory), and the refusal changes
/// nothing: the sandbox stays paused (`warden ls` says so), its saved
/// memory and state whole, and once the owner puts the directory back a
/// resume brings the same guest back, its counter going on and its
/// `/tmp` file there. Both resumes: by the supervisor that paused it, and
/// by a new one (that supervisor killed). Before, the first refusal ended
/// the sandbox and removed its saved state.
#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_resume_refused_for_a_changed_share_leaves_it_paused_and_resumes_once_the_share_is_back() {
    let state = TempDir::new("vm-pause-share");
    let _stop = VmStopper(state.path(), "back");
    if guest_release().is_none() {
        return;
    }
    let Some(tree) = busybox_tree() else {
        return;
    };
    let top = TempDir::new("vm-pause-share-top");
    let share = top.path().join("share");
    std::fs::create_dir_all(&share).unwrap();
    std::fs::write(share.join("f"), "own-share").unwrap();
    std::fs::create_dir_all(top.path().join("elsewhere")).unwrap();
    let s = state.path();
    // Its shares over 9p, which a pause to disk can save.
    let w = |args: &[&str]| vm_warden_env(s, args, None, &[("WARDEN_VM_FS", "9p")]);
    let share_s = share.to_str().unwrap();
    ok(&w(&[
        "create",
        "--isolation",
        "vm",
        "--rootfs",
        tree.path().to_str().unwrap(),
        "--rw",
        share_s,
        "back",
    ]));
    ok(&w(&["start", "back"]));
    let counter = format!("cd /; echo in-ram > /tmp/kept; {COUNTER}");
    ok(&w(&["exec", "-d", "back", "--", "sh", "-c", &counter]));
    wait_until("the counter to count", Duration::from_secs(60), || {
        count(s, "back") > 0
    });

    // By the supervisor that paused it: a link at the path.
    let supervisor = supervisor_pid(s, "back");
    let before = count(s, "back");
    ok(&w(&["pause", "--to-disk", "back"]));
    swap_share(&share, |p| {
        std::os::unix::fs::symlink(top.path().join("elsewhere"), p).unwrap()
    });
    refused_and_still_paused(s, "back", &share, "share_link", true);
    assert_eq!(
        supervisor_pid(s, "back"),
        supervisor,
        "its supervisor ended"
    );
    put_back(&share);
    ok(&w(&["resume", "back"]));
    let after = count(s, "back");
    assert!(after >= before, "booted anew: {before} then {after}");
    wait_until("the counter to go on", Duration::from_secs(30), || {
        count(s, "back") > after
    });
    let o = ok(&w(&[
        "exec",
        "back",
        "--",
        "cat",
        "/tmp/kept",
        &format!("{share_s}/f"),
    ]));
    assert_eq!(o, "in-ram\nown-share");

    // By a new supervisor (the one that paused it killed): another
    // directory at the path.
    let before = count(s, "back");
    paused_to_disk_and_orphaned(s, "back");
    swap_share(&share, |p| std::fs::create_dir(p).unwrap());
    refused_and_still_paused(s, "back", &share, "share_changed", false);
    put_back(&share);
    ok(&w(&["resume", "back"]));
    let after = count(s, "back");
    assert!(after >= before, "booted anew: {before} then {after}");
    wait_until("the counter to go on", Duration::from_secs(30), || {
        count(s, "back") > after
    });
    let o = ok(&w(&["exec", "back", "--", "cat", "/tmp/kept"]));
    assert_eq!(o, "in-ram\n");
}

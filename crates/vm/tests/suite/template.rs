//! VM sandboxes started from a template snapshot: fast, each copy with
//! randomness of its own, and a damaged template never half-restored.

use crate::common::{config, run, BOOT};
use std::time::Instant;
use warden_vm::template::{self, Started};
use warden_vm::wire::Ended;

#[test]
#[ignore]
fn two_guests_restored_from_one_template_never_read_the_same_random_bytes() {
    let Some(a_cfg) = config("tmpl-a") else {
        return;
    };
    let Some(mut b_cfg) = config("tmpl-b") else {
        return;
    };
    b_cfg.run_dir.set_extension("b");
    let (a, how_a) = template::start(&a_cfg, BOOT).unwrap();
    let t = Instant::now();
    let (b, how_b) = template::start(&b_cfg, BOOT).unwrap();
    let b_start = t.elapsed();
    assert!(
        matches!(how_a, Started::Template | Started::Built),
        "{how_a:?}"
    );
    assert_eq!(how_b, Started::Template);
    eprintln!("second start, from the template: {b_start:?}");
    // The attack: a secret made right after the restore (before the
    // guest's kernel would reseed on its own) is the same in both copies
    // unless the host's seed made each copy's generator its own.
    let read = "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'";
    let (ra, ea) = run(&a, 1, read);
    let (rb, eb) = run(&b, 1, read);
    assert_eq!((ea, eb), (Ended::Exited(0), Ended::Exited(0)));
    assert_eq!(ra.len(), 64, "{ra}");
    assert_ne!(
        ra, rb,
        "two copies of one template read the same random bytes"
    );
    // Each copy has its own settings and the host's clock.
    let (ha, _) = run(&a, 2, "hostname; date +%s");
    let (hb, _) = run(&b, 2, "hostname");
    assert!(ha.starts_with("tmpl-a\n"), "{ha}");
    assert_eq!(hb.trim(), "tmpl-b");
    let guest_now: i64 = ha.lines().nth(1).unwrap().trim().parse().unwrap();
    let host_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (guest_now - host_now).abs() < 30,
        "guest clock {guest_now}, host {host_now}"
    );
}

#[test]
#[ignore]
fn a_truncated_template_is_refused_and_the_guest_boots_cold() {
    let Some(mut cfg) = config("tmpl-cut") else {
        return;
    };
    // A shape of its own (1 MiB more RAM), so that no other test's
    // template is cut.
    cfg.memory_mib += 1;
    let key = template::key(&cfg);
    let dir = template::dir().unwrap();
    let state = dir.join(format!("template-{key}.vmstate"));
    if !state.exists() {
        let (m, _) = template::start(&cfg, BOOT).unwrap();
        drop(m);
    }
    let len = std::fs::metadata(&state).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&state)
        .unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    let (m, how) = template::start(&cfg, BOOT).unwrap();
    match &how {
        Started::Cold { why: Some(why) } => assert!(why.contains("damaged"), "{why}"),
        other => panic!("a truncated template was used: {other:?}"),
    }
    let (out, end) = run(&m, 1, "echo booted");
    assert_eq!((out.as_str(), end), ("booted\n", Ended::Exited(0)));
    assert!(!state.exists(), "the damaged template was kept");
}

#[test]
#[ignore]
fn a_template_whose_bytes_changed_is_refused_before_its_guest_runs() {
    let Some(mut cfg) = config("tmpl-flip") else {
        return;
    };
    cfg.memory_mib += 2;
    let key = template::key(&cfg);
    let dir = template::dir().unwrap();
    let state = dir.join(format!("template-{key}.vmstate"));
    if !state.exists() {
        let (m, _) = template::start(&cfg, BOOT).unwrap();
        drop(m);
    }
    // Same size, one byte of the guest's memory changed: only the digest
    // can tell, and it must before the guest runs.
    let mut bytes = std::fs::read(&state).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&state, &bytes).unwrap();
    let err = template::restore(&cfg, &state, &key, BOOT)
        .err()
        .expect("a changed template was restored");
    assert!(err.to_string().contains("digest"), "{err}");
    // Its VMM, which loaded the stream and never ran the guest (whose
    // init would have ended it when its channel closed), ends with the
    // refusal. Before, run as nobody, it lost its parent-death signal to
    // the change of user and stayed, under PID 1, after the tests.
    let ram = template::ram_path(&state);
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while let Some(pid) = holder_of(&ram) {
        assert!(
            Instant::now() < deadline,
            "the refused restore's VMM {pid} (a child of {:?}) is still running",
            parent_of(pid)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A process (not a zombie) that has the file at `path` open.
fn holder_of(path: &std::path::Path) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if stat_field(pid, 0).as_deref() == Some("Z") {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|f| std::fs::read_link(f.path()).is_ok_and(|t| t == path))
        {
            return Some(pid);
        }
    }
    None
}

/// A VM started from a template runs on a copy of its own: no process
/// holds the template's memory file while it runs, and the file is
/// owner-only (before, every VMM of every owner mapped it, mode 0666,
/// opened read-write by QEMU 7.2, so one VMM's write reached every other
/// VM's unwritten pages). Should it still be written (by the host), the
/// next start sees it changed since the template was made and refuses it,
/// before any guest runs from it; making it anew sweeps no sandbox's run
/// directory.
#[test]
#[ignore]
fn a_template_whose_memory_file_was_written_is_refused_before_its_guest_runs() {
    use std::os::unix::fs::FileExt;
    use std::os::unix::fs::PermissionsExt;
    let Some(mut cfg) = config("tmpl-ram") else {
        return;
    };
    cfg.memory_mib += 4;
    let key = template::key(&cfg);
    let dir = template::dir().unwrap();
    let state = dir.join(format!("template-{key}.vmstate"));
    let (m, _) = template::start(&cfg, BOOT).unwrap();
    let ram = template::ram_path(&state);
    assert!(ram.is_file(), "no memory file beside the template");
    assert_eq!(holder_of(&ram), None, "a process holds the template's base");
    let mode = std::fs::metadata(&ram).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the template's base is not owner-only");
    drop(m);
    // The same bytes written back: the size and content stay, the file's
    // change time does not.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ram)
        .unwrap();
    let mut page = vec![0u8; 4096];
    f.read_at(&mut page, 1 << 20).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    f.write_all_at(&page, 1 << 20).unwrap();
    drop(f);
    let err = template::restore(&cfg, &state, &key, BOOT)
        .err()
        .expect("a written template was restored");
    assert!(err.to_string().contains("changed"), "{err}");
    // The start after it boots cold (the template removed).
    let (m, how) = template::start(&cfg, BOOT).unwrap();
    assert!(matches!(how, Started::Cold { .. }), "{how:?}");
    let (out, end) = run(&m, 1, "echo booted");
    assert_eq!((out.as_str(), end), ("booted\n", Ended::Exited(0)));
    drop(m);
    // Making it anew sweeps dead builders' run directories, never a
    // sandbox's whose name looks like one (before, a sandbox named
    // `template-999999` lost its run directory to the next build).
    let runs = warden_vm::kernel::vm_dir().unwrap().join("run");
    // A live sandbox named `template-999999`: its run directory is
    // `ID-PID-N`, PID its supervisor's (here this test's).
    let lookalike = runs.join(format!("template-999999-{}-0", std::process::id()));
    std::fs::create_dir_all(lookalike.join("vm")).unwrap();
    let built = template::build(&cfg, &dir, &key);
    let kept = lookalike.is_dir();
    let _ = std::fs::remove_dir(lookalike.join("vm"));
    let _ = std::fs::remove_dir(&lookalike);
    built.unwrap();
    assert!(kept, "a template build swept a sandbox's run directory");
}

/// Set in the copy of this test binary that builds a template and is
/// killed: the directory its template goes to.
const BUILDER: &str = "WARDEN_TEST_KILLED_TEMPLATE_BUILDER";

/// Processes whose command line holds `marker`, with their parent's PID.
fn with_marker(marker: &str) -> Vec<(i32, i32)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        if let Some(parent) = parent_of(pid) {
            found.push((pid, parent));
        }
    }
    found
}

/// The parent of `pid` (its `stat`'s fourth field), while it exists.
fn parent_of(pid: i32) -> Option<i32> {
    stat_field(pid, 1)?.parse().ok()
}

/// Field `n` after the command's name (0: the state) of `pid`'s `stat`.
fn stat_field(pid: i32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1.to_string();
    rest.split_whitespace().nth(n).map(str::to_string)
}

/// Is the process `pid` that started at `since` (ticks after boot) still
/// there, and not a zombie?
fn still_running(pid: i32, since: &str) -> bool {
    stat_field(pid, 19).as_deref() == Some(since) && stat_field(pid, 0).as_deref() != Some("Z")
}

/// A template builder killed with SIGKILL while its VMM boots (as a test's
/// timeout kills it) leaves no VMM running: before, the VMM and its keeper
/// were left, parented to PID 1, for good.
#[test]
#[ignore]
fn a_template_builder_killed_mid_boot_leaves_no_vmm_running() {
    if let Some(dir) = std::env::var_os(BUILDER) {
        // The builder: boots a template until it is killed.
        let Some(mut cfg) = config("tmpl-killed") else {
            return;
        };
        cfg.memory_mib += 3;
        let _ = template::build(&cfg, std::path::Path::new(&dir), "killed");
        return;
    }
    if config("tmpl-killed").is_none() {
        return;
    }
    let out = std::env::temp_dir().join(format!("warden-tmpl-killed-{}", std::process::id()));
    let mut builder = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "suite::template::a_template_builder_killed_mid_boot_leaves_no_vmm_running",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(BUILDER, &out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let builder_pid = builder.id() as i32;
    // The builder's VMM: a template's, whose keeper is the builder's child.
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    let (vmm, keeper) = loop {
        let mine = with_marker("warden.template=1")
            .into_iter()
            .find(|(_, keeper)| parent_of(*keeper) == Some(builder_pid));
        if let Some(found) = mine {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "the builder started no template VMM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let since = |pid| stat_field(pid, 19).unwrap_or_default();
    let (vmm_since, keeper_since) = (since(vmm), since(keeper));
    builder.kill().unwrap();
    builder.wait().unwrap();
    // Whatever is left of the builder goes within moments.
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while still_running(vmm, &vmm_since) || still_running(keeper, &keeper_since) {
        assert!(
            Instant::now() < deadline,
            "the killed builder's VMM {vmm} (keeper {keeper}, now a child of {:?}) is still running",
            parent_of(keeper)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = warden_workspace::fsutil::remove_tree(&out);
}

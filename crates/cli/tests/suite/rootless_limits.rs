//! Rootless on a host without delegated cgroups: one short line per run
//! (`warden doctor` has the details), never the whole explanation; and
//! limits for a rootless user where an administrator delegated a cgroup
//! once (`<v1 hierarchy>/warden-user-UID`, owned by the user): warden finds
//! it and the limits hold, proved with a real memory hog and a real fork
//! flood. Run as root (which makes the delegation for the `warden-test`
//! user and takes it away again).

use crate::common::*;

fn is_v1_host() -> bool {
    v1_hierarchies()
        .iter()
        .any(|h| h.file_name().is_some_and(|n| n == "memory"))
}

#[test]
fn rootless_limits_need_one_delegation_and_without_it_one_short_line() {
    if !is_root() {
        skip("making a delegation for the warden-test user needs root");
        return;
    }
    if !is_v1_host() {
        skip("no cgroup v1 memory hierarchy here (a v2 host delegates with systemd's Delegate=yes instead)");
        return;
    }
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let state = TempDir::new("rl-state");
    who.own(state.path());
    let run = |args: &[&str], script: &str| {
        who.command(who.bin.to_str().unwrap())
            .args(["run", "--no-tty", "--no-audit-log"])
            .args(args)
            .args(["--", "sh", "-c", script])
            .env("XDG_STATE_HOME", state.path())
            .output()
            .unwrap()
    };

    // Without a delegation: the run goes on rlimits and says so in one
    // short line.
    Delegation::remove_for(who.uid);
    let out = run(&[], "echo ran");
    assert_eq!(stdout(&out), "ran\n", "{}", stderr(&out));
    let said = stderr(&out);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("warden doctor") && lines[0].len() < 140,
        "{}",
        lines[0]
    );
    let refused = run(&["--memory", "64M"], "echo ran");
    assert_eq!(code(&refused), 125, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("warden-user-"),
        "the refusal does not say how to delegate: {}",
        stderr(&refused)
    );

    // Delegated once: no line, and the limits hold for the sandbox as a
    // whole.
    let _d = Delegation::make(who.uid, who.gid);
    let out = run(&[], "echo ran");
    assert_eq!(stdout(&out), "ran\n");
    assert_eq!(stderr(&out), "", "a delegated user is still told something");
    let hog = run(
        &["--memory", "64M", "--timeout", "60s"],
        "python3 -c 'b = bytearray(400 << 20); print(len(b))'",
    );
    assert_eq!(code(&hog), 137, "{}{}", stdout(&hog), stderr(&hog));
    // 64 children asked for under --pids 16: the sandbox gets fewer than
    // 16. (The memory hog above is what tells the cgroup from rlimits: under
    // RLIMIT_DATA alone the allocation fails with MemoryError, status 1.)
    let flood = run(
        &["--pids", "16", "--timeout", "60s"],
        "python3 -c '
import os, time
kids = []
for i in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(5); os._exit(0)
    kids.append(pid)
print(\"forked\", len(kids))
for k in kids: os.kill(k, 9)
'",
    );
    let forked: usize = stdout(&flood)
        .trim()
        .strip_prefix("forked ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}{}", stdout(&flood), stderr(&flood)));
    assert!(forked < 16, "{forked} children under --pids 16");
    // Nothing of the sandboxes stays in the delegated cgroups.
    for h in v1_hierarchies() {
        let d = h.join(format!("warden-user-{}", who.uid));
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "{left:?} left in {}", d.display());
    }
}

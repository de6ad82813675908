//! What a second week of use tripped over in the command line itself:
//! each test is a friction seen, through the real binary.

use crate::common::*;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `warden audit list | head -1`: the reader goes away after one line and
/// warden must end as other Unix tools do (by SIGPIPE, silently), not with
/// a panic and a backtrace on the terminal.
#[test]
fn a_listing_whose_reader_goes_away_ends_quietly() {
    let state = TempDir::new("closed-pipe");
    let audit = state.path().join("warden/audit");
    std::fs::create_dir_all(&audit).unwrap();
    // Far more lines than a pipe's buffer holds, so that warden is still
    // printing when the reader closes.
    for i in 0..3000 {
        std::fs::write(audit.join(format!("20260101-000000-{i:012}.jsonl")), "").unwrap();
    }
    let mut child = Command::new(warden_bin())
        .args(["audit", "list"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    let mut out = child.stdout.take().unwrap();
    out.read_exact(&mut first).unwrap();
    drop(out);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "warden complained about its closed output: {err}"
    );
    assert!(
        status.success() || status.signal() == Some(libc::SIGPIPE),
        "warden ended with {status:?} when its reader went away"
    );
}

/// A person who starts `warden serve` is told where it listens, where the
/// dashboard is and how to get a token to log in with.
#[test]
fn serve_says_where_it_listens_where_the_dashboard_is_and_how_to_get_a_token() {
    use std::io::BufRead;
    let state = TempDir::new("serve-words");
    let mut child = Command::new(warden_bin())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !said.contains("dashboard") && std::time::Instant::now() < deadline {
        if err.read_line(&mut said).unwrap_or(0) == 0 {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let addr = said
        .split("serving on ")
        .nth(1)
        .and_then(|r| r.split("http://").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in: {said}"))
        .to_string();
    assert!(
        said.contains(&format!("the dashboard is http://{addr}/")),
        "{said}"
    );
    assert!(said.contains("warden token create"), "{said}");
}

/// `warden doctor` speaks of the microVM backend as the thing it is, and
/// never says a probe is still to come right after it tried one.
#[test]
fn doctor_words_the_microvm_backend_as_it_is_now() {
    let state = TempDir::new("doctor-words");
    let out = warden(state.path(), &["doctor"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!text.contains("future"), "{text}");
    assert!(
        !text.contains("or `warden doctor`, probes it"),
        "doctor says it has not probed what it just probed: {text}"
    );
}

/// Completions and manual pages come from the command line's own
/// definitions: a bash script that knows `run`'s table-built flags, and a
/// manual page per command.
#[test]
fn completions_and_manual_pages_are_made_from_the_command_line_itself() {
    let state = TempDir::new("manual");
    let bash = ok(&warden(state.path(), &["completions", "bash"]));
    assert!(
        bash.contains("--allow-domain") && bash.contains("--memory"),
        "{bash}"
    );
    for shell in ["zsh", "fish"] {
        assert!(ok(&warden(state.path(), &["completions", shell])).contains("allow-domain"));
    }
    let page = ok(&warden(state.path(), &["man"]));
    assert!(page.starts_with(".ie") || page.contains(".TH"), "{page}");
    let dir = state.path().join("man");
    ok(&warden(
        state.path(),
        &["man", "--dir", dir.to_str().unwrap()],
    ));
    assert!(dir.join("warden-run.1").is_file());
    let bad = warden(state.path(), &["completions", "tcsh"]);
    assert_eq!(code(&bad), 125, "an unknown shell is warden's own error");
    assert!(
        stderr(&bad).contains("bash"),
        "the error lists the shells: {}",
        stderr(&bad)
    );
}

#[test]
fn a_sandbox_whose_state_directory_is_removed_is_ended_by_its_supervisor() {
    let state = TempDir::new("state-gone");
    ok(&warden(state.path(), &["create", "orphan", "--start"]));
    let pid = supervisor_pid(state.path(), "orphan");
    let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(alive());
    // What a person cleaning up by hand does: nothing could reach the
    // sandbox after this, so nothing could stop it either.
    std::fs::remove_dir_all(sandbox_dir(state.path(), "orphan")).unwrap();
    wait_until(
        "the supervisor ends its sandbox and itself",
        Duration::from_secs(15),
        || !alive() || zombie(pid),
    );
}

/// Whether `pid` has ended and waits only to be reaped.
fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// The cgroup directories of the sandboxes under each hierarchy's shared
/// parent, by name.
fn sandbox_cgroups() -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    for h in ["pids", "memory", "unified", ""] {
        let parent = std::path::Path::new("/sys/fs/cgroup")
            .join(h)
            .join("warden");
        if let Ok(rd) = std::fs::read_dir(&parent) {
            all.extend(rd.flatten().map(|e| e.path()));
        }
    }
    all
}

/// The names of the cgroups (their last component) that hold a process
/// descended from `root` on the host.
fn cgroup_names_below(root: u32) -> Vec<String> {
    let parent_of = |pid: u32| -> Option<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse().ok())
    };
    let below = |mut pid: u32| {
        for _ in 0..64 {
            if pid == root {
                return true;
            }
            match parent_of(pid) {
                Some(p) if p > 1 => pid = p,
                _ => return false,
            }
        }
        false
    };
    let mut names = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return names;
    };
    for pid in rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        if pid == root || !below(pid) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        for line in text.lines() {
            if let Some(name) = line.rsplit('/').next().filter(|n| n.starts_with("warden-")) {
                if !names.iter().any(|m| m == name) {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// A `warden run` killed with SIGKILL cannot remove its sandbox's cgroups;
/// the next warden command sweeps the empty ones (here backdated past the
/// age that keeps a sandbox being set up out of reach), never one that
/// still holds a process.
#[test]
fn cgroups_left_by_a_run_killed_outright_are_swept_by_the_next_command() {
    if !is_root() {
        skip("the shared cgroup parents are root's");
        return;
    }
    let state = TempDir::new("cgroup-sweep");
    let before = sandbox_cgroups();
    let start = |secs: &str| {
        Command::new(warden_bin())
            .args(["run", "--no-tty", "--", "sleep", secs])
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // The cgroups that hold a process of this run: other tests make and
    // remove sandboxes' cgroups meanwhile.
    let held_by = |run: u32| -> Vec<std::path::PathBuf> {
        let names = cgroup_names_below(run);
        sandbox_cgroups()
            .into_iter()
            .filter(|p| !before.contains(p))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| names.iter().any(|m| m == n))
            })
            .collect()
    };
    let mut killed = start("300");
    let mut mine = Vec::new();
    wait_until("the run's cgroups exist", Duration::from_secs(20), || {
        mine = held_by(killed.id());
        mine.iter()
            .any(|p| std::fs::read_to_string(p.join("cgroup.procs")).is_ok_and(|t| !t.is_empty()))
    });
    killed.kill().unwrap();
    let _ = killed.wait();
    wait_until(
        "the killed run's processes are gone",
        Duration::from_secs(20),
        || {
            mine.iter().all(|p| {
                std::fs::read_to_string(p.join("cgroup.procs")).map_or(true, |t| t.is_empty())
            })
        },
    );
    assert!(
        mine.iter().any(|p| p.exists()),
        "nothing was left to sweep: {mine:?}"
    );
    // A live sandbox beside it, its cgroups as old.
    let mut live = start("300");
    let mut theirs = Vec::new();
    wait_until(
        "the live run's cgroups hold it",
        Duration::from_secs(20),
        || {
            theirs = held_by(live.id());
            !theirs.is_empty()
                && theirs.iter().all(|p| {
                    std::fs::read_to_string(p.join("cgroup.procs")).is_ok_and(|t| !t.is_empty())
                })
        },
    );
    for p in mine.iter().chain(&theirs) {
        let o = Command::new("touch")
            .args(["-d", "2 hours ago"])
            .arg(p)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // The last sweep's marker gone: the next command is due to sweep.
    let _ = std::fs::remove_file("/run/warden/cgroups-swept");
    ok(&warden(state.path(), &["run", "--no-tty", "--", "true"]));
    let left: Vec<_> = mine.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        theirs.iter().all(|p| p.exists()),
        "a live sandbox's cgroup was removed"
    );
    live.kill().unwrap();
    let _ = live.wait();
}

/// `warden run --ask` from a script: nobody can be asked, and warden says
/// so when the run starts rather than only at the first denial.
#[test]
fn ask_without_a_terminal_is_said_at_the_start() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("ask-no-tty");
    let out = warden(state.path(), &["run", "--ask", "--no-tty", "--", "true"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--ask has no terminal to ask on"), "{err}");
    let out = warden(state.path(), &["run", "--no-tty", "--", "true"]);
    assert!(!stderr(&out).contains("--ask"), "{}", stderr(&out));
}

/// A sandbox's own hostname resolves inside it from its hosts file, so
/// nothing asks the resolver for it and no run proposes it as a rule;
/// the host's own hosts entries are not shown.
#[test]
fn the_sandboxs_own_hostname_resolves_inside_it_and_is_never_proposed() {
    let state = TempDir::new("own-hostname");
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--",
            "sh",
            "-c",
            "getent hosts \"$(hostname)\"; cat /etc/hosts",
        ],
    );
    let text = ok(&out);
    assert!(
        text.starts_with("127.0.1.1") || text.starts_with("::1"),
        "{text}"
    );
    let host_hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    // The host's own entries (any name past loopback's) stay the host's.
    for line in host_hosts
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.contains("localhost"))
        .filter(|l| !l.trim().is_empty())
    {
        assert!(!text.contains(line), "{line:?} shown:\n{text}");
    }
    if !egress_available() {
        return;
    }
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--allow-domain",
            "example.test",
            "--",
            "sh",
            "-c",
            "getent hosts \"$(hostname)\" >/dev/null && echo resolved",
        ],
    );
    assert_eq!(ok(&out).trim(), "resolved");
    assert!(
        !stderr(&out).contains("to allow what this run was denied"),
        "{}",
        stderr(&out)
    );
}

/// `warden token create --help` says `warden token create` (not the
/// daemon binary's file name), and `warden token list` lines its columns
/// up whatever the names' lengths.
#[test]
fn token_usage_names_warden_and_the_token_list_lines_up() {
    let state = TempDir::new("token-list");
    let help = ok(&warden(state.path(), &["token", "create", "--help"]));
    assert!(help.contains("Usage: warden token create"), "{help}");
    for name in ["a-rather-long-name-for-a-token", "b"] {
        ok(&warden(
            state.path(),
            &["token", "create", name, "--scope", "sandboxes:read"],
        ));
    }
    let list = ok(&warden(state.path(), &["token", "list"]));
    let starts: Vec<Option<usize>> = list
        .lines()
        .map(|l| l.find("live").or(l.find("STATE")))
        .collect();
    assert_eq!(starts.len(), 3, "{list}");
    assert!(
        starts.iter().all(|s| s.is_some() && *s == starts[0]),
        "{list}"
    );
}

/// `--host` is listed under the commands that go through a daemon and
/// taken after their name too; a command that never does neither lists
/// nor takes it.
#[test]
fn host_is_listed_and_taken_only_by_the_commands_that_use_it() {
    let state = TempDir::new("host-flag");
    let help = |args: &[&str]| ok(&warden(state.path(), args));
    assert!(help(&["ls", "--help"]).contains("--host <URL>"));
    assert!(help(&["run", "--help"]).contains("--host <URL>"));
    assert!(!help(&["audit", "list", "--help"]).contains("--host"));
    assert!(!help(&["doctor", "--help"]).contains("--host"));
    let refused = warden(state.path(), &["doctor", "--host", "unix"]);
    assert!(!refused.status.success());
    // Before or after the name, the same daemon is asked for.
    for args in [
        &["ls", "--host", "unix:/nonexistent/sock"][..],
        &["--host", "unix:/nonexistent/sock", "ls"][..],
    ] {
        let o = warden(state.path(), args);
        assert!(
            stderr(&o).contains("unix:/nonexistent/sock"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

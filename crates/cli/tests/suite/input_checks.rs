//! Input that is valid in form but wrong for what it asks: each is refused
//! with its own message and exit status 125, and nothing runs (the
//! command would leave a marker file; none appears).

use crate::common::*;
use std::process::{Command, Stdio};

/// `warden run FLAGS -- touch MARKER` must be refused, saying `message`,
/// before the command runs.
fn refused(flags: &[&str], message: &str) {
    let dir = TempDir::new("input-check");
    let marker = dir.path().join("ran");
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--no-audit-log", "--rw", dir.str()])
        .args(flags)
        .args(["--", "touch"])
        .arg(&marker)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{flags:?}: {err}");
    assert!(err.contains(message), "{flags:?}: {err}");
    assert!(!marker.exists(), "{flags:?}: the command ran");
}

/// A refusal that names another option says it as this person gives it:
/// the flag on the command line, the key in a finding about a profile
/// file (the libraries name it by its key; each door words it).
#[test]
fn another_option_a_refusal_names_is_a_flag_on_the_command_line_and_a_key_in_a_profile() {
    refused(
        &["--egress-learn", "--ask"],
        "--egress-learn cannot be used with `--ask`: learning mode allows what `--ask` would ask about",
    );
    let dir = TempDir::new("input-check-profile");
    let profile = dir.path().join("learn.yaml");
    std::fs::write(&profile, "egress:\n  learn: true\n  ask: true\n").unwrap();
    let path = profile.to_string_lossy().to_string();
    refused(
        &["-P", &path],
        "egress.learn: cannot be used with `egress.ask`: learning mode allows what `egress.ask` would ask about",
    );
}

#[test]
fn an_idle_timeout_of_zero_is_refused() {
    refused(
        &["--allow-domain", "a.test", "--egress-idle-timeout", "0"],
        "--egress-idle-timeout must be longer than zero",
    );
}

#[test]
fn a_file_size_of_zero_is_refused() {
    refused(
        &["--file-size", "0"],
        "--file-size 0 would make every write fail",
    );
}

#[test]
fn more_cpus_than_the_host_has_are_refused_with_the_host_count() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let asked = (cores + 1).to_string();
    refused(
        &["--cpus", &asked],
        &format!("more cores than this host has ({cores})"),
    );
}

#[test]
fn more_processes_than_the_kernel_can_have_are_refused_with_the_kernels_limit() {
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let asked = (max.min(1 << 22) + 1).to_string();
    refused(
        &["--pids", &asked],
        &format!(
            "more processes than the kernel can have ({}",
            max.min(1 << 22)
        ),
    );
}

#[test]
fn a_system_directory_is_refused_as_a_writable_bind_or_a_workspace() {
    for dir in ["/etc", "/usr", "/usr/lib", "/boot", "/var", "/home"] {
        refused(&["--rw", dir], &format!("--rw {dir} is not allowed"));
        refused(&["-w", dir], &format!("--workspace {dir} is not allowed"));
    }
}

#[test]
fn a_file_as_the_workspace_is_refused_as_not_a_directory() {
    let dir = TempDir::new("input-check-file");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "x").unwrap();
    refused(
        &["-w", file.to_str().unwrap()],
        "is a file, not a directory",
    );
}

#[test]
fn an_invalid_range_is_said_first() {
    refused(
        &["--allow-cidr", "10.0.0.0/33"],
        "\"10.0.0.0/33\" must be an address range",
    );
}

#[test]
fn json_events_dash_is_standard_output() {
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--no-audit-log", "--json-events", "-"])
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let events: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(events.first().unwrap()["event"], "created");
    assert_eq!(events.last().unwrap()["event"], "exited");
    assert!(!std::path::Path::new("-").exists());
}

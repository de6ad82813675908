//! A secret's program gets its arguments whole, from a flag's `cmd:` line
//! and from a profile's `from_command` list alike.
//!
//! Before: a profile's list was joined with spaces and split again at
//! blanks, so `from_command: [sh, -c, "pass show x"]` ran `sh -c pass show
//! x` (the shell ran `pass` alone), and `cmd:sh -c 'pass show x'` gave the
//! shell the script `'pass`. Now: the list is the program's argv element
//! for element, the `cmd:` line is split as a POSIX shell splits words
//! (without running one), and a line with an open quote is refused at the
//! flag before anything runs.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A program that writes each of its arguments, NUL-terminated, to `out`
/// and prints a value.
fn recorder(dir: &Path, out: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("record-argv");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{}'\necho recorded-value\n",
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The arguments the recorder wrote to `out`.
fn recorded(out: &Path) -> Vec<String> {
    let bytes = std::fs::read(out).unwrap_or_default();
    bytes
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .split_last()
        .map(|(_, args)| args.to_vec())
        .unwrap_or_default()
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args(args)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_secret_programs_quoted_arguments_on_the_flag_reach_it_whole() {
    if !egress_available() {
        return skip("this kernel cannot wire a sandbox's network");
    }
    let dir = TempDir::new("secret-argv-flag");
    let out = dir.path().join("argv");
    let rec = recorder(dir.path(), &out);
    let secret = format!(
        r#"T=cmd:{} -c 'pass show x' "a b" c\ d ''@example.com"#,
        rec.display()
    );
    let o = run(&["--secret", &secret]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        recorded(&out),
        ["-c", "pass show x", "a b", "c d", ""],
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_profiles_from_command_list_reaches_the_program_element_for_element() {
    if !egress_available() {
        return skip("this kernel cannot wire a sandbox's network");
    }
    let dir = TempDir::new("secret-argv-profile");
    let out = dir.path().join("argv");
    let rec = recorder(dir.path(), &out);
    let profile = dir.path().join("p.yaml");
    std::fs::write(
        &profile,
        format!(
            "secrets:\n  T:\n    from_command: [{:?}, -c, \"pass show x\", \"it's\", \"$HOME\"]\n    hosts: [example.com]\n",
            rec.display().to_string()
        ),
    )
    .unwrap();
    let o = run(&["-P", profile.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        recorded(&out),
        ["-c", "pass show x", "it's", "$HOME"],
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_secret_program_line_with_an_open_quote_is_refused_at_the_flag_and_nothing_runs() {
    let dir = TempDir::new("secret-argv-open");
    let out = dir.path().join("argv");
    let rec = recorder(dir.path(), &out);
    for line in [
        format!("{} -c 'pass show x", rec.display()),
        format!("{} -c \"pass show x", rec.display()),
    ] {
        let o = run(&["--secret", &format!("T=cmd:{line}@example.com")]);
        assert_eq!(code(&o), 125, "{line}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("--secret"), "{err}");
        assert!(err.contains("quote"), "{err}");
        assert!(!out.exists(), "the program ran: {line}");
    }
}

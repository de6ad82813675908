//! Doors that must agree, through the real binaries: `profile validate`
//! accepts exactly what `run --profile` accepts (and makes nothing doing
//! so); MCP's change list and `warden diff` list the same changes (the
//! workspace's own `.gitignore` honoured by both); a detached command's
//! output is kept and read the same way whether `exec -d`, `run -d` or
//! the daemon's API started it.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `warden ARGS` with its state in `state`/warden and its temporary files
/// in `tmp` (so that what it leaves there can be seen).
fn warden_in(state: &Path, tmp: &Path, args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The entries of `dir` (none when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn profile_validate_accepts_a_caches_profile_as_run_does_and_makes_nothing() {
    let t = TempDir::new("parity-caches");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let profile = t.path().join("caches.yaml");
    std::fs::write(&profile, "filesystem:\n  caches: [pip]\n").unwrap();
    let p = profile.to_str().unwrap();

    let v = warden_in(t.path(), &tmp, &["profile", "validate", p]);
    assert_eq!(
        code(&v),
        0,
        "validate refused what run accepts: {}{}",
        stdout(&v),
        stderr(&v)
    );
    assert!(
        stdout(&v).contains(&format!("{p}: valid")),
        "{}",
        stdout(&v)
    );
    // Validating made nothing: no caches in warden's state, no scratch
    // left in the temporary directory.
    assert!(
        !t.path().join("warden/caches").exists(),
        "validate made the caches: {:?}",
        entries(&t.path().join("warden"))
    );
    assert_eq!(entries(&tmp), Vec::<String>::new());

    let r = warden_in(
        t.path(),
        &tmp,
        &["run", "--no-tty", "--profile", p, "--", "true"],
    );
    assert_eq!(code(&r), 0, "run: {}", stderr(&r));
}

#[test]
fn profile_validate_refuses_what_run_refuses_at_the_place_it_was_written() {
    let t = TempDir::new("parity-refuse");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // A value only the resolver refuses (a cache warden does not know),
    // on line 3, column 7.
    let profile = t.path().join("bad.yaml");
    std::fs::write(
        &profile,
        "hostname: x\nfilesystem:\n  caches: [pip, no-such-cache]\n",
    )
    .unwrap();
    let p = profile.to_str().unwrap();
    let v = warden_in(t.path(), &tmp, &["profile", "validate", p]);
    let r = warden_in(
        t.path(),
        &tmp,
        &["run", "--no-tty", "--profile", p, "--", "true"],
    );
    assert_ne!(code(&r), 0, "run accepted it: {}", stderr(&r));
    assert_eq!(code(&v), 1, "validate accepted it: {}", stdout(&v));
    assert!(
        stderr(&v).starts_with(&format!("{p}:3:")),
        "not at its place: {}",
        stderr(&v)
    );
    assert!(
        stderr(&v).contains("filesystem.caches") && !stderr(&v).contains("--cache"),
        "{}",
        stderr(&v)
    );
    assert!(!t.path().join("warden/caches").exists());
    assert_eq!(entries(&tmp), Vec::<String>::new());
}

#[test]
fn every_built_in_profile_is_valid_exactly_when_run_takes_it() {
    let t = TempDir::new("parity-builtin");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let list = ok(&warden_in(t.path(), &tmp, &["profile", "list"]));
    let names: Vec<&str> = list
        .lines()
        .filter(|l| l.contains("[builtin"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.len() > 3, "{list}");
    for name in names {
        let v = warden_in(t.path(), &tmp, &["profile", "validate", name]);
        // Validating made nothing in warden's state.
        assert_eq!(entries(&t.path().join("warden")), Vec::<String>::new());
        let r = warden_in(
            t.path(),
            &tmp,
            &["run", "--no-tty", "--profile", name, "--", "true"],
        );
        assert_eq!(
            code(&v) == 0,
            code(&r) == 0,
            "validate and run disagree on {name}:\nvalidate: {}{}\nrun: {}",
            stdout(&v),
            stderr(&v),
            stderr(&r)
        );
        let _ = std::fs::remove_dir_all(t.path().join("warden"));
    }
    assert_eq!(entries(&tmp), Vec::<String>::new());
}

/// A relative `filesystem.workspace` in the owner's own profile file is
/// relative to the file's directory, for `run` as for `validate`. What
/// `run` cannot mount (a path through `..` or a symbolic link, which the
/// jail never follows) `validate` refuses too, at the value's place.
#[test]
fn a_relative_workspace_means_the_same_to_validate_and_to_run() {
    let t = TempDir::new("parity-relws");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let conf = t.path().join("conf");
    std::fs::create_dir_all(conf.join("proj")).unwrap();
    std::fs::write(conf.join("proj/marker.txt"), "from the profile's dir\n").unwrap();
    std::fs::create_dir_all(t.path().join("sibling")).unwrap();
    std::os::unix::fs::symlink(t.path().join("sibling"), conf.join("link")).unwrap();
    std::fs::write(conf.join("inside.yaml"), "filesystem:\n  workspace: proj\n").unwrap();
    std::fs::write(
        conf.join("climbs.yaml"),
        "hostname: x\nfilesystem:\n  workspace: ../sibling\n",
    )
    .unwrap();
    std::fs::write(
        conf.join("link.yaml"),
        "hostname: x\nfilesystem:\n  workspace: link\n",
    )
    .unwrap();
    let in_dir = |dir: &Path, args: &[&str]| -> Output {
        Command::new(warden_bin())
            .args(args)
            .current_dir(dir)
            .env("WARDEN_STATE_DIR", t.path().join("warden"))
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // From elsewhere: the profile's directory decides, not ours.
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let inside = conf.join("inside.yaml");
    let inside = inside.to_str().unwrap();
    let v = in_dir(&elsewhere, &["profile", "validate", inside]);
    assert_eq!(code(&v), 0, "{}", stderr(&v));
    let r = in_dir(
        &elsewhere,
        &[
            "run",
            "--no-tty",
            "--profile",
            inside,
            "--",
            "cat",
            "/workspace/marker.txt",
        ],
    );
    assert_eq!(stdout(&r), "from the profile's dir\n", "{}", stderr(&r));

    // The same answer from both, whatever it is, for a workspace that
    // climbs out of the profile's directory, one through a link, and a
    // profile named by a path with '..'.
    let climbs = conf.join("climbs.yaml");
    let link = conf.join("link.yaml");
    for (dir, profile, line) in [
        (elsewhere.as_path(), climbs.to_str().unwrap(), 3),
        (elsewhere.as_path(), link.to_str().unwrap(), 3),
        (conf.join("proj").as_path(), "../inside.yaml", 2),
    ] {
        let v = in_dir(dir, &["profile", "validate", profile]);
        let r = in_dir(
            dir,
            &["run", "--no-tty", "--profile", profile, "--", "true"],
        );
        assert_eq!(
            code(&v) == 0,
            code(&r) == 0,
            "validate and run disagree on {profile}:\nvalidate: {}{}\nrun: {}",
            stdout(&v),
            stderr(&v),
            stderr(&r)
        );
        if code(&v) != 0 {
            // Said at the value's place in the file, by its key.
            assert!(
                stderr(&v).starts_with(&format!("{profile}:{line}:"))
                    && stderr(&v).contains("filesystem.workspace")
                    && !stderr(&v).contains("--workspace"),
                "{}",
                stderr(&v)
            );
        }
    }
    assert_eq!(entries(&tmp), Vec::<String>::new());
}

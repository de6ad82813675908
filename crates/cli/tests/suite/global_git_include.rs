//! Outside review 24 (F6): a work-tree file that the owner's *global* git
//! config includes is config git obeys in every repository, this one
//! included; a sandbox that writes `core.fsmonitor` there runs a program
//! at the owner's next `git status`. Through the real binary, with HOME
//! a temporary home holding the `.gitconfig`: such a file, and the
//! work-tree files it includes in turn, are flagged `git-config` and a
//! plain commit does not land them.

use crate::common::review::rules_of;
use crate::common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// warden with its state in `state`/warden and `home` as the owner's home
/// (its `.gitconfig` the global git config), stdin closed.
fn warden_home(state: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("GIT_CONFIG_GLOBAL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `warden diff NAME --json` under `home`: each change's path and its
/// flags' rules.
fn flag_rules(state: &Path, home: &Path, name: &str) -> Vec<(String, Vec<String>)> {
    let json = ok(&warden_home(state, home, &["diff", name, "--json"]));
    crate::common::daemon::flag_rules(&serde_json::from_str(&json).unwrap())
}

#[test]
fn a_work_tree_file_the_owners_global_git_config_includes_is_flagged_and_not_committed() {
    let state = TempDir::new("gginc-state");
    let home = TempDir::new("gginc-home");
    let h = home.path();
    let w = h.join("src/app");
    std::fs::create_dir_all(w.join("tools/more")).unwrap();
    std::fs::create_dir_all(w.join("team")).unwrap();
    std::fs::write(
        w.join("tools/gitconfig"),
        "[include]\n\tpath = more/deep.cfg\n",
    )
    .unwrap();
    std::fs::write(w.join("tools/more/deep.cfg"), "[alias]\n\tst = status\n").unwrap();
    std::fs::write(w.join("team/ci.cfg"), "[alias]\n\tco = checkout\n").unwrap();
    std::fs::write(w.join("a"), "a\n").unwrap();
    if !git_in(&w, &["init", "-q"]) {
        skip("git is not available");
        return;
    }
    // The global config names one file by `~`, and includes a file of the
    // home that names another relatively (against its own directory),
    // under a condition that does not hold today.
    std::fs::write(
        h.join(".gitconfig"),
        "[include]\n\tpath = ~/src/app/tools/gitconfig\n\tpath = ~/team.cfg\n",
    )
    .unwrap();
    std::fs::write(
        h.join("team.cfg"),
        "[includeIf \"onbranch:ci\"]\n\tpath = src/./app/team/ci.cfg\n",
    )
    .unwrap();
    let files = ["tools/gitconfig", "tools/more/deep.cfg", "team/ci.cfg"];
    fsmonitor_written_is_flagged_and_not_committed(state.path(), h, &w, &files);
}

/// Before: a work-tree file that the repository's own git config (or a
/// file that config includes) names by `~` (`include.path =
/// ~/src/app/tools/team.cfg`, under `includeIf "gitdir:~/src/"` too) was
/// never followed, so a sandbox that wrote `core.fsmonitor` there was
/// unflagged and a plain commit landed it: the owner's next `git status`
/// ran the program. Now `~/` is the owner's home as the command line
/// knows it, `~user/` is taken against every directory above the
/// workspace (any may be that user's home), and each file reached is
/// flagged `git-config`.
#[test]
fn a_work_tree_file_the_repositorys_config_includes_through_home_is_flagged_and_not_committed() {
    let state = TempDir::new("homeinc-state");
    let home = TempDir::new("homeinc-home");
    let h = home.path();
    let w = h.join("src/app");
    std::fs::create_dir_all(w.join("tools")).unwrap();
    for f in ["team.cfg", "local.cfg", "other.cfg", "deep.cfg"] {
        std::fs::write(w.join("tools").join(f), "[alias]\n\tst = status\n").unwrap();
    }
    std::fs::write(w.join("a"), "a\n").unwrap();
    if !git_in(&w, &["init", "-q"]) {
        skip("git is not available");
        return;
    }
    // The owner's repository config, and a work-tree file it includes
    // that includes another by `~` in turn.
    let mut config = std::fs::read_to_string(w.join(".git/config")).unwrap();
    config.push_str(
        "[include]\n\tpath = ~/src/app/tools/team.cfg\n[includeIf \"gitdir:~/src/\"]\n\tpath = ~/src/app/tools/local.cfg\n[include]\n\tpath = ~root/src/app/tools/other.cfg\n",
    );
    std::fs::write(w.join(".git/config"), config).unwrap();
    std::fs::write(
        w.join("tools/team.cfg"),
        "[include]\n\tpath = ~/src/app/tools/deep.cfg\n",
    )
    .unwrap();
    let files = [
        "tools/team.cfg",
        "tools/local.cfg",
        "tools/other.cfg",
        "tools/deep.cfg",
    ];
    fsmonitor_written_is_flagged_and_not_committed(state.path(), h, &w, &files);
}

/// A sandbox over the work tree `w` under `home` appends `core.fsmonitor`
/// to each of `files` and changes the plain file `a`: each of `files` is
/// flagged `git-config` and `a` is not, and a plain commit (status 125)
/// lands none of them.
fn fsmonitor_written_is_flagged_and_not_committed(
    state: &Path,
    home: &Path,
    w: &Path,
    files: &[&str],
) {
    let fsmonitor = "[core]\\n\\tfsmonitor = \\\"touch /tmp/pwned; false\\\"\\n";
    let writes: Vec<String> = files
        .iter()
        .map(|f| format!("printf '{fsmonitor}' >> {f}"))
        .collect();
    let out = warden_home(
        state,
        home,
        &[
            "run",
            "--no-tty",
            "--overlay",
            "-w",
            w.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &format!("{} && echo b > a", writes.join(" && ")),
        ],
    );
    ok(&out);
    let err = stderr(&out);
    let name = err
        .split("kept in sandbox ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no sandbox named: {err}"))
        .to_string();
    let all = flag_rules(state, home, &name);
    for path in files {
        assert!(
            rules_of(&all, path).iter().any(|r| r == "git-config"),
            "{path} is not flagged git-config: {all:?}"
        );
    }
    assert!(rules_of(&all, "a").is_empty(), "{all:?}");
    ok(&warden_home(
        state,
        home,
        &["diff", &name, "--color", "never"],
    ));
    let out = warden_home(state, home, &["commit", &name]);
    assert_eq!(
        out.status.code(),
        Some(125),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    for path in files {
        assert!(
            !std::fs::read_to_string(w.join(path))
                .unwrap()
                .contains("fsmonitor"),
            "{path} landed"
        );
    }
}

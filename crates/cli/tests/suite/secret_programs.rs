//! A token never rewrites what the owner's secret program runs, attacked
//! through the real daemon (outside review 21, findings 1 and 2).
//!
//! The owner's profile runs a program on the host for a secret
//! (`from_command`). Before: a program kept in a project under a
//! `--workspace-root`, run by the project's own virtualenv, loaded a
//! `.pth` file a token's sandbox over `.venv` had committed (the closure
//! held only the script): the token's code ran as root when the profile
//! was named. A relative script ran from the daemon's working directory,
//! a project a token could write. A variable of the daemon's environment
//! (`BASH_ENV`, `PYTHONPATH`) reached the program. Now: a program (its
//! links, its `#!` interpreter chain, the paths its arguments name) under
//! a workspace root or the state is refused before anything starts (403,
//! reason `secret_program_writable`); a relative program is a profile
//! error (`relative_secret_program`); the program runs from `/` with a
//! fixed environment. No marker appears.

use crate::common::daemon::*;
use crate::common::owner::{name_profile, path_in_pieces, OwnerHost};
use crate::common::*;
use std::path::Path;

#[test]
fn a_pth_file_a_token_commits_into_the_projects_venv_never_runs_as_the_owner() {
    let Some(host) = OwnerHost::new("secret-venv") else {
        return;
    };
    if !Path::new("/usr/bin/python3").exists() {
        return skip("python3 is not installed");
    }
    let proj = host.root.join("proj");
    std::fs::create_dir_all(proj.join("tools")).unwrap();
    let made = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(proj.join(".venv"))
        .status();
    if !made.is_ok_and(|s| s.success()) {
        return skip("python3 cannot make a virtualenv here");
    }
    let program = proj.join("tools/get-token");
    std::fs::write(
        &program,
        format!(
            "#!{}\nprint('tok-123')\n",
            proj.join(".venv/bin/python3").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    host.secret_profile("proj", &[program.to_str().unwrap()]);
    let d = host.daemon_over_root();
    let t = host.agent();

    // The token's sandbox over the venv plants a .pth and commits it.
    let venv = proj.join(".venv");
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.is_dir())
        .unwrap();
    let rel = site.strip_prefix(&venv).unwrap().join("zz.pth");
    let pth = format!("import os; os.system('touch {}')\n", host.marker.display());
    let body = serde_json::json!({"name": "v1", "workspace": venv, "start": true}).to_string();
    let (s, b) = json_as(&d, &t, "POST", "/v1/sandboxes", &body);
    if s == 201 {
        let script = format!("printf '%s' {:?} > /workspace/{}", pth, rel.display());
        shell_as(&d, &t, "v1", &script);
        json_as(&d, &t, "POST", "/v1/sandboxes/v1/stop", "");
        json_as(&d, &t, "POST", "/v1/sandboxes/v1/commit", "{}");
    } else {
        assert_eq!(s, 403, "{b}");
    }
    if !venv.join(&rel).exists() {
        // Whatever route a token takes to the venv, this is what it writes.
        std::fs::write(venv.join(&rel), &pth).unwrap();
    }

    let (s, b) = name_profile(&d, &t, "proj");
    assert_eq!(
        s, 403,
        "a secret program under a workspace root is not run: {b}"
    );
    assert_eq!(b["reason"], "secret_program_writable", "{b}");
    assert!(
        b["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the profile's secret program lies where tokens may write"),
        "{b}"
    );
    assert!(
        !b.to_string().contains(host.root.to_str().unwrap()),
        "the token is not told where the owner keeps the program: {b}"
    );
    assert!(
        !host.marker_appeared(),
        "the token's .pth ran on the host with the owner's trust"
    );
}

#[test]
fn a_relative_secret_script_never_runs_from_the_daemons_working_directory() {
    let Some(host) = OwnerHost::new("secret-relative") else {
        return;
    };
    // What a token's committed change to the project would leave there.
    let app = host.project(
        "app",
        "tools/get-token.sh",
        &format!("touch {}\necho tok-abc\n", host.marker.display()),
    );
    host.secret_profile("rel", &["/bin/sh", "tools/get-token.sh"]);
    host.secret_profile("relprog", &["tools/get-token.sh"]);
    let d = host.daemon_from(Some(&app), &host.over_root(), &[]);
    let t = host.agent();

    let (s, b) = name_profile(&d, &t, "rel");
    assert_ne!(s, 201, "{b}");
    assert!(
        !host.marker_appeared(),
        "the script in the daemon's working directory ran as the owner"
    );

    // A relative program is the owner's profile error: the token is told
    // only that the profile does not compose, the owner where and why.
    let (s, b) = name_profile(&d, &t, "relprog");
    assert_eq!(s, 422, "a relative program is a profile error: {b}");
    assert_eq!(b["reason"], "owners_profile_invalid", "{b}");
    assert!(!host.marker_appeared());
    let file = host.profile("relprog");
    let out = std::process::Command::new(warden_bin())
        .args(["profile", "validate"])
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!("{}:2:3:", file.display())) && said.contains("is a relative path"),
        "{said}"
    );
}

#[test]
fn the_daemons_environment_does_not_reach_a_secret_program() {
    let Some(host) = OwnerHost::new("secret-env") else {
        return;
    };
    if !Path::new("/bin/bash").exists() {
        return skip("bash is not installed");
    }
    let hook = host.dir.path().join("bash-env.sh");
    std::fs::write(&hook, format!("touch {}\n", host.marker.display())).unwrap();
    let get = host.dir.path().join("get-token.sh");
    std::fs::write(&get, "echo tok-abc\n").unwrap();
    host.secret_profile("envy", &["/bin/bash", get.to_str().unwrap()]);
    let d = host.daemon_from(None, &host.over_root(), &[("BASH_ENV", &hook)]);
    let t = host.agent();
    let (s, b) = name_profile(&d, &t, "envy");
    assert_eq!(s, 201, "{b}");
    assert!(
        !host.marker_appeared(),
        "BASH_ENV of the daemon's environment ran in the secret program"
    );
}

/// Before: the rule read a secret program's arguments for paths, but an
/// interpreter given code inline builds its paths at run time: the
/// owner's `python3 -c "...chr(47).join([...])..."`, `perl -e`, `node
/// -e`, an awk program, each reached directly, through `env`, `nice`,
/// `timeout`, `xargs`, or from a shell line, ran a script a token had
/// written under the workspace root, and it left its mark as the owner.
/// Now inline code of an interpreter warden does not read is refused
/// (403, `secret_program_unreadable_args`) before anything starts, and no
/// mark appears; the same interpreter given a script of the owner's
/// outside the root still runs.
#[test]
fn an_interpreter_given_code_inline_never_runs_a_tokens_script_as_the_owner() {
    let Some(host) = OwnerHost::new("secret-inline") else {
        return;
    };
    // What a token's committed change to the project leaves there.
    host.project(
        "proj",
        "tools/get.sh",
        &format!("touch {}\necho tok-abc\n", host.marker.display()),
    );
    let script = host.root.join("proj/tools/get.sh");
    // The script's path in pieces, none of which names a directory.
    let pieces = path_in_pieces(&script);
    let list = pieces.join(", ");
    let python =
        format!("import subprocess; subprocess.run(['sh', chr(47) + chr(47).join([{list}])])");
    let perl = format!("system('sh', join(chr(47), '', {list}))");
    let node = format!(
        "require('child_process').execFileSync('sh', [['', {list}].join(String.fromCharCode(47))])"
    );
    let awk = format!(
        "BEGIN {{ s = sprintf(\"%c\", 47); system(\"sh \" s {}) }}",
        pieces
            .iter()
            .map(|p| format!("\"{}\"", p.trim_matches('\'')))
            .collect::<Vec<_>>()
            .join(" s ")
    );
    let shell_line = format!("exec /usr/bin/python3 -c \"{python}\"");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("/usr/bin/python3", vec!["/usr/bin/python3", "-c", &python]),
        ("/usr/bin/perl", vec!["/usr/bin/perl", "-e", &perl]),
        ("/usr/bin/node", vec!["/usr/bin/node", "-e", &node]),
        ("/usr/bin/awk", vec!["/usr/bin/awk", &awk]),
        (
            "/usr/bin/python3",
            vec!["/usr/bin/env", "python3", "-c", &python],
        ),
        (
            "/usr/bin/perl",
            vec!["/usr/bin/nice", "-n", "5", "perl", "-le", &perl],
        ),
        (
            "/usr/bin/node",
            vec!["/usr/bin/timeout", "5", "node", "-e", &node],
        ),
        (
            "/usr/bin/python3",
            vec!["/usr/bin/xargs", "python3", "-c", &python],
        ),
        ("/usr/bin/python3", vec!["/bin/sh", "-c", &shell_line]),
    ];
    let d = host.daemon_over_root();
    let t = host.agent();
    for (i, (needs, argv)) in cases.iter().enumerate() {
        if !Path::new(needs).exists() {
            skip(&format!("{needs} is not installed"));
            continue;
        }
        let name = format!("inline{i}");
        host.secret_profile(&name, argv);
        let (s, b) = name_profile(&d, &t, &name);
        assert!(
            !host.marker_appeared(),
            "{argv:?} ran the token's script as the owner: {s} {b}"
        );
        assert_eq!(s, 403, "{argv:?}: {b}");
        assert_eq!(
            b["reason"], "secret_program_unreadable_args",
            "{argv:?}: {b}"
        );
    }
    // The owner's own command line refuses it too, naming the remedy.
    if Path::new("/usr/bin/python3").exists() {
        let out = host.owner(&["run", "--no-tty", "--profile", "inline0", "--", "true"]);
        let said = stderr(&out);
        assert!(!host.marker_appeared(), "{said}");
        assert!(!out.status.success(), "{said}");
        assert!(
            said.contains("secret_program_unreadable_args")
                && said.contains("put that code in a script of your own"),
            "{said}"
        );
    }
    // A script of the owner's, outside the root, given to the same
    // interpreter, still runs.
    if Path::new("/usr/bin/python3").exists() {
        let own = host.dir.path().join("home/get-token.py");
        std::fs::write(&own, "print('tok-own')\n").unwrap();
        host.secret_profile("own", &["/usr/bin/python3", own.to_str().unwrap()]);
        let (s, b) = name_profile(&d, &t, "own");
        assert_eq!(s, 201, "{b}");
    }
}

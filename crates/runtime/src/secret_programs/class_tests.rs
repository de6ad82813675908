//! The rule's classes of refusal, attacked by spelling: a command its
//! input names (`xargs -I{} {}`), a command run at the other end of
//! `ssh` (which may be this host) or from a login's home, a program that
//! runs commands in a file tree of its own (containers, namespaces,
//! chroots, sandboxes), a directory that holds a root (a program moved
//! there reaches the root by names no word shows), a path through a
//! process's own views (`/proc/self/cwd`, `/dev/fd/3`), and a file with
//! another name (a hard link). Each spelling ran the token's script
//! under the root before; the owner's ordinary programs still run.

use super::*;

fn secret(argv: &[String]) -> SecretSpec {
    SecretSpec {
        name: "S".into(),
        source: SecretSource::Command(argv.to_vec()),
        hosts: Vec::new(),
        in_bodies: false,
    }
}

/// A spelling (`{h}` the owner's home, which holds the root `{r}`;
/// `{t}` the bare name of the top directory holding both; `{hl}` the
/// owner's script hard-linked to the root's) and the refusal it meets.
type Attack = (Vec<&'static str>, Result<(), &'static str>);

fn attacks() -> Vec<Attack> {
    [input_and_remote(), trees(), places()].concat()
}

/// The program xargs or parallel runs, named by its input; the command
/// at the other end of ssh or a login's.
fn input_and_remote() -> Vec<Attack> {
    let w = Err(SECRET_PROGRAM_WRITABLE);
    let u = Err(SECRET_PROGRAM_UNREADABLE_ARGS);
    vec![
        // The program xargs or parallel runs, named by its input.
        (
            vec!["/usr/bin/xargs", "-a", "/etc/hostname", "-I{}", "{}"],
            u,
        ),
        (
            vec!["/usr/bin/xargs", "-a", "/etc/hostname", "-I", "X", "X"],
            u,
        ),
        (
            vec!["/usr/bin/xargs", "-a", "/etc/hostname", "--replace=C", "C"],
            u,
        ),
        (
            vec!["/usr/bin/xargs", "-0ra", "/etc/hostname", "-i", "{}"],
            u,
        ),
        (vec!["/usr/bin/xargs", "-a", "/etc/hostname", "npx"], u),
        (vec!["/usr/bin/xargs", "-a", "/etc/hostname", "prlimit"], u),
        (
            vec![
                "/usr/bin/xargs",
                "-a",
                "/etc/hostname",
                "-I{}",
                "setpriv",
                "{}",
            ],
            u,
        ),
        (vec!["/bin/sh", "-c", "cat /etc/hostname | xargs -I% %"], u),
        (vec!["/bin/sh", "-c", "cat /etc/hostname | parallel"], u),
        (
            vec![
                "/usr/bin/ionice",
                "-c3",
                "xargs",
                "-a",
                "/etc/hostname",
                "-I{}",
                "{}",
            ],
            u,
        ),
        // The command at the other end of ssh (this host, from a home),
        // and the ssh family's commands.
        (vec!["/usr/bin/ssh", "localhost", "proj/get.sh"], w),
        (
            vec!["/usr/bin/ssh", "-p", "22", "localhost", "exec proj/get.sh"],
            w,
        ),
        (
            vec![
                "/usr/bin/ssh",
                "-l",
                "me",
                "localhost",
                "cd proj && ./get.sh",
            ],
            u,
        ),
        (vec!["/usr/bin/ssh", "localhost", "sh $PWD/proj/get.sh"], u),
        (
            vec![
                "/usr/bin/ssh",
                "-o",
                "PermitLocalCommand=yes",
                "-o",
                "LocalCommand=id",
                "h",
            ],
            u,
        ),
        (vec!["/usr/bin/ssh", "-o", "RemoteCommand=id", "h"], u),
        (vec!["/usr/bin/scp", "-o", "ProxyCommand=id", "a", "b"], u),
        (
            vec![
                "/usr/bin/env",
                "GIT_SSH_COMMAND=sh proj/get.sh",
                "git",
                "fetch",
            ],
            u,
        ),
        (
            vec!["/usr/bin/rsync", "-e", "ssh", "localhost:x", "/tmp/y"],
            u,
        ),
        // A login's shell runs from a home.
        (vec!["/usr/bin/sudo", "-i", "proj/get.sh"], u),
        (vec!["/usr/bin/sudo", "-iu", "me", "proj/get.sh"], u),
        (vec!["/bin/su", "-", "me", "-c", "proj/get.sh"], u),
        (vec!["/sbin/runuser", "-l", "me", "-c", "proj/get.sh"], u),
    ]
}

/// Containers, namespaces, chroots, sandboxes.
fn trees() -> Vec<Attack> {
    let u = Err(SECRET_PROGRAM_UNREADABLE_ARGS);
    vec![
        (
            vec![
                "/usr/bin/docker",
                "run",
                "-v",
                "{h}:/h",
                "img",
                "/h/proj/get.sh",
            ],
            u,
        ),
        (
            vec![
                "/usr/bin/podman",
                "run",
                "--volumes-from",
                "c",
                "img",
                "/x/get.sh",
            ],
            u,
        ),
        (
            vec!["/usr/bin/bwrap", "--bind", "/", "/", "/x/proj/get.sh"],
            u,
        ),
        (vec!["/usr/bin/systemd-nspawn", "-D", "/", "/x/get.sh"], u),
        (
            vec!["/usr/bin/warden", "run", "-w", "{h}", "proj/get.sh"],
            u,
        ),
        (
            vec![
                "/usr/bin/docker",
                "run",
                "-v",
                "{h}:/h",
                "img",
                "sh",
                "/h/proj/get.sh",
            ],
            u,
        ),
        (
            vec![
                "/usr/bin/docker",
                "run",
                "--volumes-from",
                "c",
                "img",
                "sh",
                "/x/get.sh",
            ],
            u,
        ),
        (
            vec![
                "/usr/bin/podman",
                "run",
                "-v",
                "vol:/x",
                "img",
                "sh",
                "/x/get.sh",
            ],
            u,
        ),
        (vec!["/usr/bin/nerdctl", "exec", "c", "sh", "/x/get.sh"], u),
        (
            vec!["/usr/bin/systemd-nspawn", "--bind=/srv", "-D", "/", "sh"],
            u,
        ),
        (
            vec!["/usr/bin/bwrap", "--bind", "/", "/", "sh", "/x/proj/get.sh"],
            u,
        ),
        (
            vec!["/usr/bin/unshare", "-r", "--wd=/", "sh", "x/get.sh"],
            u,
        ),
        (
            vec!["/usr/bin/nsenter", "-t", "1", "-m", "sh", "x/get.sh"],
            u,
        ),
        (vec!["/usr/sbin/chroot", "/", "sh", "x/get.sh"], u),
        (
            vec![
                "/bin/sh",
                "-c",
                "unshare -rm sh -c 'mount --bind / /mnt; sh /mnt/x'",
            ],
            u,
        ),
        (vec!["warden", "run", "--", "sh", "x/get.sh"], u),
        (
            vec![
                "/usr/bin/systemd-run",
                "--user",
                "-p",
                "WorkingDirectory={h}",
                "sh",
                "proj/get.sh",
            ],
            u,
        ),
        (
            vec![
                "/usr/bin/systemd-run",
                "--user",
                "-p",
                "BindPaths=/:/x",
                "sh",
                "/x/get.sh",
            ],
            u,
        ),
    ]
}

/// A directory that holds a root, a path through a process's views, a
/// file with another name.
fn places() -> Vec<Attack> {
    let w = Err(SECRET_PROGRAM_WRITABLE);
    let u = Err(SECRET_PROGRAM_UNREADABLE_ARGS);
    vec![
        // A directory that holds a root, named by any word.
        (vec!["/usr/bin/make", "-C", "{h}", "-f", "proj/Makefile"], u),
        (
            vec!["/usr/local/bin/git", "-C", "{h}", "commit", "-m", "x"],
            u,
        ),
        (vec!["/usr/bin/git", "-C{t}", "status"], u),
        (
            vec!["/usr/bin/cmake", "-E", "chdir", "{t}", "sh", "x/get.sh"],
            u,
        ),
        (vec!["/usr/bin/sudo", "-D", "{h}", "sh", "proj/get.sh"], u),
        (vec!["/usr/bin/npm", "--prefix={h}", "run", "get"], u),
        (vec!["/usr/bin/yarn", "--cwd", "{t}", "run", "get"], u),
        (
            vec![
                "/usr/bin/env",
                "PYTHONPATH={h}",
                "python3",
                "-m",
                "proj.get",
            ],
            u,
        ),
        (
            vec!["/usr/bin/nice", "-n", "5", "git", "-C", "~", "commit"],
            u,
        ),
        (vec!["/usr/bin/stdbuf", "-o0", "make", "-C", "{h}"], u),
        (vec!["/usr/bin/watch", "-n1", "make -C {h}"], u),
        (
            vec!["/usr/bin/timeout", "5", "npx", "--prefix", "~", "get"],
            u,
        ),
        (vec!["/usr/bin/npm", "--prefix", "{r}", "run", "get"], w),
        // A path through a process's own views.
        (
            vec!["/bin/sh", "-c", "cd {h} && sh /proc/self/cwd/proj/get.sh"],
            u,
        ),
        (vec!["/bin/sh", "/proc/self/root{r}/get.sh"], w),
        (vec!["/bin/sh", "/proc/1/cwd/x/get.sh"], u),
        (
            vec!["/bin/sh", "-c", "exec 3< /etc/hostname; sh /dev/fd/3"],
            u,
        ),
        (vec!["/bin/bash", "/dev/stdin"], u),
        // A file with another name under the root.
        (vec!["{hl}"], u),
        (vec!["/bin/sh", "{hl}"], u),
        (vec!["/bin/sh", "-c", "exec {hl}"], u),
    ]
}

/// The shell reading's own refusals, which hold whatever is writable.
const SHELL_READING: &[&str] = &["a shell script it is given", "an argument before its shell"];

#[test]
fn every_spelling_of_a_class_the_rule_cannot_follow_is_refused() {
    let t = std::env::temp_dir().join(format!("warden-secret-classes-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&t);
    std::fs::create_dir_all(t.join("home/proj")).unwrap();
    let t = t.canonicalize().unwrap();
    let home = t.join("home");
    let root = home.join("proj");
    let get = root.join("get.sh");
    std::fs::write(&get, "#!/bin/sh\ntouch /x\n").unwrap();
    let linked = home.join("get-token");
    std::fs::hard_link(&get, &linked).unwrap();
    // The top directory holding the root, by its bare name from `/`.
    let top = t
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap()
        .to_string();
    let fill = |a: &str| {
        a.replace("{hl}", linked.to_str().unwrap())
            .replace("{r}", root.to_str().unwrap())
            .replace("{h}", home.to_str().unwrap())
            .replace("{t}", &top)
    };
    let writable = [root.clone()];
    let env = [("HOME".to_string(), home.clone().into_os_string())];
    let code = |argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|a| fill(a)).collect();
        check_with(&[secret(&argv)], &writable, &env).map_err(|r| r.code())
    };
    let ran: Vec<String> = attacks()
        .iter()
        .filter(|(argv, want)| code(argv) != *want)
        .map(|(argv, _)| format!("{argv:?}: {:?}", code(argv)))
        .collect();
    assert!(
        ran.is_empty(),
        "not refused as they should be:\n{}",
        ran.join("\n")
    );
    // With nothing a token may write, the owner's own lines run, but
    // for what the shell's reading refuses whatever is writable.
    for (argv, _) in attacks() {
        let argv: Vec<String> = argv.iter().map(|a| fill(a)).collect();
        let r = check_with(&[secret(&argv)], &[], &env);
        assert!(
            r.as_ref()
                .err()
                .is_none_or(|r| SHELL_READING.contains(&r.what)),
            "{argv:?}: {r:?}"
        );
    }
    warden_workspace::fsutil::remove_tree(&t).unwrap();
}

#[test]
fn the_owners_ordinary_secret_programs_still_run_with_a_root_under_home() {
    let t = std::env::temp_dir().join(format!("warden-secret-ordinary-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&t);
    std::fs::create_dir_all(t.join("home/proj")).unwrap();
    std::fs::create_dir_all(t.join("home/.gnupg")).unwrap();
    let t = t.canonicalize().unwrap();
    let home = t.join("home");
    std::fs::write(home.join(".token"), "x\n").unwrap();
    let writable = [home.join("proj")];
    let env = [("HOME".to_string(), home.clone().into_os_string())];
    for argv in [
        &["pass", "show", "x"][..],
        &["pass", "show", "work/github"],
        &["op", "read", "op://vault/item/field"],
        &["gh", "auth", "token"],
        &["security", "find-generic-password", "-s", "x", "-w"],
        &["cat", "~/.token"],
        &["/bin/cat", "$HOME/.token"],
        &["sh", "-c", "pass show x"],
        &["sh", "-c", "cat ~/.token | head -n1"],
        &["sh", "-c", "cd ~ && pass show x"],
        &[
            "aws",
            "secretsmanager",
            "get-secret-value",
            "--secret-id",
            "prod/api",
            "--query",
            "SecretString",
            "--output",
            "text",
        ],
        &["vault", "kv", "get", "-field=token", "secret/api"],
        &["gpg", "--homedir", "~/.gnupg", "-q", "-d", "~/.token"],
        &["sh", "-c", "pass show x | xargs printf %s"],
        &[
            "/usr/bin/xargs",
            "-a",
            "/etc/hostname",
            "-I{}",
            "echo",
            "{}",
        ],
        &[
            "/usr/bin/ssh",
            "-o",
            "BatchMode=yes",
            "-p",
            "22",
            "h",
            "cat",
            "t",
        ],
        &["/usr/bin/timeout", "5", "pass", "show", "x"],
        &["sh", "-c", "pass show x 2>/dev/null"],
    ] {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            check_with(&[secret(&argv)], &writable, &env),
            Ok(()),
            "{argv:?}"
        );
    }
    warden_workspace::fsutil::remove_tree(&t).unwrap();
}

/// Spellings of the same family that the rule's paths and shell reading
/// refused already: they stay refused beside the classes (`sh
/// /dev/fd/3` after `exec 3<` a root's file now meets the view first).
#[test]
fn the_families_spellings_read_by_their_paths_stay_refused() {
    let t = std::env::temp_dir().join(format!("warden-secret-family-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&t);
    std::fs::create_dir_all(t.join("home/proj")).unwrap();
    let t = t.canonicalize().unwrap();
    let home = t.join("home");
    let root = home.join("proj");
    let writable = [root.clone()];
    let env = [("HOME".to_string(), home.clone().into_os_string())];
    let w = Err(SECRET_PROGRAM_WRITABLE);
    let u = Err(SECRET_PROGRAM_UNREADABLE_ARGS);
    let r = root.to_str().unwrap();
    let cases: Vec<(Vec<String>, Result<(), &str>)> = vec![
        (
            vec!["/bin/sh".into(), "-c".into(), format!("cd {r} && ./get.sh")],
            w,
        ),
        (
            vec![
                "/usr/bin/env".into(),
                "-C".into(),
                r.into(),
                "./get.sh".into(),
            ],
            w,
        ),
        (
            vec![
                "/usr/bin/sudo".into(),
                format!("--chdir={r}"),
                "./get.sh".into(),
            ],
            w,
        ),
        (
            vec![
                "/bin/bash".into(),
                "-c".into(),
                format!("sh <(cat {r}/get.sh)"),
            ],
            w,
        ),
        (
            vec!["/bin/sh".into(), "-c".into(), format!(". {r}/get.sh")],
            w,
        ),
        (
            vec![
                "/bin/bash".into(),
                "-c".into(),
                "source ~/proj/get.sh".into(),
            ],
            w,
        ),
        (
            vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("exec 3<{r}/get.sh; sh /dev/fd/3"),
            ],
            u,
        ),
        (
            vec!["/bin/bash".into(), "-c".into(), "bash <<< 'sh x'".into()],
            u,
        ),
        (
            vec!["/bin/busybox".into(), "sh".into(), format!("{r}/get.sh")],
            w,
        ),
        (
            vec![
                "/usr/bin/cmake".into(),
                "-P".into(),
                format!("{r}/get.cmake"),
            ],
            w,
        ),
        (
            vec![
                "/usr/local/bin/git".into(),
                "-C".into(),
                r.into(),
                "commit".into(),
            ],
            w,
        ),
        (
            vec![
                "/usr/bin/setsid".into(),
                "sh".into(),
                "-c".into(),
                "~/proj/get.sh".into(),
            ],
            w,
        ),
        (
            vec![
                "/usr/bin/ssh".into(),
                "-F".into(),
                format!("{r}/ssh_config"),
                "h".into(),
            ],
            w,
        ),
        (
            vec![
                "/usr/bin/scp".into(),
                "-S".into(),
                format!("{r}/get.sh"),
                "a".into(),
                "b".into(),
            ],
            w,
        ),
    ];
    for (argv, want) in cases {
        let got = check_with(&[secret(&argv)], &writable, &env).map_err(|r| r.code());
        assert_eq!(got, want, "{argv:?}");
    }
    warden_workspace::fsutil::remove_tree(&t).unwrap();
}

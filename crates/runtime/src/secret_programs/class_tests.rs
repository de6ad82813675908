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

/// An owner's home under a directory of its own, holding the root
/// `proj`, and the home the rule is told of (`HOME`). Removed when
/// dropped.
struct Home {
    top: PathBuf,
    home: PathBuf,
    root: PathBuf,
    env: [(String, std::ffi::OsString); 1],
}

impl Home {
    /// The home, with `dirs` made in it besides the root.
    fn new(tag: &str, dirs: &[&str]) -> Home {
        let t = std::env::temp_dir().join(format!("warden-secret-{tag}-{}", std::process::id()));
        let _ = warden_workspace::fsutil::remove_tree(&t);
        for d in ["proj"].iter().chain(dirs) {
            std::fs::create_dir_all(t.join("home").join(d)).unwrap();
        }
        let top = t.canonicalize().unwrap();
        let home = top.join("home");
        let root = home.join("proj");
        let env = [("HOME".to_string(), home.clone().into_os_string())];
        Home {
            top,
            home,
            root,
            env,
        }
    }

    /// The rule's answer for a secret read from `argv`, `writable` what a
    /// token may write: its refusal's code, if any.
    fn code(&self, argv: &[String], writable: &[PathBuf]) -> Result<(), &'static str> {
        check_with(&[secret(argv)], writable, &self.env).map_err(|r| r.code())
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = warden_workspace::fsutil::remove_tree(&self.top);
    }
}

/// A spelling (`{h}` the owner's home, which holds the root `{r}`;
/// `{t}` the bare name of the top directory holding both; `{hl}` the
/// owner's script hard-linked to the root's) and the refusal it meets.
type Attack = (&'static [&'static str], Result<(), &'static str>);

fn attacks() -> impl Iterator<Item = &'static Attack> {
    INPUT_AND_REMOTE.iter().chain(TREES).chain(PLACES)
}

/// The program xargs or parallel runs, named by its input; the command
/// at the other end of ssh or a login's.
const INPUT_AND_REMOTE: &[Attack] = &[
    // The program xargs or parallel runs, named by its input.
    (&["/usr/bin/xargs", "-a", "/etc/hostname", "-I{}", "{}"], U),
    (
        &["/usr/bin/xargs", "-a", "/etc/hostname", "-I", "X", "X"],
        U,
    ),
    (
        &["/usr/bin/xargs", "-a", "/etc/hostname", "--replace=C", "C"],
        U,
    ),
    (&["/usr/bin/xargs", "-0ra", "/etc/hostname", "-i", "{}"], U),
    (&["/usr/bin/xargs", "-a", "/etc/hostname", "npx"], U),
    (&["/usr/bin/xargs", "-a", "/etc/hostname", "prlimit"], U),
    (
        &[
            "/usr/bin/xargs",
            "-a",
            "/etc/hostname",
            "-I{}",
            "setpriv",
            "{}",
        ],
        U,
    ),
    (&["/bin/sh", "-c", "cat /etc/hostname | xargs -I% %"], U),
    (&["/bin/sh", "-c", "cat /etc/hostname | parallel"], U),
    (
        &[
            "/usr/bin/ionice",
            "-c3",
            "xargs",
            "-a",
            "/etc/hostname",
            "-I{}",
            "{}",
        ],
        U,
    ),
    // The command at the other end of ssh (this host, from a home),
    // and the ssh family's commands.
    (&["/usr/bin/ssh", "localhost", "proj/get.sh"], W),
    (
        &["/usr/bin/ssh", "-p", "22", "localhost", "exec proj/get.sh"],
        W,
    ),
    (
        &[
            "/usr/bin/ssh",
            "-l",
            "me",
            "localhost",
            "cd proj && ./get.sh",
        ],
        U,
    ),
    (&["/usr/bin/ssh", "localhost", "sh $PWD/proj/get.sh"], U),
    (
        &[
            "/usr/bin/ssh",
            "-o",
            "PermitLocalCommand=yes",
            "-o",
            "LocalCommand=id",
            "h",
        ],
        U,
    ),
    (&["/usr/bin/ssh", "-o", "RemoteCommand=id", "h"], U),
    (&["/usr/bin/scp", "-o", "ProxyCommand=id", "a", "b"], U),
    (
        &[
            "/usr/bin/env",
            "GIT_SSH_COMMAND=sh proj/get.sh",
            "git",
            "fetch",
        ],
        U,
    ),
    (&["/usr/bin/rsync", "-e", "ssh", "localhost:x", "/tmp/y"], U),
    // A login's shell runs from a home.
    (&["/usr/bin/sudo", "-i", "proj/get.sh"], U),
    (&["/usr/bin/sudo", "-iu", "me", "proj/get.sh"], U),
    (&["/bin/su", "-", "me", "-c", "proj/get.sh"], U),
    (&["/sbin/runuser", "-l", "me", "-c", "proj/get.sh"], U),
];

/// Containers, namespaces, chroots, sandboxes.
const TREES: &[Attack] = &[
    (
        &[
            "/usr/bin/docker",
            "run",
            "-v",
            "{h}:/h",
            "img",
            "/h/proj/get.sh",
        ],
        U,
    ),
    (
        &[
            "/usr/bin/podman",
            "run",
            "--volumes-from",
            "c",
            "img",
            "/x/get.sh",
        ],
        U,
    ),
    (&["/usr/bin/bwrap", "--bind", "/", "/", "/x/proj/get.sh"], U),
    (&["/usr/bin/systemd-nspawn", "-D", "/", "/x/get.sh"], U),
    (&["/usr/bin/warden", "run", "-w", "{h}", "proj/get.sh"], U),
    (
        &[
            "/usr/bin/docker",
            "run",
            "-v",
            "{h}:/h",
            "img",
            "sh",
            "/h/proj/get.sh",
        ],
        U,
    ),
    (
        &[
            "/usr/bin/docker",
            "run",
            "--volumes-from",
            "c",
            "img",
            "sh",
            "/x/get.sh",
        ],
        U,
    ),
    (
        &[
            "/usr/bin/podman",
            "run",
            "-v",
            "vol:/x",
            "img",
            "sh",
            "/x/get.sh",
        ],
        U,
    ),
    (&["/usr/bin/nerdctl", "exec", "c", "sh", "/x/get.sh"], U),
    (
        &["/usr/bin/systemd-nspawn", "--bind=/srv", "-D", "/", "sh"],
        U,
    ),
    (
        &["/usr/bin/bwrap", "--bind", "/", "/", "sh", "/x/proj/get.sh"],
        U,
    ),
    (&["/usr/bin/unshare", "-r", "--wd=/", "sh", "x/get.sh"], U),
    (&["/usr/bin/nsenter", "-t", "1", "-m", "sh", "x/get.sh"], U),
    (&["/usr/sbin/chroot", "/", "sh", "x/get.sh"], U),
    (
        &[
            "/bin/sh",
            "-c",
            "unshare -rm sh -c 'mount --bind / /mnt; sh /mnt/x'",
        ],
        U,
    ),
    (&["warden", "run", "--", "sh", "x/get.sh"], U),
    (
        &[
            "/usr/bin/systemd-run",
            "--user",
            "-p",
            "WorkingDirectory={h}",
            "sh",
            "proj/get.sh",
        ],
        U,
    ),
    (
        &[
            "/usr/bin/systemd-run",
            "--user",
            "-p",
            "BindPaths=/:/x",
            "sh",
            "/x/get.sh",
        ],
        U,
    ),
];

/// A directory that holds a root, a path through a process's views, a
/// file with another name.
const PLACES: &[Attack] = &[
    // A directory that holds a root, named by any word.
    (&["/usr/bin/make", "-C", "{h}", "-f", "proj/Makefile"], U),
    (&["/usr/local/bin/git", "-C", "{h}", "commit", "-m", "x"], U),
    (&["/usr/bin/git", "-C{t}", "status"], U),
    (
        &["/usr/bin/cmake", "-E", "chdir", "{t}", "sh", "x/get.sh"],
        U,
    ),
    (&["/usr/bin/sudo", "-D", "{h}", "sh", "proj/get.sh"], U),
    (&["/usr/bin/npm", "--prefix={h}", "run", "get"], U),
    (&["/usr/bin/yarn", "--cwd", "{t}", "run", "get"], U),
    (
        &[
            "/usr/bin/env",
            "PYTHONPATH={h}",
            "python3",
            "-m",
            "proj.get",
        ],
        U,
    ),
    (&["/usr/bin/nice", "-n", "5", "git", "-C", "~", "commit"], U),
    (&["/usr/bin/stdbuf", "-o0", "make", "-C", "{h}"], U),
    (&["/usr/bin/watch", "-n1", "make -C {h}"], U),
    (&["/usr/bin/timeout", "5", "npx", "--prefix", "~", "get"], U),
    (&["/usr/bin/npm", "--prefix", "{r}", "run", "get"], W),
    // A path through a process's own views.
    (
        &["/bin/sh", "-c", "cd {h} && sh /proc/self/cwd/proj/get.sh"],
        U,
    ),
    (&["/bin/sh", "/proc/self/root{r}/get.sh"], W),
    (&["/bin/sh", "/proc/1/cwd/x/get.sh"], U),
    (&["/bin/sh", "-c", "exec 3< /etc/hostname; sh /dev/fd/3"], U),
    (&["/bin/bash", "/dev/stdin"], U),
    // A file with another name under the root.
    (&["{hl}"], U),
    (&["/bin/sh", "{hl}"], U),
    (&["/bin/sh", "-c", "exec {hl}"], U),
];

/// The shell reading's own refusals, which hold whatever is writable.
const SHELL_READING: &[&str] = &["a shell script it is given", "an argument before its shell"];

#[test]
fn every_spelling_of_a_class_the_rule_cannot_follow_is_refused() {
    let h = Home::new("classes", &[]);
    let (t, home, root) = (&h.top, &h.home, &h.root);
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
    let code = |argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|a| fill(a)).collect();
        h.code(&argv, &writable)
    };
    let ran: Vec<String> = attacks()
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
        let r = check_with(&[secret(&argv)], &[], &h.env);
        assert!(
            r.as_ref()
                .err()
                .is_none_or(|r| SHELL_READING.contains(&r.what)),
            "{argv:?}: {r:?}"
        );
    }
}

#[test]
fn the_owners_ordinary_secret_programs_still_run_with_a_root_under_home() {
    let h = Home::new("ordinary", &[".gnupg"]);
    std::fs::write(h.home.join(".token"), "x\n").unwrap();
    let writable = [h.root.clone()];
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
        assert_eq!(h.code(&argv, &writable), Ok(()), "{argv:?}");
    }
}

/// Spellings of the same family that the rule's paths and shell reading
/// refused already: they stay refused beside the classes (`sh
/// /dev/fd/3` after `exec 3<` a root's file now meets the view first).
#[test]
fn the_families_spellings_read_by_their_paths_stay_refused() {
    let h = Home::new("family", &[]);
    let writable = [h.root.clone()];
    let r = h.root.to_str().unwrap();
    for (argv, want) in FAMILY {
        let argv: Vec<String> = argv.iter().map(|a| a.replace("{r}", r)).collect();
        assert_eq!(h.code(&argv, &writable), *want, "{argv:?}");
    }
}

/// The family's spellings (`{r}` the root) and the refusal each meets.
const FAMILY: &[(&[&str], Result<(), &str>)] = &[
    (&["/bin/sh", "-c", "cd {r} && ./get.sh"], W),
    (&["/usr/bin/env", "-C", "{r}", "./get.sh"], W),
    (&["/usr/bin/sudo", "--chdir={r}", "./get.sh"], W),
    (&["/bin/bash", "-c", "sh <(cat {r}/get.sh)"], W),
    (&["/bin/sh", "-c", ". {r}/get.sh"], W),
    (&["/bin/bash", "-c", "source ~/proj/get.sh"], W),
    (&["/bin/sh", "-c", "exec 3<{r}/get.sh; sh /dev/fd/3"], U),
    (&["/bin/bash", "-c", "bash <<< 'sh x'"], U),
    (&["/bin/busybox", "sh", "{r}/get.sh"], W),
    (&["/usr/bin/cmake", "-P", "{r}/get.cmake"], W),
    (&["/usr/local/bin/git", "-C", "{r}", "commit"], W),
    (&["/usr/bin/setsid", "sh", "-c", "~/proj/get.sh"], W),
    (&["/usr/bin/ssh", "-F", "{r}/ssh_config", "h"], W),
    (&["/usr/bin/scp", "-S", "{r}/get.sh", "a", "b"], W),
];
const W: Result<(), &str> = Err(SECRET_PROGRAM_WRITABLE);
const U: Result<(), &str> = Err(SECRET_PROGRAM_UNREADABLE_ARGS);

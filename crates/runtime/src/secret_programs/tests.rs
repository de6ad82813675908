//! The rule's unit tests: programs, their interpreters, links and
//! arguments under a root; paths read as the program's environment
//! reads them; interpreters given code inline.

use super::*;

fn secret(argv: &[&str]) -> SecretSpec {
    SecretSpec {
        name: "S".into(),
        source: SecretSource::Command(argv.iter().map(|s| s.to_string()).collect()),
        hosts: Vec::new(),
        in_bodies: false,
    }
}

#[test]
fn a_program_its_interpreter_links_and_path_arguments_under_a_root_are_refused() {
    let t = std::env::temp_dir().join(format!("warden-secret-programs-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&t);
    std::fs::create_dir_all(t.join("root/proj/.venv/bin")).unwrap();
    std::fs::create_dir_all(t.join("outside")).unwrap();
    let t = t.canonicalize().unwrap();
    let root = t.join("root");
    let python = root.join("proj/.venv/bin/python3");
    std::os::unix::fs::symlink("/usr/bin/python3", &python).unwrap();
    let script = t.join("outside/get-token");
    std::fs::write(&script, format!("#!{}\nprint('x')\n", python.display())).unwrap();
    let linked = t.join("outside/linked");
    std::os::unix::fs::symlink(root.join("proj/get"), &linked).unwrap();
    let writable = [root.clone()];
    let code = |argv: &[&str]| check_with(&[secret(argv)], &writable, &[]).map_err(|r| r.what);

    assert_eq!(code(&[script.to_str().unwrap()]), Err("its interpreter"));
    assert_eq!(code(&[linked.to_str().unwrap()]), Err("the program"));
    let opt = format!("--homedir={}", root.join("proj/.gnupg").display());
    assert_eq!(code(&["/usr/bin/gpg", &opt]), Err("an argument"));
    let var = format!("PYTHONPATH={}", root.join("proj/lib").display());
    assert_eq!(code(&["/usr/bin/env", &var, "python3"]), Err("an argument"));
    assert_eq!(code(&["/bin/sh", "-c", "cat /etc/hostname"]), Ok(()));
    assert_eq!(code(&["pass", "show", "work/github"]), Ok(()));
    // A relative word is taken from the program's working directory.
    let rel = root.strip_prefix("/").unwrap().join("proj/get.sh");
    assert_eq!(
        code(&["/bin/sh", rel.to_str().unwrap()]),
        Err("an argument")
    );
    warden_workspace::fsutil::remove_tree(&t).unwrap();
}

#[test]
fn a_path_through_home_tilde_or_a_kept_variable_is_read_as_the_program_reads_it() {
    let t = std::env::temp_dir().join(format!("warden-secret-home-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&t);
    std::fs::create_dir_all(t.join("home/proj/tools")).unwrap();
    let t = t.canonicalize().unwrap();
    let home = t.join("home");
    let root = home.join("proj");
    let writable = [root.clone()];
    let env = [("HOME".to_string(), home.clone().into_os_string())];
    let code = |argv: &[&str]| check_with(&[secret(argv)], &writable, &env).map_err(|r| r.code());
    let w = Err(SECRET_PROGRAM_WRITABLE);
    let u = Err(SECRET_PROGRAM_UNREADABLE_ARGS);
    // Before: each of these was read as `/HOME/...` or `/~/...` and ran.
    assert_eq!(code(&["sh", "-c", "$HOME/proj/tools/get.sh"]), w);
    assert_eq!(code(&["sh", "-c", "${HOME}/proj/tools/get.sh"]), w);
    assert_eq!(code(&["sh", "-c", "~/proj/tools/get.sh"]), w);
    assert_eq!(code(&["bash", "-lc", "exec ~/pro\"j\"/tools/get.sh"]), w);
    assert_eq!(code(&["/bin/dash", "-ec", "x=1; ~/pro\\j/get.sh"]), u);
    assert_eq!(code(&["sh", "-c", "cd ~/proj && tools/get.sh"]), w);
    assert_eq!(code(&["sh", "-c", "cd ~ && proj/tools/get.sh"]), w);
    assert_eq!(code(&["sh", "-c", "cd && proj/tools/get.sh"]), u);
    assert_eq!(code(&["sh", "-c", "cd proj; tools/get.sh"]), u);
    assert_eq!(code(&["sh", "-c", "$OTHER/get.sh"]), u);
    assert_eq!(code(&["sh", "-c", "$(cat /etc/dir)/get.sh"]), u);
    assert_eq!(code(&["sh", "-c", "`echo x`/get.sh"]), u);
    assert_eq!(code(&["sh", "-c", "~/pro?/tools/get.sh"]), u);
    assert_eq!(code(&["sh", "-c", "D=/x; $D/get.sh"]), u);
    assert_eq!(code(&["sh", "-c", "$1/get.sh", "x", "/"]), u);
    assert_eq!(code(&["/usr/bin/env", "HOME=/x", "sh", "-c", "true"]), u);
    assert_eq!(code(&["/usr/bin/env", "-C", "/x", "sh", "-c", "true"]), u);
    assert_eq!(code(&["/usr/bin/env", "sh", "-c", "$HOME/proj/get.sh"]), w);
    // Without a shell, what a program expands itself is read too.
    assert_eq!(code(&["/usr/bin/gpg", "--homedir=~/proj/.gnupg"]), w);
    assert_eq!(code(&["/usr/bin/python3", "$HOME/proj/x.py"]), w);
    // A kept variable that names a path under a root: the program reads
    // its files there by default (gpg-agent.conf's pinentry-program),
    // whatever it is given.
    let gnupg = [
        env[0].clone(),
        (
            "GNUPGHOME".to_string(),
            root.join(".gnupg").into_os_string(),
        ),
    ];
    let by_env = |argv: &[&str]| check_with(&[secret(argv)], &writable, &gnupg).map_err(|r| r.what);
    assert_eq!(
        by_env(&["/usr/bin/gpg", "--homedir", "$GNUPGHOME"]),
        Err("a path its environment names")
    );
    assert_eq!(
        by_env(&["pass", "show", "x"]),
        Err("a path its environment names")
    );
    // The ordinary cases still run.
    assert_eq!(code(&["vault", "read", "-field=x", "secret/y"]), Ok(()));
    assert_eq!(code(&["sh", "-c", "pass show x"]), Ok(()));
    assert_eq!(code(&["sh", "-c", "'pass", "show", "x'"]), Ok(()));
    assert_eq!(code(&["sh", "-c", "'~/proj/get.sh", "x'"]), w);
    assert_eq!(
        code(&["sh", "-c", "set -e; pass show 'work/gh' | head -n1"]),
        Ok(())
    );
    assert_eq!(
        code(&["/usr/bin/op", "read", "op://vault/item/field"]),
        Ok(())
    );
    assert_eq!(code(&["sh", "-c", "exec $HOME/bin/get-token"]), Ok(()));
    assert_eq!(code(&["sh", "-c", "cd /etc && cat hostname"]), Ok(()));
    warden_workspace::fsutil::remove_tree(&t).unwrap();
}

#[test]
fn an_interpreter_given_code_inline_is_refused_and_its_script_is_checked_as_the_program() {
    let t = std::env::temp_dir().join(format!("warden-secret-inline-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&t);
    std::fs::create_dir_all(t.join("root/proj")).unwrap();
    std::fs::create_dir_all(t.join("outside")).unwrap();
    let t = t.canonicalize().unwrap();
    let root = t.join("root");
    let linked = t.join("outside/get.py");
    std::os::unix::fs::symlink(root.join("proj/get.py"), &linked).unwrap();
    let own = t.join("outside/own.py");
    std::fs::write(&own, "print(1)\n").unwrap();
    let writable = [root.clone()];
    let code = |argv: &[&str]| check_with(&[secret(argv)], &writable, &[]).map_err(|r| r.code());
    let u = Err(SECRET_PROGRAM_UNREADABLE_ARGS);
    let w = Err(SECRET_PROGRAM_WRITABLE);
    let py = "import subprocess; subprocess.run(['sh', chr(47).join(['', 'x'])])";
    // Before: each of these ran, the path built where no word shows it.
    assert_eq!(code(&["/usr/bin/python3", "-c", py]), u);
    assert_eq!(code(&["/usr/bin/python3", "-Ic", py]), u);
    assert_eq!(code(&["/usr/bin/perl", "-lne", "print"]), u);
    assert_eq!(code(&["ruby", "-e", "x"]), u);
    assert_eq!(code(&["/usr/bin/node", "--eval=x"]), u);
    assert_eq!(code(&["/usr/bin/awk", "BEGIN { system(\"x\") }"]), u);
    assert_eq!(code(&["/usr/bin/env", "python3", "-c", py]), u);
    assert_eq!(code(&["/usr/bin/nice", "-n", "5", "perl", "-e", "x"]), u);
    assert_eq!(code(&["/usr/bin/timeout", "5", "node", "-e", "x"]), u);
    assert_eq!(code(&["/usr/bin/xargs", "python3", "-c", py]), u);
    assert_eq!(code(&["/bin/busybox", "awk", "BEGIN{system(\"id\")}"]), u);
    assert_eq!(code(&["/bin/sh", "-c", "exec python3 -c 'print(1)'"]), u);
    assert_eq!(code(&["/bin/sh", "-c", "bash -c \"perl -e x\""]), u);
    assert_eq!(code(&["/usr/bin/env", "bash", "-c", "python3 -c x"]), u);
    // A script given to an interpreter is checked as the program is:
    // a link to the root is the root's file.
    assert_eq!(code(&["/usr/bin/python3", linked.to_str().unwrap()]), w);
    assert_eq!(
        code(&[
            "/usr/bin/awk",
            "-f",
            linked.to_str().unwrap(),
            "/etc/hostname"
        ]),
        w
    );
    assert_eq!(code(&["/bin/sh", linked.to_str().unwrap()]), w);
    // The owner's own script, a module, plain programs: they run.
    assert_eq!(code(&["/usr/bin/python3", own.to_str().unwrap()]), Ok(()));
    assert_eq!(
        code(&["/usr/bin/python3", "-m", "json.tool", "/etc/hostname"]),
        Ok(())
    );
    assert_eq!(code(&["/usr/bin/env", "pass", "show", "x"]), Ok(()));
    assert_eq!(code(&["/bin/sh", "-c", "pass show x | head -n1"]), Ok(()));
    // awk and sed code with none of their ways to a file or a program.
    assert_eq!(
        code(&["/bin/sh", "-c", "pass show x | awk '{print $1}'"]),
        Ok(())
    );
    assert_eq!(code(&["/bin/sh", "-c", "pass show x | sed -n 1p"]), Ok(()));
    assert_eq!(code(&["/bin/sh", "-c", "pass show x | sed -n 1e"]), u);
    let r = check_with(&[secret(&["/usr/bin/python3", "-c", py])], &writable, &[]).unwrap_err();
    assert!(r.inline_code(), "{r}");
    assert!(
        r.to_string()
            .contains("put that code in a script of your own"),
        "{r}"
    );
    // With nothing a token may write, inline code is the owner's own.
    assert_eq!(
        check_with(&[secret(&["python3", "-c", py])], &[], &[]),
        Ok(())
    );
    warden_workspace::fsutil::remove_tree(&t).unwrap();
}

#[test]
fn every_interpreter_of_the_table_is_refused_code_inline_and_checked_for_its_script() {
    let t = std::env::temp_dir().join(format!("warden-secret-table-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&t);
    std::fs::create_dir_all(t.join("root")).unwrap();
    std::fs::create_dir_all(t.join("outside")).unwrap();
    let t = t.canonicalize().unwrap();
    // A name with no `/` and no `.`: read as a path by no other rule.
    let inside = t.join("root/x");
    let linked = t.join("outside/linked");
    std::os::unix::fs::symlink(&inside, &linked).unwrap();
    let own = t.join("outside/own");
    std::fs::write(&own, "x\n").unwrap();
    let writable = [t.join("root")];
    let code = |argv: &[String], w: &[PathBuf]| {
        check_with(
            &[secret(&argv.iter().map(String::as_str).collect::<Vec<_>>())],
            w,
            &[],
        )
        .map_err(|r| r.code())
    };
    let code_with_sink = "system(getline)\n|e r w";
    for row in interpreters::INTERPRETERS {
        for name in row.names {
            let prog = format!("/nonexistent/{name}");
            let mut inline: Vec<Vec<String>> = Vec::new();
            if let Some(c) = row.inline_short.chars().next() {
                inline.push(vec![prog.clone(), format!("-{c}"), code_with_sink.into()]);
            }
            if let Some(o) = row.inline_long.first() {
                inline.push(vec![prog.clone(), o.to_string(), code_with_sink.into()]);
            }
            if row.code_operand {
                inline.push(vec![prog.clone(), code_with_sink.into()]);
            }
            assert!(!inline.is_empty(), "{name}: no way to give it code");
            for argv in &inline {
                assert_eq!(
                    code(argv, &writable),
                    Err(SECRET_PROGRAM_UNREADABLE_ARGS),
                    "{argv:?}"
                );
                assert_eq!(code(argv, &[]), Ok(()), "{argv:?} with nothing writable");
            }
            let mut scripts: Vec<Vec<String>> = Vec::new();
            if let Some(c) = row.file_short.chars().next() {
                scripts.push(vec![prog.clone(), format!("-{c}")]);
            }
            if !row.code_operand {
                scripts.push(vec![prog.clone()]);
            }
            for argv in scripts {
                let with = |file: &Path| {
                    let mut a = argv.clone();
                    a.push(file.to_str().unwrap().to_string());
                    a
                };
                assert_eq!(
                    code(&with(&linked), &writable),
                    Err(SECRET_PROGRAM_WRITABLE),
                    "{argv:?} linked"
                );
                assert_eq!(code(&with(&own), &writable), Ok(()), "{argv:?} own");
            }
        }
    }
    warden_workspace::fsutil::remove_tree(&t).unwrap();
}

/// Outside review 27, F6 and F7: a path attached to an option, a command
/// line inside an argument, a program that runs commands of its own, a
/// variable set for the program, a `#!` chain of a program a command line
/// names, and the environment's own paths. `{r}` is a root tokens may
/// write, `{o}` a script of the owner's outside it whose `#!` line names
/// an interpreter under the root, `{h}` the owner's home.
#[test]
fn every_way_a_program_is_given_code_or_a_path_is_read_or_refused() {
    let t = std::env::temp_dir().join(format!("warden-secret-runners-{}", std::process::id()));
    let _ = warden_workspace::fsutil::remove_tree(&t);
    std::fs::create_dir_all(t.join("home/proj/lib")).unwrap();
    std::fs::create_dir_all(t.join("outside")).unwrap();
    let t = t.canonicalize().unwrap();
    let home = t.join("home");
    let root = home.join("proj");
    let o = t.join("outside/get-token");
    std::fs::write(
        &o,
        format!("#!{}/venv/bin/python3\nprint(1)\n", root.display()),
    )
    .unwrap();
    std::fs::set_permissions(&o, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let env_s = t.join("outside/env-s");
    std::fs::write(
        &env_s,
        format!("#!/usr/bin/env -S perl -I{}/lib\nprint 1\n", root.display()),
    )
    .unwrap();
    std::fs::set_permissions(&env_s, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let own = t.join("outside/own.pl");
    std::fs::write(&own, "print 1\n").unwrap();
    let writable = [root.clone()];
    let env = [("HOME".to_string(), home.clone().into_os_string())];
    let fill = |a: &str| {
        a.replace("{r}", root.to_str().unwrap())
            .replace("{o}", o.to_str().unwrap())
            .replace("{s}", env_s.to_str().unwrap())
            .replace("{own}", own.to_str().unwrap())
            .replace("{h}", home.to_str().unwrap())
    };
    let code = |argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|a| fill(a)).collect();
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        check_with(&[secret(&argv)], &writable, &env).map_err(|r| r.code())
    };
    let mut attacks = attacks();
    attacks.extend(input_and_url_attacks());
    let mut ran = Vec::new();
    for (argv, want) in &attacks {
        if code(argv) != *want {
            ran.push(format!("{argv:?}: {:?}", code(argv)));
        }
    }
    assert!(
        ran.is_empty(),
        "not refused as they should be:\n{}",
        ran.join("\n")
    );
    // What legitimately runs still runs.
    for argv in [
        &["pass", "show", "work/github"][..],
        &["/usr/bin/op", "read", "op://vault/item/field"],
        &["gh", "auth", "token"],
        &["security", "find-generic-password", "-s", "x", "-w"],
        &["/bin/sh", "-c", "pass show x | awk '{print $1}'"],
        &["/bin/sh", "-c", "pass show x | head -1"],
        &["/bin/sh", "-c", "pass show x | xargs printf %s"],
        &["/bin/sh", "-c", "pass show x | python3 -m json.tool"],
        &[
            "/usr/bin/curl",
            "-s",
            "https://vault.example.com/v1/%73ecret",
        ],
        &[
            "/usr/bin/env",
            "VAULT_ADDR=https://vault.example.com:8200",
            "vault",
            "read",
            "-field=x",
            "secret/y",
        ],
        &["/usr/bin/env", "-S", "pass show x"],
        &["/usr/bin/gpg", "--batch", "-q", "-d", "/etc/hostname"],
        &["/usr/bin/ssh", "-o", "BatchMode=yes", "h", "cat", "t"],
        &["git", "config", "--get", "user.email"],
        &["/usr/bin/sqlite3", "/etc/hostname"],
        &["/usr/bin/flock", "/tmp/l", "-c", "pass show x"],
        &["/usr/bin/perl", "-I/usr/share/perl5", "{own}"],
        &[
            "/usr/bin/find",
            "/etc",
            "-name",
            "hostname",
            "-exec",
            "cat",
            "{}",
            ";",
        ],
    ] {
        assert_eq!(code(argv), Ok(()), "{argv:?}");
    }
    // With nothing a token may write, the owner's own lines run.
    assert_eq!(
        check_with(&[secret(&["/usr/bin/vim", "-c", "!id"])], &[], &env),
        Ok(())
    );
    // The owner's home under a root: every program reads files there.
    let under = [home.clone()];
    let r = check_with(&[secret(&["pass", "show", "x"])], &under, &env).unwrap_err();
    assert_eq!(r.what, "a path its environment names", "{r}");
    warden_workspace::fsutil::remove_tree(&t).unwrap();
}

/// A command line that runs a path it builds from pieces.
const PY: &str = "python3 -c \"import os; os.system(chr(47).join(['', 'x']))\"";

/// Each spelling of [`every_way_a_program_is_given_code_or_a_path_is_read_or_refused`]
/// and the refusal it meets: `{r}` is the root, `{own}` the owner's Perl
/// script, `{o}` the owner's script whose `#!` names an interpreter under
/// the root, `{s}` one whose `#!/usr/bin/env -S` line names a path there.
type Attack = (Vec<&'static str>, Result<(), &'static str>);

fn attacks() -> Vec<Attack> {
    let w = Err(SECRET_PROGRAM_WRITABLE);
    let u = Err(SECRET_PROGRAM_UNREADABLE_ARGS);
    vec![
        // F6: a path attached to an option, for any program.
        (vec!["/usr/bin/perl", "-I{r}/lib", "-MTok", "{own}"], w),
        (vec!["/usr/bin/perl", "-wI{r}/lib", "-MTok", "{own}"], w),
        (vec!["/usr/bin/perl", "-I~/proj/lib", "-MTok", "{own}"], w),
        (vec!["ruby", "-I{r}/lib", "-rtok", "{own}"], w),
        (vec!["ruby", "-r{r}/lib/tok.rb", "{own}"], w),
        (vec!["/usr/bin/node", "-r{r}/hook.js", "{own}"], w),
        (vec!["/usr/bin/gcc", "-B{r}/bin", "-E", "-"], w),
        (vec!["/bin/sh", "-c", "perl -I{r}/lib -MTok {own}"], w),
        (
            vec!["/usr/bin/env", "PERL5OPT=-I{r}/lib", "perl", "{own}"],
            w,
        ),
        (
            vec!["/usr/bin/env", "RUBYOPT=-r{r}/x.rb", "ruby", "{own}"],
            w,
        ),
        (vec!["{s}"], w),
        // Code that is a URL, not a file.
        (
            vec![
                "/usr/bin/node",
                "--import",
                "data:text/javascript,import('x')",
                "{own}",
            ],
            u,
        ),
        (
            vec![
                "/usr/bin/env",
                "NODE_OPTIONS=--import=data:text/javascript,x",
                "node",
                "{own}",
            ],
            u,
        ),
        (
            vec![
                "/usr/bin/env",
                "PERL5DB=BEGIN{require chr(47)}",
                "perl",
                "-d",
                "{own}",
            ],
            u,
        ),
        (
            vec![
                "/usr/bin/env",
                "GIT_CONFIG_COUNT=1",
                "GIT_CONFIG_KEY_0=alias.t",
                "GIT_CONFIG_VALUE_0=!sh",
                "git",
                "t",
            ],
            u,
        ),
        // F7: one more command line, or a program that runs commands.
        (vec!["/usr/bin/env", "-S", PY], u),
        (vec!["/usr/bin/env", "-Sperl -e", "exec 'x'"], u),
        (
            vec!["/usr/bin/env", "--split-string=sh -c 'python3 -c x'"],
            u,
        ),
        (vec!["/usr/bin/script", "-qc", PY, "/dev/null"], u),
        (vec!["/usr/bin/flock", "/tmp/l", "-c", PY], u),
        (vec!["/usr/bin/su", "me", "-c", PY], u),
        (
            vec!["/usr/sbin/runuser", "-u", "me", "--", "sh", "-c", PY],
            u,
        ),
        (vec!["/usr/bin/watch", "-n", "5", PY], u),
        (vec!["/usr/bin/sqlite3", ":memory:", ".shell id"], u),
        (
            vec!["/usr/bin/sqlite3", "-cmd", ".system id", ":memory:"],
            u,
        ),
        (vec!["/usr/bin/vim", "-es", "-c", "!id", "-c", "q"], u),
        (vec!["/usr/bin/ex", "+!id", "+q"], u),
        (vec!["/usr/bin/less", "+!id", "/etc/hostname"], u),
        (vec!["/usr/bin/man", "-P", "id", "ls"], u),
        (vec!["/usr/local/bin/git", "-c", "alias.t=!id", "t"], u),
        (vec!["git", "-c", "core.pager=id", "log"], u),
        (vec!["/usr/bin/ssh", "-oProxyCommand=id", "h"], u),
        (vec!["/usr/bin/tar", "--to-command=id", "-xf", "/a.tar"], u),
        (vec!["/usr/bin/tar", "-I", "id", "-xf", "/a.tar"], u),
        (vec!["rsync", "-e", "id", "a:", "/b"], u),
        (vec!["/usr/bin/tar", "xIf", "id", "/a.tar"], u),
        (
            vec!["systemd-run", "--user", "-p", "ExecStartPre=id", "true"],
            u,
        ),
        (vec!["nix-shell", "--run", PY], u),
        (vec!["/usr/bin/gcc", "-wrapper", "id", "-E", "-"], u),
        (vec!["/bin/busybox", "sh", "-c", "watch 'python3 -c x'"], u),
        (
            vec![
                "/usr/bin/find",
                "/",
                "-maxdepth",
                "0",
                "-exec",
                "python3",
                "-c",
                "x",
                ";",
            ],
            u,
        ),
        // The `#!` chain of a program a command line, `find -exec` or a
        // runner names.
        (vec!["/bin/sh", "-c", "{o}"], w),
        (
            vec!["/usr/bin/find", "/", "-maxdepth", "0", "-exec", "{o}", ";"],
            w,
        ),
        (vec!["/usr/bin/env", "-S", "{o} x"], w),
        // A search that reaches into a root gives what it finds there to
        // its command; a directory changed to moves relative paths.
        (
            vec![
                "/usr/bin/find",
                "{h}",
                "-name",
                "x.py",
                "-exec",
                "python3",
                "{}",
                ";",
            ],
            w,
        ),
        (
            vec![
                "/usr/bin/find",
                "-name",
                "x.py",
                "-execdir",
                "python3",
                "x.py",
                ";",
            ],
            w,
        ),
        (vec!["/usr/bin/env", "-C", "{h}", "sh", "proj/x.sh"], u),
        (
            vec!["/usr/bin/env", "--chdir={h}", "python3", "proj/x.py"],
            u,
        ),
        (vec!["/usr/bin/flock", "/tmp/l", "-c", "{o}"], w),
    ]
}

/// A shell or interpreter fed its program by a pipe or a redirect, a
/// command line built by `xargs`, a path inside a URL.
fn input_and_url_attacks() -> Vec<Attack> {
    let w = Err(SECRET_PROGRAM_WRITABLE);
    let u = Err(SECRET_PROGRAM_UNREADABLE_ARGS);
    vec![
        // F7: a shell or interpreter reading its program from a pipe or
        // a redirect, or given arguments by xargs from its input.
        (vec!["/bin/sh", "-c", "find {h} -name get.sh | xargs sh"], u),
        (vec!["/bin/sh", "-c", "find {h} -name get.sh | sh"], u),
        (
            vec![
                "/bin/sh",
                "-c",
                "find {h} -name get.sh -print0 | xargs -0 -n1 sh",
            ],
            u,
        ),
        (
            vec!["/bin/sh", "-c", "base64 -d /etc/hostname | xargs python3"],
            u,
        ),
        (vec!["/bin/sh", "-c", "cat /etc/hostname | bash -s"], u),
        (vec!["/bin/sh", "-c", "cat /etc/hostname | python3 -"], u),
        (vec!["/bin/sh", "-c", "cat /etc/hostname | perl"], u),
        (
            vec![
                "/bin/sh",
                "-c",
                "cat /etc/hostname | timeout 5 bash -o pipefail",
            ],
            u,
        ),
        (
            vec!["/bin/sh", "-c", "cat /etc/hostname | sh /dev/stdin"],
            u,
        ),
        (
            vec!["/bin/sh", "-c", "cat /etc/hostname |& env sh 2>/dev/null"],
            u,
        ),
        (vec!["/bin/sh", "-c", "exec 3</etc/hostname; sh <&3"], u),
        (vec!["/bin/sh", "-c", "sh < /etc/hostname"], u),
        (vec!["/usr/bin/xargs", "-a", "/etc/hostname", "sh"], u),
        (vec!["/usr/bin/xargs", "-a", "/etc/hostname", "nice"], u),
        // F7: a path in a URL, percent-encoded or behind a host.
        (
            vec!["/bin/sh", "-c", "curl -s file://{h}/pro%6a/get.sh | sh"],
            w,
        ),
        (vec!["/usr/bin/curl", "-s", "file://{h}/pro%6a/get.sh"], w),
        (vec!["/usr/bin/curl", "-s", "file://localhost{r}/get.sh"], w),
        (vec!["/usr/bin/curl", "-s", "file:{h}/%70roj/get.sh"], w),
    ]
}

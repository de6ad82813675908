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
    let env = [
        ("HOME".to_string(), home.clone().into_os_string()),
        (
            "GNUPGHOME".to_string(),
            root.join(".gnupg").into_os_string(),
        ),
    ];
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
    assert_eq!(code(&["/usr/bin/gpg", "--homedir", "$GNUPGHOME"]), w);
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

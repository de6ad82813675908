//! A secret's program never runs a token's code through a path attached
//! to an option, a command line inside an argument, or a program that
//! runs commands of its own (outside review 27, F6 and F7), attacked
//! through the real daemon and the owner's command line.
//!
//! A token's sandbox over a project under the daemon's workspace root
//! leaves a script and a Perl module there. Before: the owner's profile
//! naming its secret's program as `perl -I<root>/lib -MTok own.pl`, `env
//! PERL5OPT=-I<root>/lib perl ...`, `env -S "python3 -c ..."`, `sqlite3
//! :memory: ".shell ..."`, `git -c alias.t=!...`, `flock L -c "..."`, `vim
//! -es -c "!..."`, or a script of the owner's whose `#!` line names the
//! token's script reached by `sh -c` or `find -exec`, ran the token's
//! code as the owner when a sandbox was made from it. Now each is
//! refused before anything runs (403, `secret_program_writable` or
//! `secret_program_unreadable_args`), and no mark appears. Each spelling
//! is first run on the host by the test itself, outside warden, to show
//! that it does run the token's code.

use crate::common::owner::{name_profile, path_in_pieces, OwnerHost};
use crate::common::*;
use std::path::Path;

#[test]
fn a_path_attached_to_an_option_or_a_command_inside_an_argument_never_runs_a_tokens_code() {
    let Some(host) = OwnerHost::new("secret-runners") else {
        return;
    };
    // What a token's committed change to the project leaves there.
    let proj = host.root.join("proj");
    let get = proj.join("tools/get.sh");
    host.plant(&get);
    host.project(
        "proj",
        "lib/Tok.pm",
        &format!("system('/bin/sh', '{}'); 1;\n", get.display()),
    );
    let lib = proj.join("lib");
    // The owner's own files, outside the root.
    let home = host.dir.path().join("home");
    let own_pl = home.join("own.pl");
    std::fs::write(&own_pl, "print \"tok-own\\n\";\n").unwrap();
    let launcher = home.join("get-token");
    std::fs::write(&launcher, format!("#!{}\n", get.display())).unwrap();
    std::fs::set_permissions(
        &launcher,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // The script's path in pieces, none of which names a directory.
    let pieces = path_in_pieces(&get);
    let python = format!(
        "python3 -c \"import subprocess; subprocess.run(['sh', chr(47) + chr(47).join([{}])])\"",
        pieces.join(", ")
    );
    let (lib, own_pl, launcher) = (
        lib.to_str().unwrap(),
        own_pl.to_str().unwrap(),
        launcher.to_str().unwrap(),
    );
    let lock = host.dir.path().join("lock");
    let cases = cases(lib, own_pl, launcher, lock.to_str().unwrap(), &python);
    let d = host.daemon_over_root();
    let t = host.agent();
    for (i, (needs, argv, reason)) in cases.iter().enumerate() {
        if !Path::new(needs).exists() {
            skip(&format!("{needs} is not installed"));
            continue;
        }
        assert!(
            host.runs_the_tokens_code(argv),
            "{argv:?} does not run the token's code on this host: the attack proves nothing"
        );
        let name = format!("runner{i}");
        host.secret_profile(&name, argv);
        let (s, b) = name_profile(&d, &t, &name);
        assert!(
            !host.marker_appeared(),
            "{argv:?} ran the token's code as the owner: {s} {b}"
        );
        assert_eq!(s, 403, "{argv:?}: {b}");
        assert_eq!(b["reason"], *reason, "{argv:?}: {b}");
        // The owner's own command line refuses it too.
        let out = host.owner(&["run", "--no-tty", "--profile", &name, "--", "true"]);
        let said = stderr(&out);
        assert!(
            !host.marker_appeared(),
            "{argv:?} from the command line: {said}"
        );
        assert!(
            !out.status.success() && said.contains(reason),
            "{argv:?}: {said}"
        );
    }
    // The owner's own ways still run: a command line `env -S` splits, a
    // library path outside the root.
    if Path::new("/usr/bin/perl").exists() {
        let ok = [
            vec![
                "/usr/bin/env".to_string(),
                "-S".into(),
                format!("perl {own_pl}"),
            ],
            vec![
                "/usr/bin/perl".into(),
                "-I/usr/share/perl5".into(),
                own_pl.into(),
            ],
        ];
        for (i, argv) in ok.iter().enumerate() {
            let name = format!("own{i}");
            host.secret_profile(&name, argv);
            let (s, b) = name_profile(&d, &t, &name);
            assert_eq!(s, 201, "{argv:?}: {b}");
        }
    }
}

/// The spellings, each with the program it needs and the reason it is
/// refused for: `lib` holds the token's module, `own_pl` is the owner's
/// script, `launcher` the owner's script whose `#!` line names the
/// token's, `python` a command line that runs the token's script by a
/// path built from pieces.
fn cases(
    lib: &str,
    own_pl: &str,
    launcher: &str,
    lock: &str,
    python: &str,
) -> Vec<(&'static str, Vec<String>, &'static str)> {
    let w = "secret_program_writable";
    let u = "secret_program_unreadable_args";
    vec![
        (
            "/usr/bin/perl",
            vec![
                "/usr/bin/perl".into(),
                format!("-I{lib}"),
                "-MTok".into(),
                own_pl.into(),
            ],
            w,
        ),
        (
            "/usr/bin/perl",
            vec![
                "/usr/bin/env".into(),
                format!("PERL5OPT=-I{lib}"),
                "perl".into(),
                "-MTok".into(),
                own_pl.into(),
            ],
            w,
        ),
        (
            "/usr/bin/python3",
            vec!["/usr/bin/env".into(), "-S".into(), python.to_string()],
            u,
        ),
        (
            "/usr/bin/sqlite3",
            vec![
                "/usr/bin/sqlite3".into(),
                ":memory:".into(),
                format!(".shell {python}"),
            ],
            u,
        ),
        (
            "/usr/local/bin/git",
            vec![
                "git".into(),
                "-c".into(),
                format!("alias.t=!{python}"),
                "t".into(),
            ],
            u,
        ),
        (
            "/usr/bin/flock",
            vec![
                "/usr/bin/flock".into(),
                lock.into(),
                "-c".into(),
                python.to_string(),
            ],
            u,
        ),
        (
            "/usr/bin/vim",
            vec![
                "/usr/bin/vim".into(),
                "-es".into(),
                "-c".into(),
                format!("!{python}"),
                "-c".into(),
                "q".into(),
            ],
            u,
        ),
        (
            "/bin/sh",
            vec!["/bin/sh".into(), "-c".into(), launcher.into()],
            w,
        ),
        (
            "/usr/bin/find",
            vec![
                "/usr/bin/find".into(),
                "/".into(),
                "-maxdepth".into(),
                "0".into(),
                "-exec".into(),
                launcher.into(),
                ";".into(),
            ],
            w,
        ),
    ]
}

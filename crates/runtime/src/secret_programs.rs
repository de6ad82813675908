//! The rule for the programs the owner's configuration runs on the host
//! for a secret (`secrets.*.from_command`): the program, every link on
//! the way to it, its `#!` interpreter chain, and every path its
//! arguments name lie outside every directory a token can write.
//!
//! A closure of files cannot follow what a program reads once it runs: a
//! script's interpreter is a project's virtualenv whose `site-packages`
//! runs any `.pth` file it holds, a shell script sources a file beside
//! it, a node script loads its `node_modules`. A token's sandbox over any
//! of those directories writes the owner's program by another name. So
//! the rule is put on where the program is, which can be checked: a door
//! that lets tokens write under some directories (the daemon's workspace
//! roots, its state) refuses to run a secret's program from there at all
//! ([`check`]). What a program outside those directories reads under
//! them by a fixed path of its own is the owner's to keep out (see
//! `docs/threat-model.md`).
//!
//! The program runs from `/`, with a fixed search path and a short list
//! of variables (`warden_jail::secrets::PROGRAM_PATH`,
//! `warden_jail::settings::PROGRAM_KEEPS`):
//! what is checked here is what runs, wherever the door was started.

use std::io::Read;
use std::path::{Path, PathBuf};

use warden_jail::secrets::{program_path, PROGRAM_DIR, PROGRAM_PATH};
use warden_policy::{SecretSource, SecretSpec};

use crate::pathwalk::walk;

/// The reason code of a refusal to run a secret's program that lies where
/// tokens may write.
pub const SECRET_PROGRAM_WRITABLE: &str = "secret_program_writable";

/// Interpreters followed from a `#!` line before giving up (the kernel
/// follows at most 4 levels itself).
const MAX_INTERPRETERS: usize = 5;

/// A secret's program, or what it is given, lies where tokens may write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secret `{secret}`: {what} {path} lies under {under}, where sandboxes' changes may be written; keep secret programs, their interpreters and the files they are given outside the daemon's workspace roots and its state")]
pub struct Refusal {
    /// The secret whose program it is.
    pub secret: String,
    /// What the path is to the program (`the program`, `its interpreter`,
    /// `a link on the way to it`, `an argument`, `a directory of its
    /// search path`).
    pub what: &'static str,
    /// The path as met (a link's own path, not its target's).
    pub path: PathBuf,
    /// The directory tokens may write that holds it.
    pub under: PathBuf,
}

impl Refusal {
    /// The stable reason code, [`SECRET_PROGRAM_WRITABLE`].
    pub const fn code(&self) -> &'static str {
        SECRET_PROGRAM_WRITABLE
    }
}

/// Check every `from_command` of `secrets` against `writable`: real paths
/// of the directories tokens may write (at or under them is refused).
pub fn check(secrets: &[SecretSpec], writable: &[PathBuf]) -> Result<(), Refusal> {
    for s in secrets {
        let SecretSource::Command(argv) = &s.source else {
            continue;
        };
        let c = Checker {
            secret: &s.name,
            writable,
        };
        c.argv(argv)?;
    }
    Ok(())
}

struct Checker<'a> {
    secret: &'a str,
    writable: &'a [PathBuf],
}

impl Checker<'_> {
    fn argv(&self, argv: &[String]) -> Result<(), Refusal> {
        let Some(program) = argv.first() else {
            return Ok(());
        };
        if !program.contains('/') {
            // A name planted in an earlier directory of the search path
            // would be run instead.
            for dir in PROGRAM_PATH.split(':') {
                self.path(Path::new(dir), "a directory of its search path")?;
            }
        }
        self.program(program, "the program", 0)?;
        for arg in &argv[1..] {
            for p in paths_in(arg) {
                self.path(&p, "an argument")?;
            }
        }
        Ok(())
    }

    /// The program, the links on the way to it, and its `#!` chain.
    fn program(&self, name: &str, what: &'static str, depth: usize) -> Result<(), Refusal> {
        let Some(found) = program_path(name) else {
            return Ok(());
        };
        let real = self.path(&found, what)?;
        if depth >= MAX_INTERPRETERS {
            return Ok(());
        }
        let Some(words) = shebang(&real) else {
            return Ok(());
        };
        let mut words = words.into_iter();
        let Some(interp) = words.next() else {
            return Ok(());
        };
        self.program(&interp, "its interpreter", depth + 1)?;
        // `#!/usr/bin/env python3` runs what the search path finds; the
        // search path is the fixed one the program is given.
        if Path::new(&interp).file_name().is_some_and(|n| n == "env") {
            if let Some(next) = words.find(|w| !w.starts_with('-') && !w.contains('=')) {
                self.program(&next, "its interpreter", depth + 1)?;
            }
        } else {
            for w in words {
                for p in paths_in(&w) {
                    self.path(&p, "an argument of its interpreter")?;
                }
            }
        }
        Ok(())
    }

    /// Refuse `p` (absolute) if it, or a link on the way to it, lies
    /// where tokens may write; its real path otherwise.
    fn path(&self, p: &Path, what: &'static str) -> Result<PathBuf, Refusal> {
        let (real, links) = walk(p);
        let met = [(p.to_path_buf(), what), (real.clone(), what)]
            .into_iter()
            .chain(links.into_iter().map(|l| (l, "a link on the way to it")));
        for (path, what) in met {
            if let Some(under) = self.writable.iter().find(|w| path.starts_with(w)) {
                return Err(Refusal {
                    secret: self.secret.to_string(),
                    what,
                    path,
                    under: under.clone(),
                });
            }
        }
        Ok(real)
    }
}

/// The interpreter and its argument of a `#!` line, if `file` starts with
/// one.
fn shebang(file: &Path) -> Option<Vec<String>> {
    let mut head = [0u8; 256];
    let mut f = std::fs::File::open(file).ok()?;
    let n = f.read(&mut head).ok()?;
    let rest = head[..n].strip_prefix(b"#!")?;
    let line = rest.split(|b| *b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    Some(line.split_whitespace().map(str::to_string).collect())
}

/// The paths an argument names, as the program would take them from its
/// working directory (`/`): itself, or each word of it that is one
/// (`--homedir=/proj/.gnupg`, `PYTHONPATH=/proj/lib`, `sh -c "exec
/// /proj/get.sh"`, `tools/get.sh`). A word that only looks like a path
/// protects a directory more, never less.
fn paths_in(arg: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = arg
        .split(|c: char| c.is_whitespace() || ";|&<>()'\"=`$,:".contains(c))
        .chain(std::iter::once(arg))
        .filter(|w| w.contains('/') && !w.contains("://"))
        .map(|w| Path::new(PROGRAM_DIR).join(w))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
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
        let code = |argv: &[&str]| check(&[secret(argv)], &writable).map_err(|r| r.what);

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
}

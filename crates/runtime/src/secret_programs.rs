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
//! A word is read as that environment reads it: `~`, `~user`, `$HOME`,
//! `${HOME}` and every kept variable expanded with the values the program
//! is given. A script a shell is given (`sh -c`, `bash -c`, ... anywhere
//! after a shell's name) is read with the shell's quoting; what cannot be
//! read for certain there (a variable the program is not given, a
//! command substitution, a pattern, a `cd` to a directory not named
//! outright, a variable set by the script) is refused
//! ([`SECRET_PROGRAM_UNREADABLE_ARGS`]) rather than guessed.

use std::io::Read;
use std::path::{Path, PathBuf};

use warden_jail::secrets::{program_path, PROGRAM_DIR, PROGRAM_PATH};
use warden_policy::{SecretSource, SecretSpec};

use crate::pathwalk::walk;

mod interpreters;
mod places;
mod runners;
mod shell;
mod stdin;
use interpreters::{given, interpreter, is_url, is_wrapper, provably_pathless, Given};
use places::{tree, TREE};
use runners::runner;
use shell::shell_tokens;
use stdin::Token;

/// The reason code of a refusal to run a secret's program that lies where
/// tokens may write.
pub const SECRET_PROGRAM_WRITABLE: &str = "secret_program_writable";

/// The reason code of a refusal to run a secret's program given a shell
/// script whose paths cannot be read for certain.
pub const SECRET_PROGRAM_UNREADABLE_ARGS: &str = "secret_program_unreadable_args";

/// Shells: what follows one of these names in a secret's argv is read as
/// a shell script.
const SHELLS: &[&str] = &[
    "sh", "bash", "rbash", "dash", "ash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "loksh",
    "yash", "posh", "busybox", "fish", "csh", "tcsh",
];

/// Words of a shell script that set a variable or read one in, or run a
/// string built at run time: the words after them cannot be read for
/// certain.
const SETTERS: &[&str] = &[
    "read",
    "for",
    "select",
    "export",
    "local",
    "declare",
    "typeset",
    "readonly",
    "getopts",
    "eval",
    "unset",
    "alias",
    "mapfile",
    "readarray",
    "let",
];

/// Interpreters followed from a `#!` line before giving up (the kernel
/// follows at most 4 levels itself).
const MAX_INTERPRETERS: usize = 5;

/// Shell lines read inside shell lines (`sh -c "bash -c '...'"`) before
/// giving up: deeper is refused as unreadable.
const MAX_NESTED: usize = 4;

/// What a [`Refusal`] names when an interpreter other than a shell is
/// given code inline.
const INLINE: &str = "code it is given inline";

/// What a [`Refusal`] names when a program is given a command or code to
/// run in a language warden does not read ([`runners`]).
const RUNS: &str = "a command or code it is given to run";

/// A secret's program, or what it is given, lies where tokens may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The secret whose program it is.
    pub secret: String,
    /// What the path is to the program (`the program`, `its interpreter`,
    /// `a link on the way to it`, `an argument`, `a directory of its
    /// search path`).
    pub what: &'static str,
    /// The path as met (a link's own path, not its target's).
    pub path: PathBuf,
    /// The directory tokens may write that holds it; for a script that
    /// cannot be read, the first such directory it might reach.
    pub under: PathBuf,
    /// Why a shell script it is given cannot be read for certain (then
    /// `path` is the script itself).
    pub unreadable: Option<&'static str>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (secret, what, path, under) = (
            &self.secret,
            self.what,
            self.path.display(),
            self.under.display(),
        );
        match self.unreadable {
            Some(why) if what == TREE => write!(f, "secret `{secret}`: {what}, `{path}`, cannot be followed ({why}): what runs inside goes by names the host's paths do not show, so it cannot be told while sandboxes' changes may be written under {under}; run it from a script of your own outside the daemon's workspace roots and its state, whose binds and volumes name no directory at, under or above them"),
            Some(why) if what == INLINE || what == RUNS => write!(f, "secret `{secret}`: {what}, `{path}`, cannot be read for certain ({why}): warden reads no language but the shell's, and such code can build any path it opens from pieces, so what it runs cannot be told while sandboxes' changes may be written under {under}; put that code in a script of your own outside the daemon's workspace roots and its state, and name the script"),
            None => write!(f, "secret `{secret}`: {what} {path} lies under {under}, where sandboxes' changes may be written; keep secret programs, their interpreters and the files they are given outside the daemon's workspace roots and its state"),
            Some(why) => write!(f, "secret `{secret}`: {what} `{path}` holds {why}, so the paths it names cannot be read for certain while sandboxes' changes may be written under {under}; name the program and its files by absolute paths (or `~`, `$HOME`), without a `cd`"),
        }
    }
}

impl std::error::Error for Refusal {}

impl Refusal {
    /// Whether the refusal is of code given inline to an interpreter
    /// other than a shell (its remedy: an owner-only script), rather
    /// than of a path or a shell line.
    pub fn inline_code(&self) -> bool {
        self.what == INLINE || self.what == RUNS || self.what == TREE
    }

    /// The stable reason code: [`SECRET_PROGRAM_WRITABLE`], or
    /// [`SECRET_PROGRAM_UNREADABLE_ARGS`] for a script that cannot be read.
    pub const fn code(&self) -> &'static str {
        match self.unreadable {
            None => SECRET_PROGRAM_WRITABLE,
            Some(_) => SECRET_PROGRAM_UNREADABLE_ARGS,
        }
    }
}

/// Check every `from_command` of `secrets` against `writable`: real paths
/// of the directories tokens may write (at or under them is refused).
pub fn check(secrets: &[SecretSpec], writable: &[PathBuf]) -> Result<(), Refusal> {
    let env = &warden_jail::settings::Settings::current().program_env;
    check_with(secrets, writable, env)
}

/// [`check`] with `env`, the variables the program is given (besides its
/// fixed search path).
pub fn check_with(
    secrets: &[SecretSpec],
    writable: &[PathBuf],
    env: &[(String, std::ffi::OsString)],
) -> Result<(), Refusal> {
    for s in secrets {
        let SecretSource::Command(argv) = &s.source else {
            continue;
        };
        let c = Checker {
            secret: &s.name,
            writable,
            env: Env(env),
        };
        // `HOME` under a root: every file a program reads from there by
        // default (`.gitconfig`, `.zshenv`, `.sqliterc`, `.vimrc`) is one
        // a token may write; so is `GNUPGHOME`'s `gpg.conf`.
        for (_, value) in env {
            for p in paths_in(&value.to_string_lossy(), &c.env) {
                c.path(&p, "a path its environment names")?;
            }
        }
        c.argv(argv)?;
    }
    Ok(())
}

struct Checker<'a> {
    secret: &'a str,
    writable: &'a [PathBuf],
    env: Env<'a>,
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
        let mut shell = is_shell(program);
        // `env HOME=/proj sh -c '~/get.sh'`, `env -C /proj sh -c get.sh`:
        // what runs before a shell may change what its script reads.
        if let Some(at) = argv.iter().skip(1).position(|a| is_shell(a)) {
            if let Some(a) = argv[1..=at]
                .iter()
                .find(|a| a.starts_with('-') || is_assignment(a))
            {
                return Err(Refusal {
                    secret: self.secret.to_string(),
                    what: "an argument before its shell",
                    path: PathBuf::from(a),
                    under: self.writable.first().cloned().unwrap_or_default(),
                    unreadable: Some(
                        "an option or a variable that may change what the shell reads",
                    ),
                });
            }
        }
        // A shell's script has its words read for directories that hold
        // a root by `script`, a `cd`'s apart.
        let mut plain = Vec::new();
        for arg in &argv[1..] {
            for p in paths_in(arg, &self.env) {
                self.path(&p, "an argument")?;
            }
            if shell {
                self.script(arg, 0)?;
            } else {
                plain.push(arg);
            }
            shell |= is_shell(arg);
        }
        self.commands(argv, 0)?;
        plain.into_iter().try_for_each(|a| self.holders(a))
    }

    /// The interpreters, shells and wrappers among `words` (an argv, or a
    /// shell line's words) and what each is given, read by its row
    /// ([`interpreters`]): inline code of a language warden does not read
    /// is refused, a script is checked as the program is, and so is the
    /// program a wrapper runs. `depth`: how many shell lines deep.
    fn commands(&self, words: &[String], depth: usize) -> Result<(), Refusal> {
        for (i, w) in words.iter().enumerate() {
            let rest = &words[i + 1..];
            // A word may be the program a shell line, `find -exec` or a
            // runner's command runs: its links and its `#!` chain too.
            // Only a file that is there has a `#!` chain; the word's own
            // path was read with every word's paths before.
            if (i > 0 || depth > 0) && !w.is_empty() && !w.starts_with('-') {
                let name = absolute(w);
                if program_path(&name).is_some_and(|p| p.is_file()) {
                    self.program(&name, "a program its arguments name", 0)?;
                }
            }
            if let Some(row) = interpreter(w) {
                for g in given(row, rest) {
                    match g {
                        Given::Inline(code) if provably_pathless(row, code) => {}
                        Given::Inline(code) => self.inline(code, row.why)?,
                        // `node --import data:text/javascript,...`: code.
                        Given::Script(file) if is_url(file) => self.inline(file, row.why)?,
                        Given::Script(file) => self.script_file(file)?,
                    }
                }
            }
            if let Some(row) = runner(w) {
                self.runs(row, rest, depth)?;
            }
            if let Some(why) = tree(w) {
                self.unread(TREE, w, why)?;
            }
            if stdin::builds_from_input(w, rest) {
                self.unread(
                    "a command line its input builds",
                    w,
                    "a shell, an interpreter or a wrapper given arguments read from its input",
                )?;
            }
            if is_shell(w) {
                let mut inline = false;
                for r in rest {
                    // `sh get.sh`: bash looks for a script it cannot find
                    // from its directory on the search path.
                    if r.starts_with('-') {
                        inline |= r.contains('c') && !r.starts_with("--");
                        continue;
                    }
                    if !inline {
                        self.script_file(r)?;
                    }
                    if depth > 0 {
                        // A shell line inside a shell line.
                        self.script(r, depth)?;
                    }
                }
            }
            if is_wrapper(w) {
                for r in rest
                    .iter()
                    .filter(|r| !r.starts_with('-') && !is_assignment(r))
                {
                    self.program(&absolute(r), "a program a wrapper runs", 0)?;
                }
            }
        }
        Ok(())
    }

    /// Code given inline to an interpreter whose language warden does not
    /// read: refused while tokens may write anywhere.
    fn inline(&self, code: &str, why: &'static str) -> Result<(), Refusal> {
        self.unread(INLINE, code, why)
    }

    /// Code or a command, `what`, that warden does not read: refused
    /// while tokens may write anywhere.
    fn unread(&self, what: &'static str, code: &str, why: &'static str) -> Result<(), Refusal> {
        let Some(under) = self.writable.first() else {
            return Ok(());
        };
        Err(Refusal {
            secret: self.secret.to_string(),
            what,
            path: PathBuf::from(code),
            under: under.clone(),
            unreadable: Some(why),
        })
    }

    /// A script file an interpreter or a shell is given, checked as the
    /// program is: from the program's directory (`/`), and on the search
    /// path for a bare name (bash looks there; so does `env`).
    fn script_file(&self, file: &str) -> Result<(), Refusal> {
        if file.is_empty() {
            return Ok(());
        }
        let named = self.env.tilde(file).unwrap_or_else(|| file.to_string());
        self.path(&Path::new(PROGRAM_DIR).join(&named), "a script it is given")?;
        if !named.contains('/') {
            self.program(&named, "a script it is given", 0)?;
        }
        Ok(())
    }

    /// An argument a shell may run as a script: its words as the shell
    /// reads them, each from `/` and from every directory it `cd`s to.
    fn script(&self, arg: &str, depth: usize) -> Result<(), Refusal> {
        let unreadable = |why: &'static str| Refusal {
            secret: self.secret.to_string(),
            what: "a shell script it is given",
            path: PathBuf::from(arg),
            under: self.writable.first().cloned().unwrap_or_default(),
            unreadable: Some(why),
        };
        if depth >= MAX_NESTED {
            return Err(unreadable("shell lines nested too deep to read"));
        }
        let tokens = shell_tokens(arg, &self.env).map_err(unreadable)?;
        let words: Vec<String> = tokens
            .iter()
            .filter_map(|t| match t {
                Token::Word(w) => Some(w.clone()),
                Token::Op(_) => None,
            })
            .collect();
        let mut dirs = vec![PathBuf::from(PROGRAM_DIR)];
        for (i, w) in words.iter().enumerate() {
            if SETTERS.contains(&w.as_str())
                || is_assignment(w)
                || (w == "-v" && i > 0 && words[i - 1] == "printf")
            {
                return Err(unreadable("a word that sets a variable"));
            }
            if matches!(w.as_str(), "cd" | "pushd" | "popd" | "chdir") {
                match words.get(i + 1) {
                    Some(d) if d.starts_with('/') => dirs.push(PathBuf::from(d)),
                    _ => return Err(unreadable("a `cd` to a directory not named outright")),
                }
            }
        }
        for w in &words {
            for p in paths_in(w, &self.env) {
                self.path(&p, "a path its shell script names")?;
            }
            // After a `cd`, any word may be a file of that directory.
            if !w.starts_with('/') && !w.is_empty() {
                for d in &dirs[1..] {
                    self.path(&d.join(w), "a path its shell script names")?;
                }
            }
        }
        // `find ... | sh`, `sh < x`: a program read from a pipe.
        if let Some(why) = stdin::fed_program(&tokens) {
            return Err(unreadable(why));
        }
        // The line's own commands: `python3 -c`, `env perl -e`, a shell
        // line in it.
        self.commands(&words, depth + 1)?;
        // A `cd`'s directory is followed above, whatever it holds.
        words
            .iter()
            .enumerate()
            .filter(|(i, _)| *i == 0 || !matches!(words[i - 1].as_str(), "cd" | "pushd" | "chdir"))
            .try_for_each(|(_, w)| self.holders(w))
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
        let words: Vec<String> = words.collect();
        for w in &words {
            // `#!/usr/bin/perl -I/proj/lib`, `#!/usr/bin/env -S perl -I/proj/lib`.
            for p in paths_in(w, &self.env) {
                self.path(&p, "an argument of its interpreter")?;
            }
        }
        if Path::new(&interp).file_name().is_some_and(|n| n == "env") {
            if let Some(next) = words
                .iter()
                .find(|w| !w.starts_with('-') && !w.contains('='))
            {
                self.program(next, "its interpreter", depth + 1)?;
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
            .chain(links.iter().map(|l| (l.clone(), "a link on the way to it")));
        for (path, what) in met {
            if let Some(under) = self.writable.iter().find(|w| path.starts_with(w)) {
                return Err(Refusal {
                    secret: self.secret.to_string(),
                    what,
                    path,
                    under: under.clone(),
                    unreadable: None,
                });
            }
        }
        // What lies where tokens may write is refused as such first; then
        // what cannot be followed from here.
        let seen: Vec<&Path> = [p, real.as_path()]
            .into_iter()
            .chain(links.iter().map(PathBuf::as_path))
            .collect();
        self.followed(&seen, &real, what)?;
        Ok(real)
    }
}

/// The interpreter and its argument of a `#!` line, if `file` starts with
/// one.
fn shebang(file: &Path) -> Option<Vec<String>> {
    let mut head = [0u8; 256];
    // Never a FIFO or a device: opening one may wait for ever.
    if !std::fs::metadata(file).ok()?.is_file() {
        return None;
    }
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
/// /proj/get.sh"`, `tools/get.sh`), both as written and with the
/// program's variables and `~` expanded (`$HOME/proj/get.sh`,
/// `--homedir=~/proj/.gnupg`). A word that only looks like a path
/// protects a directory more, never less.
fn paths_in(arg: &str, env: &Env) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = words_in(arg, env)
        .into_iter()
        .filter(|w| w.contains('/') && !w.contains("://"))
        .map(|w| Path::new(PROGRAM_DIR).join(w))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The words [`paths_in`] reads an argument as: the argument, each part
/// of it between blanks and separators, each way of reading an option's
/// attached value, with `~` and the program's variables expanded.
fn words_in(arg: &str, env: &Env) -> Vec<String> {
    let expanded = env.expand_vars(arg);
    // `file:///p/%67et.sh`, `file://localhost/p`: the path a URL names.
    let urls: Vec<String> = [arg, expanded.as_str()]
        .into_iter()
        .flat_map(stdin::url_paths)
        .collect();
    [arg, expanded.as_str()]
        .into_iter()
        .chain(urls.iter().map(String::as_str))
        .flat_map(|a| {
            a.split(|c: char| c.is_whitespace() || ";|&<>()'\"=`$,:{}".contains(c))
                .chain(std::iter::once(a))
        })
        .flat_map(attached)
        .map(|w| env.tilde(w).unwrap_or_else(|| w.to_string()))
        .collect()
}

/// `word`, and for an option with a value attached (`-I/proj/lib`,
/// `-wI~/lib`, `-r/proj/x.rb`, `+so/proj/x.vim`), each way of reading
/// where the value starts: every tail after the option letters up to the
/// first `/` or `~`. An option's letters are not known for every
/// program; a tail that is not its value protects more, never less.
fn attached(word: &str) -> Vec<&str> {
    let mut out = vec![word];
    if !word.starts_with(['-', '+']) {
        return out;
    }
    let end = word.find(['/', '~']).unwrap_or(0);
    out.extend(
        word.char_indices()
            .skip(1)
            .take_while(|(at, _)| *at <= end)
            .map(|(at, _)| &word[at..]),
    );
    out
}

/// `name` as the program's environment finds it: a relative path from
/// the program's working directory, a bare name on its search path.
fn absolute(name: &str) -> String {
    if name.contains('/') && !name.starts_with('/') {
        format!("{PROGRAM_DIR}{name}")
    } else {
        name.to_string()
    }
}

/// Whether `word` names a shell (its last component).
fn is_shell(word: &str) -> bool {
    let name = word.rsplit('/').next().unwrap_or(word);
    SHELLS.contains(&name)
}

/// `NAME=...`: a shell word that sets a variable.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut c = name.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// The variables a secret's program is given, as it expands them.
struct Env<'a>(&'a [(String, std::ffi::OsString)]);

impl Env<'_> {
    /// The value of `name` in the program's environment; `None` when it
    /// is not given one.
    fn get(&self, name: &str) -> Option<String> {
        if name == "PATH" {
            return Some(PROGRAM_PATH.to_string());
        }
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    }

    /// `word` with a leading `~` or `~user` expanded as a shell does;
    /// `None` when it has none that expands.
    fn tilde(&self, word: &str) -> Option<String> {
        let rest = word.strip_prefix('~')?;
        let (user, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let home = if user.is_empty() {
            self.get("HOME")?
        } else {
            let u = nix::unistd::User::from_name(user).ok().flatten()?;
            u.dir.to_string_lossy().into_owned()
        };
        Some(format!("{home}{tail}"))
    }

    /// `text` with every `$NAME` and `${NAME}` the program is given
    /// replaced by its value (others kept as written).
    fn expand_vars(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (name, used) = match after.strip_prefix('{') {
                Some(b) => match b.find('}') {
                    Some(end) => (&b[..end], end + 2),
                    None => ("", 0),
                },
                None => {
                    let n = after
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(after.len());
                    (&after[..n], n)
                }
            };
            match self.get(name).filter(|_| !name.is_empty()) {
                Some(v) => {
                    out.push_str(&v);
                    rest = &after[used..];
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

#[cfg(test)]
mod class_tests;
#[cfg(test)]
mod tests;

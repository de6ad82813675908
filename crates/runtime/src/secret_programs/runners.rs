//! Programs that run a command, or code, their arguments give them: the
//! table the rule for secret programs (`super`) reads such an argument
//! by, and how it reads it.
//!
//! An argument of these is one more command line (`env -S "..."`, `su
//! -c`, `script -c`, `flock -c`, `watch`), a command's words (`find
//! -exec ... ;`), or code in a language warden does not read (`vim -c`,
//! `sqlite3`'s dot-commands, `git -c alias.x=!...`, `ssh -o
//! ProxyCommand=`). A shell line is read as a shell line is (its paths,
//! its programs, what it cannot be read for certain refused); the words
//! of a command are checked as a command's are; anything else is refused
//! while tokens may write anywhere, as inline code of an interpreter is:
//! what it runs cannot be told without running it. A variable such a
//! program is given by an assignment (`env NODE_OPTIONS=...`, `sudo
//! PERL5OPT=...`, `make CC=...`) is read too: a value that is more than a
//! word (options with blanks, quotes, a `$`, a data URL) is refused, a
//! path in it is checked.

/// How an argument carries what the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Carries {
    /// A shell line, run by `sh -c` or the user's shell.
    ShellLine,
    /// A command line the program splits into words itself (`env -S`):
    /// its words, then the words after it, are one more command.
    Split,
    /// A command's words, up to a `;` or a `+` (`find -exec`), or a
    /// program's name (`scp -S`).
    Command,
    /// Commands or code of a language warden does not read.
    Unreadable,
}

/// One program that runs what its arguments give it.
pub(super) struct Runner {
    /// Its names (the last component of a path).
    pub(super) names: &'static [&'static str],
    /// Options whose value carries a command, and how: a short one
    /// (`-c`) takes the word after it or a value attached (`-cVALUE`), a
    /// long one (`--command`, `-exec`) the word after it or the value
    /// after `=`.
    pub(super) options: &'static [(&'static str, Carries)],
    /// Whether its short options cluster (`-qc`, `-vo`): a cluster
    /// holding one of `options` carries as that option does.
    pub(super) clusters: bool,
    /// A word starting with `+` carries a command (vim's `+cmd`, less's
    /// `+!cmd`).
    pub(super) plus: Option<Carries>,
    /// Its operands (words not starting with `-`) after the first
    /// `.0` carry a command: joined with blanks for a shell line.
    pub(super) operands: Option<(usize, Carries)>,
    /// An option value refused as [`Carries::Unreadable`] only when it
    /// holds one of these words (any case): `ssh -o` runs a command only
    /// through its `...Command` keys. `None`: every value is refused.
    pub(super) only_if: Option<&'static [&'static str]>,
    /// Its `NAME=value` words set variables of the program it runs,
    /// which that program may read as options or code.
    pub(super) assignments: bool,
    /// It searches directories (its operands before its expression, `/`
    /// without one) and gives what it finds to the command it runs
    /// (`find -exec ... {}`, `-execdir`): none may hold a root.
    pub(super) searches: bool,
    /// Its first argument may be its options without a `-` (`tar xIf
    /// prog a.tar`).
    pub(super) old_style: bool,
    /// Its short options that take a value as the next word (`ssh -p
    /// 22`): that word is not an operand.
    pub(super) valued: &'static str,
    /// The command its operands carry runs from a home directory (the
    /// other end of `ssh`, which may be this host): its relative words
    /// are read from `HOME` as well as from `/`.
    pub(super) home: bool,
    /// Why it is in the table.
    pub(super) why: &'static str,
}

const NONE: Runner = Runner {
    names: &[],
    options: &[],
    clusters: false,
    plus: None,
    operands: None,
    only_if: None,
    assignments: false,
    searches: false,
    old_style: false,
    valued: "",
    home: false,
    why: "",
};

use std::path::{Path, PathBuf};

use warden_jail::secrets::PROGRAM_DIR;

use crate::pathwalk::walk;

use super::shell::shell_words;
use super::{is_assignment, paths_in, Checker, Refusal, MAX_NESTED, RUNS};
use Carries::{Command, ShellLine, Split, Unreadable};

/// Programs that run commands or code their arguments give them, and why
/// each is read so.
pub(super) const RUNNERS: &[Runner] = &[
    Runner {
        names: &["env"],
        options: &[
            ("-S", Split),
            ("--split-string", Split),
            ("-C", Unreadable),
            ("--chdir", Unreadable),
        ],
        clusters: true,
        assignments: true,
        why: "env -S splits its string into one more command line, env -C moves where the program's relative paths lead, and its assignments set variables the program it runs reads",
        ..NONE
    },
    Runner {
        names: &["sudo", "doas"],
        options: &[("-i", Unreadable), ("--login", Unreadable)],
        clusters: true,
        assignments: true,
        why: "sudo's assignments set variables the program it runs reads, and sudo -i runs its command with a login shell from the target's home, where its relative paths lead",
        ..NONE
    },
    Runner {
        names: &["make", "gmake"],
        assignments: true,
        why: "make's assignments set variables its recipes run (CC, SHELL, MAKEFLAGS)",
        ..NONE
    },
    Runner {
        names: &["su", "runuser"],
        options: &[
            ("-", Unreadable),
            ("-l", Unreadable),
            ("--login", Unreadable),
            ("-c", ShellLine),
            ("--command", ShellLine),
            ("--session-command", ShellLine),
            ("-s", Command),
            ("--shell", Command),
        ],
        clusters: true,
        why: "su and runuser run the shell line -c gives them with the shell -s names; with -, -l or --login from the target's home, where its relative paths lead",
        ..NONE
    },
    Runner {
        names: &["script"],
        options: &[("-c", ShellLine), ("--command", ShellLine)],
        clusters: true,
        why: "script runs the shell line -c gives it",
        ..NONE
    },
    Runner {
        names: &["flock"],
        options: &[("-c", ShellLine), ("--command", ShellLine)],
        clusters: true,
        why: "flock runs the shell line -c gives it with sh -c",
        ..NONE
    },
    Runner {
        names: &["watch"],
        options: &[],
        operands: Some((0, ShellLine)),
        why: "watch runs its operands, joined, with sh -c",
        ..NONE
    },
    Runner {
        names: &["sg"],
        options: &[("-c", ShellLine)],
        operands: Some((1, ShellLine)),
        why: "sg runs the command after its group with sh -c",
        ..NONE
    },
    Runner {
        names: &["parallel", "sem"],
        options: &[],
        operands: Some((0, ShellLine)),
        why: "GNU parallel runs its command template with a shell",
        ..NONE
    },
    Runner {
        names: &["find"],
        options: &[
            ("-exec", Command),
            ("-execdir", Command),
            ("-ok", Command),
            ("-okdir", Command),
        ],
        searches: true,
        why: "find runs the command -exec and -ok give it, up to `;` or `+`, on the files it finds",
        ..NONE
    },
    Runner {
        names: &["vim", "vi", "nvim", "ex", "view", "vimdiff", "rvim", "rview", "gvim", "evim", "vimx"],
        options: &[("-c", Unreadable), ("--cmd", Unreadable)],
        plus: Some(Unreadable),
        why: "Vim runs the Ex commands -c, --cmd and +cmd give it (:!, :py, :lua, :source)",
        ..NONE
    },
    Runner {
        names: &["less"],
        plus: Some(Unreadable),
        why: "less runs the commands +cmd gives it (! runs a shell line)",
        ..NONE
    },
    Runner {
        names: &["man"],
        options: &[
            ("-P", Unreadable),
            ("--pager", Unreadable),
            ("-H", Unreadable),
            ("--html", Unreadable),
        ],
        why: "man runs the pager -P names and the browser -H names with a shell",
        ..NONE
    },
    Runner {
        names: &["sqlite3", "sqlite"],
        options: &[("-cmd", Unreadable), ("--cmd", Unreadable)],
        operands: Some((1, Unreadable)),
        why: "sqlite3 runs the SQL and dot-commands its operands and -cmd give it (.shell, .system, .load, load_extension(), readfile())",
        ..NONE
    },
    Runner {
        names: &["git"],
        options: &[
            ("-c", Unreadable),
            ("--config-env", Unreadable),
            ("--exec", Unreadable),
            ("-x", Unreadable),
            ("--extcmd", Unreadable),
            ("--upload-pack", Unreadable),
            ("--receive-pack", Unreadable),
            ("--to-cmd", Unreadable),
            ("--cc-cmd", Unreadable),
            ("--sendmail-cmd", Unreadable),
            ("--index-filter", Unreadable),
            ("--tree-filter", Unreadable),
            ("--msg-filter", Unreadable),
            ("--env-filter", Unreadable),
            ("--commit-filter", Unreadable),
        ],
        operands: None,
        why: "git runs the commands its configuration names (-c core.pager=, alias.x=!..., core.sshCommand, credential.helper) and those its subcommands' options name (rebase --exec, difftool --extcmd, fetch --upload-pack)",
        ..NONE
    },
    Runner {
        names: &["ssh", "slogin"],
        options: &[("-o", Unreadable)],
        clusters: true,
        only_if: Some(&["command", "exec"]),
        operands: Some((1, ShellLine)),
        valued: "BbcDEeFIiJLlmOoPpQRSWw",
        home: true,
        why: "ssh runs the commands its ProxyCommand, LocalCommand, RemoteCommand and KnownHostsCommand options name, and the command after its host with a shell from a home directory, on a host that may be this one (localhost, an alias of ~/.ssh/config)",
        ..NONE
    },
    Runner {
        names: &["scp", "sftp"],
        options: &[("-o", Unreadable), ("-S", Command)],
        clusters: true,
        only_if: Some(&["command", "exec"]),
        why: "scp and sftp run the program -S names, and the commands ssh's ...Command options name",
        ..NONE
    },
    Runner {
        names: &["tar", "gtar"],
        options: &[
            ("--to-command", Unreadable),
            ("--use-compress-program", Unreadable),
            ("-I", Unreadable),
            ("--checkpoint-action", Unreadable),
            ("--info-script", Unreadable),
            ("--new-volume-script", Unreadable),
            ("-F", Unreadable),
            ("--rsh-command", Unreadable),
            ("--rmt-command", Unreadable),
        ],
        clusters: true,
        old_style: true,
        why: "tar runs the commands --to-command, -I, --checkpoint-action=exec and -F name",
        ..NONE
    },
    Runner {
        names: &["rsync"],
        options: &[("-e", Unreadable), ("--rsh", Unreadable), ("--rsync-path", Unreadable)],
        clusters: true,
        why: "rsync runs the command line -e gives it (and --rsync-path's at the other end)",
        ..NONE
    },
    Runner {
        names: &["systemd-run"],
        options: &[("-p", Unreadable), ("--property", Unreadable)],
        only_if: Some(&["exec", "directory", "bind", "root", "mount", "filesystem"]),
        why: "systemd-run runs the commands its Exec...= properties name, from the directories and over the binds and roots its WorkingDirectory=, RootDirectory=, BindPaths=, MountImages= properties name",
        ..NONE
    },
    Runner {
        names: &["nix-shell"],
        options: &[("--run", ShellLine), ("--command", ShellLine)],
        why: "nix-shell runs the shell line --run and --command give it",
        ..NONE
    },
    Runner {
        names: &["gcc", "cc", "g++", "c++", "clang", "clang++"],
        options: &[("-wrapper", Unreadable)],
        why: "the compiler driver runs its tools under the command -wrapper names",
        ..NONE
    },
];

/// The row of the program `word` names (its last component), if it runs
/// what its arguments give it.
pub(super) fn runner(word: &str) -> Option<&'static Runner> {
    let name = word.rsplit('/').next().unwrap_or(word);
    RUNNERS.iter().find(|row| row.names.contains(&name))
}

/// One argument of a runner that carries a command: how, and the words
/// it is (a shell line's text; a command's words, from its program on).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Carried {
    pub(super) how: Carries,
    pub(super) words: Vec<String>,
}

/// What `row`'s program is given to run by the words `rest` after its
/// name.
pub(super) fn carried(row: &Runner, rest: &[String]) -> Vec<Carried> {
    let dashed: Vec<String>;
    let rest = match rest.split_first() {
        Some((first, later)) if row.old_style && !first.starts_with('-') => {
            dashed = std::iter::once(format!("-{first}"))
                .chain(later.iter().cloned())
                .collect();
            &dashed[..]
        }
        _ => rest,
    };
    let mut out = Vec::new();
    let mut operands: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        i += 1;
        // `watch id -u`: after the first operand, every word is the
        // command's.
        if !operands.is_empty() && row.operands.is_some() {
            operands.push(w);
            continue;
        }
        if let (Some(how), true) = (row.plus, w.starts_with('+')) {
            out.push(Carried {
                how,
                words: vec![w[1..].to_string()],
            });
            continue;
        }
        if let Some((how, value, took_next)) = option(row, w, rest.get(i).map(String::as_str)) {
            if took_next {
                i += 1;
            }
            let mut words = vec![value.to_string()];
            match how {
                // `find -exec prog args ;`: the command runs to `;` or `+`.
                Command => {
                    while let Some(n) = rest.get(i) {
                        i += 1;
                        if n == ";" || n == "+" {
                            break;
                        }
                        words.push(n.clone());
                    }
                }
                // `env -S'perl -e' x`: what follows is the rest of its line.
                Split => words.extend(rest[i..].iter().cloned()),
                _ => {}
            }
            let refused = how != Unreadable
                || row.only_if.is_none_or(|words| {
                    let v = value.to_ascii_lowercase();
                    words.iter().any(|k| v.contains(k))
                });
            if refused {
                out.push(Carried { how, words });
            }
            continue;
        }
        if takes_next(row, w) {
            i += 1;
            continue;
        }
        if !w.starts_with('-') && (!row.assignments || !is_assignment(w)) {
            operands.push(w);
        }
    }
    if let Some((skip, how)) = row.operands {
        let ops: Vec<&str> = operands.into_iter().skip(skip).collect();
        if !ops.is_empty() {
            let words = match how {
                ShellLine => vec![ops.join(" ")],
                _ => ops.iter().map(|s| s.to_string()).collect(),
            };
            out.push(Carried { how, words });
        }
    }
    out
}

/// Whether option `w` of `row` takes the next word as its value (`-p
/// 22`, `-vp 22`): its last short letter is one of [`Runner::valued`].
fn takes_next(row: &Runner, w: &str) -> bool {
    let Some(cluster) = w.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
        return false;
    };
    cluster
        .char_indices()
        .find(|(_, c)| row.valued.contains(*c))
        .is_some_and(|(at, c)| at + c.len_utf8() == cluster.len())
}

/// `w` as one of `row`'s options that carry a command: how, its value,
/// and whether the value is the next word.
fn option<'a>(row: &Runner, w: &'a str, next: Option<&'a str>) -> Option<(Carries, &'a str, bool)> {
    let value = |attached: &'a str| match attached {
        "" => (next.unwrap_or(""), true),
        v => (v, false),
    };
    for &(name, how) in row.options {
        let short = name.len() == 2 && !name.starts_with("--");
        if w == name {
            return Some((how, next.unwrap_or(""), true));
        }
        if let Some(v) = w.strip_prefix(name).and_then(|v| v.strip_prefix('=')) {
            return Some((how, v, false));
        }
        if short {
            let letter = &name[1..];
            if let Some(v) = w.strip_prefix(name) {
                let (v, took) = value(v);
                return Some((how, v, took));
            }
            // `-qc line`, `-vo ProxyCommand=x`.
            let cluster = w.strip_prefix('-').filter(|c| !c.starts_with('-'));
            if let (true, Some(c)) = (row.clusters, cluster) {
                if let Some(at) = c.find(letter) {
                    let (v, took) = value(&c[at + 1..]);
                    return Some((how, v, took));
                }
            }
        }
    }
    None
}

/// Whether the value of assignment `word` is one word a program can read
/// no options or code from, beyond the paths in it (which are checked):
/// no blank, quote, `$`, `!`, shell operator, pattern, `%`-escape or data
/// URL (`NODE_OPTIONS=--import=data:...`, `PERL5DB=BEGIN{...}`, `LESSOPEN=|x`,
/// `GIT_CONFIG_VALUE_0=!sh`).
pub(super) fn plain_value(word: &str) -> bool {
    let value = word.split_once('=').map_or("", |(_, v)| v);
    !value.contains(|c: char| c.is_whitespace() || "\"'`$;|&<>(){}[]*?!\\#%".contains(c))
        && !value.to_ascii_lowercase().contains("data:")
}

impl Checker<'_> {
    /// What the runner of `row` is given to run by the words `rest`
    /// after its name: a shell line read as one, a command's words
    /// checked as a command's, anything else refused while tokens may
    /// write. `depth`: how many shell lines deep.
    pub(super) fn runs(&self, row: &Runner, rest: &[String], depth: usize) -> Result<(), Refusal> {
        if row.assignments {
            if let Some(a) = rest.iter().find(|a| is_assignment(a) && !plain_value(a)) {
                self.unread(RUNS, a, "a variable's value that the program it runs may read as options or code (NODE_OPTIONS, PERL5OPT, PERL5DB, GIT_CONFIG_*, LESSOPEN)")?;
            }
        }
        for c in carried(row, rest) {
            match c.how {
                // `ssh localhost proj/get.sh`: the other end's shell
                // starts in a home; `cd ~` makes its relative words read
                // from there too (and, with no `HOME` given, refuses).
                ShellLine if row.home => {
                    self.script(&format!("cd ~; {}", c.words.join(" ")), depth)?
                }
                ShellLine => self.script(&c.words.join(" "), depth)?,
                Split => {
                    let mut words = shell_words(&c.words[0], &self.env)
                        .map_err(|why| self.unreadable_line(&c.words[0], why))?;
                    words.extend(c.words[1..].iter().cloned());
                    self.line(&words, depth)?;
                }
                Command if row.searches => {
                    self.line(&c.words, depth)?;
                    self.searched(rest)?;
                }
                Command => self.line(&c.words, depth)?,
                Unreadable => self.unread(RUNS, &c.words.join(" "), row.why)?,
            }
        }
        Ok(())
    }

    /// A command's words (`find -exec`'s, `env -S`'s split): their paths,
    /// their program, and their own commands, one shell line deeper.
    fn line(&self, words: &[String], depth: usize) -> Result<(), Refusal> {
        if depth >= MAX_NESTED {
            let text = words.join(" ");
            return Err(self.unreadable_line(&text, "command lines nested too deep to read"));
        }
        for w in words {
            for p in paths_in(w, &self.env) {
                self.path(&p, "a path its command line names")?;
            }
        }
        self.commands(words, depth + 1)?;
        words.iter().try_for_each(|w| self.holders(w))
    }

    /// The directories a search (`find`) starts from, whose files it
    /// gives the command it runs: none may hold a root, nor lie under one.
    fn searched(&self, rest: &[String]) -> Result<(), Refusal> {
        let mut starts: Vec<&str> = rest
            .iter()
            .take_while(|w| !w.starts_with(['-', '(', '!', ',']))
            .map(String::as_str)
            .collect();
        if starts.is_empty() {
            starts.push(".");
        }
        for s in starts {
            let named = self.env.tilde(s).unwrap_or_else(|| s.to_string());
            let dir = Path::new(PROGRAM_DIR).join(named);
            let (real, _) = walk(&dir);
            let found = self
                .writable
                .iter()
                .find(|r| r.starts_with(&dir) || r.starts_with(&real));
            if let Some(under) = found {
                return Err(Refusal {
                    secret: self.secret.to_string(),
                    what: "a directory it searches and runs a command on what it finds",
                    path: dir,
                    under: under.clone(),
                    unreadable: None,
                });
            }
            self.path(&dir, "a directory it searches")?;
        }
        Ok(())
    }

    /// A command line given to a runner that cannot be read for certain.
    fn unreadable_line(&self, line: &str, why: &'static str) -> Refusal {
        Refusal {
            secret: self.secret.to_string(),
            what: "a command line it is given",
            path: PathBuf::from(line),
            under: self.writable.first().cloned().unwrap_or_default(),
            unreadable: Some(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(argv: &[&str]) -> Vec<(Carries, Vec<String>)> {
        let row = runner(argv[0]).expect("a runner");
        let rest: Vec<String> = argv[1..].iter().map(|s| s.to_string()).collect();
        carried(row, &rest)
            .into_iter()
            .map(|c| (c.how, c.words))
            .collect()
    }

    fn one(how: Carries, words: &[&str]) -> Vec<(Carries, Vec<String>)> {
        vec![(how, words.iter().map(|s| s.to_string()).collect())]
    }

    #[test]
    fn each_runner_is_known_by_its_name_and_its_command_by_the_arguments_that_carry_one() {
        assert_eq!(read(&["env", "-S", "sh -c x"]), one(Split, &["sh -c x"]));
        assert_eq!(
            read(&["/usr/bin/env", "-Sperl -e", "x"]),
            one(Split, &["perl -e", "x"])
        );
        assert_eq!(read(&["env", "-vS", "a b"]), one(Split, &["a b"]));
        assert_eq!(read(&["env", "--split-string=a b"]), one(Split, &["a b"]));
        assert_eq!(read(&["env", "pass", "show", "x"]), vec![]);
        assert_eq!(
            read(&["script", "-qc", "id", "/dev/null"]),
            one(ShellLine, &["id"])
        );
        assert_eq!(read(&["flock", "/l", "-c", "id"]), one(ShellLine, &["id"]));
        assert_eq!(read(&["su", "me", "--command=id"]), one(ShellLine, &["id"]));
        assert_eq!(
            read(&["watch", "-n", "5", "id", "-u"]),
            one(ShellLine, &["5 id -u"])
        );
        assert_eq!(
            read(&[
                "find",
                "/",
                "-maxdepth",
                "0",
                "-exec",
                "get",
                "{}",
                ";",
                "-print"
            ]),
            one(Command, &["get", "{}"])
        );
        assert_eq!(read(&["vim", "-c", "!id"]), one(Unreadable, &["!id"]));
        assert_eq!(read(&["ex", "+!id", "x"]), one(Unreadable, &["!id"]));
        assert_eq!(
            read(&["sqlite3", "db", ".shell id"]),
            one(Unreadable, &[".shell id"])
        );
        assert_eq!(read(&["sqlite3", "db"]), vec![]);
        assert_eq!(
            read(&["git", "-c", "core.pager=x", "log"]),
            one(Unreadable, &["core.pager=x"])
        );
        assert_eq!(read(&["git", "config", "--get", "user.name"]), vec![]);
        assert_eq!(
            read(&["ssh", "-oProxyCommand=x", "h"]),
            one(Unreadable, &["ProxyCommand=x"])
        );
        assert_eq!(
            read(&["ssh", "-vo", "proxycommand x", "h"]),
            one(Unreadable, &["proxycommand x"])
        );
        assert_eq!(read(&["ssh", "-o", "Port=22", "h"]), vec![]);
        assert_eq!(
            read(&["tar", "--to-command=x", "-xf", "a"]),
            one(Unreadable, &["x"])
        );
        assert_eq!(read(&["tar", "-xzf", "a"]), vec![]);
        assert_eq!(read(&["tar", "xzf", "a"]), vec![]);
        assert_eq!(read(&["tar", "xIf", "prog", "a"]).len(), 1);
        assert_eq!(
            read(&["systemd-run", "--user", "-p", "ExecStartPre=x", "true"]).len(),
            1
        );
        assert_eq!(
            read(&["systemd-run", "--user", "-p", "Nice=5", "true"]),
            vec![]
        );
        assert_eq!(read(&["nix-shell", "--run", "id"]), one(ShellLine, &["id"]));
        assert_eq!(
            read(&["rsync", "-avze", "x", "a", "b"]),
            one(Unreadable, &["x"])
        );
        assert_eq!(read(&["gcc", "-wrapper", "x,y"]), one(Unreadable, &["x,y"]));
        assert!(runner("pass").is_none() && runner("/usr/bin/op").is_none());
        assert!(plain_value("VAULT_ADDR=https://vault.example.com:8200"));
        assert!(!plain_value("NODE_OPTIONS=--import=data:text/javascript,x"));
        assert!(!plain_value("PERL5DB=BEGIN{x}"));
        assert!(!plain_value("LESSOPEN=|x %s"));
        assert!(!plain_value("GIT_CONFIG_VALUE_0=!sh"));
    }
}

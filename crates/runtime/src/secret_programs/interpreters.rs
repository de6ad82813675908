//! Interpreters and wrappers a secret's program may reach, and how each
//! takes what it runs: the table the rule for secret programs
//! (`super`) reads an argv, or a shell line's words, by.
//!
//! warden reads one language, the shell's (`super::shell::shell_words`). Code
//! of any other language given inline (`python3 -c`, `perl -e`, an awk
//! program) can build any path it opens from pieces (`'/'.join(...)`,
//! `chr(47)`, `$ENV{HOME}`) that no reading short of running it can tell,
//! so it is never proven to name no path a token can write: it is refused
//! while tokens may write anywhere, with the remedy of putting it in a
//! script of the owner's. A script such an interpreter is given is
//! checked as the program itself is. A wrapper runs the program named
//! after it, so that name is checked as the program is (its search path,
//! its links, its `#!` chain).

/// One interpreter: the names it goes by, how it is given code inline
/// and a script by name, and why it is here.
pub(super) struct Interpreter {
    /// Its names (the last component of a path; a version suffix such as
    /// `3.12` or `5.36` is ignored).
    pub(super) names: &'static [&'static str],
    /// Short options whose argument (attached, or the next word) is code.
    pub(super) inline_short: &'static str,
    /// Long options whose argument (`=...`, or the next word) is code.
    pub(super) inline_long: &'static [&'static str],
    /// Short options whose argument is a script file.
    pub(super) file_short: &'static str,
    /// Long options whose argument is a script file.
    pub(super) file_long: &'static [&'static str],
    /// Short options that take an argument of another kind (a cluster
    /// ends there: perl's `-MData::Dumper` holds no `-e`).
    pub(super) arg_short: &'static str,
    /// Its first operand is code (awk's program, sed's script) unless a
    /// script file was named; otherwise its first operand is a script
    /// file and the words after it are that script's arguments.
    pub(super) code_operand: bool,
    /// Words whose absence from inline code proves the code names no
    /// path (the language's only ways to open a file or run a program);
    /// `None` for a general-purpose language, whose code is never proven
    /// so (`open`, `import`, `require`, `do`, string building).
    pub(super) sinks: Option<&'static [&'static str]>,
    /// Why it is in the table.
    pub(super) why: &'static str,
}

/// Interpreters a secret's program may hand code or a script to, and why
/// each is read so. Order follows how often a secret's program is one.
pub(super) const INTERPRETERS: &[Interpreter] = &[
    Interpreter {
        names: &["python", "python2", "python3", "pypy", "pypy3"],
        inline_short: "c",
        inline_long: &[],
        file_short: "",
        file_long: &[],
        arg_short: "mWXQ",
        code_operand: false,
        sinks: None,
        why: "Python runs the code -c gives it, or the script named first",
    },
    Interpreter {
        names: &["perl"],
        inline_short: "eE",
        inline_long: &[],
        file_short: "",
        file_long: &[],
        arg_short: "MmIdD",
        code_operand: false,
        sinks: None,
        why: "Perl runs the code -e and -E give it (-le, -ne clusters too), or the script named first",
    },
    Interpreter {
        names: &["ruby"],
        inline_short: "e",
        inline_long: &[],
        file_short: "",
        file_long: &[],
        arg_short: "IrCxFEKT0",
        code_operand: false,
        sinks: None,
        why: "Ruby runs the code -e gives it, or the script named first",
    },
    Interpreter {
        names: &["node", "nodejs", "bun"],
        inline_short: "ep",
        inline_long: &["--eval", "--print"],
        file_short: "r",
        file_long: &["--require", "--import", "--loader", "--preload"],
        arg_short: "",
        code_operand: false,
        sinks: None,
        why: "node and bun run the code -e and -p give them, the modules -r preloads, or the script named first",
    },
    Interpreter {
        names: &["deno"],
        inline_short: "",
        inline_long: &["eval"],
        file_short: "",
        file_long: &[],
        arg_short: "",
        code_operand: false,
        sinks: None,
        why: "deno eval runs the code it is given; deno run, the script named",
    },
    Interpreter {
        names: &["php"],
        inline_short: "rBRE",
        inline_long: &[],
        file_short: "fF",
        file_long: &[],
        arg_short: "cdz",
        code_operand: false,
        sinks: None,
        why: "PHP runs the code -r gives it, or the script -f or its first operand names",
    },
    Interpreter {
        names: &["lua", "luajit"],
        inline_short: "e",
        inline_long: &[],
        file_short: "l",
        file_long: &[],
        arg_short: "",
        code_operand: false,
        sinks: None,
        why: "Lua runs the code -e gives it, the module -l loads, or the script named first",
    },
    Interpreter {
        names: &["Rscript", "R"],
        inline_short: "e",
        inline_long: &[],
        file_short: "f",
        file_long: &["--file"],
        arg_short: "",
        code_operand: false,
        sinks: None,
        why: "R runs the expressions -e gives it, or the script -f or its first operand names",
    },
    Interpreter {
        names: &["julia"],
        inline_short: "eEL",
        inline_long: &["--eval", "--print", "--load"],
        file_short: "",
        file_long: &[],
        arg_short: "JCOgtp",
        code_operand: false,
        sinks: None,
        why: "Julia runs the code -e and -E give it, or the script named first",
    },
    Interpreter {
        names: &["tclsh", "wish", "expect"],
        inline_short: "c",
        inline_long: &[],
        file_short: "f",
        file_long: &[],
        arg_short: "",
        code_operand: false,
        sinks: None,
        why: "Tcl and expect run the commands -c gives them, or the script named first",
    },
    Interpreter {
        names: &["pwsh", "powershell"],
        inline_short: "cC",
        inline_long: &["-Command", "-command", "--command"],
        file_short: "fF",
        file_long: &["-File", "-file", "--file"],
        arg_short: "",
        code_operand: false,
        sinks: None,
        why: "PowerShell runs the command -c gives it, or the script -File names",
    },
    Interpreter {
        names: &["awk", "gawk", "mawk", "nawk", "busybox-awk"],
        inline_short: "",
        inline_long: &["--source"],
        file_short: "fiEl",
        file_long: &["--file", "--include", "--exec", "--load"],
        arg_short: "vF",
        code_operand: true,
        // system(), getline from a file or a command, output to a file or
        // a command, @include and @load, and the input files and
        // environment it can be steered to.
        sinks: Some(&["system", "getline", "|", ">", "<", "@", "ARGV", "ARGC", "ENVIRON", "PROCINFO", "close", "fflush"]),
        why: "awk runs its first operand as a program (system(), getline from any path, @include) unless -f names a program file",
    },
    Interpreter {
        names: &["sed", "gsed"],
        inline_short: "e",
        inline_long: &["--expression"],
        file_short: "f",
        file_long: &["--file"],
        arg_short: "l",
        code_operand: true,
        // e (run a command, or s///e), r and R (read a file), w and W
        // (write one): a script holding none of those letters opens no
        // path (`1p`, `s/a/b/g`, `$d`).
        sinks: Some(&["e", "r", "R", "w", "W"]),
        why: "sed runs its first operand (or -e) as a script, whose e command runs a shell and r reads any path, unless -f names a script file",
    },
    Interpreter {
        names: &["gdb"],
        inline_short: "",
        inline_long: &["-ex", "--ex", "-iex", "--iex", "-eval-command", "--eval-command"],
        file_short: "x",
        file_long: &["--command", "-command"],
        arg_short: "p",
        code_operand: false,
        sinks: None,
        why: "gdb runs the commands -ex gives it (shell, python) and the command files -x names",
    },
    Interpreter {
        names: &["emacs"],
        inline_short: "",
        inline_long: &["--eval", "-eval"],
        file_short: "l",
        file_long: &["--load", "-load", "--script", "-script"],
        arg_short: "",
        code_operand: false,
        sinks: None,
        why: "Emacs runs the Lisp --eval gives it and the files -l and --script load",
    },
    Interpreter {
        names: &["make", "gmake"],
        inline_short: "E",
        inline_long: &["--eval"],
        file_short: "f",
        file_long: &["--file", "--makefile"],
        arg_short: "CIjlo",
        code_operand: false,
        sinks: None,
        why: "make runs the recipes of the makefile -f names (from / without one) and the text --eval gives it",
    },
];

/// Programs that run the program named after them (with options, a
/// count, a duration or a lock file before it), and why each is here.
/// The name after one is checked as the program itself is.
pub(super) const WRAPPERS: &[(&str, &str)] = &[
    (
        "env",
        "runs the program named after its assignments and options, found on the search path",
    ),
    ("nice", "runs the program named after its niceness"),
    ("ionice", "runs the program named after its class and level"),
    ("timeout", "runs the program named after its duration"),
    ("nohup", "runs the program named after it"),
    ("stdbuf", "runs the program named after its buffering modes"),
    ("setsid", "runs the program named after it in a new session"),
    (
        "chrt",
        "runs the program named after its policy and priority",
    ),
    ("taskset", "runs the program named after its CPU mask"),
    (
        "xargs",
        "runs the program named after its options, with arguments from its input",
    ),
    (
        "busybox",
        "runs the applet named after it: a shell, awk, sed, or any program",
    ),
    (
        "flock",
        "runs the program (or the shell line, -c) named after its lock file",
    ),
    ("time", "runs the program named after it"),
    ("command", "runs the program named after it"),
    (
        "exec",
        "runs the program named after it in place of the shell",
    ),
    (
        "sudo",
        "runs the program named after its options as another user",
    ),
    (
        "doas",
        "runs the program named after its options as another user",
    ),
    (
        "runuser",
        "runs the program (or the shell line, -c) named after its options",
    ),
    ("su", "runs the shell line -c gives it"),
    ("watch", "runs the line named after it with sh -c"),
    ("script", "runs the shell line -c gives it"),
    ("unbuffer", "runs the program named after it"),
    ("firejail", "runs the program named after its options"),
];

/// What an interpreter is given, read by its row.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Given<'a> {
    /// Code given inline: the option's argument or the code operand.
    Inline(&'a str),
    /// A script file, named by an option or as the first operand.
    Script(&'a str),
}

/// The row of the interpreter `word` names (its last component, a
/// version suffix ignored), if it names one.
pub(super) fn interpreter(word: &str) -> Option<&'static Interpreter> {
    let name = word.rsplit('/').next().unwrap_or(word);
    let bare = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS
        .iter()
        .find(|row| row.names.iter().any(|n| *n == name || *n == bare))
}

/// Whether inline `code` for `row`'s interpreter provably names no path:
/// its language has a short list of ways to open a file or run a
/// program ([`Interpreter::sinks`]) and the code holds none of them.
pub(super) fn provably_pathless(row: &Interpreter, code: &str) -> bool {
    row.sinks
        .is_some_and(|sinks| !sinks.iter().any(|s| code.contains(s)))
}

/// Whether a script an interpreter is given is a URL rather than a file
/// (`data:text/javascript,...`, `https://...`): code that is no file of
/// the host's to check. A `file:` URL names a path, read as one.
pub(super) fn is_url(script: &str) -> bool {
    let Some((scheme, _)) = script.split_once(':') else {
        return false;
    };
    let mut c = scheme.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic())
        && c.all(|x| x.is_ascii_alphanumeric() || "+.-".contains(x))
        && !scheme.eq_ignore_ascii_case("file")
}

/// Whether `word` names a wrapper ([`WRAPPERS`]).
pub(super) fn is_wrapper(word: &str) -> bool {
    let name = word.rsplit('/').next().unwrap_or(word);
    WRAPPERS.iter().any(|(n, _)| *n == name)
}

/// What `row`'s interpreter is given by the words `rest` after its name:
/// inline code and script files, as its options read them.
pub(super) fn given<'a>(row: &Interpreter, rest: &'a [String]) -> Vec<Given<'a>> {
    let mut out = Vec::new();
    let mut file_named = false;
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        let next = rest.get(i + 1).map(String::as_str);
        i += 1;
        if w == "--" {
            operands(row, &rest[i..], file_named, &mut out);
            break;
        }
        let long = w.starts_with("--")
            || row
                .inline_long
                .iter()
                .chain(row.file_long)
                .any(|o| w.split('=').next() == Some(o));
        if long {
            let (name, value) = match w.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (w, None),
            };
            let inline = row.inline_long.contains(&name);
            let file = row.file_long.contains(&name);
            if inline || file {
                let arg = value.or(next).unwrap_or("");
                if value.is_none() {
                    i += 1;
                }
                if inline {
                    out.push(Given::Inline(arg));
                } else {
                    file_named = true;
                    out.push(Given::Script(arg));
                }
            }
            continue;
        }
        if let Some(cluster) = w.strip_prefix('-').filter(|c| !c.is_empty()) {
            for (at, ch) in cluster.char_indices() {
                let attached = &cluster[at + ch.len_utf8()..];
                let arg = if attached.is_empty() {
                    i += 1;
                    next.unwrap_or("")
                } else {
                    attached
                };
                if row.inline_short.contains(ch) {
                    out.push(Given::Inline(arg));
                    break;
                }
                if row.file_short.contains(ch) {
                    file_named = true;
                    out.push(Given::Script(arg));
                    break;
                }
                if row.arg_short.contains(ch) {
                    break;
                }
                if attached.is_empty() {
                    // A flag without an argument: the next word was not
                    // its argument after all.
                    i -= 1;
                }
            }
            continue;
        }
        operands(row, &rest[i - 1..], file_named, &mut out);
        break;
    }
    out
}

/// The operands `ops`, from the first: code (awk's program, sed's
/// script, unless a file was named), or a script file and its
/// arguments. Every later word is the script's own (`python3 get.py -c
/// x` gives `-c` to get.py); one that is not an option is checked as a
/// script too, which only ever refuses more (`deno run x.ts`).
fn operands<'a>(row: &Interpreter, ops: &'a [String], file_named: bool, out: &mut Vec<Given<'a>>) {
    let Some((first, later)) = ops.split_first() else {
        return;
    };
    if row.code_operand {
        if !file_named {
            out.push(Given::Inline(first));
        }
        // awk's and sed's later operands are input files, named as
        // paths and read as data.
        return;
    }
    out.push(Given::Script(first));
    out.extend(
        later
            .iter()
            .filter(|w| !w.starts_with('-'))
            .map(|w| Given::Script(w.as_str())),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(argv: &[&str]) -> Vec<String> {
        let row = interpreter(argv[0]).expect("an interpreter");
        let rest: Vec<String> = argv[1..].iter().map(|s| s.to_string()).collect();
        given(row, &rest)
            .into_iter()
            .map(|g| match g {
                Given::Inline(c) => format!("code:{c}"),
                Given::Script(s) => format!("script:{s}"),
            })
            .collect()
    }

    #[test]
    fn each_interpreter_is_known_by_its_name_and_its_code_by_its_options() {
        assert_eq!(read(&["/usr/bin/python3.12", "-c", "x"]), ["code:x"]);
        assert_eq!(read(&["python3", "-Ic", "x"]), ["code:x"]);
        assert_eq!(read(&["python3", "-cx"]), ["code:x"]);
        assert_eq!(read(&["python3", "-m", "json.tool"]), Vec::<String>::new());
        assert_eq!(
            read(&["python3", "-u", "get.py", "-c", "x"]),
            ["script:get.py", "script:x"]
        );
        assert_eq!(read(&["perl", "-lne", "print"]), ["code:print"]);
        assert_eq!(
            read(&["perl", "-MData::Dumper", "get.pl"]),
            ["script:get.pl"]
        );
        assert_eq!(read(&["ruby", "-e", "x"]), ["code:x"]);
        assert_eq!(read(&["node", "--eval=x"]), ["code:x"]);
        assert_eq!(
            read(&["node", "-r", "/p/hook.js", "get.js"]),
            ["script:/p/hook.js", "script:get.js"]
        );
        assert_eq!(read(&["awk", "BEGIN{}", "/etc/hostname"]), ["code:BEGIN{}"]);
        assert_eq!(read(&["mawk", "-F:", "{print}", "f"]), ["code:{print}"]);
        assert_eq!(read(&["awk", "-f", "/p/x.awk", "f"]), ["script:/p/x.awk"]);
        assert_eq!(read(&["sed", "-n", "1p", "f"]), ["code:1p"]);
        assert_eq!(read(&["deno", "eval", "x"]), ["code:x"]);
        assert_eq!(
            read(&["deno", "run", "x.ts"]),
            ["script:run", "script:x.ts"]
        );
        assert!(interpreter("perl5.36").is_some());
        let awk = interpreter("awk").unwrap();
        assert!(provably_pathless(awk, "{print $1}"));
        assert!(!provably_pathless(awk, "BEGIN{system(\"x\")}"));
        assert!(!provably_pathless(awk, "{print > \"/p/x\"}"));
        assert!(!provably_pathless(awk, "@include \"x\""));
        let sed = interpreter("sed").unwrap();
        assert!(provably_pathless(sed, "1p"));
        assert!(!provably_pathless(sed, "1e id"));
        assert!(!provably_pathless(
            interpreter("python3").unwrap(),
            "print(1)"
        ));
        assert!(interpreter("pass").is_none());
        assert!(is_wrapper("/usr/bin/timeout") && !is_wrapper("gpg"));
    }
}

//! What a shell line feeds a program on its input, and paths a URL
//! names: the parts of the rule for secret programs (`super`) that read
//! a line's pipes and redirects, and a URL's percent-encoded path.
//!
//! A shell or an interpreter given no script and no inline code (`sh`,
//! `bash -s`, `python3 -`, `perl`) runs its input as its program; `xargs`
//! gives the program after it arguments from its input. Behind a pipe or
//! a redirect that input is what another program prints (`find ... |
//! sh`, `... | xargs sh`), whose content no reading of the line can tell:
//! it is refused as unreadable rather than guessed.

use super::interpreters::{given, interpreter, is_wrapper, Given};
use super::is_shell;

/// A token of a shell line: a word after quote removal, or one of the
/// operators `;|&<>()` and a newline.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Token {
    Word(String),
    Op(char),
}

/// Names by which a program reads its own input as a file.
const STDIN_NAMES: &[&str] = &["-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"];

/// Why the line `tokens` is unreadable for what it feeds a program on its
/// input, if it is: a line with a pipe or an input redirect anywhere in
/// it (`exec 3<`, `( ... ) <`, `|&` included) that runs a shell or an
/// interpreter reading its program from its input.
pub(super) fn fed_program(tokens: &[Token]) -> Option<&'static str> {
    let fed = tokens
        .iter()
        .any(|t| matches!(t, Token::Op('|') | Token::Op('<')));
    if !fed {
        return None;
    }
    simple_commands(tokens)
        .iter()
        .any(|words| runs_input(words))
        .then_some("a shell or interpreter that runs what a pipe or a redirect feeds it")
}

/// The simple commands of a line: the words between `;|&()` and
/// newlines, without redirects and their targets (`2>/dev/null`, `<&3`).
fn simple_commands(tokens: &[Token]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    let mut target = false;
    for t in tokens {
        let Some(cur) = out.last_mut() else {
            break;
        };
        match t {
            Token::Op(c @ ('<' | '>')) => {
                // `2>`: the descriptor is the redirect's, not a word.
                if cur.last().is_some_and(|w: &String| {
                    !w.is_empty() && w.chars().all(|x| x.is_ascii_digit())
                }) {
                    cur.pop();
                }
                target = *c == '<' || *c == '>';
            }
            // `<&3`, `>&2`: part of the redirect.
            Token::Op('&') if target => {}
            Token::Op(_) => {
                target = false;
                out.push(Vec::new());
            }
            Token::Word(_) if target => target = false,
            Token::Word(w) => cur.push(w.clone()),
        }
    }
    out
}

/// Whether the simple command `words` runs a shell or an interpreter
/// that reads its program from its input, or has `xargs` build a command
/// line from its input for one: at its start, or anywhere after a
/// wrapper at its start (`timeout 5 sh`, `env sh`).
fn runs_input(words: &[String]) -> bool {
    let Some(first) = words.first() else {
        return false;
    };
    let last = if is_wrapper(first) { words.len() } else { 1 };
    (0..last).any(|i| {
        let (w, rest) = (&words[i], &words[i + 1..]);
        (is_shell(w) && shell_reads_input(rest))
            || interpreter(w).is_some_and(|row| {
                let g = given(row, rest);
                g.iter()
                    .any(|x| matches!(x, Given::Script(s) if STDIN_NAMES.contains(s)))
                    || (g.is_empty()
                        && !(row.names.contains(&"python3")
                            && rest.iter().any(|r| r.starts_with("-m"))))
            })
    })
}

/// Whether a shell given `rest` reads its program from its input: no
/// `-c`, and `-s`, `-` or no script operand.
fn shell_reads_input(rest: &[String]) -> bool {
    let mut i = 0;
    while let Some(w) = rest.get(i) {
        i += 1;
        if STDIN_NAMES.contains(&w.as_str()) {
            return true;
        }
        if w == "--" {
            return rest
                .get(i)
                .is_none_or(|s| STDIN_NAMES.contains(&s.as_str()));
        }
        if let Some(long) = w.strip_prefix("--") {
            // bash's options that take a file.
            if matches!(long, "rcfile" | "init-file") {
                i += 1;
            }
            continue;
        }
        if let Some(cluster) = w.strip_prefix(['-', '+']) {
            if w.starts_with('-') && cluster.contains('c') {
                return false;
            }
            if w.starts_with('-') && cluster.contains('s') {
                return true;
            }
            if cluster.contains(['o', 'O']) {
                i += 1;
            }
            continue;
        }
        return false;
    }
    true
}

/// Programs a command line built from input may run: each prints or
/// reads what it is given and runs nothing it names. Any other program
/// after `xargs` may take its input as a command, a script or options
/// that run one (`xargs sh`, `xargs npx`, `xargs git -c`), which no
/// reading can tell.
const PRINTERS: &[&str] = &[
    "echo", "printf", "cat", "head", "tail", "tr", "wc", "basename", "dirname", "realpath",
    "readlink", "ls", "stat", "sort", "uniq", "cut", "grep", "true",
];

/// `xargs`'s short options that take a value (attached, or the next
/// word).
const XARGS_VALUED: &str = "adEILnPs";

/// `xargs`'s long options that take the next word as their value.
const XARGS_LONG_VALUED: &[&str] = &[
    "--arg-file",
    "--delimiter",
    "--max-args",
    "--max-procs",
    "--max-chars",
    "--process-slot-var",
];

/// Whether `xargs` (or GNU `parallel`, `sem`), given `rest`, runs a
/// command its input may choose or steer: unless its command is one of
/// [`PRINTERS`] named outright, the input's words become a program's
/// arguments, and with a replace string (`-I{}`, `-i`, `--replace`,
/// parallel's `{}`) the program itself (`xargs -I{} {}`). `parallel`
/// without a command runs its input's lines as commands; `xargs`
/// without one runs `echo`.
pub(super) fn builds_from_input(name: &str, rest: &[String]) -> bool {
    let name = name.rsplit('/').next().unwrap_or(name);
    let (command, replace) = match name {
        "xargs" => xargs_command(rest),
        "parallel" | "sem" => (
            rest.iter()
                .find(|w| !w.starts_with('-'))
                .map(String::as_str),
            Some("{".to_string()),
        ),
        _ => return false,
    };
    let Some(command) = command else {
        return name != "xargs";
    };
    let program = command.rsplit('/').next().unwrap_or(command);
    replace.is_some_and(|r| command.contains(&r)) || !PRINTERS.contains(&program)
}

/// The command `xargs` runs, given `rest` (its first word that is not
/// an option or an option's value), and its replace string if it has
/// one.
fn xargs_command(rest: &[String]) -> (Option<&str>, Option<String>) {
    let mut replace = None;
    let mut i = 0;
    while let Some(w) = rest.get(i) {
        i += 1;
        if w == "--" {
            return (rest.get(i).map(String::as_str), replace);
        }
        if let Some(long) = w.strip_prefix("--") {
            let (opt, value) = match long.split_once('=') {
                Some((o, v)) => (o, Some(v)),
                None => (long, None),
            };
            if opt == "replace" {
                replace = Some(value.unwrap_or("{}").to_string());
            } else if value.is_none() && XARGS_LONG_VALUED.contains(&w.as_str()) {
                i += 1;
            }
            continue;
        }
        let Some(cluster) = w.strip_prefix('-').filter(|c| !c.is_empty()) else {
            return (Some(w.as_str()), replace);
        };
        for (at, c) in cluster.char_indices() {
            let attached = &cluster[at + c.len_utf8()..];
            if c == 'i' {
                replace = Some(if attached.is_empty() { "{}" } else { attached }.to_string());
                break;
            }
            if matches!(c, 'e' | 'l') {
                break;
            }
            if XARGS_VALUED.contains(c) {
                let value = if attached.is_empty() {
                    i += 1;
                    rest.get(i - 1).map(String::as_str).unwrap_or("")
                } else {
                    attached
                };
                if c == 'I' {
                    replace = Some(value.to_string());
                }
                break;
            }
        }
    }
    (None, replace)
}

/// The paths a URL in `word` names (`file:///p`, `file://host/p`,
/// `file:/p`, any `scheme://host/p`), percent-decoded; and `word`
/// itself decoded when it holds a `%`. A URL's path that is no file of
/// the host's only protects a directory more, never less.
pub(super) fn url_paths(word: &str) -> Vec<String> {
    let mut out = Vec::new();
    if word.contains('%') {
        out.push(percent_decoded(word));
    }
    let mut rest = word;
    while let Some(at) = rest.find(':') {
        let after = &rest[at + 1..];
        if let Some(host_path) = after.strip_prefix("//") {
            if let Some(slash) = host_path.find('/') {
                out.push(percent_decoded(&host_path[slash..]));
            }
        } else if after.starts_with('/') {
            out.push(percent_decoded(after));
        }
        rest = after;
    }
    out
}

/// `s` with every `%XX` replaced by the byte it encodes.
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .filter(|h| b[i] == b'%' && h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok());
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(x) => {
                out.push(x);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

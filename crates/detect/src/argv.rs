//! Command lines as warden records them: the values a command line hands
//! a secret through, by its shape rather than the value's.
//!
//! The same rules apply to an argv's elements and to the words of a
//! shell string (`sh -c`, `bash -l -c`: the API's `shell` and every E2B
//! `commands.run`), which is split in place so the rest of it reads as
//! typed:
//!
//! - an option whose name ends in a word that says secret
//!   (`--password`, `--db-password`, `--api-key`, `-Dspring.datasource.password`)
//!   loses its value, as `--opt=X` or as the next word whatever that
//!   starts with (`--opt=` with nothing after `=` also takes the next);
//! - `NAME=value` where NAME says secret (`PGPASSWORD=...`, `API_KEY=...`),
//!   with no entropy threshold: an environment prefix, an `env` argument,
//!   a `make` variable;
//! - the short forms of well-known tools: `curl -u/--user user:pw` (the
//!   password after the colon), `mysql -pPW`, `sshpass -p PW`,
//!   `redis-cli -a PW`, httpie's `-a user:pw`.
//!
//! Not secrets: an option naming where a secret is (`--password-file
//! PATH`, `--token-path`), a flag (`--password-stdin`, `--no-password`),
//! a one-letter option of another program (`ls -p`, `grep -u`), `mysql -p`
//! alone (it prompts; the next word is the database). Short options
//! bundled with others (`curl -su a:b`) are not unbundled.

use shlex::Shlex;
use std::borrow::Cow;

/// What replaces a word, or the part of it after `keep` bytes.
enum Edit {
    /// The word's first `keep` bytes (of its unquoted text), then a mark.
    Mark { keep: usize, id: &'static str },
    /// A nested shell string, redacted.
    Script(String),
}

/// What the next word is, after an option that takes a secret.
#[derive(Clone, Copy)]
enum Pending {
    Whole,
    AfterColon,
}

/// How deep shell strings nest before the inner ones are left to the
/// text rules (`bash -c "sh -c '...'"` is two).
const MAX_DEPTH: u8 = 4;

/// Programs that run the command after their own arguments.
const WRAPPERS: &[&str] = &[
    "env", "sudo", "exec", "command", "nohup", "time", "nice", "stdbuf", "doas",
];
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ash", "ksh", "mksh"];
const MYSQL: &[&str] = &[
    "mysql",
    "mysqldump",
    "mysqladmin",
    "mysqlimport",
    "mysqlcheck",
    "mysqlshow",
    "mariadb",
    "mariadb-dump",
    "mariadb-admin",
];

/// Words whose presence at the end of a name makes it secret, written
/// in lower case with `-` between segments. Glued: also at the end of a
/// longer segment (`PGPASSWORD`, `NPM_TOKEN`, `--apikey`).
const GLUED: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "credentials",
    "credential",
];
/// Only as whole segments (`--pass`, `MYSQL_PWD`, `--x-api-key`): glued,
/// they end ordinary words (`bypass`, `OLDPWD`).
const SEGMENT: &[&str] = &[
    "pass",
    "api-key",
    "access-key",
    "secret-key",
    "private-key",
    "auth",
];

/// Whether an option's or a variable's name says its value is a secret:
/// it ends in one of the words above, compared ignoring case with `_` and
/// `.` as `-`. A negated flag (`--no-password`) is none.
pub(crate) fn secret_name(name: &str) -> bool {
    let b = name.as_bytes();
    if b.len() > 3 && eq_norm(&b[..3], b"no-") {
        return false;
    }
    GLUED.iter().any(|t| ends_with_norm(b, t.as_bytes()))
        || SEGMENT.iter().any(|t| {
            let t = t.as_bytes();
            b.len() == t.len() && eq_norm(b, t)
                || b.len() > t.len()
                    && ends_with_norm(b, t)
                    && norm(b[b.len() - t.len() - 1]) == b'-'
        })
        // `MYSQL_PWD`; `PWD` alone is the working directory.
        || b.len() > 4 && ends_with_norm(b, b"pwd") && norm(b[b.len() - 4]) == b'-'
}

fn norm(c: u8) -> u8 {
    match c {
        b'_' | b'.' => b'-',
        c => c.to_ascii_lowercase(),
    }
}

fn eq_norm(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| norm(x) == y)
}

fn ends_with_norm(a: &[u8], t: &[u8]) -> bool {
    a.len() >= t.len() && eq_norm(&a[a.len() - t.len()..], t)
}

/// A value that is already a mark, or a sandbox's placeholder: kept.
fn kept(value: &str) -> bool {
    value.is_empty()
        || (value.starts_with("[REDACTED:") && value.ends_with(']'))
        || crate::placeholder(value.as_bytes())
}

fn mark_after(word: &str, keep: usize, id: &'static str) -> Option<Edit> {
    (!kept(&word[keep..])).then_some(Edit::Mark { keep, id })
}

fn pending_edit(p: Pending, word: &str) -> Option<Edit> {
    match p {
        Pending::Whole => mark_after(word, 0, "secret-option"),
        Pending::AfterColon => after_colon(word, 0),
    }
}

/// `user:password` from `at`: the password.
fn after_colon(word: &str, at: usize) -> Option<Edit> {
    if kept(&word[at..]) {
        return None;
    }
    let colon = word[at..].find(':')? + at;
    mark_after(word, colon + 1, "secret-option")
}

/// `NAME=value` with a secret NAME: the value.
fn assignment(word: &str) -> Option<Edit> {
    let (name, _) = word.split_once('=')?;
    let valid = !name.is_empty()
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
    (valid && secret_name(name))
        .then(|| mark_after(word, name.len() + 1, "secret-variable"))
        .flatten()
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// One command's state while its words are judged.
#[derive(Default)]
struct Command<'a> {
    program: Option<&'a str>,
    /// Past the program's wrappers (`env`, `sudo`) and assignments.
    started: bool,
    pending: Option<Pending>,
    /// A shell's `-c` was seen: its next operand is a script.
    script_next: bool,
}

/// The edits for `words` (unquoted), where `first[i]` says word `i`
/// starts a command.
fn judge(words: &[Cow<'_, str>], first: &[bool], depth: u8) -> Vec<Option<Edit>> {
    let mut out = Vec::with_capacity(words.len());
    let mut cmd = Command::default();
    for (i, w) in words.iter().enumerate() {
        if first.get(i).copied().unwrap_or(false) {
            cmd = Command::default();
        }
        out.push(judge_word(&mut cmd, w, depth));
    }
    out
}

fn judge_word<'a>(cmd: &mut Command<'a>, w: &'a str, depth: u8) -> Option<Edit> {
    if let Some(p) = cmd.pending.take() {
        return pending_edit(p, w);
    }
    if !cmd.started {
        if w.contains('=') && !w.starts_with('-') {
            return assignment(w);
        }
        if cmd.program.is_some() && w.starts_with('-') {
            // A wrapper's own option (`env -i`, `sudo -E`).
            return None;
        }
        let name = basename(w);
        cmd.program = Some(name);
        cmd.started = !WRAPPERS.contains(&name);
        return None;
    }
    if !w.starts_with('-') && !cmd.script_next && known(basename(w)) {
        // A tool run by the one before it (`xargs curl`, `ssh h mysql`,
        // `docker exec c sh -c`, `timeout 5 curl`): its forms apply.
        cmd.program = Some(basename(w));
        return None;
    }
    let program = cmd.program.unwrap_or("");
    if SHELLS.contains(&program) {
        if is_cluster(w) && w.contains('c') {
            cmd.script_next = true;
            return None;
        }
        if cmd.script_next && !w.starts_with('-') {
            cmd.script_next = false;
            if depth >= MAX_DEPTH {
                return None;
            }
            let inner = script_words(w, depth + 1);
            return (inner != w).then_some(Edit::Script(inner));
        }
    }
    if let Some(e) = short_form(cmd, program, w) {
        return e;
    }
    if let Some(rest) = w.strip_prefix('-') {
        let name_end = rest.find('=').unwrap_or(rest.len());
        let name = rest.strip_prefix('-').unwrap_or(rest);
        let name = &name[..name.find('=').unwrap_or(name.len())];
        if name.len() > 1 && secret_name(name) {
            let eq = 1 + name_end;
            if eq >= w.len() || w[eq..] == *"=" {
                cmd.pending = Some(Pending::Whole);
                return None;
            }
            return mark_after(w, eq + 1, "secret-option");
        }
        // `--env=DB_PASSWORD=x`, `-eAPI_KEY=x`.
        let eq = w.find('=')?;
        return match assignment(&w[eq + 1..])? {
            Edit::Mark { keep, id } => Some(Edit::Mark {
                keep: eq + 1 + keep,
                id,
            }),
            Edit::Script(_) => None,
        };
    }
    assignment(w)
}

/// A program some of whose forms are known.
fn known(name: &str) -> bool {
    SHELLS.contains(&name)
        || MYSQL.contains(&name)
        || matches!(
            name,
            "curl" | "sshpass" | "redis-cli" | "http" | "https" | "xh" | "xhs"
        )
}

fn is_cluster(w: &str) -> bool {
    w.len() > 1
        && w.starts_with('-')
        && !w.starts_with("--")
        && w[1..].bytes().all(|c| c.is_ascii_alphabetic())
}

/// The short forms of well-known tools. `Some(edit)` when `w` was one
/// (the edit itself may be none: `mysql -p`, or the value comes next).
fn short_form(cmd: &mut Command<'_>, program: &str, w: &str) -> Option<Option<Edit>> {
    let (letters, pending): (&[&str], Pending) = match program {
        "curl" => (&["-u", "-U", "--user", "--proxy-user"], Pending::AfterColon),
        "http" | "https" | "xh" | "xhs" => (&["-a", "--auth"], Pending::AfterColon),
        "sshpass" => (&["-p"], Pending::Whole),
        "redis-cli" => (&["-a", "--pass"], Pending::Whole),
        p if MYSQL.contains(&p) => {
            // `-p` alone prompts; attached, it is the password.
            return (w.len() > 2 && w.starts_with("-p") && !w.starts_with("-p="))
                .then(|| mark_after(w, 2, "secret-option"));
        }
        _ => return None,
    };
    for opt in letters {
        let Some(rest) = w.strip_prefix(opt) else {
            continue;
        };
        let at = if rest.is_empty() {
            cmd.pending = Some(pending);
            return Some(None);
        } else if opt.starts_with("--") {
            match rest.strip_prefix('=') {
                Some(_) => opt.len() + 1,
                None => continue,
            }
        } else {
            opt.len()
        };
        return Some(match pending {
            Pending::Whole => mark_after(w, at, "secret-option"),
            Pending::AfterColon => after_colon(w, at),
        });
    }
    None
}

/// A command line with its secrets replaced (see the module's text), each
/// element first passed through the text rules ([`crate::redact`]).
pub(crate) fn redact_argv(argv: &[String]) -> Vec<String> {
    let words: Vec<Cow<'_, str>> = argv.iter().map(|a| crate::redact(a)).collect();
    let mut first = vec![false; words.len()];
    if let Some(f) = first.first_mut() {
        *f = true;
    }
    let edits = judge(&words, &first, 0);
    words
        .iter()
        .zip(edits)
        .map(|(w, e)| match e {
            None => w.to_string(),
            Some(Edit::Mark { keep, id }) => format!("{}{}", &w[..keep], crate::mark(id)),
            Some(Edit::Script(s)) => s,
        })
        .collect()
}

/// A shell string (already passed through the text rules) with its
/// secrets replaced in place; the rest is kept
/// as written. A string that does not split (an open quote) is split as
/// far as it goes: the open word runs to the end, and is replaced whole
/// when it is a secret.
fn script_words(text: &str, depth: u8) -> String {
    let raws = split(text);
    if raws.is_empty() {
        return text.to_string();
    }
    let words: Vec<Cow<'_, str>> = raws
        .iter()
        .map(|r| unquote(&text[r.start..r.end]))
        .collect();
    let first: Vec<bool> = raws.iter().map(|r| r.first).collect();
    let edits = judge(&words, &first, depth);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for ((r, w), e) in raws.iter().zip(&words).zip(edits) {
        let Some(e) = e else { continue };
        out.push_str(&text[at..r.start]);
        let raw = &text[r.start..r.end];
        match e {
            Edit::Mark { keep, id } => {
                let prefix = &w[..keep];
                if raw.starts_with(prefix) {
                    out.push_str(prefix);
                } else {
                    out.push_str(&quote(prefix));
                }
                out.push_str(&crate::mark(id));
            }
            Edit::Script(s) => out.push_str(&quote(&s)),
        }
        at = r.end;
    }
    out.push_str(&text[at..]);
    out
}

fn quote(s: &str) -> Cow<'_, str> {
    // Only a NUL fails to quote; it has no place in a command line.
    shlex::try_quote(s).unwrap_or(Cow::Borrowed(""))
}

/// A raw word's text as the shell reads it (quotes and escapes removed),
/// or the raw text when it does not parse whole.
fn unquote(raw: &str) -> Cow<'_, str> {
    if !raw.contains(['\'', '"', '\\']) {
        return Cow::Borrowed(raw);
    }
    let mut lex = Shlex::new(raw);
    match (lex.next(), lex.next(), lex.had_error) {
        (Some(w), None, false) if w != raw => Cow::Owned(w),
        _ => Cow::Borrowed(raw),
    }
}

/// A word of a shell string: its bytes and whether it starts a command.
struct Raw {
    start: usize,
    end: usize,
    first: bool,
}

/// The words of a shell string, split where the shell splits them:
/// unquoted blanks and operators (`;`, `&`, `|`, `(`, `)`, a backquote,
/// a newline start a new command; `<`, `>` do not). Comments are skipped.
/// Every split point is ASCII, so each word is whole characters.
fn split(s: &str) -> Vec<Raw> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut first) = (0, true);
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'`' => {
                first = true;
                i += 1;
            }
            b'<' | b'>' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            _ => {
                let start = i;
                i = word_end(b, i);
                out.push(Raw {
                    start,
                    end: i,
                    first,
                });
                first = false;
            }
        }
    }
    out
}

/// Where the word starting at `i` ends: an unquoted blank or operator,
/// or the end of the string (an open quote runs to the end).
fn word_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\r' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'`' | b'<'
            | b'>' => return i,
            b'\\' => i += 2,
            b'\'' => {
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    b.len()
}

//! A lint, run as a test: below the doors no message names a command-line
//! flag. A message of policy, runtime, jail, vm, workspace or audit may reach
//! a person through any door (the CLI, a profile's validation, the API, the
//! E2B door, MCP, containerd), so it names another option by its profile key
//! in backticks (`` `resources.disk` ``) and each door words it
//! ([`crate::word`]): told to pass `--disk`, an API caller could do nothing
//! with it.
//!
//! The scan reads each crate's source as text: string literals outside
//! comments and outside `#[cfg(test)]` items, and fails on any that holds
//! the flag of a field that has a profile key. A flag with no key
//! (`--profile`, `--ask-save`) is the command line's own matter.

use std::path::{Path, PathBuf};

use crate::fields::FIELDS;

mod circles;
mod env;
mod printed;

/// The crates below the doors, and the vocabulary and client crates the
/// doors share. egress is checked by its own reason codes.
const CRATES: &[&str] = &[
    "policy",
    "runtime",
    "jail",
    "vm",
    "workspace",
    "audit",
    "protocol",
    "api",
    "client",
    "detect",
];

/// Files whose literals are not messages, and why.
const SKIPPED: &[(&str, &str)] = &[
    (
        "policy/src/fields.rs",
        "the table itself: it spells each flag (its docs are checked below, from the table)",
    ),
    ("policy/src/lint.rs", "this lint's own examples"),
    (
        "runtime/src/desktop/services.rs",
        "the command lines of the desktop's programs (chromium, dbus, certutil)",
    ),
    (
        "runtime/src/desktop/actions.rs",
        "the command lines of xdotool, chromium and scrot that carry a desktop action",
    ),
    (
        "runtime/src/desktop/mod.rs",
        "the apt-get line that installs the desktop's packages",
    ),
    (
        "vm/src/fsd.rs",
        "virtiofsd's command line (its own options, not warden's)",
    ),
    (
        "runtime/src/secret_programs/interpreters.rs",
        "the options of the interpreters a secret's program may run (node's --eval, awk's --file), not warden's",
    ),
    (
        "runtime/src/secret_programs/runners.rs",
        "the options of the programs that run commands a secret's program may be (env's --split-string, su's --command, git's --exec), not warden's",
    ),
    (
        "runtime/src/secret_programs/tests.rs",
        "the secret-program rule's unit tests, a module file of their own (gpg's --homedir, node's --eval)",
    ),
    (
        "runtime/src/secret_programs/class_tests.rs",
        "the secret-program rule's unit tests of its classes (xargs's --replace, docker's --volumes-from, bwrap's --bind)",
    ),
    (
        "runtime/src/secret_programs/places.rs",
        "the options of the container, namespace and chroot runners a secret's program may be (docker's --volumes-from, bwrap's --bind), not warden's",
    ),
    (
        "runtime/src/secret_programs/stdin.rs",
        "the options of xargs a secret's program may run (--arg-file, --replace), not warden's",
    ),
    (
        "jail/src/gvisor/shim.rs",
        "the dynamic loader's command line for the exec shim (ld.so's --library-path, not warden's)",
    ),
    (
        "jail/src/gvisor/runsc.rs",
        "runsc's command line (its own options, not warden's)",
    ),
    (
        "jail/src/gvisor/serve.rs",
        "runsc's command line (its own options, not warden's)",
    ),
    (
        "jail/src/gvisor/exits.rs",
        "runsc's command line (its own options, not warden's)",
    ),
    (
        "detect/src/tests.rs",
        "the detector's tests: command lines that hold credentials",
    ),
    (
        "detect/src/argv.rs",
        "other programs' options that take a secret (curl's --user, mysql's --password)",
    ),
    (
        "detect/src/tests_argv.rs",
        "the command-line redaction's tests: other programs' options with their secrets",
    ),
];

/// A literal that spells a flag for a reason other than telling a person
/// which option to give, and why it may.
const NOT_OURS: &[(&str, &str, &str)] = &[
    (
        "vm/src/guest/launch.rs",
        "--warden-launch",
        "the guest init's internal argument for its launcher, which no person types",
    ),
    (
        "vm/src/guest/launch.rs",
        "--library-path",
        "the dynamic loader's own option, not warden's",
    ),
    (
        "policy/src/error.rs",
        "put CMD after `--`, e.g. `warden run -- bash`, or use a --profile",
        "the command line's own wording of `NoCommand`, in `describe_for_cli`",
    ),
    (
        "jail/src/gvisor/mod.rs",
        "--bundle=",
        "runsc's own option, not warden's",
    ),
    (
        "jail/src/cgroup/error.rs",
        "systemd-run --user --scope",
        "a command for the host's administrator, not an option of warden's",
    ),
    (
        "jail/src/sandbox/error.rs",
        "systemd-run --user --scope",
        "a command for the host's administrator, not an option of warden's",
    ),
    (
        "runtime/src/resolve.rs",
        "--ask-save",
        "`ask_save` exists only on the command line (no profile key, no JSON path), \
         and only the command line can give the profile it writes to",
    ),
    (
        "runtime/src/resolve.rs",
        "--profile FILE",
        "`ask_save` exists only on the command line (see above)",
    ),
    (
        "runtime/src/state.rs",
        "warden serve --socket",
        "the daemon's socket is set only by `warden serve` on its host's command line",
    ),
    (
        "runtime/src/teach.rs",
        "or --profile.",
        "the head of a learned-profile file, which only `warden run --egress-learn-file` writes",
    ),
    // Still to be worded by each door (the lifecycle of snapshots and
    // commits reaches the API too): the workspace crate names `warden`
    // commands with their options. Each entry here is a debt, not a reason.
    (
        "workspace/src/commit.rs",
        "commit again with --force",
        "debt: a commit's conflicts should carry a reason code the doors word",
    ),
    (
        "workspace/src/commit.rs",
        "commit with --interactive",
        "debt: an unreviewed commit should carry a reason code the doors word",
    ),
    (
        "workspace/src/layer.rs",
        "`warden snapshot NAME --list`",
        "debt: a missing snapshot should carry a reason code the doors word",
    ),
    (
        "workspace/src/layer.rs",
        "--delete LABEL` (`warden snapshot {name} --list`",
        "debt: the snapshot limit should carry a reason code the doors word",
    ),
    (
        "runtime/src/teach.rs",
        "# Written by warden run --egress-learn",
        "the first line by which warden knows a learned-profile file it wrote (files \
         written before keep it); only `warden run --egress-learn-file` writes one",
    ),
];

/// The sections of a profile: a backticked name that starts with one of
/// them is meant as a key, and must be one a door can word.
const SECTIONS: &[&str] = &["egress.", "filesystem.", "resources.", "env.", "secrets"];

/// One string literal of a source file, with the line it starts on and
/// whether it sits inside a `#[cfg(test)]` item.
#[derive(Debug)]
struct Literal {
    text: String,
    line: usize,
    in_test: bool,
}

/// The string literals of `src` that are code: not in a comment, with
/// whether each sits in a `#[cfg(test)]` item. Char literals and lifetimes
/// are told apart so a `'"'` opens no string.
fn literals(src: &str) -> Vec<Literal> {
    let (code, found) = scan(src);
    let tests = test_items(&code);
    found
        .into_iter()
        .map(|(at, text, line)| Literal {
            text,
            line,
            in_test: tests.iter().any(|(s, e)| (*s..*e).contains(&at)),
        })
        .collect()
}

/// A literal's text found by [`scan`]: where it stood in the code (with
/// literals left out), its text and its first line.
type Found = (usize, String, usize);

/// `src` without its comments and with every literal's text left out,
/// and the literals, each where it stood in that code.
fn scan(src: &str) -> (String, Vec<Found>) {
    let chars: Vec<char> = src.chars().collect();
    // The code with every literal's text left out, and where each literal
    // stood in it, so the test items can be found by their braces.
    let mut code = String::new();
    let mut found: Vec<Found> = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
        }
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            continue;
        }
        let prev_ident = i > 0 && ident(chars[i - 1]);
        // A raw string: r"..", r#".."#, br#".."#.
        if c == 'r' && !(prev_ident && chars[i - 1] != 'b') {
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                let hashes = j - i - 1;
                let start_line = line;
                let mut text = String::new();
                let mut k = j + 1;
                while k < chars.len() {
                    if chars[k] == '"' && (1..=hashes).all(|h| chars.get(k + h) == Some(&'#')) {
                        break;
                    }
                    if chars[k] == '\n' {
                        line += 1;
                    }
                    text.push(chars[k]);
                    k += 1;
                }
                found.push((code.len(), text, start_line));
                i = k + 1 + hashes;
                continue;
            }
        }
        if c == '"' {
            let start_line = line;
            let mut text = String::new();
            let mut k = i + 1;
            while k < chars.len() && chars[k] != '"' {
                if chars[k] == '\\' {
                    text.push(chars[k]);
                    k += 1;
                }
                if let Some(&ch) = chars.get(k) {
                    if ch == '\n' {
                        line += 1;
                    }
                    text.push(ch);
                }
                k += 1;
            }
            found.push((code.len(), text, start_line));
            i = k + 1;
            continue;
        }
        if c == '\'' {
            // '\n', '\'', '"' are chars; 'a (no closing quote) a lifetime.
            if next == Some('\\') {
                let mut k = i + 2;
                while k < chars.len() && chars[k] != '\'' {
                    k += 1;
                }
                i = k + 1;
                continue;
            }
            if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                continue;
            }
        }
        code.push(c);
        i += 1;
    }
    (code, found)
}

/// The byte ranges of `code` (literals left out) that `#[cfg(test)]` items
/// span: from the attribute to the item's closing brace or its `;`.
fn test_items(code: &str) -> Vec<(usize, usize)> {
    let bytes = code.as_bytes();
    let mut items = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|a| a + from) {
        let mut k = at + "#[cfg(test)]".len();
        let mut nesting = 0i32;
        let mut end = code.len();
        while k < bytes.len() {
            match bytes[k] {
                b'(' | b'[' => nesting += 1,
                b')' | b']' => nesting -= 1,
                b';' if nesting == 0 => {
                    end = k + 1;
                    break;
                }
                b'{' if nesting == 0 => {
                    let mut depth = 0;
                    while k < bytes.len() {
                        match bytes[k] {
                            b'{' => depth += 1,
                            b'}' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                    end = k + 1;
                    break;
                }
                _ => {}
            }
            k += 1;
        }
        items.push((at, end));
        from = end.min(code.len());
    }
    items
}

/// The backticked names of `text` that look like profile keys
/// (`` `resources.disk` ``, `` `egress.domains NAME` ``) but are not one.
fn unknown_keys(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|inner| inner.split(' ').next().unwrap_or_default())
        .filter(|key| SECTIONS.iter().any(|s| key.starts_with(s)))
        .filter(|key| crate::Field::from_profile_key(key).is_none())
        .map(str::to_string)
        .collect()
}

/// The flags of `text` that belong to a field with a profile key, as whole
/// words (`--ro` is not found in `--rootfs`).
fn flags_in(text: &str) -> Vec<&'static str> {
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    FIELDS
        .iter()
        .filter(|i| i.profile_key.is_some())
        .filter_map(|i| i.flag)
        .filter(|flag| {
            text.match_indices(flag).any(|(at, _)| {
                let before = text[..at].chars().next_back();
                let after = text[at + flag.len()..].chars().next();
                !before.is_some_and(word_char) && !after.is_some_and(word_char)
            })
        })
        .collect()
}

/// Every `--word` of `text` (`--force`, `--user-data-dir=X` as
/// `--user-data-dir`): a message below the doors names no option of any
/// command line, warden's or another's, unless [`NOT_OURS`] says why.
fn dashed_words(text: &str) -> Vec<&str> {
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices("--")
        .filter(|(at, _)| {
            let before = text[..*at].chars().next_back();
            let after = text[at + 2..].chars().next();
            !before.is_some_and(word_char) && after.is_some_and(|c| c.is_ascii_lowercase())
        })
        .map(|(at, _)| {
            let len = text[at + 2..]
                .find(|c: char| !word_char(c))
                .unwrap_or(text.len() - at - 2);
            &text[at..at + 2 + len]
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_scan_finds_literals_outside_comments_and_tests() {
    let src = r####"
// "--memory" in a comment
/// "--disk" in a doc comment
const A: char = '"';
fn f<'a>(x: &'a str) -> String { format!("lower --disk or raise `resources.memory`") }
const B: &str = r#"--allow-domain "x""#;
#[cfg(test)]
mod tests {
    const C: &str = "--pids";
}
const D: &str = "--rootfs and --ro";
"####;
    let found: Vec<(String, bool)> = literals(src)
        .into_iter()
        .map(|l| (l.text, l.in_test))
        .collect();
    assert_eq!(
        found,
        [
            (
                "lower --disk or raise `resources.memory`".to_string(),
                false
            ),
            ("--allow-domain \"x\"".to_string(), false),
            ("--pids".to_string(), true),
            ("--rootfs and --ro".to_string(), false),
        ]
    );
    assert_eq!(
        flags_in("lower --disk or raise --memory"),
        ["--memory", "--disk"]
    );
    assert_eq!(flags_in("--rootfs"), ["--rootfs"]);
    assert_eq!(
        dashed_words("run `warden rm --force x`, --user-data-dir=/d, a--b, -- cmd, --"),
        ["--force", "--user-data-dir"]
    );
    assert!(flags_in("--profile dev, --ask-save, --disks, `resources.disk`").is_empty());
    assert_eq!(
        unknown_keys("`resources.disk` or `resources.disks 2G`, `secrets X`, `warden doctor`"),
        ["resources.disks"]
    );
}

#[test]
fn no_doc_of_a_field_a_profile_can_set_names_a_flag() {
    // The docs of keyed fields are the profile schema's descriptions and
    // the API's; a command-line-only field's doc (`--help`) may name its flag.
    for i in FIELDS.iter().filter(|i| i.profile_key.is_some()) {
        assert!(
            flags_in(i.doc).is_empty(),
            "{:?}: its doc names {:?}",
            i.field,
            flags_in(i.doc)
        );
    }
}

#[test]
fn no_message_below_the_doors_names_a_flag() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for name in CRATES {
        rust_files(&crates.join(name).join("src"), &mut files);
    }
    files.sort();
    assert!(files.len() > 50, "{} files", files.len());
    let mut offences = Vec::new();
    for file in &files {
        let shown = file.strip_prefix(&crates).unwrap_or(file).to_string_lossy();
        if SKIPPED.iter().any(|(f, _)| *f == shown) {
            continue;
        }
        let Ok(src) = std::fs::read_to_string(file) else {
            panic!("cannot read {shown}");
        };
        for lit in literals(&src) {
            if lit.in_test {
                continue;
            }
            let flags: Vec<&str> = dashed_words(&lit.text)
                .into_iter()
                .filter(|flag| {
                    !NOT_OURS
                        .iter()
                        .any(|(f, l, _)| *f == shown && lit.text.contains(l) && l.contains(flag))
                })
                .collect();
            if !flags.is_empty() {
                offences.push(format!(
                    "{shown}:{}: {} in {:?}",
                    lit.line,
                    flags.join(", "),
                    lit.text
                ));
            }
            for key in unknown_keys(&lit.text) {
                offences.push(format!(
                    "{shown}:{}: `{key}` is no profile key, in {:?}",
                    lit.line, lit.text
                ));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "{} messages below the doors name a flag or a key no field has; name the option \
         by its profile key in backticks (`resources.disk`), which each door words with \
         `word`:\n{}",
        offences.len(),
        offences.join("\n")
    );
}

#[test]
fn every_reason_code_of_a_problem_is_documented_for_the_api() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Ok(src) = std::fs::read_to_string(root.join("src/error.rs")) else {
        panic!("cannot read src/error.rs");
    };
    let Ok(doc) = std::fs::read_to_string(root.join("../../docs/api.md")) else {
        panic!("cannot read docs/api.md");
    };
    // The arms of `Problem::code`: `Problem::X... => "code",`.
    let codes: Vec<String> = literals(&src)
        .into_iter()
        .filter(|l| !l.in_test)
        .map(|l| l.text)
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    assert!(codes.len() > 40, "{} codes found", codes.len());
    let missing: Vec<&String> = codes
        .iter()
        .filter(|c| !doc.contains(&format!("`{c}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "reason codes missing from docs/api.md: {missing:?}"
    );
}

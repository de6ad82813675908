//! Configurations in data form (INI, TOML, YAML, JSON) that can name code
//! for a tool to load: pylint's `init-hook` and `load-plugins`, RuboCop's
//! `require:`, ESLint's and Prettier's `plugins`, pytest's `addopts`. Such
//! a file is mostly settings, and often shared by many tools
//! (`pyproject.toml`, `setup.cfg`), so its name alone is no reason to look
//! twice: a change is flagged `host-exec` when what it names for a tool to
//! load changed. (Configurations that are code by their name,
//! `eslint.config.js` or `conftest.py`, are rows of
//! [`crate::hostexec::TOOLS`].)
//!
//! The file is read as text, not parsed per format: every line that names
//! one of the row's keys (any case, `_` or `-`, quoted or not, escaped as
//! `\u002d` or not) starts a part that runs on through its value's
//! continuation (deeper lines, open brackets, triple quotes, YAML list
//! items), and the parts before and after are compared. A part that
//! refers elsewhere (an interpolation `%(x)s` or `${x}`, a YAML anchor or
//! alias) makes the whole file the part. What cannot be read is flagged.

use crate::beneath::Tree;
use crate::change::{Change, EntryKind, Flag};
use std::io::Read;
use std::path::Path;

/// Files read at most this far; a longer one is flagged unread.
const LIMIT: u64 = 8 << 20;

/// A family of configuration files and the keys by which they name code
/// for their tool to load.
pub(crate) struct Keyed {
    /// File names, at any depth.
    pub(crate) names: &'static [&'static str],
    /// Keys, compared in lower case with `_` read as `-`.
    pub(crate) keys: &'static [&'static str],
    pub(crate) reason: &'static str,
}

/// The rule, one row per family.
pub(crate) const KEYED: &[Keyed] = &[
    Keyed {
        names: &[".pylintrc", "pylintrc", ".pylintrc.toml", "pylintrc.toml"],
        keys: &["init-hook", "load-plugins"],
        reason: "pylint runs the init-hook (Python) and imports the load-plugins named here whenever it lints, in an editor as soon as a Python file is opened; what they name changed",
    },
    Keyed {
        names: &["pyproject.toml", "setup.cfg", "tox.ini"],
        keys: &["init-hook", "load-plugins", "plugins", "addopts", "local-plugins"],
        reason: "Python tools load the code their sections here name (pylint's init-hook and load-plugins, mypy's and coverage's plugins, pytest's addopts -p, flake8's local-plugins) whenever they run, in an editor as soon as a file is opened or tests are discovered; what they name changed",
    },
    Keyed {
        names: &["mypy.ini", ".mypy.ini"],
        keys: &["plugins"],
        reason: "mypy imports the plugins named here whenever it checks, in an editor as soon as a Python file is opened; what they name changed",
    },
    Keyed {
        names: &["pytest.ini", ".pytest.ini"],
        keys: &["addopts"],
        reason: "pytest takes its command line from addopts (-p loads a plugin) at every run, editors' test discovery included; it changed",
    },
    Keyed {
        names: &[".flake8"],
        keys: &["local-plugins"],
        reason: "flake8 imports the local plugins named here whenever it lints, in an editor as soon as a Python file is opened; what they name changed",
    },
    Keyed {
        names: &[".coveragerc"],
        keys: &["plugins"],
        reason: "coverage imports the plugins named here at every measured run; what they name changed",
    },
    Keyed {
        names: &[".rubocop.yml", ".rubocop.yaml"],
        keys: &["require", "plugins", "inherit-from", "inherit-gem"],
        reason: "RuboCop loads the Ruby its require and plugins name (and the configurations it inherits) whenever it lints, in an editor as soon as a Ruby file is opened; what they name changed",
    },
    Keyed {
        names: &[".standard.yml"],
        keys: &["require", "plugins", "extend-config"],
        reason: "Standard Ruby loads the Ruby its plugins and require name whenever it lints, in an editor as soon as a Ruby file is opened; what they name changed",
    },
    Keyed {
        names: &[".golangci.yml", ".golangci.yaml", ".golangci.toml", ".golangci.json"],
        keys: &["custom", "plugins"],
        reason: "golangci-lint loads the custom linters (Go plugins) named here whenever it lints, in an editor as soon as a Go file is saved; what they name changed",
    },
    Keyed {
        names: &[".eslintrc", ".eslintrc.json", ".eslintrc.yaml", ".eslintrc.yml"],
        keys: &["plugins", "parser", "extends", "processor"],
        reason: "ESLint loads the plugins, parser and shared configurations named here (JavaScript) whenever it lints, in an editor as soon as a file is opened; what they name changed",
    },
    Keyed {
        names: &[".prettierrc", ".prettierrc.json", ".prettierrc.json5", ".prettierrc.yaml", ".prettierrc.yml", ".prettierrc.toml"],
        keys: &["plugins", "parser"],
        reason: "Prettier loads the plugins named here (JavaScript) whenever it formats, in an editor at the next format on save; what they name changed",
    },
    Keyed {
        names: &[".stylelintrc", ".stylelintrc.json", ".stylelintrc.yaml", ".stylelintrc.yml"],
        keys: &["plugins", "extends", "customsyntax", "processors"],
        reason: "stylelint loads the plugins, syntaxes and shared configurations named here (JavaScript) whenever it lints, in an editor as soon as a stylesheet is opened; what they name changed",
    },
    Keyed {
        names: &[".babelrc", ".babelrc.json"],
        keys: &["plugins", "presets", "extends"],
        reason: "Babel loads the plugins and presets named here (JavaScript) whenever it compiles: a linter's Babel parser, a test runner, a bundler; what they name changed",
    },
    Keyed {
        names: &[".mocharc.json", ".mocharc.jsonc", ".mocharc.yaml", ".mocharc.yml"],
        keys: &["require", "loader", "node-option"],
        reason: "Mocha loads the modules named here at every run, an editor's test explorer included; what they name changed",
    },
    Keyed {
        names: &[".nycrc", ".nycrc.json", ".nycrc.yaml", ".nycrc.yml"],
        keys: &["require"],
        reason: "nyc loads the modules its require names (JavaScript) at every measured test run; what they name changed",
    },
    Keyed {
        names: &[".postcssrc", ".postcssrc.json", ".postcssrc.yaml", ".postcssrc.yml"],
        keys: &["plugins", "parser", "syntax", "stringifier"],
        reason: "PostCSS loads the plugins and syntaxes named here (JavaScript) at every build and in editor extensions; what they name changed",
    },
    Keyed {
        names: &["phpstan.neon", "phpstan.neon.dist", "phpstan.dist.neon"],
        keys: &["bootstrapfiles", "bootstrap", "includes"],
        reason: "PHPStan runs the bootstrap files (PHP) and reads the configurations named here whenever it analyses, in an editor as soon as a PHP file is opened; what they name changed",
    },
];

/// The row whose names hold `path`'s file name, in any case (the owner's
/// file system may fold case: `Setup.cfg` is the tools' `setup.cfg`).
pub(crate) fn row(path: &Path) -> Option<&'static Keyed> {
    let name = path.file_name()?.to_string_lossy().to_lowercase();
    KEYED.iter().find(|k| k.names.contains(&name.as_str()))
}

/// What a file names for its tool to load: its parts, or the whole text
/// when a part refers elsewhere.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Named {
    Parts(Vec<String>),
    Whole(String),
}

impl Named {
    fn is_empty(&self) -> bool {
        matches!(self, Named::Parts(p) if p.is_empty())
    }
}

/// The reason to flag a change from `old` to `new` (the files' texts)
/// under `row`: what the file names for its tool changed, and it names
/// something now.
pub(crate) fn changed(row: &Keyed, old: Option<&str>, new: &str) -> Option<&'static str> {
    let after = named(new, row.keys);
    if after.is_empty() {
        return None;
    }
    let before = old.map(|o| named(o, row.keys));
    (before.as_ref() != Some(&after)).then_some(row.reason)
}

/// The parts of `text` that name one of `keys`.
pub(crate) fn named(text: &str, keys: &[&str]) -> Named {
    let text = unescaped(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !names_key(lines[i], keys) {
            i += 1;
            continue;
        }
        let end = part_end(&lines, i);
        let part = lines[i..end].join("\n").trim_end().to_string();
        if refers(&part) {
            return Named::Whole(text.to_string());
        }
        parts.push(part);
        i = end;
    }
    Named::Parts(parts)
}

/// The line after the part that starts at `start`.
fn part_end(lines: &[&str], start: usize) -> usize {
    let indent = indent_of(lines[start]);
    // An INI section named by a key (`[flake8:local-plugins]`) runs to
    // the next section.
    let section = lines[start].trim_start().starts_with('[');
    let mut open = balance(lines[start], 0);
    let mut triple = triples(lines[start]) % 2 == 1;
    let mut j = start + 1;
    while j < lines.len() {
        let l = lines[j];
        let t = l.trim();
        let closer = t.starts_with([']', '}', ')']);
        let more = open > 0
            || triple
            || t.is_empty()
            || indent_of(l) > indent
            || ((t.starts_with('-') || t.starts_with(':') || closer) && indent_of(l) >= indent)
            || (section && !t.starts_with('['));
        if !more {
            break;
        }
        open = balance(l, open);
        triple ^= triples(l) % 2 == 1;
        j += 1;
    }
    j
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Brackets still open after `line`, outside its quotes.
fn balance(line: &str, mut open: usize) -> usize {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in line.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '[' | '{' | '(' => open += 1,
                ']' | '}' | ')' => open = open.saturating_sub(1),
                _ => {}
            },
        }
    }
    open
}

fn triples(line: &str) -> usize {
    line.matches("\"\"\"").count() + line.matches("'''").count()
}

/// Whether `line` names one of `keys` as a key: after the start, a quote,
/// a space or a separator, and before (a quote, spaces and) `=`, `:`, `]`
/// or the line's end. Over-reading a line that merely mentions a key
/// costs a flag; missing a spelling lands code.
fn names_key(line: &str, keys: &[&str]) -> bool {
    let norm: String = line
        .chars()
        .map(|c| match c {
            '_' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-';
    keys.iter().any(|key| {
        norm.match_indices(key).any(|(at, _)| {
            let before_ok = norm[..at].chars().next_back().is_none_or(|c| !word(c));
            let rest = norm[at + key.len()..].trim_start_matches(['"', '\'']);
            let rest = rest.trim_start();
            let after_ok = rest.is_empty() || rest.starts_with(['=', ':', ']']);
            before_ok && after_ok
        })
    })
}

/// Whether a part refers to text elsewhere in the file: an interpolation
/// (`%(x)s`, `${x}`) or a YAML anchor or alias (`&x`, `*x`, `<<:`).
fn refers(part: &str) -> bool {
    if part.contains("%(") || part.contains("${") || part.contains("<<") {
        return true;
    }
    let chars: Vec<char> = part.chars().collect();
    chars.windows(2).enumerate().any(|(i, w)| {
        let before_ok = i == 0 || matches!(chars[i - 1], ' ' | '\t' | '[' | '{' | ',' | ':' | '\n');
        matches!(w[0], '&' | '*') && (w[1].is_ascii_alphanumeric() || w[1] == '_') && before_ok
    })
}

/// `text` with the escapes of JSON, YAML and TOML strings read (`\u0069`,
/// `\U00000069`, `\x69`, and YAML's escaped line break), so a key spelled
/// with them is found.
fn unescaped(text: &str) -> String {
    if !text.contains('\\') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        let hex = |n: usize| -> Option<char> {
            let digits = tail.get(1..1 + n)?;
            u32::from_str_radix(digits, 16)
                .ok()
                .and_then(char::from_u32)
        };
        // What the escape reads as (nothing for a line break) and the
        // bytes it spans after the backslash; `None`: not an escape here.
        let read: Option<(Option<char>, usize)> = match tail.chars().next() {
            Some('u') => hex(4).map(|c| (Some(c), 5)),
            Some('U') => hex(8).map(|c| (Some(c), 9)),
            Some('x') => hex(2).map(|c| (Some(c), 3)),
            // An escaped backslash escapes nothing after it.
            Some('\\') => Some((Some('\\'), 1)),
            Some('\n') => {
                let after = &tail[1..];
                Some((
                    None,
                    1 + after.len() - after.trim_start_matches([' ', '\t']).len(),
                ))
            }
            _ => None,
        };
        match read {
            Some((c, used)) => {
                out.extend(c);
                rest = &tail[used..];
            }
            None => {
                out.push('\\');
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `host-exec` for a change to a file of [`KEYED`] whose named code
/// changed, one warden cannot read, or a symbolic link standing at such a
/// name (the tool reads what it leads to).
pub(crate) fn flag(upper: &Path, real: &Tree, c: &Change) -> Option<Flag> {
    let row = row(&c.path)?;
    let flag = |reason: String| Flag {
        rule: "host-exec",
        reason,
        findings: Vec::new(),
    };
    let new = c.new.as_ref()?;
    match new.kind {
        EntryKind::File => {}
        EntryKind::Symlink => {
            return Some(flag(format!(
                "a symbolic link where a tool reads its configuration: {}",
                row.reason.split(';').next().unwrap_or(row.reason)
            )))
        }
        _ => return None,
    }
    let Some(after) = read(Tree::layer(upper), &c.path) else {
        return Some(flag(format!(
            "warden cannot read this configuration to tell what it names for its tool to load: {}",
            row.reason.split(';').next().unwrap_or(row.reason)
        )));
    };
    let before = match c.old.as_ref().map(|o| o.kind) {
        Some(EntryKind::File) => read(real.try_clone(), c.from.as_deref().unwrap_or(&c.path)),
        _ => None,
    };
    changed(row, before.as_deref(), &after).map(|r| flag(r.to_string()))
}

/// The text of `rel` in `tree`, when it reads whole within [`LIMIT`].
fn read(tree: std::io::Result<Tree>, rel: &Path) -> Option<String> {
    let mut buf = Vec::new();
    tree.ok()?
        .file(rel)
        .ok()?
        .take(LIMIT + 1)
        .read_to_end(&mut buf)
        .ok()?;
    if buf.len() as u64 > LIMIT {
        return None;
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str, keys: &[&str]) -> Vec<String> {
        match named(text, keys) {
            Named::Parts(p) => p,
            Named::Whole(_) => vec!["<whole>".into()],
        }
    }

    #[test]
    fn a_part_runs_through_its_values_continuation_in_each_format() {
        let k = &["load-plugins", "require", "plugins"];
        // INI continuation lines, then the next key.
        assert_eq!(
            parts("[x]\nload-plugins =\n    a\n    b\njobs = 2\n", k),
            ["load-plugins =\n    a\n    b"]
        );
        // TOML array closed at the key's own indent.
        assert_eq!(
            parts("load_plugins = [\n\"a\",\n]\nx = 1\n", k),
            ["load_plugins = [\n\"a\",\n]"]
        );
        // YAML list at the key's indent.
        assert_eq!(
            parts("require:\n- a\n- b\nAllCops: {}\n", k),
            ["require:\n- a\n- b"]
        );
        // A bracket inside a string does not close the value.
        assert_eq!(
            parts("plugins = [\"a]\",\n\"b\"\n]\n", k),
            ["plugins = [\"a]\",\n\"b\"\n]"]
        );
        // A key spelled with escapes, or as YAML's complex key.
        assert_eq!(parts("\"plug\\u0069ns\": [1]\n", k), ["\"plugins\": [1]"]);
        assert_eq!(parts("? require\n: [a]\n", k), ["? require\n: [a]"]);
        // Not a key: a longer word, or a value.
        assert!(parts("myplugins = 1\nx = \"require it\"\n", k).is_empty());
    }

    #[test]
    fn a_part_that_refers_elsewhere_makes_the_whole_file_the_part() {
        let k = &["require", "init-hook"];
        for text in [
            "x: &e [a]\nrequire: *e\n",
            "a: &k require\n*k : [b]\n",
            "[DEFAULT]\nx = import os\n[MAIN]\ninit-hook = %(x)s\n",
        ] {
            assert!(matches!(named(text, k), Named::Whole(_)), "{text}");
        }
        assert!(matches!(
            named("addopts = --ignore=*.tmp -k 'a and b'\n", &["addopts"]),
            Named::Parts(_)
        ));
    }

    #[test]
    fn a_settings_file_is_its_row_in_any_case() {
        for name in ["Setup.cfg", "PYPROJECT.TOML", "x/.PyLintRC", ".NYCRC"] {
            assert!(row(Path::new(name)).is_some(), "{name}");
        }
        assert!(row(Path::new("setup.cfg.bak")).is_none());
    }

    #[test]
    fn only_a_change_to_what_is_named_is_flagged() {
        let py = row(Path::new("pyproject.toml")).unwrap();
        let old = "[project]\nversion = \"1\"\n[tool.pylint.main]\nload-plugins = [\"a\"]\n";
        let bumped = old.replace("\"1\"", "\"2\"");
        assert_eq!(changed(py, Some(old), &bumped), None);
        assert!(changed(py, Some(old), &old.replace("[\"a\"]", "[\"a\", \"evil\"]")).is_some());
        assert!(changed(py, None, old).is_some());
        assert_eq!(changed(py, None, "[project]\nname = \"a\"\n"), None);
        // Duplicated, as YAML lets the last one win.
        let rubocop = row(Path::new(".rubocop.yml")).unwrap();
        assert!(changed(
            rubocop,
            Some("require: a\n"),
            "require: a\nrequire: ./evil.rb\n"
        )
        .is_some());
    }
}

//! A lint, run as a test: no two files of a crate import each other.
//!
//! Two modules that each use the other are one module in two files: neither
//! can be read, changed or tested alone, and what they share has no home.
//! The cure is to move the shared type or function to the lower of the two
//! (the one the other is built on), never to hide the circle behind a
//! re-export. A module and one of its own descendants (`mod.rs` and the
//! files below it) are one unit and may use each other.
//!
//! The scan reads each crate's source as text: the paths written after
//! `crate::` and `super::` in code (not in comments, literals or
//! `#[cfg(test)]` items), `use` trees with braces included, each resolved
//! to the file of the longest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Circles that are still there, each a place to cut next (`crate: a <->
/// b`, the modules as paths below `src/`, `lib` for the crate's root), and
/// why it is left for now. The test fails on a circle not listed here, and
/// on an entry that is no longer a circle (so the list only shrinks).
#[rustfmt::skip]
const KNOWN: &[(&str, &str)] = &[
];

/// A module's path below `src/` (`proxy/relay`; `lib` for the root).
type Module = Vec<String>;

/// The module a file of `src` is, or `None` for a binary's own file.
fn module_of(src: &Path, file: &Path) -> Option<Module> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    Some(parts)
}

/// `code` without its `#[cfg(test)]` items.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut from = 0;
    for (s, e) in super::test_items(code) {
        out.push_str(&code[from..s]);
        from = e.min(code.len());
    }
    out.push_str(&code[from..]);
    out
}

/// An identifier or `*` at the start of `s`, and its length.
fn word(s: &str) -> Option<&str> {
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '*'))
        .map_or(s.len(), |(i, _)| i);
    (end > 0).then(|| &s[..end])
}

/// The paths of the use tree at the start of `s`, each with `prefix` in
/// front (`a::{b, c::d}` is `a::b` and `a::c::d`); how much was read.
fn tree(s: &str, prefix: &[String], out: &mut Vec<Module>) -> usize {
    let mut segs = prefix.to_vec();
    let mut at = 0;
    loop {
        let rest = &s[at..];
        let trimmed = rest.trim_start();
        at += rest.len() - trimmed.len();
        if let Some(inner) = trimmed.strip_prefix('{') {
            at += 1;
            let mut read = 0;
            loop {
                read += tree(&inner[read..], &segs, out);
                let rest = inner[read..].trim_start();
                read = inner.len() - rest.len();
                if rest.starts_with(',') {
                    read += 1;
                    continue;
                }
                if rest.starts_with('}') {
                    read += 1;
                }
                break;
            }
            return at + read;
        }
        let Some(w) = word(trimmed) else {
            out.push(segs);
            return at;
        };
        segs.push(w.to_string());
        at += w.len();
        if s[at..].starts_with("::") {
            at += 2;
            continue;
        }
        out.push(segs);
        return at;
    }
}

/// Every path `code` writes after `crate::` or `super::`, as a path from
/// the crate's root, for the code of module `me`.
fn paths(code: &str, me: &[String]) -> Vec<Module> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let rest = &code[i..];
        let (base, len): (Module, usize) = if starts_word && rest.starts_with("crate::") {
            (Vec::new(), "crate::".len())
        } else if starts_word && rest.starts_with("super::") {
            let mut base = me.to_vec();
            let mut len = 0;
            while code[i + len..].starts_with("super::") {
                base.pop();
                len += "super::".len();
            }
            (base, len)
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let read = tree(&code[i + len..], &base, &mut out);
        i += len + read.max(1);
    }
    out
}

/// The modules of one crate's `src` and which others each one uses.
fn uses(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    super::rust_files(src, &mut files);
    let modules: BTreeMap<Module, &Path> = files
        .iter()
        .filter_map(|f| Some((module_of(src, f)?, f.as_path())))
        .collect();
    let resolve = |path: &[String]| {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| modules.contains_key(m))
    };
    let mut out = BTreeMap::new();
    for (me, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let code = without_tests(&super::scan(&text).0);
        let used: BTreeSet<Module> = paths(&code, me)
            .iter()
            .filter_map(|p| resolve(p))
            .filter(|m| m != me)
            .collect();
        out.insert(me.clone(), used);
    }
    out
}

/// The pairs of `uses` that use each other, neither inside the other.
fn circles(uses: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<(String, String)> {
    let name = |m: &Module| {
        if m.is_empty() {
            "lib".to_string()
        } else {
            m.join("/")
        }
    };
    let mut out = Vec::new();
    for (a, used) in uses {
        for b in used {
            let nested = a.starts_with(b) || b.starts_with(a);
            if a < b && !nested && uses.get(b).is_some_and(|u| u.contains(a)) {
                out.push((name(a), name(b)));
            }
        }
    }
    out
}

#[test]
fn the_scan_reads_use_trees_and_super_paths_outside_comments_and_tests() {
    let src = "use crate::{a::{B, c::D}, e};\n// crate::f::G\nfn x() { super::h::i(); crate::j::K; }\n#[cfg(test)]\nmod tests { use crate::l; }\n";
    let code = without_tests(&super::scan(src).0);
    let me: Module = vec!["m".into(), "n".into()];
    let found: Vec<String> = paths(&code, &me).iter().map(|p| p.join("::")).collect();
    assert_eq!(found, ["a::B", "a::c::D", "e", "m::h::i", "j::K"]);
}

#[test]
fn no_two_files_of_a_crate_use_each_other_beyond_the_listed_debt() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(&crates) else {
        panic!("cannot read {}", crates.display());
    };
    let mut dirs: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let krate = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (a, b) in circles(&uses(&src)) {
            found.push((krate.clone(), a, b));
        }
    }
    // Each pair as KNOWN writes it, either way round.
    let key =
        |k: &str, a: &str, b: &str| [format!("{k}: {a} <-> {b}"), format!("{k}: {b} <-> {a}")];
    let listed = |k: &str, a: &str, b: &str| {
        key(k, a, b)
            .iter()
            .any(|x| KNOWN.iter().any(|(known, _)| known == x))
    };
    let new: Vec<String> = found
        .iter()
        .filter(|(k, a, b)| !listed(k, a, b))
        .map(|(k, a, b)| key(k, a, b)[0].clone())
        .collect();
    assert!(
        new.is_empty(),
        "files that use each other (move what they share to the lower one): {new:?}"
    );
    let gone: Vec<&str> = KNOWN
        .iter()
        .map(|(known, _)| *known)
        .filter(|known| {
            !found
                .iter()
                .any(|(k, a, b)| key(k, a, b).iter().any(|x| x == known))
        })
        .collect();
    assert!(
        gone.is_empty(),
        "no longer circles: take them off the list in lint/circles.rs: {gone:?}"
    );
}

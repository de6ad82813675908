//! A lint, run as a test: the command line prints no path raw.
//!
//! A path the CLI prints may be one a token or a sandbox chose (a
//! workspace a token named, a file a sandbox made): written as it is, its
//! escapes (`ESC]0;...BEL`, `ESC[2J`) reach the owner's terminal through
//! `warden ls` or `warden commit`. Every path printed goes through
//! `warden_workspace::printable_path`, as every name goes through
//! `printable`; a `.display()` among a print macro's arguments is a path
//! printed raw.
//!
//! The scan reads the CLI's source as text: each `println!`, `print!`,
//! `eprintln!` and `eprint!` in code (not in comments, literals or
//! `#[cfg(test)]` items), and fails on one whose arguments call
//! `.display()`.

use std::path::Path;

/// The print macros.
const PRINTS: &[&str] = &["println!(", "print!(", "eprintln!(", "eprint!("];

/// The arguments of each print macro in `code`, with where it starts.
fn printed(code: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    for mac in PRINTS {
        for (at, _) in code.match_indices(mac) {
            // `eprintln!(` holds `println!(`: only a whole name counts.
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let open = at + mac.len();
            let mut depth = 1usize;
            let mut end = open;
            for (i, c) in code[open..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = open + i;
                    break;
                }
            }
            out.push((at, &code[open..end]));
        }
    }
    out
}

/// The print macros in `src` that print a path raw, outside tests: their
/// arguments, as the scan left them.
fn raw_paths(src: &str) -> Vec<String> {
    let code = super::scan(src).0;
    let tests = super::test_items(&code);
    printed(&code)
        .into_iter()
        .filter(|(at, args)| {
            args.contains(".display()") && !tests.iter().any(|(s, e)| (*s..*e).contains(at))
        })
        .map(|(_, args)| args.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn the_scan_sees_a_path_printed_raw_in_code_only() {
    assert_eq!(
        raw_paths("fn f(p: &Path) { println!(\"{}\", p.display()); }").len(),
        1
    );
    assert_eq!(
        raw_paths("fn f(p: &Path) { eprintln!(\"a {}\", x(p).display()); }").len(),
        1
    );
    assert!(raw_paths("fn f(p: &Path) { println!(\"{}\", printable_path(p)); }").is_empty());
    assert!(raw_paths("// println!(\"{}\", p.display());\nfn f() {}").is_empty());
    assert!(raw_paths("fn f(p: &Path) { let s = format!(\"{}\", p.display()); }").is_empty());
    assert!(raw_paths(
        "#[cfg(test)]\nmod tests { fn f(p: &Path) { println!(\"{}\", p.display()); } }"
    )
    .is_empty());
}

#[test]
fn the_command_line_prints_every_path_through_printable_path() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    super::rust_files(&crates.join("cli").join("src"), &mut files);
    files.sort();
    assert!(files.len() > 10, "{} files", files.len());
    let mut raw = Vec::new();
    for file in &files {
        let shown = file.strip_prefix(&crates).unwrap_or(file).to_string_lossy();
        let Ok(src) = std::fs::read_to_string(file) else {
            panic!("cannot read {shown}");
        };
        for args in raw_paths(&src) {
            raw.push(format!("{shown}: ({args})"));
        }
    }
    assert!(
        raw.is_empty(),
        "a path is printed raw (its escapes reach the terminal); print warden_workspace::printable_path(p) instead of p.display(): {raw:?}"
    );
}

//! A lint, run as a test: below the doors no code reads the environment.
//!
//! A setting read from the environment by a library is an option that no
//! door declared: the table does not know it, the API cannot set it, and a
//! process that inherits another's environment (a supervisor, a helper)
//! changes behaviour without anyone asking. A binary's `main` (the door)
//! reads what it honours once into a typed value (`TestHooks`,
//! `warden_vm::Settings`, `warden_jail::settings::Settings`) and the library
//! asks that value.
//!
//! The scan reads each library crate's source as text: `env::var`,
//! `env::var_os`, `env::vars` and `env::vars_os` in code (not in comments,
//! literals or `#[cfg(test)]` items), in every file but a binary's own.

use std::path::Path;

/// The library crates (the doors are cli, daemon and oci).
const CRATES: &[&str] = &[
    "policy",
    "protocol",
    "runtime",
    "jail",
    "vm",
    "egress",
    "workspace",
    "audit",
    "api",
    "client",
    "detect",
    "selftest",
];

/// Files that still read the environment, and why they may. The test fails
/// on a file that reads it and is not listed, and on a listed file that no
/// longer does (so the list only shrinks).
#[rustfmt::skip]
const ALLOWED: &[(&str, &str)] = &[
    ("selftest/src/attacks/fs.rs", "a probe inside the sandbox reads the sandbox's own HOME"),
    ("selftest/src/attacks/secrets.rs", "a probe inside the sandbox looks for secrets in its own environment"),
    ("selftest/src/attacks/secret_proxy.rs", "a probe inside the sandbox reads its placeholder and the CA bundle its init set"),
    ("selftest/src/attacks/secret_routes.rs", "a probe inside the sandbox reads its placeholder"),
];

/// The calls that read the environment.
const READS: &[&str] = &["env::var(", "env::var_os(", "env::vars(", "env::vars_os("];

/// Whether `code` (comments and literals left out) reads the environment
/// outside its `#[cfg(test)]` items.
fn reads_env(src: &str) -> bool {
    let code = super::scan(src).0;
    let tests = super::test_items(&code);
    READS.iter().any(|call| {
        code.match_indices(call)
            .any(|(at, _)| !tests.iter().any(|(s, e)| (*s..*e).contains(&at)))
    })
}

#[test]
fn the_scan_sees_reads_in_code_only() {
    assert!(reads_env("fn f() { let _ = std::env::var_os(\"X\"); }"));
    assert!(reads_env("use std::env;\nfn f() { env::vars(); }"));
    assert!(!reads_env(
        "// std::env::var(\"X\")\nfn f() { let _ = \"env::var(\"; }"
    ));
    assert!(!reads_env(
        "#[cfg(test)]\nmod tests { fn f() { std::env::var(\"X\"); } }"
    ));
    assert!(!reads_env("fn f() { std::env::split_paths(&p); }"));
}

#[test]
fn no_library_crate_reads_the_environment_beyond_the_listed_few() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for name in CRATES {
        super::rust_files(&crates.join(name).join("src"), &mut files);
    }
    files.sort();
    assert!(files.len() > 50, "{} files", files.len());
    let mut reading = Vec::new();
    for file in &files {
        let shown = file.strip_prefix(&crates).unwrap_or(file).to_string_lossy();
        // A binary's own file is a door.
        if shown.contains("/src/bin/") || shown.ends_with("/src/main.rs") {
            continue;
        }
        let Ok(src) = std::fs::read_to_string(file) else {
            panic!("cannot read {shown}");
        };
        if reads_env(&src) {
            reading.push(shown.into_owned());
        }
    }
    let unlisted: Vec<&String> = reading
        .iter()
        .filter(|f| !ALLOWED.iter().any(|(a, _)| a == f))
        .collect();
    assert!(
        unlisted.is_empty(),
        "library code reads the environment; read it once in the binary's main into a \
         typed value (TestHooks, warden_vm::Settings, warden_jail::settings::Settings) that the library asks: {unlisted:?}"
    );
    let gone: Vec<&str> = ALLOWED
        .iter()
        .map(|(a, _)| *a)
        .filter(|a| !reading.iter().any(|f| f == a))
        .collect();
    assert!(
        gone.is_empty(),
        "no longer read the environment: take them off the list in lint/env.rs: {gone:?}"
    );
}

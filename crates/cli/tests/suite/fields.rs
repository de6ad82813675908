//! The flags of `warden run` and the field table of `warden-policy` cannot
//! drift apart: every flag of the table is in `warden run --help` (with its
//! short form and value name), and every flag of the help is in the table.
//! And an error carries its field, so each door names it in its own words:
//! the flag on the command line, `file:line:column` and the key in a profile.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use warden_policy::{Field, FIELDS};

fn warden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("warden could not be started")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The option lines of clap's long help: `  -w, --workspace <DIR>`, each
/// as (short, long, rest of the line). Description lines are indented
/// further and never start with a dash.
fn options(help: &str) -> Vec<(Option<char>, String, String)> {
    let mut out = Vec::new();
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if indent > 6 || !text.starts_with('-') {
            continue;
        }
        let (short, rest) = match text.strip_prefix('-').and_then(|t| t.chars().next()) {
            Some(c) if c != '-' => (Some(c), text[2..].trim_start_matches(',').trim()),
            _ => (None, text),
        };
        let Some(rest) = rest.strip_prefix("--") else {
            out.push((short, String::new(), rest.to_string()));
            continue;
        };
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        out.push((
            short,
            format!("--{}", &rest[..end]),
            rest[end..].to_string(),
        ));
    }
    out
}

/// Flags the table has but this build does not offer.
fn not_built(field: Field) -> bool {
    field == Field::OtlpEndpoint && !cfg!(feature = "otlp")
}

#[test]
fn the_flags_of_warden_run_are_exactly_the_flags_of_the_field_table() {
    let out = warden(&["run", "--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let options = options(&help);
    assert!(options.len() > 30, "{help}");

    for info in FIELDS {
        let Some(flag) = info.flag else { continue };
        if not_built(info.field) {
            continue;
        }
        let Some((short, _, rest)) = options.iter().find(|(_, long, _)| long == flag) else {
            panic!("the table's {flag} is not a flag of `warden run`:\n{help}");
        };
        assert_eq!(*short, info.short, "{flag}: its short form");
        match info.value_name {
            Some(v) => assert!(
                rest.contains(&format!("<{v}>")),
                "{flag}: the help shows {rest:?}, the table's value is {v}"
            ),
            None => assert!(!rest.contains('<'), "{flag} takes no value: {rest:?}"),
        }
    }
    for (short, long, _) in &options {
        // `--host` is warden's own global option (which machine's runtime
        // makes the sandbox), not a property of the sandbox.
        if long == "--help" || long == "--host" {
            continue;
        }
        assert!(
            !long.is_empty(),
            "-{short:?} has no long form: every option is named in the table by its long flag"
        );
        let field = Field::from_flag(long);
        assert!(
            field.is_some(),
            "`warden run {long}` has no field in warden_policy::FIELDS: declare it there"
        );
    }
    // The command, which has no flag, is the positional argument.
    let cmd = Field::Command.info().value_name.unwrap();
    assert!(help.contains(&format!("[{cmd}]")), "{help}");
}

#[test]
fn a_bad_value_on_the_command_line_names_its_flag() {
    let out = warden(&["run", "--no-tty", "--memory", "1K", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--memory 1024 bytes is too small"),
        "{}",
        stderr(&out)
    );
    let out = warden(&[
        "run",
        "--no-tty",
        "--allow-domain",
        "a.example.com",
        "--allow-cidr",
        "10.0.0.0/8",
        "--allow-cidr",
        "10.1.2.3/40",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--allow-cidr \"10.1.2.3/40\" must be an address range"),
        "{}",
        stderr(&out)
    );
}

/// A directory with one profile, removed on drop.
struct Profile(PathBuf);

impl Profile {
    fn new(text: &str) -> Profile {
        let dir = std::env::temp_dir().join(format!(
            "warden-fields-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("p.yaml"), text).unwrap();
        Profile(dir)
    }
    fn path(&self) -> String {
        self.0.join("p.yaml").display().to_string()
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_same_bad_value_in_a_profile_is_placed_at_its_line_and_column() {
    let p = Profile::new(
        "egress:\n  domains: [a.example.com]\n  allow_cidrs:\n    - 10.0.0.0/8\n    - 10.1.2.3/40\n",
    );
    let out = warden(&["profile", "validate", &p.path()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{}:5:7: error: egress.allow_cidrs: \"10.1.2.3/40\" must be an address range",
            p.path()
        )),
        "{}",
        stderr(&out)
    );
    // `warden run` finds the same place through the error's field.
    let out = warden(&["run", "--no-tty", "-P", &p.path(), "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{}:5:7:", p.path())),
        "{}",
        stderr(&out)
    );

    let p = Profile::new("resources:\n  memory: 1K\n");
    let out = warden(&["profile", "validate", &p.path()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{}:2:11: error: resources.memory: 1024 bytes is too small",
            p.path()
        )),
        "{}",
        stderr(&out)
    );
}

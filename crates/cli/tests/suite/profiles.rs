//! `warden profile` and `warden run --profile`, through the real binary:
//! validation messages and exit codes, resolved output, checks, the schema,
//! and every shipped profile running a real sandbox.

use crate::common::{code, skip, stderr, stdout, warden_bin, TempDir};
use std::process::{Command, Output, Stdio};

/// `warden ARGS` with an empty configuration directory, so that only the
/// built-in profiles and presets are seen.
fn warden(config: &TempDir, args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("XDG_CONFIG_HOME", config.path())
        .stdin(Stdio::null())
        .output()
        .expect("warden could not be started")
}

const SHIPPED: &[&str] = &[
    "base",
    "debugger",
    "devops",
    "feature-dev",
    "researcher",
    "security",
];

#[test]
fn a_valid_profile_passes_validation_with_exit_zero() {
    let dir = TempDir::new("prof-valid");
    let file = dir.path().join("agent.yaml");
    std::fs::write(
        &file,
        "extends: [base]\negress:\n  presets: [pypi]\n  domains: [.example.dev]\n",
    )
    .unwrap();
    let out = warden(&dir, &["profile", "validate", file.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("valid"), "{}", stdout(&out));
}

#[test]
fn an_invalid_profile_fails_with_every_message_at_its_place() {
    let dir = TempDir::new("prof-invalid");
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "name: bad\negress:\n  presets: [pipy]\n").unwrap();
    let f = file.to_str().unwrap();
    let out = warden(&dir, &["profile", "validate", f]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains(&format!(
            "{f}:3:13: error: no preset named \"pipy\" (did you mean \"pypi\"?)"
        )),
        "{}",
        stderr(&out)
    );

    std::fs::write(&file, "resources:\n  memory: 4 GB\n").unwrap();
    let out = warden(&dir, &["profile", "validate", f]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains(&format!("{f}:2:11: error: size \"4 GB\" is not valid")),
        "{}",
        stderr(&out)
    );

    std::fs::write(&file, "egress:\n  allow_htp: true\n").unwrap();
    let out = warden(&dir, &["profile", "validate", f]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains(&format!(
            "{f}:2:3: error: unknown key `allow_htp`; did you mean `allow_http`?"
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn warnings_alone_still_exit_zero() {
    let dir = TempDir::new("prof-warn");
    let file = dir.path().join("w.yaml");
    std::fs::write(
        &file,
        "egress:\n  domains:\n    - .github.com\n    - api.github.com\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let out = warden(&dir, &["profile", "validate", f]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{f}:4:7: warning: `api.github.com` is covered by `.github.com`"
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn every_shipped_profile_validates() {
    let dir = TempDir::new("prof-shipped");
    let mut args = vec!["profile", "validate"];
    args.extend_from_slice(SHIPPED);
    let out = warden(&dir, &args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn show_json_is_the_fully_resolved_profile() {
    let dir = TempDir::new("prof-show");
    let out = warden(&dir, &["profile", "show", "feature-dev", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["name"], "feature-dev");
    assert_eq!(v["command"], serde_json::json!(["bash", "-l"]));
    let domains = v["egress"]["domains"].as_array().unwrap();
    assert!(domains.contains(&"api.github.com".into()));
    assert!(domains.contains(&"api.anthropic.com".into()));
    assert_eq!(v["resources"]["timeout"], "8h");
    assert_eq!(v["env"]["set"]["EDITOR"], "vi");
    assert!(
        v["resources"]["memory"].is_string(),
        "defaults are filled in"
    );

    let out = warden(&dir, &["profile", "show", "feature-dev", "--explain"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("resources.timeout") && l.ends_with("# builtin:base:11:12")),
        "{text}"
    );
    assert!(
        text.contains("# preset github (builtin:feature-dev:6:13)"),
        "{text}"
    );
    assert!(text
        .lines()
        .any(|l| l.starts_with("resources.pids") && l.ends_with("# default")));
}

#[test]
fn check_says_which_rule_allows_a_destination() {
    let dir = TempDir::new("prof-check");
    let out = warden(
        &dir,
        &["profile", "check", "researcher", "export.arxiv.org"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("by `.arxiv.org` (preset arxiv"),
        "{}",
        stdout(&out)
    );
    let out = warden(&dir, &["profile", "check", "researcher", "github.com"]);
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("denied"), "{}", stdout(&out));
    let out = warden(&dir, &["profile", "check", "researcher", "arxiv.org:22"]);
    assert_eq!(code(&out), 1);
}

#[test]
fn the_printed_schema_is_the_committed_one() {
    let dir = TempDir::new("prof-schema");
    let out = warden(&dir, &["profile", "schema"]);
    assert_eq!(code(&out), 0);
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../schema/profile.schema.json"
    ))
    .unwrap();
    assert_eq!(stdout(&out), committed);
}

#[test]
fn a_user_profile_is_found_by_name_and_listed() {
    let dir = TempDir::new("prof-user");
    std::fs::create_dir_all(dir.path().join("warden/profiles")).unwrap();
    std::fs::write(
        dir.path().join("warden/profiles/mine.yaml"),
        "description: my own\nextends: [base]\nhostname: mine\n",
    )
    .unwrap();
    let out = warden(&dir, &["profile", "list"]);
    assert!(stdout(&out).contains("mine"), "{}", stdout(&out));
    let out = warden(
        &dir,
        &["run", "--no-tty", "--profile", "mine", "--", "hostname"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "mine");
}

#[test]
fn presets_are_listed_and_shown() {
    let dir = TempDir::new("prof-presets");
    let out = warden(&dir, &["preset", "list"]);
    assert_eq!(code(&out), 0);
    for name in ["github", "pypi", "crates-io", "anthropic", "sentry", "cve"] {
        assert!(stdout(&out).contains(name), "{name} missing");
    }
    let out = warden(&dir, &["preset", "list", "--show", "pypi"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("files.pythonhosted.org"));
}

#[test]
fn every_shipped_profile_runs_a_real_sandbox() {
    let dir = TempDir::new("prof-run");
    for name in SHIPPED {
        let out = warden(&dir, &["run", "--no-tty", "--profile", name, "--", "true"]);
        if code(&out) == 125 && stderr(&out).contains("namespace") {
            skip(&format!("this host cannot run sandboxes: {}", stderr(&out)));
            return;
        }
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
    }
}

#[test]
fn the_command_line_overrides_the_profile_in_a_real_sandbox() {
    let dir = TempDir::new("prof-override");
    let ws = TempDir::new("prof-ws");
    let out = warden(
        &dir,
        &[
            "run",
            "--no-tty",
            "--profile",
            "feature-dev",
            "-w",
            ws.str(),
            "--hostname",
            "override",
            "--",
            "sh",
            "-c",
            "hostname; pwd; echo $EDITOR",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "override\n/workspace\nvi\n");
}

#[test]
fn a_profile_without_a_command_runs_its_own_and_none_is_a_clear_error() {
    let dir = TempDir::new("prof-cmd");
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, "command: [sh, -c, 'echo from-profile']\n").unwrap();
    let out = warden(
        &dir,
        &["run", "--no-tty", "--profile", file.to_str().unwrap()],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "from-profile\n");
    let out = warden(&dir, &["run", "--no-tty"]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("no command given"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_invalid_profile_stops_the_run_with_125() {
    let dir = TempDir::new("prof-run-bad");
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "resources:\n  pids: -5\n").unwrap();
    let f = file.to_str().unwrap();
    let out = warden(&dir, &["run", "--no-tty", "--profile", f, "--", "true"]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains(&format!("{f}:2:9: error: -5 is negative")),
        "{}",
        stderr(&out)
    );
    let out = warden(
        &dir,
        &["run", "--no-tty", "--profile", "feature-devv", "--", "true"],
    );
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("did you mean \"feature-dev\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn every_finding_of_a_file_parse_level_ones_included_is_said_in_one_run_at_its_place() {
    let dir = TempDir::new("prof-all");
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "resources:\n  memory: 4G\n  memory: 8G\n  pids: lots\n  cpus: [1]\n\
egress:\n  domains: [pypi.org, \"bad domain\"]\n  nonsense: 1\n  ask: maybe\n\
secrets:\n  TOKEN:\n    from_env: MY_TOKEN\n    from_file: /tmp/x\n    hosts: [api.example.com]\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = warden(&dir, &["profile", "validate", path]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    for (place, words) in [
        ("3:3", "`memory` is given twice in this section; keep one"),
        ("4:9", "\"lots\" is not a whole number"),
        // At the value that is wrong.
        (
            "5:9",
            "expected a number of cores such as 0.5 or 2, not a list",
        ),
        ("7:23", "\"bad domain\""),
        ("8:3", "unknown key `nonsense`"),
        ("9:8", "expected true or false"),
        (
            "13:16",
            "secret `TOKEN` has a second source: `from_file` here and `from_env` at line 12",
        ),
    ] {
        let want = format!("{path}:{place}: error: ");
        let line = err
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("nothing at {place}: {err}"));
        assert!(line.contains(words), "{line}");
    }
    // In warden's own words, and in the file's order.
    assert!(!err.contains("DuplicateKeyPolicy"), "{err}");
    let lines: Vec<u64> = err
        .lines()
        .filter_map(|l| {
            l.strip_prefix(&format!("{path}:"))?
                .split(':')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{err}");
    // The same profile used for a run starts nothing.
    let marker = dir.path().join("ran");
    let out = warden(
        &dir,
        &[
            "run",
            "--no-tty",
            "--no-audit-log",
            "--profile",
            path,
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(!marker.exists());
}

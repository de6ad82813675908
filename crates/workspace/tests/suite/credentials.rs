//! The `credential` flag: a change that adds a credential-shaped string to
//! the workspace is flagged with the rule and the line, and its JSON holds
//! the finding's hash, never the value; a key that was already in the real
//! file is not the sandbox's doing and flags nothing.

use crate::common::TempDir;
use std::fs;
use std::path::Path;
use warden_workspace::{Change, CreateOptions, DiffOptions, Store};

/// An AWS access key id, assembled so that this file is no finding itself.
fn aws_key() -> String {
    ["AKIA", "IOSFODNN7EXAMPLE"].concat()
}

fn pem() -> String {
    [
        "-----BEGIN OPENSSH ",
        "PRIVATE KEY-----\n",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n",
        "QyNTUxOQAAACDq1Mxq1M0f7sVZmyWbJnX8b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE\n",
        "-----END OPENSSH ",
        "PRIVATE KEY-----\n",
    ]
    .concat()
}

fn diff(real: &Path, layer: &[(&str, &str)]) -> (Vec<Change>, TempDir) {
    let state = TempDir::new("cred-state");
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real))
        .expect("create sandbox");
    for (rel, content) in layer {
        let p = sb.upper().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    (sb.diff(&DiffOptions::default()).expect("diff"), state)
}

fn flag<'a>(changes: &'a [Change], path: &str) -> Option<&'a warden_workspace::Flag> {
    changes
        .iter()
        .find(|c| c.path == Path::new(path))
        .unwrap_or_else(|| panic!("no change for {path}"))
        .flags
        .iter()
        .find(|f| f.rule == "credential")
}

#[test]
fn a_file_that_gained_a_key_is_flagged_with_its_rule_and_line_but_not_its_value() {
    let real = TempDir::new("cred-real");
    fs::write(real.join("config.py"), "DEBUG = True\n").unwrap();
    let key = aws_key();
    let added = format!("DEBUG = True\nAWS_KEY = '{key}'\n");
    let pem = pem();
    let (changes, _state) = diff(
        real.path(),
        &[("config.py", &added), ("deploy/id_ed25519", &pem)],
    );
    let f = flag(&changes, "config.py").expect("config.py is flagged");
    assert!(
        f.reason.contains("aws-access-key-id (line 2)"),
        "{}",
        f.reason
    );
    assert_eq!(f.findings.len(), 1);
    assert_eq!(f.findings[0].hash, warden_detect::hash(key.as_bytes()));
    let k = flag(&changes, "deploy/id_ed25519").expect("the key file is flagged");
    assert!(k.reason.contains("private-key (line 1)"), "{}", k.reason);
    let json = serde_json::to_string(&changes).unwrap();
    assert!(json.contains("\"credential\""));
    // The patch is the reviewer's to read; the flags never repeat the value.
    let flags_json =
        serde_json::to_string(&changes.iter().map(|c| &c.flags).collect::<Vec<_>>()).unwrap();
    assert!(!flags_json.contains(&key), "{flags_json}");
    assert!(!flags_json.contains("b3BlbnNzaC1rZXkt"), "{flags_json}");
}

#[test]
fn a_key_already_in_the_real_file_does_not_flag_an_edit_around_it() {
    let real = TempDir::new("cred-real");
    let key = aws_key();
    fs::write(real.join("settings.ini"), format!("[aws]\nkey = {key}\n")).unwrap();
    let edited = format!("[aws]\nregion = eu-west-1\nkey = {key}\n");
    let (changes, _state) = diff(real.path(), &[("settings.ini", &edited)]);
    assert!(flag(&changes, "settings.ini").is_none());
    // A second copy of the same key is an addition.
    let twice = format!("{edited}backup = {key}\n");
    let (changes, _state) = diff(real.path(), &[("settings.ini", &twice)]);
    assert!(flag(&changes, "settings.ini").is_some());
}

#[test]
fn a_key_in_a_file_the_workspace_ignores_is_flagged_and_shown() {
    let real = TempDir::new("cred-real");
    fs::write(real.join(".gitignore"), ".env\n").unwrap();
    fs::create_dir(real.join(".git")).unwrap();
    let env = ["STRIPE=sk_live_", "4eC39HqLyjWDarjtT1zdp7dc\n"].concat();
    let (changes, _state) = diff(real.path(), &[(".env", &env), ("notes.txt", "nothing\n")]);
    assert!(flag(&changes, ".env").is_some());
    let env_change = changes
        .iter()
        .find(|c| c.path == Path::new(".env"))
        .unwrap();
    assert!(!env_change.ignored, "a flagged change is never left out");
    assert!(flag(&changes, "notes.txt").is_none());
}

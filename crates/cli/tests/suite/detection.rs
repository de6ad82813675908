//! Credential-shaped strings in what an agent produces, through the real
//! command: a commit of a file that gained a key is refused until it is
//! accepted, and a token typed on a command line never reaches the audit
//! log. Values are assembled at run time, so this file is no finding of a
//! scanner run over the repository.

use crate::common::*;

fn aws_key() -> String {
    ["AKIA", "IOSFODNN7EXAMPLE"].concat()
}

fn private_key() -> String {
    [
        "-----BEGIN RSA ",
        "PRIVATE KEY-----\n",
        "MIIEowIBAAKCAQEAvZ9u3cL0rIkqK5s0pP0VsXqSxJ8xHj0Z2d4t6vYQ1b2c3d4e\n",
        "f5g6h7i8j9k0l1m2n3o4p5q6r7s8t9u0v1w2x3y4z5A6B7C8D9E0F1G2H3I4J5K6\n",
        "-----END RSA ",
        "PRIVATE KEY-----\n",
    ]
    .concat()
}

#[test]
fn a_commit_of_files_that_gained_a_key_is_refused_until_accepted() {
    let state = TempDir::new("detect-state");
    let proj = TempDir::new("detect-proj");
    std::fs::write(proj.path().join("config.py"), "DEBUG = True\n").unwrap();
    ok(&warden(state.path(), &["create", "k", "-w", proj.str()]));
    // The sandbox writes the key files; the script builds them from pieces
    // held in its environment, so the command line itself holds neither.
    let script = "printf 'DEBUG = True\\nAWS_KEY = \"%s\"\\n' \"$K\" > config.py && mkdir -p deploy && printf '%s' \"$P\" > deploy/id_rsa && echo notes > notes.txt";
    let out = warden(
        state.path(),
        &[
            "exec",
            "k",
            "--no-tty",
            "--env",
            &format!("K={}", aws_key()),
            "--env",
            &format!("P={}", private_key()),
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    ok(&out);
    ok(&warden(state.path(), &["stop", "k"]));
    let diff = ok(&warden(state.path(), &["diff", "k", "--color", "never"]));
    assert!(
        diff.contains(
            "! credential: a credential-shaped string was added: aws-access-key-id (line 2)"
        ),
        "{diff}"
    );
    assert!(diff.contains("private-key (line 1)"), "{diff}");
    // The JSON says which rules and where, with a hash: never the value in
    // a flag.
    let json: serde_json::Value =
        serde_json::from_str(&ok(&warden(state.path(), &["diff", "k", "--json"]))).unwrap();
    let flags: Vec<&serde_json::Value> = json
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["flags"].as_array().unwrap().iter())
        .collect();
    let credential: Vec<_> = flags.iter().filter(|f| f["rule"] == "credential").collect();
    assert_eq!(credential.len(), 2, "{flags:?}");
    let flags_text = serde_json::to_string(&flags).unwrap();
    assert!(!flags_text.contains(&aws_key()), "{flags_text}");
    assert!(!flags_text.contains("MIIEowIBAAKCAQEA"), "{flags_text}");
    assert!(flags_text.contains("\"hash\""), "{flags_text}");

    let out = warden(state.path(), &["commit", "k"]);
    assert_eq!(code(&out), 125, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("--accept-flagged"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(proj.path().join("config.py")).unwrap(),
        "DEBUG = True\n"
    );
    assert!(!proj.path().join("deploy/id_rsa").exists());
    // The unflagged change alone goes in by name; the rest waits.
    ok(&warden(state.path(), &["commit", "k", "notes.txt"]));
    assert!(proj.path().join("notes.txt").exists());
    assert!(!proj.path().join("deploy/id_rsa").exists());
    // Accepted, it is applied.
    ok(&warden(state.path(), &["commit", "k", "--accept-flagged"]));
    assert!(std::fs::read_to_string(proj.path().join("config.py"))
        .unwrap()
        .contains(&aws_key()));
    assert!(proj.path().join("deploy/id_rsa").exists());
    // The audit log holds the refusal and the commit, never the values.
    let log = std::fs::read_to_string(sandbox_dir(state.path(), "k").join("audit.jsonl")).unwrap();
    assert!(!log.contains(&aws_key()), "{log}");
    assert!(!log.contains("MIIEowIBAAKCAQEA"), "{log}");
}

#[test]
fn an_execs_bearer_token_leaves_no_trace_in_the_audit_log() {
    let state = TempDir::new("detect-exec-state");
    let proj = TempDir::new("detect-exec-proj");
    ok(&warden(state.path(), &["create", "t", "-w", proj.str()]));
    let token = ["q8Xz2LmN4vB7", "cK1pR9sT3wY6", "Zt5Hj"].concat();
    let header = format!("Authorization: Bearer {token}");
    // The command runs (the token is the agent's to use); only the record
    // of it is redacted.
    let out = warden(
        state.path(),
        &[
            "exec",
            "t",
            "--no-tty",
            "--",
            "sh",
            "-c",
            "echo \"$1\" > seen",
            "sh",
            &header,
        ],
    );
    ok(&out);
    let out = warden(
        state.path(),
        &[
            "exec",
            "t",
            "--no-tty",
            "--",
            "true",
            "--password",
            "hunter2-not-logged",
        ],
    );
    ok(&out);
    ok(&warden(state.path(), &["stop", "t"]));
    let log = std::fs::read_to_string(sandbox_dir(state.path(), "t").join("audit.jsonl")).unwrap();
    assert!(log.contains("exec_started"), "{log}");
    assert!(!log.contains(&token), "the token is in the log:\n{log}");
    assert!(!log.contains("hunter2-not-logged"), "{log}");
    assert!(log.contains("Bearer [REDACTED:authorization]"), "{log}");
    // The log still verifies, and `warden logs` shows it redacted.
    let logs = ok(&warden(state.path(), &["logs", "t"]));
    assert!(!logs.contains(&token), "{logs}");
}

//! Secrets typed on a command line sent to the daemon never reach the
//! audit log, whatever the command line's shape: the API's `shell`
//! (`sh -c`), the E2B door's `bash -l -c`, an argv with compound options,
//! short forms and secret-named assignments. The commands run as sent;
//! only their record is redacted.

use crate::common::daemon::*;
use crate::common::*;

#[test]
fn secrets_in_shell_strings_and_argvs_sent_to_the_daemon_never_reach_the_audit_log() {
    let Some((state, d)) = on_socket("redact-daemon") else {
        return;
    };
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"sa"}"#), None);
    assert_eq!(s, 201, "{b}");
    // Each value is one the text rules alone let through (low entropy,
    // no provider's shape).
    let shell = "true mysql --password hunter2 ; true curl -u alice:Hunter2Pass; \
                 true PGPASSWORD=pw1xyz; true sshpass -p Plain1Pass; true mysql -pS3cr3tPw; echo ran";
    let bodies = [
        serde_json::json!({ "shell": shell }),
        // What the E2B SDK's commands.run sends.
        serde_json::json!({ "argv": ["/bin/bash", "-l", "-c", "true --db-password 'hunter2 b' && API_KEY=k1xyz echo ran"] }),
        // A tool's short forms apply where it is named (`xargs curl -u`).
        serde_json::json!({ "argv": ["true", "--password", "-dash1Secret", "curl", "-u", "alice:Hunter2Pass",
            "--passwd=", "X9secretvalue", "--db-password", "Zz9TopSecretX", "--PASSWORD", "hunter3"] }),
    ];
    for body in &bodies {
        let (s, b) = call(
            &d,
            "POST",
            "/v1/sandboxes/sa/exec",
            Some(&body.to_string()),
            None,
        );
        assert_eq!(s, 200, "{b}");
        // The command ran as sent.
        assert_eq!(json(&b)["exit_status"].as_i64(), Some(0), "{body} {b}");
    }
    let (s, b) = call(&d, "POST", "/v1/sandboxes/sa/stop", None, None);
    assert_eq!(s, 200, "{b}");
    let log = std::fs::read_to_string(sandbox_dir(state.path(), "sa").join("audit.jsonl"))
        .unwrap_or_default();
    assert!(log.matches("exec_started").count() >= 3, "{log}");
    for secret in [
        "hunter2",
        "Hunter2Pass",
        "pw1xyz",
        "Plain1Pass",
        "S3cr3tPw",
        "k1xyz",
        "dash1Secret",
        "X9secretvalue",
        "Zz9TopSecretX",
        "hunter3",
    ] {
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
    }
    // What is kept reads as typed.
    assert!(
        log.contains("true mysql --password [REDACTED:secret-option] ;"),
        "{log}"
    );
    assert!(
        log.contains("PGPASSWORD=[REDACTED:secret-variable]"),
        "{log}"
    );
    let (s, _) = call(&d, "DELETE", "/v1/sandboxes/sa", None, None);
    assert_eq!(s, 204);
}

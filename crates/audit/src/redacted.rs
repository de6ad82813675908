//! What warden records never holds a credential an agent typed: command
//! lines and free-text details of events pass through `warden-detect`'s
//! redaction on their way out (every sink that writes an event serializes
//! it: the JSON lines, the hash-chained log, OTLP, the control socket that
//! feeds `warden logs -f`, the API's event stream and the dashboard) and
//! on their way back in (a log written before redaction existed is shown
//! redacted all the same). A value becomes `[REDACTED:rule]`.
//!
//! Redaction is idempotent, so an event read back and written again is
//! the same bytes, and a hash-chained record (whose hash covers its bytes
//! as written) verifies as it was written.

/// `#[serde(with)]` for a command line (`Vec<String>`).
pub(crate) mod argv {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(argv: &[String], s: S) -> Result<S::Ok, S::Error> {
        warden_detect::redact_argv(argv).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        Ok(warden_detect::redact_argv(&Vec::<String>::deserialize(d)?))
    }
}

/// `#[serde(with)]` for a free-text detail (`String`).
pub(crate) mod text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&warden_detect::redact(text))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let text = String::deserialize(d)?;
        Ok(warden_detect::redact(&text).into_owned())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use crate::chain::ChainedLog;
    use crate::{Event, EventKind, EventSink};

    fn token() -> String {
        ["q8Xz2LmN4vB7", "cK1pR9sT3wY6"].concat()
    }

    #[test]
    fn a_bearer_token_on_a_command_line_never_reaches_the_log_file() {
        let dir = std::env::temp_dir().join(format!("warden-redact-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let _ = std::fs::remove_file(&path);
        let argv: Vec<String> = [
            "curl",
            "-H",
            &format!("Authorization: Bearer {}", token()),
            "--password",
            "hunter2",
            "https://api.example.com/",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        {
            let mut log = ChainedLog::open(&path).unwrap();
            log.emit(&Event::now(
                "s",
                EventKind::ExecStarted {
                    exec: 1,
                    argv: argv.clone(),
                    pid: 2,
                    tty: false,
                },
            ));
            log.emit(&Event::now(
                "s",
                EventKind::Created {
                    command: argv,
                    workspace: None,
                    rootless: true,
                    cgroup: None,
                },
            ));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&token()), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("Bearer [REDACTED:authorization]"), "{text}");
        // What was written verifies as written, and reads back the same.
        assert!(matches!(
            crate::chain::verify(&path).unwrap(),
            crate::chain::Verdict::Intact { records: 2, .. }
        ));
        let line = text.lines().next().unwrap();
        let back = crate::chain::Record::parse(line).unwrap();
        let again = serde_json::to_string(&back.event).unwrap();
        assert!(line.contains(&again[1..again.len() - 1]), "{line}\n{again}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_password_inside_a_shell_string_never_reaches_the_log_and_the_record_verifies() {
        let dir = std::env::temp_dir().join(format!("warden-redact-sh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let _ = std::fs::remove_file(&path);
        // What the E2B door's commands.run records.
        let argv: Vec<String> = [
            "/bin/bash",
            "-l",
            "-c",
            "mysql --password hunter2 db && PGPASSWORD=pw1xyz psql -c 'select 1'",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        {
            let mut log = ChainedLog::open(&path).unwrap();
            log.emit(&Event::now(
                "s",
                EventKind::ExecStarted {
                    exec: 1,
                    argv,
                    pid: 2,
                    tty: false,
                },
            ));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("pw1xyz"),
            "{text}"
        );
        assert!(
            text.contains("mysql --password [REDACTED:secret-option] db && PGPASSWORD=[REDACTED:secret-variable] psql -c 'select 1'"),
            "{text}"
        );
        assert!(matches!(
            crate::chain::verify(&path).unwrap(),
            crate::chain::Verdict::Intact { records: 1, .. }
        ));
        let line = text.lines().next().unwrap();
        let back = crate::chain::Record::parse(line).unwrap();
        let again = serde_json::to_string(&back.event).unwrap();
        assert!(line.contains(&again[1..again.len() - 1]), "{line}\n{again}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_old_record_holding_a_token_is_read_back_redacted() {
        let old = format!(
            r#"{{"ts_ms":1,"sandbox":"s","event":"exec_started","exec":1,"argv":["sh","-c","curl -H 'Authorization: Bearer {}'"],"pid":2,"tty":false}}"#,
            token()
        );
        let e: Event = serde_json::from_str(&old).unwrap();
        let EventKind::ExecStarted { argv, .. } = e.kind else {
            panic!("{e:?}");
        };
        assert!(!argv[2].contains(&token()), "{argv:?}");
    }
}

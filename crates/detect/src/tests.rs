//! Each rule both ways: a value of its shape is found, and a near miss
//! (the shape one step off, or what a project holds that only looks like
//! it) is not. Credential-shaped strings are assembled at run time, so
//! this file is no finding of a scanner run over the repository.

use super::*;

fn ids(text: &str) -> Vec<String> {
    scan(text.as_bytes()).into_iter().map(|f| f.rule).collect()
}

fn found(rule: &str, text: &str) {
    assert_eq!(ids(text), vec![rule.to_string()], "{rule} in {text:?}");
}

fn missed(text: &str) {
    assert!(
        ids(text).is_empty(),
        "nothing in {text:?}, found {:?}",
        ids(text)
    );
}

fn j(parts: &[&str]) -> String {
    parts.concat()
}

#[test]
fn every_rule_compiles_and_has_a_unique_id() {
    // Each rule compiles: engine.rs.
    let mut seen = std::collections::BTreeSet::new();
    for r in RULES {
        assert!(seen.insert(r.id), "{} twice", r.id);
        assert!(!r.reason.is_empty());
    }
}

#[test]
fn private_key_blocks_are_found_and_public_keys_are_not() {
    let body = "MIIEowIBAAKCAQEAvZ9u3cL0rIkqK5s0pP0VsXqSxJ8xHj0Z2d4t6vYQ1b2c3d4e\nf5g6h7i8j9k0l1m2n3o4p5q6r7s8t9u0v1w2x3y4z5A6B7C8D9E0F1G2H3I4J5K6\n";
    let head = j(&["-----BEGIN RSA ", "PRIVATE KEY-----\n"]);
    let tail = j(&["-----END RSA ", "PRIVATE KEY-----\n"]);
    let block = format!("x = 1\n{head}{body}{tail}y = 2\n");
    let f = scan(block.as_bytes());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].rule, "private-key");
    let value = &block.as_bytes()[f[0].offset as usize..(f[0].offset + f[0].len) as usize];
    assert!(value.starts_with(b"-----BEGIN") && value.ends_with(b"KEY-----"));
    // An OpenSSH key and a block cut before its end.
    found(
        "private-key",
        &format!(
            "{}{body}",
            j(&["-----BEGIN OPENSSH ", "PRIVATE KEY-----\n"])
        ),
    );
    // Near misses: a public key, a header in prose.
    missed(&format!(
        "-----BEGIN PUBLIC KEY-----\n{body}-----END PUBLIC KEY-----\n"
    ));
    missed(&j(&[
        "the file starts with -----BEGIN ",
        "PRIVATE KEY----- and then ...",
    ]));
}

#[test]
fn aws_access_key_ids_are_found_by_prefix_and_length() {
    found("aws-access-key-id", &j(&["key=AKIA", "IOSFODNN7EXAMPLE"]));
    found("aws-access-key-id", &j(&["ASIA", "Y34FZKBOKMUTVV7A"]));
    missed(&j(&["AKIA", "IOSFODNN7EXAMPL"])); // one short
    missed(&j(&["XKIA", "IOSFODNN7EXAMPLE"])); // no such prefix
    missed(&j(&["AKIA", "IOSFODNN7EXAMPLE1"])); // one long: no boundary
}

#[test]
fn aws_secret_keys_are_found_by_their_name() {
    let secret = j(&["wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY"]);
    found(
        "aws-secret-access-key",
        &format!("aws_secret_access_key = {secret}"),
    );
    found(
        "aws-secret-access-key",
        &format!("AWS_SECRET_ACCESS_KEY=\"{secret}\""),
    );
    // 39 characters under the name are no AWS key (at most a generic
    // secret), and a variable is nothing.
    let short = format!("aws_secret_access_key = {}", &secret[..39]);
    assert!(!ids(&short).contains(&"aws-secret-access-key".to_string()));
    missed("aws_secret_access_key = ${AWS_SECRET}");
}

#[test]
fn github_tokens_are_found_by_prefix() {
    found(
        "github-token",
        &j(&["ghp_", "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"]),
    );
    found(
        "github-token",
        &j(&["token: gho_", "16C7e42F292c6912E7710c838347Ae178B4a"]),
    );
    found(
        "github-fine-grained-token",
        &j(&[
            "github_pat_",
            "11ABCDEFG0123456789ab_",
            &"x1Y2z3".repeat(10),
        ]),
    );
    missed(&j(&["ghp_", "1a2B3c4D5e6F7g8H9i0J"])); // too short
    missed(&j(&["ghx_", "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"])); // no such kind
}

#[test]
fn gitlab_tokens_are_found_by_prefix() {
    found("gitlab-token", &j(&["glpat-", "xK9fQ2mZ7bN4vL1pR8sT"]));
    found("gitlab-token", &j(&["glrt-", "aB3dE5fG7hJ9kL1mN3pQ"]));
    missed(&j(&["glpat-", "xK9fQ2mZ7b"]));
}

#[test]
fn slack_tokens_and_webhooks_are_found() {
    found(
        "slack-token",
        &j(&[
            "xoxb-",
            "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        ]),
    );
    found(
        "slack-webhook",
        &j(&[
            "https://hooks.slack.com/services/",
            "T01ABCDEFGH/B01ABCDEFGH/aBcDeFgHiJkLmNoPqRsTuVwX",
        ]),
    );
    missed("xoxb-your-token-here");
    missed("https://hooks.slack.com/services/T000/B000/short");
}

#[test]
fn stripe_secret_keys_are_found_and_publishable_keys_are_not() {
    found("stripe-key", &j(&["sk_live_", "4eC39HqLyjWDarjtT1zdp7dc"]));
    found(
        "stripe-key",
        &j(&["rk_test_", "51H8sKpLyjWDarjtT1zdp7dcXy"]),
    );
    missed(&j(&["pk_live_", "4eC39HqLyjWDarjtT1zdp7dc"]));
    missed(&j(&["sk_live_", "4eC39Hq"]));
}

#[test]
fn google_api_keys_are_found() {
    found(
        "google-api-key",
        &j(&["AIza", "SyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"]),
    );
    missed(&j(&["AIza", "SyDdI0hCZtE6vySjMm"]));
}

#[test]
fn jwts_are_found_and_a_lone_header_is_not() {
    let jwt = j(&[
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0.",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ]);
    found("jwt", &format!("cookie={jwt};"));
    missed("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9");
    missed("eyes.eyebrows.eyelids");
}

#[test]
fn bearer_tokens_are_found_and_variables_or_filler_are_not() {
    found(
        "authorization",
        &j(&[
            "curl -H 'Authorization: Bearer ",
            "q8Xz2LmN4vB7cK1pR9sT3wY6'",
        ]),
    );
    found(
        "authorization",
        &j(&["Authorization: token ", "0b5e2f7c9a1d3e4f6a8b"]),
    );
    missed("curl -H \"Authorization: Bearer $TOKEN\"");
    missed("Authorization: Bearer xxxxxxxxxxxxxxxxxxxxxxxx");
    missed("a bearer of bad news");
}

#[test]
fn passwords_in_urls_are_found_and_users_alone_are_not() {
    found(
        "url-password",
        &j(&[
            "git clone https://alice:",
            "s3cr3tPass@git.example.com/r.git",
        ]),
    );
    missed("https://alice@git.example.com/r.git");
    missed("http://localhost:8080/path");
    missed("https://alice:$PASSWORD@git.example.com");
}

#[test]
fn high_entropy_assignments_are_found_and_plain_words_are_not() {
    found("generic-secret", &j(&["DB_PASSWORD=", "Xk29fLq0zPw7"]));
    found(
        "generic-secret",
        &j(&["api_key: \"", "9f8e7d6c5b4a3f2e1d0c\""]),
    );
    found(
        "generic-secret",
        &j(&["\"client_secret\": \"", "Zq7Wx3Ve9Rt1Yu5Io2\""]),
    );
    missed("password = \"changeme\"");
    missed("token = os.environ[\"TOKEN\"]");
    missed("password: ${DB_PASSWORD}");
    missed("secret_santa = true");
    missed("tokens: 12345678");
}

#[test]
fn the_sandboxs_placeholders_are_never_findings() {
    let ph = format!("{PLACEHOLDER_PREFIX}0123456789abcdef0123456789abcdef");
    missed(&format!("Authorization: Bearer {ph}"));
    missed(&format!("API_KEY={ph}"));
    missed(&format!("https://bot:{ph}@api.example.com/"));
}

#[test]
fn a_finding_holds_a_hash_and_a_place_never_the_value() {
    let key = j(&["AKIA", "IOSFODNN7EXAMPLE"]);
    let text = format!("one\ntwo {key}\n");
    let f = &scan(text.as_bytes())[0];
    assert_eq!(f.offset, 8);
    assert_eq!(f.len, 20);
    assert_eq!(f.line, 2);
    assert_eq!(f.hash, hash(key.as_bytes()));
    let json = serde_json::to_string(f).unwrap_or_default();
    assert!(!json.contains(&key), "{json}");
}

#[test]
fn redaction_replaces_values_keeps_the_rest_and_is_idempotent() {
    let token = j(&["ghp_", "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"]);
    let bearer = j(&["q8Xz2LmN4vB7", "cK1pR9sT3wY6"]);
    let text = format!("push {token} with Authorization: Bearer {bearer} ok");
    let once = redact(&text).into_owned();
    assert_eq!(
        once,
        "push [REDACTED:github-token] with Authorization: Bearer [REDACTED:authorization] ok"
    );
    assert_eq!(redact(&once), once);
    assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
    // Multi-byte text around a value stays whole.
    let t = format!("é{token}ü");
    assert_eq!(redact(&t), "é[REDACTED:github-token]ü");
}

#[test]
fn command_lines_lose_secret_options_whatever_their_value() {
    let argv: Vec<String> = [
        "mysql",
        "--password",
        "hunter2",
        "--user=me",
        "--token=abc",
        "-p",
        "x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        redact_argv(&argv),
        [
            "mysql",
            "--password",
            "[REDACTED:secret-option]",
            "--user=me",
            "--token=[REDACTED:secret-option]",
            "-p",
            "x"
        ]
    );
    assert_eq!(
        redact_env("DB_PASSWORD", "hunter2"),
        "[REDACTED:secret-variable]"
    );
    assert_eq!(redact_env("HOME", "/home/a"), "/home/a");
}

#[test]
fn a_stream_read_in_pieces_finds_a_value_across_their_edge_once() {
    let key = j(&["AKIA", "IOSFODNN7EXAMPLE"]);
    let mut text = b".\n".repeat(OVERLAP * 3 / 2);
    text.extend_from_slice(format!(" {key} ").as_bytes());
    text.extend(vec![b'.'; 100]);
    let whole = scan(&text);
    for piece in [997, 4096, OVERLAP, OVERLAP + 3, CHUNK] {
        let mut s = Scanner::new();
        for chunk in text.chunks(piece) {
            s.feed(chunk);
        }
        assert_eq!(s.finish(), whole, "pieces of {piece}");
    }
}

#[test]
fn redacting_a_typical_command_line_takes_microseconds() {
    // What `warden run` pays per recorded command line; printed so a change
    // can be compared (`cargo test --release -p warden-detect -- --nocapture
    // microseconds`). The bound only catches a gross regression.
    let argv: Vec<String> = [
        "python3",
        "-m",
        "pytest",
        "-q",
        "tests/test_api.py",
        "-k",
        "login",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let shell: Vec<String> = [
        "/bin/bash",
        "-l",
        "-c",
        "cd /work && make test V=1 | tee log.txt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let _ = redact_argv(&argv);
    let _ = redact_argv(&shell);
    for (what, cmd) in [("argv", &argv), ("shell", &shell)] {
        let n = 10_000u32;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(redact_argv(std::hint::black_box(cmd)));
        }
        let each = t.elapsed() / n;
        println!("redact_argv({what}): {} ns", each.as_nanos());
        assert!(each < std::time::Duration::from_millis(1), "{each:?}");
    }
}

//! Command lines: each form that hands a secret over is redacted, in an
//! argv and inside a shell string, and each near miss stays as typed.
//! Redaction is idempotent on every row.

use super::*;

fn v(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// `argv` redacts to `want`, and redacting that again changes nothing.
fn argv_case(argv: &[&str], want: &[&str]) {
    let once = redact_argv(&v(argv));
    assert_eq!(once, v(want), "{argv:?}");
    assert_eq!(redact_argv(&once), once, "twice: {argv:?}");
}

/// The shell string `script` (run as `bash -l -c`, the E2B door's form,
/// and as `sh -c`) redacts to `want`.
fn shell_case(script: &str, want: &str) {
    for prefix in [&["/bin/bash", "-l", "-c"][..], &["sh", "-c"][..]] {
        let mut argv = v(prefix);
        argv.push(script.to_string());
        let once = redact_argv(&argv);
        assert_eq!(once[prefix.len()], want, "{prefix:?} {script:?}");
        assert_eq!(&once[..prefix.len()], &argv[..prefix.len()]);
        assert_eq!(redact_argv(&once), once, "twice: {script:?}");
    }
}

const O: &str = "[REDACTED:secret-option]";
const V: &str = "[REDACTED:secret-variable]";

#[test]
fn the_reviewed_argv_forms_lose_their_secret() {
    argv_case(
        &["true", "--password", "-dash1Secret"],
        &["true", "--password", O],
    );
    argv_case(
        &["curl", "-u", "alice:Hunter2Pass", "https://x.example/"],
        &["curl", "-u", &format!("alice:{O}"), "https://x.example/"],
    );
    argv_case(&["curl", "-ualice:pw"], &["curl", &format!("-ualice:{O}")]);
    argv_case(
        &["curl", "--user=alice:pw", "--proxy-user", "bob:pw2"],
        &[
            "curl",
            &format!("--user=alice:{O}"),
            "--proxy-user",
            &format!("bob:{O}"),
        ],
    );
    argv_case(&["x", "--passwd=", "X9secretvalue"], &["x", "--passwd=", O]);
    argv_case(
        &["x", "--db-password", "Zz9Top"],
        &["x", "--db-password", O],
    );
    argv_case(&["x", "--PASSWORD", "hunter3"], &["x", "--PASSWORD", O]);
    for opt in [
        "--api-key",
        "--client-secret",
        "--auth-token",
        "--registry-token",
        "--github-token",
        "--mysql-password",
        "--apikey",
        "--pass",
    ] {
        argv_case(&["x", opt, "v1"], &["x", opt, O]);
        argv_case(&["x", &format!("{opt}=v1")], &["x", &format!("{opt}={O}")]);
    }
    argv_case(
        &["mysql", "-uroot", "-pS3cr3tPw", "db"],
        &["mysql", "-uroot", &format!("-p{O}"), "db"],
    );
    argv_case(
        &["/usr/bin/mysqldump", "-ppw"],
        &["/usr/bin/mysqldump", &format!("-p{O}")],
    );
    argv_case(
        &["sshpass", "-p", "Plain1Pass", "ssh", "h"],
        &["sshpass", "-p", O, "ssh", "h"],
    );
    argv_case(
        &["sshpass", "-pPlain1Pass", "ssh"],
        &["sshpass", &format!("-p{O}"), "ssh"],
    );
    argv_case(
        &["redis-cli", "-a", "pw", "ping"],
        &["redis-cli", "-a", O, "ping"],
    );
    argv_case(
        &["http", "-a", "u:pw", "x.example"],
        &["http", "-a", &format!("u:{O}"), "x.example"],
    );
    argv_case(
        &["java", "-Dspring.datasource.password=pw", "-jar", "a.jar"],
        &[
            "java",
            &format!("-Dspring.datasource.password={O}"),
            "-jar",
            "a.jar",
        ],
    );
}

#[test]
fn secret_named_assignments_lose_their_value_whatever_its_entropy() {
    argv_case(
        &["env", "PGPASSWORD=pw1xyz", "psql"],
        &["env", &format!("PGPASSWORD={V}"), "psql"],
    );
    argv_case(
        &["env", "-i", "API_KEY=a", "NPM_TOKEN=b", "HOME=/h", "npm"],
        &[
            "env",
            "-i",
            &format!("API_KEY={V}"),
            &format!("NPM_TOKEN={V}"),
            "HOME=/h",
            "npm",
        ],
    );
    argv_case(
        &["make", "DB_PASSWORD=x", "V=1"],
        &["make", &format!("DB_PASSWORD={V}"), "V=1"],
    );
    argv_case(
        &[
            "docker",
            "run",
            "-e",
            "MYSQL_PWD=x",
            "--env=OPENAI_API_KEY=k",
            "img",
        ],
        &[
            "docker",
            "run",
            "-e",
            &format!("MYSQL_PWD={V}"),
            &format!("--env=OPENAI_API_KEY={V}"),
            "img",
        ],
    );
    argv_case(
        &[
            "x",
            "AWS_SECRET_ACCESS_KEY=abc",
            "PRIVATE_KEY=k",
            "GOOGLE_CREDENTIALS=c",
        ],
        &[
            "x",
            &format!("AWS_SECRET_ACCESS_KEY={V}"),
            &format!("PRIVATE_KEY={V}"),
            &format!("GOOGLE_CREDENTIALS={V}"),
        ],
    );
    assert_eq!(redact_env("PGPASSWORD", "pw1xyz"), V);
    assert_eq!(redact_env("PWD", "/work"), "/work");
    assert_eq!(redact_env("OLDPWD", "/work"), "/work");
}

#[test]
fn the_same_forms_inside_a_shell_string_lose_their_secret_and_the_rest_reads_as_typed() {
    shell_case(
        "true mysql --password hunter2 ; true curl -u alice:Hunter2Pass; true PGPASSWORD=pw1xyz; true sshpass -p Plain1Pass; true mysql -pS3cr3tPw",
        &format!("true mysql --password {O} ; true curl -u alice:{O}; true PGPASSWORD={V}; true sshpass -p {O}; true mysql -p{O}"),
    );
    shell_case(
        "mysql --password hunter2 && curl -u alice:pw https://x/ | sshpass -p pw ssh h; mysql -ppw db",
        &format!("mysql --password {O} && curl -u alice:{O} https://x/ | sshpass -p {O} ssh h; mysql -p{O} db"),
    );
    shell_case(
        "PGPASSWORD=pw1xyz psql -h db",
        &format!("PGPASSWORD={V} psql -h db"),
    );
    shell_case(
        "env API_KEY=k python3 a.py",
        &format!("env API_KEY={V} python3 a.py"),
    );
    shell_case(
        "cd /w && ./tool --db-password 'two words' --x",
        &format!("cd /w && ./tool --db-password {O} --x"),
    );
    shell_case("tool --token=\"a b\"", &format!("tool --token={O}"));
    shell_case(
        "tool --passwd= -x1 next",
        &format!("tool --passwd= {O} next"),
    );
    shell_case(
        "echo $(mysql --password pw)",
        &format!("echo $(mysql --password {O})"),
    );
    shell_case(
        "git clone https://user:pw@git.example/r.git",
        "git clone https://user:[REDACTED:url-password]@git.example/r.git",
    );
    shell_case(
        "psql postgresql://app:pw@db/app",
        "psql postgresql://app:[REDACTED:url-password]@db/app",
    );
    // Nested shells.
    shell_case(
        "sh -c 'mysql --password hunter2'",
        &format!("sh -c 'mysql --password {O}'"),
    );
    shell_case(
        "docker exec db sh -c \"mysql -ppw\"; ssh h redis-cli -a pw; xargs curl -u a:b",
        &format!("docker exec db sh -c 'mysql -p{O}'; ssh h redis-cli -a {O}; xargs curl -u a:{O}"),
    );
    // An open quote: the open word runs to the end and goes whole.
    shell_case(
        "tool --password 'hunter2 and more",
        &format!("tool --password {O}"),
    );
    // Multi-byte text around a value stays whole.
    shell_case(
        "echo é; tool --password hunter2 ü",
        &format!("echo é; tool --password {O} ü"),
    );
}

#[test]
fn near_misses_stay_as_typed() {
    for argv in [
        &["ls", "-p", "/tmp"][..],
        &["grep", "-u", "x", "f"],
        &["mysql", "-p", "db"],
        &["curl", "-u", "alice", "https://x/"],
        &["x", "--password-file", "/run/secrets/pw"],
        &["x", "--token-path", "/t"],
        &["docker", "login", "--password-stdin", "-u", "me"],
        &["psql", "--no-password", "db"],
        &["x", "--max-tokens", "100"],
        &["tar", "-cpf", "a.tar", "dir"],
        &["ssh", "-p", "22", "host"],
        &["env", "HOME=/h", "PWD=/w", "BYPASS=1", "x"],
        &["x", "--bypass", "y"],
        &["x", "--password"],
        &[
            "x",
            "--password=warden-secret-0123456789abcdef0123456789abcdef",
        ],
    ] {
        argv_case(argv, argv);
    }
    for script in [
        "ls -p /tmp; grep -u x f",
        "mysql -p db",
        "x --password-file /run/pw && cat /run/pw",
        "echo password hunter2",
        "cd /work && make test V=1 | tee log.txt",
        "tool --password ; ls",
        "# --password hunter2\nls",
    ] {
        shell_case(script, script);
    }
}

#[test]
fn any_mix_of_words_quotes_and_operators_redacts_without_panic_and_idempotently() {
    // A fixed pseudo-random walk over the pieces the rules look at: no
    // input panics, and a record read back serializes to the same bytes.
    let pieces = [
        " ",
        "\t",
        "\n",
        ";",
        "&&",
        "|",
        "(",
        ")",
        "`",
        "$(",
        "'",
        "\"",
        "\\",
        "#",
        "=",
        ":",
        "-",
        "--",
        "-p",
        "-u",
        "-a",
        "-c",
        "--password",
        "--passwd=",
        "--db-password",
        "PGPASSWORD=",
        "API_KEY",
        "pw1",
        "alice:",
        "hunter2",
        "é",
        "ü",
        "[REDACTED:x]",
        "curl",
        "mysql",
        "sshpass",
        "bash",
        "sh",
        "-lc",
        "env",
        "https://u:p@h/",
        "--user=",
        "warden-secret-",
        "-Dx.password=",
    ];
    let mut seed: u64 = 0x5eed;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as usize) % n
    };
    let mut changed = 0;
    for _ in 0..3000 {
        let mut script = String::new();
        for _ in 0..next(14) {
            script.push_str(pieces[next(pieces.len())]);
        }
        let mut argv: Vec<String> = Vec::new();
        for _ in 0..next(5) {
            argv.push(pieces[next(pieces.len())].to_string());
        }
        let at = next(argv.len() + 1);
        argv.insert(at, script.clone());
        for a in [argv, v(&["bash", "-l", "-c", &script])] {
            let once = redact_argv(&a);
            changed += usize::from(once != a);
            assert_eq!(redact_argv(&once), once, "{a:?}");
        }
    }
    // The walk reaches the rules, not only the words they pass over.
    assert!(changed > 500, "{changed}");
}

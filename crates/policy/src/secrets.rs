//! Secrets that never enter the sandbox (`--secret`): the sandbox gets a
//! placeholder in the variable, and the egress proxy puts the real value in
//! place of the placeholder only in requests to the secret's own hosts.
//!
//! This module parses and checks what a person wrote. It never reads a
//! value: the supervisor does that at run time, on the host side, once the
//! sandbox's processes exist.

use crate::error::{Problem, ResolveError};
use crate::fields::Field;
use crate::DomainRule;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the sandbox's trust bundle (the host's roots and warden's
/// per-sandbox authority) is found inside it.
pub const CA_BUNDLE_PATH: &str = "/run/warden/ca-bundle.crt";
/// Where the per-sandbox authority's certificate alone is found inside it.
pub const CA_CERT_PATH: &str = "/run/warden/ca.crt";

/// One secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    /// The variable that holds the placeholder inside the sandbox.
    pub name: String,
    pub source: SecretSource,
    /// The only destinations the real value is sent to.
    pub hosts: Vec<DomainRule>,
    /// Substitute in request bodies too, not only in headers and targets
    /// (`--secret-in-body NAME`).
    pub in_bodies: bool,
}

/// Where the supervisor reads a secret's value, on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecretSource {
    /// The host's environment variable of this name.
    Env(String),
    /// The contents of this file (one trailing newline dropped).
    File(PathBuf),
    /// The output of this program and arguments, run without a shell (one
    /// trailing newline dropped): the program's argv, element for element.
    Command(Vec<String>),
}

impl SecretSpec {
    /// Parse one `--secret` entry: `NAME@HOST[,HOST...]` (from the host's
    /// variable NAME), `NAME=env:OTHER@HOSTS`, `NAME=file:PATH@HOSTS` or
    /// `NAME=cmd:PROGRAM ARGS@HOSTS`.
    pub fn parse(entry: &str) -> Result<SecretSpec, ResolveError> {
        let bad = |why: String| {
            Field::Secret.invalid(Problem::BadSecret {
                entry: entry.to_string(),
                why,
            })
        };
        let (left, hosts) = entry.trim().rsplit_once('@').ok_or_else(|| {
            bad("it names no host; write NAME@HOST, e.g. GITHUB_TOKEN@api.github.com".into())
        })?;
        let (name, source) = match left.split_once('=') {
            None => (left.trim(), SecretSource::Env(left.trim().to_string())),
            Some((name, spec)) => {
                let source = if let Some(other) = spec.strip_prefix("env:") {
                    if !crate::env::valid_name(other) {
                        return Err(bad(format!("{other:?} is not a variable name")));
                    }
                    SecretSource::Env(other.to_string())
                } else if let Some(path) = spec.strip_prefix("file:") {
                    let path = PathBuf::from(path);
                    if !path.is_absolute() {
                        return Err(bad(format!(
                            "the file {} must be an absolute path",
                            path.display()
                        )));
                    }
                    SecretSource::File(path)
                } else if let Some(cmd) = spec.strip_prefix("cmd:") {
                    // Split as a POSIX shell splits words (quotes and
                    // backslashes), so `sh -c 'pass show x'` is three
                    // arguments; no shell runs and nothing is expanded.
                    let Some(argv) = shlex::split(cmd) else {
                        return Err(Field::Secret.invalid(Problem::UnsplitSecretProgram {
                            entry: entry.to_string(),
                        }));
                    };
                    if argv.is_empty() {
                        return Err(bad("cmd: names no program".into()));
                    }
                    // A relative program resolves against the working
                    // directory of whoever reads the profile (a daemon
                    // started from a project a token may write): refused.
                    // A bare name is looked up on the programs' own fixed
                    // search path.
                    if argv[0].contains('/') && !argv[0].starts_with('/') {
                        return Err(Field::Secret.invalid(Problem::RelativeSecretProgram {
                            name: left
                                .split_once('=')
                                .map_or(left, |(n, _)| n)
                                .trim()
                                .to_string(),
                            program: argv[0].clone(),
                        }));
                    }
                    SecretSource::Command(argv)
                } else {
                    return Err(bad(
                        "the source must be env:VARIABLE, file:PATH or cmd:PROGRAM ARGS".into(),
                    ));
                };
                (name.trim(), source)
            }
        };
        if !crate::env::valid_name(name) {
            return Err(bad(format!(
                "{name:?} is not a variable name (letters, digits and '_')"
            )));
        }
        let hosts = hosts
            .split(',')
            .map(|h| DomainRule::parse(h).map_err(|e| bad(format!("host {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SecretSpec {
            name: name.to_string(),
            source,
            hosts,
            in_bodies: false,
        })
    }

    /// The host variable the value comes from, when it comes from one: it
    /// must never be copied into the sandbox.
    pub fn source_variable(&self) -> Option<&str> {
        match &self.source {
            SecretSource::Env(v) => Some(v),
            _ => None,
        }
    }
}

/// An allow rule for requests on terminated hosts (`--secret-rule`): once a
/// host has rules, only requests that match one of them are sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRule {
    /// Upper case; `None` is any method.
    pub method: Option<String>,
    /// The host (and optionally port and subdomains) the rule is for.
    pub host: DomainRule,
    /// The path, `*` matching any run of characters (`/` included); the
    /// query is not part of it.
    pub path: String,
    /// The rule as written, for messages and events.
    pub source: String,
}

impl SecretRule {
    /// Parse `[METHOD ]HOST[/PATH]`, e.g. `GET api.github.com/repos/acme/*`.
    pub fn parse(entry: &str) -> Result<SecretRule, ResolveError> {
        let bad = |why: String| {
            Field::SecretRule.invalid(Problem::BadSecretRule {
                entry: entry.to_string(),
                why,
            })
        };
        let trimmed = entry.trim();
        let (method, rest) = match trimmed.split_once(char::is_whitespace) {
            Some((m, rest)) => {
                if m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic() || b == b'*') {
                    return Err(bad(format!("{m:?} is not an HTTP method")));
                }
                let m = m.to_ascii_uppercase();
                ((m != "*").then_some(m), rest.trim())
            }
            None => (None, trimmed),
        };
        let (host, path) = match rest.find('/') {
            Some(at) => (&rest[..at], rest[at..].to_string()),
            None => (rest, "/*".to_string()),
        };
        let host = DomainRule::parse(host).map_err(|e| bad(format!("host {e}")))?;
        Ok(SecretRule {
            method,
            host,
            path,
            source: trimmed.to_string(),
        })
    }

    /// Whether the rule is for `name` on `port`.
    pub fn is_for(&self, name: &str, port: u16) -> bool {
        let h = &self.host;
        let name_matches = name == h.name
            || (h.subdomains
                && name
                    .strip_suffix(h.name.as_str())
                    .is_some_and(|p| p.ends_with('.')));
        name_matches && h.port.filter(|p| *p != port).is_none()
    }

    /// Whether the rule allows `method` on `path` (query excluded).
    pub fn allows(&self, method: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .filter(|m| !m.eq_ignore_ascii_case(method))
            .is_none()
            && glob(self.path.as_bytes(), path.as_bytes())
    }
}

/// `*` matches any run of bytes; everything else matches itself.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob(rest, &text[i..])),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}

/// Parse every `--secret-rule`; each must be for a host of some secret
/// (only terminated connections show requests).
pub(crate) fn parse_rules(
    entries: &[String],
    secrets: &[SecretSpec],
) -> Result<Vec<SecretRule>, ResolveError> {
    let mut out = Vec::new();
    for e in entries {
        let r = SecretRule::parse(e)?;
        let covered = secrets.iter().any(|s| {
            s.hosts.iter().any(|h| {
                h.name == r.host.name
                    || (h.subdomains && r.host.name.ends_with(&format!(".{}", h.name)))
            })
        });
        if !covered {
            return Err(Field::SecretRule.invalid(Problem::BadSecretRule {
                entry: e.clone(),
                why: format!(
                    "{} is not among the hosts of `secrets` (requests are seen only on secrets' hosts)",
                    r.host.name
                ),
            }));
        }
        out.push(r);
    }
    Ok(out)
}

/// Parse every `--secret`, apply `--secret-in-body`, and check them against
/// the rest of the environment request.
pub(crate) fn parse_secrets(
    entries: &[String],
    in_body: &[String],
    env: &crate::EnvRequest,
) -> Result<Vec<SecretSpec>, ResolveError> {
    let mut out: Vec<SecretSpec> = Vec::new();
    for e in entries {
        let s = SecretSpec::parse(e)?;
        if out.iter().any(|o| o.name == s.name) {
            return Err(Field::Secret.invalid(Problem::DuplicateSecret(s.name)));
        }
        out.push(s);
    }
    for name in in_body {
        match out.iter_mut().find(|s| &s.name == name) {
            Some(s) => s.in_bodies = true,
            None => {
                return Err(Field::SecretInBody.invalid(Problem::UnknownSecretInBody(name.clone())))
            }
        }
    }
    for s in &out {
        let source = s.source_variable();
        for passed in &env.pass {
            if *passed == s.name || Some(passed.as_str()) == source {
                return Err(Field::PassEnv.invalid(Problem::SecretPassed(passed.clone())));
            }
        }
        for set in &env.set {
            if set.split_once('=').map(|(k, _)| k) == Some(s.name.as_str()) {
                return Err(Field::Env.invalid(Problem::SecretSet(s.name.clone())));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_form_parses() {
        let s = SecretSpec::parse("GITHUB_TOKEN@api.github.com,.githubusercontent.com").unwrap();
        assert_eq!(s.name, "GITHUB_TOKEN");
        assert_eq!(s.source, SecretSource::Env("GITHUB_TOKEN".into()));
        assert_eq!(s.hosts.len(), 2);
        assert!(s.hosts[1].subdomains);
        let s = SecretSpec::parse("T=env:OTHER@a.test").unwrap();
        assert_eq!(
            (s.name.as_str(), s.source),
            ("T", SecretSource::Env("OTHER".into()))
        );
        let s = SecretSpec::parse("T=file:/run/keys/t@a.test:8443").unwrap();
        assert_eq!(s.source, SecretSource::File("/run/keys/t".into()));
        assert_eq!(s.hosts[0].port, Some(8443));
        let s = SecretSpec::parse("T=cmd:pass show api/token@a.test").unwrap();
        assert_eq!(
            s.source,
            SecretSource::Command(vec!["pass".into(), "show".into(), "api/token".into()])
        );
    }

    #[test]
    fn a_secret_programs_line_is_split_into_words_as_a_shell_splits_them() {
        for (line, want) in [
            ("sh -c 'pass show x'", &["sh", "-c", "pass show x"][..]),
            (r#"sh -c "pass show x""#, &["sh", "-c", "pass show x"]),
            (r"pass show my\ key", &["pass", "show", "my key"]),
            (r#"printf '%s' "a'b" ''"#, &["printf", "%s", "a'b", ""]),
            ("echo 'x@y'", &["echo", "x@y"]),
        ] {
            let s = SecretSpec::parse(&format!("T=cmd:{line}@a.test")).unwrap();
            assert_eq!(
                s.source,
                SecretSource::Command(want.iter().map(|w| w.to_string()).collect()),
                "{line}"
            );
        }
    }

    #[test]
    fn a_secret_programs_line_with_an_open_quote_is_refused() {
        for line in ["sh -c 'pass show x", r#"sh -c "pass"#, r"pass show x\"] {
            let e = SecretSpec::parse(&format!("T=cmd:{line}@a.test")).unwrap_err();
            assert_eq!(e.problem().code(), "unsplit_secret_program", "{line}");
        }
    }

    #[test]
    fn a_relative_secret_program_is_refused_and_a_bare_name_or_absolute_path_is_kept() {
        for rel in [
            "T=cmd:tools/get-token.sh@a.test",
            "T=cmd:./get@a.test",
            "T=cmd:../x y@a.test",
        ] {
            let e = SecretSpec::parse(rel).unwrap_err();
            assert_eq!(e.problem().code(), "relative_secret_program", "{rel}");
        }
        assert!(SecretSpec::parse("T=cmd:pass show api/token@a.test").is_ok());
        assert!(SecretSpec::parse("T=cmd:/bin/sh tools/get.sh@a.test").is_ok());
    }

    #[test]
    fn malformed_secrets_are_refused_with_what_to_write() {
        for bad in [
            "TOKEN",
            "TOKEN@",
            "1TOKEN@a.test",
            "T=vault:x@a.test",
            "T=file:relative@a.test",
            "T=cmd:@a.test",
            "T@https://a.test",
            "T@10.0.0.1",
            "T=env:A-B@a.test",
        ] {
            let e = SecretSpec::parse(bad).unwrap_err();
            assert!(e.to_string().contains("--secret"), "{bad}: {e}");
        }
    }

    #[test]
    fn request_rules_match_method_host_and_path() {
        let r = SecretRule::parse("GET api.github.com/repos/acme/*").unwrap();
        assert!(r.is_for("api.github.com", 443));
        assert!(!r.is_for("github.com", 443));
        assert!(r.allows("GET", "/repos/acme/widget/pulls"));
        assert!(r.allows("get", "/repos/acme/"));
        assert!(!r.allows("POST", "/repos/acme/widget"));
        assert!(!r.allows("GET", "/repos/other/widget"));
        let any = SecretRule::parse(".example.com:8443").unwrap();
        assert!(any.is_for("a.example.com", 8443) && !any.is_for("a.example.com", 443));
        assert!(any.allows("DELETE", "/x"));
        for bad in ["GET /x", "G3T a.test/x", "GET https://a.test/x"] {
            assert!(SecretRule::parse(bad).is_err(), "{bad}");
        }
        let s = vec![SecretSpec::parse("T@api.github.com").unwrap()];
        assert!(parse_rules(&["GET api.github.com/*".into()], &s).is_ok());
        assert!(matches!(
            parse_rules(&["GET example.com/*".into()], &s).map_err(|e| e.problem().clone()),
            Err(Problem::BadSecretRule { .. })
        ));
    }

    #[test]
    fn a_secret_cannot_also_be_passed_or_set() {
        let env = crate::EnvRequest {
            set: vec![],
            pass: vec!["TOKEN".into()],
        };
        assert_eq!(
            parse_secrets(&["TOKEN@a.test".into()], &[], &env),
            Err(Field::PassEnv.invalid(Problem::SecretPassed("TOKEN".into())))
        );
        assert_eq!(
            parse_secrets(&["T=env:TOKEN@a.test".into()], &[], &env),
            Err(Field::PassEnv.invalid(Problem::SecretPassed("TOKEN".into())))
        );
        let env = crate::EnvRequest {
            set: vec!["TOKEN=x".into()],
            pass: vec![],
        };
        assert_eq!(
            parse_secrets(&["TOKEN@a.test".into()], &[], &env),
            Err(Field::Env.invalid(Problem::SecretSet("TOKEN".into())))
        );
        let env = crate::EnvRequest::default();
        assert_eq!(
            parse_secrets(&["A@a.test".into(), "A@b.test".into()], &[], &env),
            Err(Field::Secret.invalid(Problem::DuplicateSecret("A".into())))
        );
        assert_eq!(
            parse_secrets(&["A@a.test".into()], &["B".into()], &env),
            Err(Field::SecretInBody.invalid(Problem::UnknownSecretInBody("B".into())))
        );
        let s = parse_secrets(&["A@a.test".into()], &["A".into()], &env).unwrap();
        assert!(s[0].in_bodies);
    }
}

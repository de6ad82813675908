//! The sandbox's environment: scrubbed to a small allowlist, plus what the
//! person named explicitly. Credentials in the host's environment
//! (`*_TOKEN`, `*_KEY`, `AWS_*`, ...) never pass unless named.

use crate::error::{Problem, ResolveError};
use crate::fields::Field;

/// Variables passed from the host by default. `LC_*` is matched as a prefix.
pub const ENV_ALLOWLIST: &[&str] = &["PATH", "LANG", "LC_*", "TERM", "TZ", "COLORTERM"];

/// The `PATH` used when the host has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What a front door asked for the environment.
#[derive(Debug, Clone, Default)]
pub struct EnvRequest {
    /// `--env NAME=VALUE`, in order; later ones win.
    pub set: Vec<String>,
    /// `--pass-env NAME`: copy this host variable in, if it is set.
    pub pass: Vec<String>,
}

fn allowed_by_default(name: &str) -> bool {
    ENV_ALLOWLIST.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => *a == name,
    })
}

pub(crate) fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Build the command's environment from the host's and the request.
pub fn resolve_env(
    req: &EnvRequest,
    host: &[(String, String)],
    home: &str,
) -> Result<Vec<(String, String)>, ResolveError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: &str| {
        if let Some(slot) = out.iter_mut().find(|(n, _)| n == k) {
            slot.1 = v.to_string();
        } else {
            out.push((k.to_string(), v.to_string()));
        }
    };
    put("PATH", DEFAULT_PATH);
    for (k, v) in host {
        if allowed_by_default(k) {
            put(k, v);
        }
    }
    put("HOME", home);
    for name in &req.pass {
        if !valid_name(name) {
            return Err(Field::PassEnv.invalid(Problem::BadEnvName(name.clone())));
        }
        if let Some((_, v)) = host.iter().find(|(k, _)| k == name) {
            put(name, v);
        }
    }
    for assignment in &req.set {
        let (k, v) = assignment
            .split_once('=')
            .ok_or_else(|| Field::Env.invalid(Problem::BadEnvAssignment(assignment.clone())))?;
        if !valid_name(k) {
            return Err(Field::Env.invalid(Problem::BadEnvName(k.to_string())));
        }
        // An environment is NUL-terminated strings: a value holding one
        // cannot be given to any program (the start would fail after the
        // sandbox is made), so it is refused here, at the variable.
        if v.contains('\0') {
            return Err(Field::Env.invalid(Problem::NulInEnvValue(k.to_string())));
        }
        put(k, v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Vec<(String, String)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
            ("GITHUB_TOKEN", "ghp_secret"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("OPENAI_API_KEY", "sk-x"),
            ("HOME", "/home/alice"),
            ("SSH_AUTH_SOCK", "/run/user/1000/ssh"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn credentials_in_the_host_environment_are_scrubbed() {
        let env = resolve_env(&EnvRequest::default(), &host(), "/workspace").unwrap();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "LANG", "LC_TIME", "HOME"]);
        assert!(env.contains(&("HOME".into(), "/workspace".into())));
    }

    #[test]
    fn named_variables_pass_and_set_ones_win() {
        let req = EnvRequest {
            set: vec!["EDITOR=vi".into(), "LANG=C".into(), "EMPTY=".into()],
            pass: vec!["GITHUB_TOKEN".into(), "NOT_SET_ON_HOST".into()],
        };
        let env = resolve_env(&req, &host(), "/tmp").unwrap();
        assert!(env.contains(&("GITHUB_TOKEN".into(), "ghp_secret".into())));
        assert!(env.contains(&("EDITOR".into(), "vi".into())));
        assert!(env.contains(&("LANG".into(), "C".into())));
        assert!(env.contains(&("EMPTY".into(), "".into())));
        assert!(!env
            .iter()
            .any(|(k, _)| k == "NOT_SET_ON_HOST" || k == "OPENAI_API_KEY"));
    }

    #[test]
    fn malformed_assignments_are_refused() {
        for bad in ["NOEQUALS", "1X=2", "A-B=c", "=v"] {
            let req = EnvRequest {
                set: vec![bad.into()],
                pass: vec![],
            };
            assert!(
                resolve_env(&req, &host(), "/tmp").is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn a_nul_byte_in_a_value_is_refused_at_the_variable() {
        for bad in ["Y=a\0b", "Y=\0", "Y=ab\0"] {
            let req = EnvRequest {
                set: vec![bad.into()],
                pass: vec![],
            };
            assert_eq!(
                resolve_env(&req, &host(), "/tmp"),
                Err(Field::Env.invalid(Problem::NulInEnvValue("Y".into()))),
                "{bad:?}"
            );
        }
    }
}

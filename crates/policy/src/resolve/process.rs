//! The programs a sandbox may execute (`process.allow_exec`): each entry
//! checked for its form here; what it names is found inside the sandbox,
//! where the paths mean something, by the jail (`warden_jail::exec_rules`).

use super::ResolveError;
use crate::compose::Layer;
use crate::error::Problem;
use crate::fields::Field;
use crate::Isolation;

/// The allowlist as written, each entry a path inside the sandbox, a glob
/// or a bare name. Empty: every program may be executed.
pub(super) fn allow_exec(layer: &Layer, isolation: Isolation) -> Result<Vec<String>, ResolveError> {
    let entries = layer.texts(Field::AllowExec);
    for e in &entries {
        check_entry(e)?;
    }
    // Never a silent run without the allowlist the caller asked for: it is
    // Landlock's execute right on the host's kernel, applied by the
    // process backend's init.
    let unenforced = match isolation {
        Isolation::Process => None,
        Isolation::Gvisor => Some((
            "gvisor",
            "the sandbox's programs are executed by gVisor's own kernel, which applies no Landlock rules",
        )),
        Isolation::Vm => Some((
            "vm",
            "the sandbox's programs are executed by the guest's kernel, and the guest's init applies no exec allowlist",
        )),
    };
    if let (false, Some((isolation, why))) = (entries.is_empty(), unenforced) {
        return Err(Field::AllowExec.invalid(Problem::ExecRulesNeedProcess { isolation, why }));
    }
    Ok(entries)
}

fn check_entry(e: &str) -> Result<(), ResolveError> {
    let bad = |why: &str| {
        Err(Field::AllowExec.invalid(Problem::BadExecRule {
            entry: e.to_string(),
            why: why.to_string(),
        }))
    };
    if e.is_empty() {
        return bad("it is empty");
    }
    if e.contains('\0') {
        return bad("it holds a NUL byte");
    }
    if e.contains('/') && !e.starts_with('/') {
        return bad("it is a relative path");
    }
    if e.split('/').any(|c| c == "." || c == "..") {
        return bad("it holds a '.' or '..' component");
    }
    let mut depth = 0i32;
    for c in e.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth > 0 => depth -= 1,
            _ => {}
        }
    }
    if depth != 0 {
        return bad("a '[' is not closed");
    }
    if e == "/" || e.chars().all(|c| c == '/' || c == '*') {
        return bad("it names every program, which is no allowlist");
    }
    Ok(())
}

/// The name of the sandbox's user (`process.user`), as `/etc/passwd` and
/// `useradd` take one: what is written in the sandbox's passwd file can
/// never add a field or a line.
pub(super) fn user(given: Option<String>) -> Result<Option<String>, ResolveError> {
    let Some(name) = given else {
        return Ok(None);
    };
    let mut bytes = name.bytes();
    let valid = name.len() <= 32
        && matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !valid {
        return Err(Field::UserName.invalid(Problem::BadUserName(name)));
    }
    Ok(Some(name))
}

/// `USER` and `LOGNAME` name the sandbox's user, unless `env.set` says
/// otherwise.
pub(super) fn user_env(env: &mut Vec<(String, String)>, name: &str, set: &[String]) {
    for var in ["USER", "LOGNAME"] {
        let given = set
            .iter()
            .any(|a| a.split_once('=').is_some_and(|(k, _)| k == var));
        if given {
            continue;
        }
        match env.iter_mut().find(|(k, _)| k == var) {
            Some(slot) => slot.1 = name.to_string(),
            None => env.push((var.to_string(), name.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_entry;

    #[test]
    fn an_entry_is_an_absolute_path_a_glob_or_a_bare_name() {
        for ok in [
            "/usr/bin/git",
            "git",
            "/usr/bin/python3*",
            "/opt/tools/",
            "/usr/lib/git-core",
        ] {
            assert!(check_entry(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "bin/git",
            "/usr/../bin/sh",
            "/usr/bin/[ab",
            "/",
            "/**",
            "/./x",
            "a\0b",
        ] {
            assert!(check_entry(bad).is_err(), "{bad:?}");
        }
    }
}

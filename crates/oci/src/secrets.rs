//! Secrets by annotation (`warden.dev/secret.NAME`): where on the node
//! their values may be read. A pod's author writes the annotation, so it
//! may name only what the node's operator set aside for containers: files
//! of the secrets directory (`WARDEN_OCI_SECRETS_DIR` in the runtime's
//! environment, `/etc/warden/secrets` by default) and variables named
//! `WARDEN_SECRET_*` (checked in `warden-policy`). Never a program.
//!
//! A file is named by a path relative to the directory, and found by the
//! kernel beneath it (`openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`):
//! nothing outside the directory is ever looked up, so the answer says
//! nothing about the node's other paths. Links the operator keeps inside
//! the directory (a Kubernetes secret volume's `..data` layout) are
//! followed; a link that leaves it is refused by the kernel. Every
//! refusal (absolute, `..`, missing, outside, not a regular file, no
//! directory) is one and the same answer, which names neither the file
//! nor the directory: it reaches the pod's events.
//!
//! Where a secret's value may be sent is the node owner's decision: each
//! secret comes with its hosts, declared by the operator in a file of the
//! same directory ([`HOSTS_SUFFIX`]). A pod may only narrow them; a
//! secret without declared hosts is refused by that same one answer.

use crate::container::OciError;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use warden_policy::oci::AnnotatedSecret;
use warden_policy::SecretSource;

/// The variable of the runtime's environment that names the secrets
/// directory.
pub const DIR_VARIABLE: &str = "WARDEN_OCI_SECRETS_DIR";
/// The secrets directory when the variable is not set.
pub const DEFAULT_DIR: &str = "/etc/warden/secrets";

/// The node's secrets directory.
pub fn dir() -> PathBuf {
    std::env::var_os(DIR_VARIABLE)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// The suffix of the file of the secrets directory in which the node's
/// operator declares the hosts a secret's value may be sent to:
/// `PATH.hosts` for the file `PATH`, `WARDEN_SECRET_X.hosts` for the
/// variable `WARDEN_SECRET_X`. Files of the directory, like the secrets:
/// root's, and a Kubernetes secret volume's keys like any other.
pub const HOSTS_SUFFIX: &str = ".hosts";
/// At most this much of a hosts declaration is read.
const HOSTS_MAX: u64 = 64 * 1024;

/// The `--secret` entries of `secrets`, each file found beneath `dir` and
/// named by its real path, each sent to the hosts its annotation chose
/// among those the node's operator declared for it (all of them when it
/// chose none). A secret without declared hosts is refused: where a
/// node's secret may go is the node owner's decision, never the pod
/// author's.
pub fn entries(secrets: &[AnnotatedSecret], dir: &Path) -> Result<Vec<String>, OciError> {
    let mut out = Vec::new();
    for s in secrets {
        let (file, declared_in) = match &s.source {
            SecretSource::File(f) => {
                let real = in_dir(f, dir).ok_or_else(|| refused(s))?;
                (Some(real), f.clone().into_os_string())
            }
            SecretSource::Env(v) => (None, v.into()),
            SecretSource::Command(_) => return Err(refused(s)),
        };
        let mut declared_in = declared_in;
        declared_in.push(HOSTS_SUFFIX);
        let declared = in_dir(Path::new(&declared_in), dir)
            .and_then(|p| read_small(&p))
            .ok_or_else(|| refused(s))?;
        let chosen = AnnotatedSecret {
            hosts: chosen(s, &declared)?,
            ..s.clone()
        };
        out.push(chosen.entry(file.as_deref()));
    }
    Ok(out)
}

/// The hosts `s` is sent to: those its annotation names, each one the
/// operator declared (`declared`: hosts separated by commas, blanks or
/// lines; `#` starts a comment), or all the declared ones.
fn chosen(s: &AnnotatedSecret, declared: &str) -> Result<Vec<String>, OciError> {
    let declared: Vec<String> = declared
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .flat_map(|l| l.split(|c: char| c == ',' || c.is_whitespace()))
        .filter(|h| !h.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    if declared.is_empty() {
        return Err(refused(s));
    }
    if s.hosts.is_empty() {
        return Ok(declared);
    }
    let undeclared: Vec<&str> = s
        .hosts
        .iter()
        .filter(|h| !declared.contains(&h.to_ascii_lowercase()))
        .map(String::as_str)
        .collect();
    if !undeclared.is_empty() {
        return Err(OciError::Unsupported(format!(
            "annotations[\"warden.dev/secret.{}\"]: {} is not a host the node's operator declared for this secret: its value goes only to those (name some of them after @, or none for all)",
            s.name,
            undeclared.join(", ")
        )));
    }
    Ok(s.hosts.clone())
}

/// The text of the operator's file `path`, at most [`HOSTS_MAX`] bytes.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(HOSTS_MAX)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The one answer to every secret that cannot be used: a file that is not
/// there, or one (or a variable) without hosts declared by the operator.
fn refused(s: &AnnotatedSecret) -> OciError {
    OciError::Unsupported(format!(
        "annotations[\"warden.dev/secret.{}\"]: the node sets aside no secret by that name for containers, with hosts its value may be sent to (file:PATH is a path relative to the node's secrets directory, which its operator fills and where it declares each file's hosts)",
        s.name
    ))
}

/// The real path of the regular file `file` beneath `dir`, or `None`.
fn in_dir(file: &Path, dir: &Path) -> Option<PathBuf> {
    // Decided on the text alone, before any lookup: an absolute path or a
    // `..` never reaches the file system.
    if file.as_os_str().is_empty() || !file.components().all(|c| matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let top = nix::fcntl::open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    // O_PATH: the file is found, not opened, so a FIFO or a device the
    // operator left there is never opened (no blocking, no side effect).
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(&top, file, how).ok()?;
    let st = fstat(&fd).ok()?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return None;
    }
    let (real_top, real) = (real_path(&top)?, real_path(&fd)?);
    // The kernel kept the lookup beneath; the name handed on must say so too.
    (real != real_top && real.starts_with(&real_top)).then_some(real)
}

/// The path the kernel knows the descriptor by.
fn real_path(fd: &OwnedFd) -> Option<PathBuf> {
    nix::fcntl::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str())
        .ok()
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(source: SecretSource) -> AnnotatedSecret {
        AnnotatedSecret {
            name: "T".into(),
            source,
            hosts: vec!["api.test".into()],
        }
    }

    #[test]
    fn only_regular_files_beneath_the_secrets_directory_are_named_and_every_refusal_is_one_answer()
    {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("secrets");
        std::fs::create_dir_all(dir.join("..2026_11_29/sub")).unwrap();
        std::fs::write(dir.join("t"), "value").unwrap();
        std::fs::write(dir.join("t.hosts"), "# the operator's\napi.test\n").unwrap();
        std::fs::write(dir.join("..2026_11_29/k"), "kube").unwrap();
        std::fs::write(dir.join("..2026_11_29/k.hosts"), "api.test, other.test").unwrap();
        std::os::unix::fs::symlink("..data/k.hosts", dir.join("k.hosts")).unwrap();
        std::fs::write(d.path().join("outside"), "host file").unwrap();
        // A Kubernetes secret volume: NAME -> ..data/NAME, ..data -> ..DATE.
        std::os::unix::fs::symlink("..2026_11_29", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/k", dir.join("k")).unwrap();
        std::os::unix::fs::symlink(d.path().join("outside"), dir.join("abs-link")).unwrap();
        std::os::unix::fs::symlink("../outside", dir.join("rel-link")).unwrap();
        let real = |p: &Path| std::fs::canonicalize(p).unwrap();
        for (name, file) in [("t", dir.join("t")), ("k", dir.join("..2026_11_29/k"))] {
            let ok = entries(&[secret(SecretSource::File(name.into()))], &dir).unwrap();
            assert_eq!(ok, [format!("T=file:{}@api.test", real(&file).display())]);
        }
        let mut answers = std::collections::BTreeSet::new();
        for bad in [
            PathBuf::from("abs-link"),
            PathBuf::from("rel-link"),
            d.path().join("outside"),
            dir.join("t"),
            PathBuf::from("missing"),
            PathBuf::from("../outside"),
            PathBuf::from("./t"),
            PathBuf::from("..2026_11_29/sub"),
            PathBuf::from("/etc/passwd"),
            PathBuf::from(""),
        ] {
            let e = entries(&[secret(SecretSource::File(bad.clone()))], &dir)
                .expect_err(&bad.display().to_string());
            answers.insert(e.to_string());
        }
        let e = entries(
            &[secret(SecretSource::File("t".into()))],
            &d.path().join("none"),
        )
        .unwrap_err();
        answers.insert(e.to_string());
        assert_eq!(answers.len(), 1, "{answers:#?}");
        let said = answers.pop_first().unwrap();
        assert!(!said.contains(&d.path().display().to_string()), "{said}");
        std::fs::write(dir.join("WARDEN_SECRET_T.hosts"), "api.test").unwrap();
        let env = entries(&[secret(SecretSource::Env("WARDEN_SECRET_T".into()))], &dir).unwrap();
        assert_eq!(env, ["T=env:WARDEN_SECRET_T@api.test"]);
    }

    #[test]
    fn a_secrets_hosts_are_among_those_the_operator_declared_and_none_declared_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        std::fs::write(dir.join("t"), "value").unwrap();
        std::fs::write(dir.join("t.hosts"), "api.test other.test:8443").unwrap();
        std::fs::write(dir.join("bare"), "value").unwrap();
        std::fs::write(dir.join("empty"), "value").unwrap();
        std::fs::write(dir.join("empty.hosts"), "# nothing\n").unwrap();
        let with = |source: SecretSource, hosts: &[&str]| AnnotatedSecret {
            name: "T".into(),
            source,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        };
        let file = |f: &str| SecretSource::File(f.into());
        let real = std::fs::canonicalize(dir.join("t")).unwrap();
        let all = entries(&[with(file("t"), &[])], &dir).unwrap();
        assert_eq!(
            all,
            [format!(
                "T=file:{}@api.test,other.test:8443",
                real.display()
            )]
        );
        let some = entries(&[with(file("t"), &["other.test:8443"])], &dir).unwrap();
        assert_eq!(some, [format!("T=file:{}@other.test:8443", real.display())]);
        let evil = entries(&[with(file("t"), &["api.test", "evil.test"])], &dir)
            .unwrap_err()
            .to_string();
        assert!(
            evil.contains("evil.test") && evil.contains("secret.T"),
            "{evil}"
        );
        for f in ["bare", "empty"] {
            let e = entries(&[with(file(f), &["api.test"])], &dir)
                .unwrap_err()
                .to_string();
            assert!(
                !e.contains(&dir.display().to_string()) && !e.contains(f),
                "{e}"
            );
        }
        let env = SecretSource::Env("WARDEN_SECRET_T".into());
        assert!(entries(&[with(env.clone(), &["api.test"])], &dir).is_err());
        std::fs::write(dir.join("WARDEN_SECRET_T.hosts"), "api.test").unwrap();
        assert!(entries(&[with(env.clone(), &["evil.test"])], &dir).is_err());
        assert_eq!(
            entries(&[with(env, &[])], &dir).unwrap(),
            ["T=env:WARDEN_SECRET_T@api.test"]
        );
    }
}

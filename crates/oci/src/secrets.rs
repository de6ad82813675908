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

/// The `--secret` entries of `secrets`, each file found beneath `dir` and
/// named by its real path.
pub fn entries(secrets: &[AnnotatedSecret], dir: &Path) -> Result<Vec<String>, OciError> {
    let mut out = Vec::new();
    for s in secrets {
        let file = match &s.source {
            SecretSource::File(f) => Some(in_dir(f, dir).ok_or_else(|| refused(s))?),
            _ => None,
        };
        out.push(s.entry(file.as_deref()));
    }
    Ok(out)
}

/// The one answer to every secret file that cannot be used.
fn refused(s: &AnnotatedSecret) -> OciError {
    OciError::Unsupported(format!(
        "annotations[\"warden.dev/secret.{}\"]: the node sets aside no secret file by that name for containers (file:PATH is a path relative to the node's secrets directory, which its operator fills)",
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
        std::fs::write(dir.join("..2026_11_29/k"), "kube").unwrap();
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
        let env = entries(&[secret(SecretSource::Env("WARDEN_SECRET_T".into()))], &dir).unwrap();
        assert_eq!(env, ["T=env:WARDEN_SECRET_T@api.test"]);
    }
}

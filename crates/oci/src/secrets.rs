//! Secrets by annotation (`warden.dev/secret.NAME`): where on the node
//! their values may be read. A pod's author writes the annotation, so it
//! may name only what the node's operator set aside for containers: files
//! of the secrets directory (`WARDEN_OCI_SECRETS_DIR` in the runtime's
//! environment, `/etc/warden/secrets` by default) and variables named
//! `WARDEN_SECRET_*` (checked in `warden-policy`). Never a program.

use crate::container::OciError;
use std::path::{Path, PathBuf};
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

/// The `--secret` entries of `secrets`, each file found in `dir` (its
/// real path, links followed, must lie in the real `dir`).
pub fn entries(secrets: &[AnnotatedSecret], dir: &Path) -> Result<Vec<String>, OciError> {
    let mut out = Vec::new();
    for s in secrets {
        let file = match &s.source {
            SecretSource::File(f) => Some(in_dir(s, f, dir)?),
            _ => None,
        };
        out.push(s.entry(file.as_deref()));
    }
    Ok(out)
}

fn in_dir(s: &AnnotatedSecret, file: &Path, dir: &Path) -> Result<PathBuf, OciError> {
    let refuse = |why: String| {
        OciError::Unsupported(format!(
            "annotations[\"warden.dev/secret.{}\"]: {why}",
            s.name
        ))
    };
    let real_dir = std::fs::canonicalize(dir).map_err(|e| {
        refuse(format!(
            "the node's secrets directory {} cannot be read ({e}); its operator puts secret files there (or sets {DIR_VARIABLE} for the runtime)",
            dir.display()
        ))
    })?;
    let given = if file.is_absolute() {
        file.to_path_buf()
    } else {
        dir.join(file)
    };
    let real = std::fs::canonicalize(&given).map_err(|e| {
        refuse(format!(
            "the file {} cannot be read ({e}): a secret's file must be in the node's secrets directory {}",
            given.display(),
            dir.display()
        ))
    })?;
    if !real.starts_with(&real_dir) || !real.is_file() {
        return Err(refuse(format!(
            "{} is not a file in the node's secrets directory {}: a container can name only the files set aside for it",
            given.display(),
            dir.display()
        )));
    }
    Ok(real)
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
    fn files_outside_the_secrets_directory_are_refused_even_through_links() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("secrets");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("t"), "value").unwrap();
        std::fs::write(d.path().join("outside"), "host file").unwrap();
        std::os::unix::fs::symlink(d.path().join("outside"), dir.join("link")).unwrap();
        let ok = entries(&[secret(SecretSource::File("t".into()))], &dir).unwrap();
        assert_eq!(
            ok,
            [format!(
                "T=file:{}@api.test",
                std::fs::canonicalize(dir.join("t")).unwrap().display()
            )]
        );
        for bad in [
            PathBuf::from("link"),
            d.path().join("outside"),
            PathBuf::from("missing"),
            PathBuf::from("/etc/passwd"),
        ] {
            assert!(
                entries(&[secret(SecretSource::File(bad.clone()))], &dir).is_err(),
                "{}",
                bad.display()
            );
        }
        let env = entries(&[secret(SecretSource::Env("WARDEN_SECRET_T".into()))], &dir).unwrap();
        assert_eq!(env, ["T=env:WARDEN_SECRET_T@api.test"]);
    }
}

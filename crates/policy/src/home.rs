//! The sandbox's home directory and the package caches mounted in it.
//!
//! A sandbox's `HOME` is its own, never the project: shells, git, npm and
//! pip write their history, global configuration, logs and caches there,
//! and none of it lands in the workspace (or in its overlay's diff). A run
//! gets a fresh tmpfs; a named sandbox keeps its home with its state, so
//! that it persists from one `exec` to the next. Package caches are the one
//! thing worth sharing between sandboxes: each declared cache is a
//! directory of warden's own state, one per profile, bound read-write at
//! the place its tool looks for it. The host's own caches are never used.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::error::{Problem, ResolveError};
use crate::fields::Field;

/// Where the sandbox's home is mounted, and its `HOME`.
pub const HOME_MOUNT: &str = "/home/sandbox";

/// The caches a profile may share, where each tool keeps its cache below
/// `HOME` (with its default settings), and what it holds. Logs and
/// configuration stay in the sandbox's own home: `npm` gets only its
/// content store, not `~/.npm/_logs`.
pub const CACHES: &[(&str, &[&str], &str)] = &[
    ("pip", &[".cache/pip"], "pip's downloads and built wheels"),
    (
        "npm",
        &[".npm/_cacache"],
        "npm's package store (not its logs)",
    ),
    (
        "cargo",
        &[".cargo/registry", ".cargo/git"],
        "cargo's registry index, crates and git checkouts",
    ),
    (
        "go",
        &["go/pkg/mod", ".cache/go-build"],
        "Go's module and build caches",
    ),
];

/// The sandbox's home.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Home {
    /// No home is mounted: a prepared root tree (`--rootfs`, an OCI
    /// bundle) brings its own, and `HOME` is the workspace or `/tmp`.
    #[default]
    None,
    /// A fresh tmpfs at [`HOME_MOUNT`], gone with the run.
    Tmpfs,
    /// This directory of warden's state, bound at [`HOME_MOUNT`] (a named
    /// sandbox's home, kept from one exec to the next).
    Dir(PathBuf),
}

/// One cache directory bound into the sandbox's home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheMount {
    /// The cache's name (`pip`).
    pub name: String,
    /// The directory on the host, in warden's state directory.
    pub host: PathBuf,
    /// Where it is bound, below the sandbox's home.
    pub inside: PathBuf,
}

/// The names [`CACHES`] knows, for messages.
fn known() -> String {
    CACHES
        .iter()
        .map(|(n, _, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The home and caches of a request: `home_dir` is a named sandbox's kept
/// home, `cache_dir` the profile's directory of caches in warden's state.
pub(crate) fn resolve(
    names: &[String],
    rootfs: bool,
    home_dir: Option<&Path>,
    cache_dir: Option<&Path>,
    home_mount: &Path,
) -> Result<(Home, Vec<CacheMount>), ResolveError> {
    let home = match (rootfs, home_dir) {
        (true, _) => Home::None,
        (false, Some(d)) => Home::Dir(d.to_path_buf()),
        (false, None) => Home::Tmpfs,
    };
    let mut mounts = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for raw in names {
        let name = raw.trim();
        let Some((_, places, _)) = CACHES.iter().find(|(n, _, _)| *n == name) else {
            return Err(Field::Caches.invalid(Problem::UnknownCache {
                name: name.to_string(),
                known: known(),
            }));
        };
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        if rootfs {
            return Err(Field::Caches.invalid(Problem::CachesWithRootfs));
        }
        let dir = cache_dir.ok_or(Field::Caches.invalid(Problem::CachesWithoutState))?;
        for place in *places {
            // `.cargo/registry` is kept as `cargo/registry`: one directory
            // per cache, its places side by side.
            let leaf = Path::new(place)
                .file_name()
                .map(PathBuf::from)
                .unwrap_or_default();
            mounts.push(CacheMount {
                name: name.to_string(),
                host: dir.join(name).join(leaf),
                inside: home_mount.join(place),
            });
        }
    }
    Ok((home, mounts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_gets_a_tmpfs_home_and_a_named_sandbox_its_kept_one() {
        let (h, _) = resolve(&[], false, None, None, Path::new(HOME_MOUNT)).unwrap();
        assert_eq!(h, Home::Tmpfs);
        let (h, _) = resolve(
            &[],
            false,
            Some(Path::new("/s/home")),
            None,
            Path::new(HOME_MOUNT),
        )
        .unwrap();
        assert_eq!(h, Home::Dir("/s/home".into()));
        let (h, _) = resolve(
            &[],
            true,
            Some(Path::new("/s/home")),
            None,
            Path::new(HOME_MOUNT),
        )
        .unwrap();
        assert_eq!(h, Home::None);
    }

    #[test]
    fn each_cache_is_bound_where_its_tool_looks_from_the_profiles_directory() {
        let names = vec!["pip".into(), "cargo".into(), "pip".into()];
        let (_, m) = resolve(
            &names,
            false,
            None,
            Some(Path::new("/st/caches/p")),
            Path::new(HOME_MOUNT),
        )
        .unwrap();
        let pairs: Vec<(String, String)> = m
            .iter()
            .map(|c| (c.host.display().to_string(), c.inside.display().to_string()))
            .collect();
        assert_eq!(
            pairs,
            [
                (
                    "/st/caches/p/pip/pip".into(),
                    "/home/sandbox/.cache/pip".into()
                ),
                (
                    "/st/caches/p/cargo/registry".into(),
                    "/home/sandbox/.cargo/registry".into()
                ),
                (
                    "/st/caches/p/cargo/git".into(),
                    "/home/sandbox/.cargo/git".into()
                ),
            ]
        );
    }

    #[test]
    fn an_unknown_cache_is_refused_with_the_known_ones() {
        let e = resolve(
            &["maven".into()],
            false,
            None,
            Some(Path::new("/c")),
            Path::new(HOME_MOUNT),
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("maven") && text.contains("pip, npm, cargo, go"),
            "{text}"
        );
        let e = resolve(&["pip".into()], false, None, None, Path::new(HOME_MOUNT)).unwrap_err();
        assert_eq!(e.field(), Some(Field::Caches));
        assert_eq!(e.problem(), &Problem::CachesWithoutState);
        let e = resolve(
            &["pip".into()],
            true,
            None,
            Some(Path::new("/c")),
            Path::new(HOME_MOUNT),
        )
        .unwrap_err();
        assert_eq!(e.problem(), &Problem::CachesWithRootfs);
    }
}

//! Where a secret's program may be led besides the paths its words name:
//! the parts of the rule for secret programs (`super`) that refuse what
//! cannot be followed from here, whatever program is given it.
//!
//! A path at or under a root is refused wherever it stands (`super`).
//! These are the ways round that check, each a class rather than a
//! program's option:
//! - a directory that holds a root, named by any word (`git -C ~`, `make
//!   -C /srv -f proj/Makefile`, `cmake -E chdir home ...`, `docker -v
//!   $HOME:/h`, `bwrap --bind /srv /x`): a program moved there, or given
//!   a bind or a chroot of it, reaches the root by names no word shows;
//! - a path through a process's own views (`/proc/self/cwd/...`,
//!   `/proc/self/root`, `/dev/fd/3`): it names where the program stands
//!   or what it has open, which a lookup made from warden does not see;
//! - a file with more names than one (a hard link the owner made): a
//!   token writing its name under a root writes the program;
//! - a program that runs commands in a file tree of its own (a
//!   container, a namespace, a chroot, a sandbox, warden's own): what
//!   runs there goes by names, binds and volumes the rule cannot see.
//!
//! Each is refused while tokens may write anywhere, with the way out
//! the rest of the rule has: a program of the owner's outside every
//! root, naming no directory at, under or above one.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{words_in, Checker, Env, Refusal};
use crate::pathwalk::walk;

/// What a [`Refusal`] names when a program runs commands in a file tree
/// of its own.
pub(super) const TREE: &str = "a program that runs commands in a file tree of its own";

/// What a [`Refusal`] names when a word names a directory holding a root.
const HOLDS: &str = "a directory it is given";

/// Programs that run commands in a file tree of their own, where host
/// directories go by other names (binds, volumes, a chroot, another
/// mount namespace): what they run cannot be followed from the host's
/// names, so they are refused while tokens may write anywhere. Order
/// follows how often a secret's program is one.
pub(super) const TREES: &[(&[&str], &str)] = &[
    (
        &["docker", "podman", "nerdctl", "ctr", "crictl", "buildah", "kubectl"],
        "a container runner, whose commands see host directories through volumes and binds (-v, --mount, --volumes-from, a named volume) or an existing container's mounts",
    ),
    (
        &["systemd-nspawn", "machinectl"],
        "a container over the directory and the binds it is given (-D, --bind)",
    ),
    (
        &[
            "bwrap", "bubblewrap", "proot", "firejail", "flatpak", "flatpak-spawn", "toolbox",
            "distrobox", "distrobox-enter", "singularity", "apptainer", "lima", "limactl",
        ],
        "a sandbox over binds of host directories (--bind, a home bound whole)",
    ),
    (
        &["unshare", "nsenter", "chroot", "schroot", "fakechroot", "mount", "pivot_root"],
        "another root, working directory or mount namespace (--root, --wd, another process's mounts)",
    ),
    (
        &["runc", "crun", "runsc", "youki", "lxc", "lxc-execute", "lxc-attach", "incus"],
        "a container from a bundle whose mounts the rule does not read",
    ),
    (
        &["warden"],
        "a sandbox over the workspace and the binds it is given",
    ),
];

/// Directories of the system's own, whose files a token's sandbox sees
/// read-only on another mount (a hard link there cannot be made from a
/// sandbox): a program there with more names than one is the system's.
const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/nix/store",
];

/// Why the program `word` names is refused as running commands in a
/// file tree of its own, if it is one of [`TREES`].
pub(super) fn tree(word: &str) -> Option<&'static str> {
    let name = word.rsplit('/').next().unwrap_or(word);
    TREES
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(_, why)| *why)
}

/// The directories a word may name for a program that moves there, from
/// `/`: each path [`words_in`] reads in it, a bare word as well
/// (`cmake -E chdir home`), and every tail of an option's letters
/// (`-Chome`, `--chdir=home`). A tail that is no directory protects
/// nothing and costs a lookup.
fn dirs_in(arg: &str, env: &Env) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for w in words_in(arg, env) {
        if w.is_empty() || w.contains("://") {
            continue;
        }
        if w.starts_with(['-', '+']) && !w.contains('/') {
            out.extend(
                w.char_indices()
                    .skip(1)
                    .map(|(at, _)| Path::new("/").join(&w[at..])),
            );
        }
        out.push(Path::new("/").join(&w));
    }
    out.sort();
    out.dedup();
    out
}

/// Whether `p` is a path through a process's own views: where it stands
/// or what it has open (`/proc/self`, `/proc/thread-self`, `/proc/PID`,
/// `/dev/fd`).
fn is_view(p: &Path) -> bool {
    let mut c = p
        .components()
        .skip(1)
        .map(|c| c.as_os_str().to_string_lossy());
    match (c.next().as_deref(), c.next()) {
        (Some("proc"), Some(n)) => {
            n == "self" || n == "thread-self" || n.chars().all(|x| x.is_ascii_digit())
        }
        (Some("dev"), Some(n)) => n == "fd",
        _ => false,
    }
}

impl Checker<'_> {
    /// The directories an argument `arg` of a command may name that hold
    /// a root: refused. Read after the rest of the rule, whose refusals
    /// say more.
    pub(super) fn holders(&self, arg: &str) -> Result<(), Refusal> {
        for d in dirs_in(arg, &self.env) {
            self.holder(&d)?;
        }
        Ok(())
    }

    /// Refuse `dir` if it is a directory, other than `/`, that holds a
    /// root below it.
    fn holder(&self, dir: &Path) -> Result<(), Refusal> {
        if self.writable.is_empty() || !dir.is_dir() {
            return Ok(());
        }
        let (real, _) = walk(dir);
        for d in [dir, real.as_path()] {
            if d == Path::new("/") {
                continue;
            }
            if let Some(under) = self.writable.iter().find(|w| w.starts_with(d) && *w != d) {
                return Err(Refusal {
                    secret: self.secret.to_string(),
                    what: HOLDS,
                    path: dir.to_path_buf(),
                    under: under.clone(),
                    unreadable: Some("a directory tokens may write below it, which a program moved there (-C, --chdir, a bind, a volume, a chroot) reaches by names no word shows"),
                });
            }
        }
        Ok(())
    }

    /// Refuse the paths `met` (a path, its real path, the links on the
    /// way) if one goes through a process's own views, and the file
    /// `real` if it has more names than one where a token may hold one.
    pub(super) fn followed(
        &self,
        met: &[&Path],
        real: &Path,
        what: &'static str,
    ) -> Result<(), Refusal> {
        let Some(first) = self.writable.first() else {
            return Ok(());
        };
        let refuse = |path: &Path, why: &'static str| Refusal {
            secret: self.secret.to_string(),
            what,
            path: path.to_path_buf(),
            under: first.clone(),
            unreadable: Some(why),
        };
        if let Some(v) = met.iter().find(|p| is_view(p)) {
            return Err(refuse(v, "a path through /proc or /dev/fd, which names where a process stands or what it has open, not a file the rule can find from here"));
        }
        let Ok(meta) = std::fs::metadata(real) else {
            return Ok(());
        };
        if !meta.is_file() || meta.nlink() < 2 || SYSTEM.iter().any(|s| real.starts_with(s)) {
            return Ok(());
        }
        // A hard link lives on one file system: only a root there can
        // hold the file's other name.
        let shared = self
            .writable
            .iter()
            .find(|w| std::fs::metadata(w).is_ok_and(|m| m.dev() == meta.dev()));
        match shared {
            Some(under) => Err(Refusal {
                under: under.clone(),
                ..refuse(real, "more names than one (a hard link), and another may lie where tokens may write it")
            }),
            None => Ok(()),
        }
    }
}

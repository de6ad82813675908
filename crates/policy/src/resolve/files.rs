//! The file system's section: the root, the workspace and the binds,
//! where commands start, and the globs of files the host runs, each
//! checked against the host directories no sandbox may write or replace.

use std::path::{Path, PathBuf};

use crate::compose::Layer;
use crate::error::{Problem, ResolveError};
use crate::fields::Field;
use crate::{Bind, WORKSPACE_MOUNT};

/// The root, the workspace (`workspace`: the layer's, or the copy the
/// state store keeps) and the binds, each checked.
pub(super) fn binds(
    layer: &Layer,
    rootfs: Option<&Path>,
    workspace: Option<&Path>,
    home: &Path,
) -> Result<Vec<Bind>, ResolveError> {
    let forbidden = |field: Field, path: &Path, why| {
        field.invalid(Problem::ForbiddenPath {
            path: path.to_path_buf(),
            why,
        })
    };
    if let Some(root) = rootfs {
        check_absolute(Field::Rootfs, root)?;
        if root == Path::new("/") {
            return Err(forbidden(
                Field::Rootfs,
                root,
                "the host's own root would expose every host file; leave `filesystem.rootfs` out to use the host's system directories read-only",
            ));
        }
    }
    if let Some(ws) = workspace {
        check_absolute(Field::Workspace, ws)?;
        if ws == Path::new("/") {
            return Err(forbidden(
                Field::Workspace,
                ws,
                "it would make the whole host writable; pass a project directory",
            ));
        }
        if let Some(why) = system_directory(ws) {
            return Err(forbidden(Field::Workspace, ws, why));
        }
    }
    let mut binds = Vec::new();
    let (ro, rw) = (layer.paths(Field::Ro), layer.paths(Field::Rw));
    for (paths, writable, field) in [(&ro, false, Field::Ro), (&rw, true, Field::Rw)] {
        for p in paths {
            check_absolute(field, p)?;
            if p == Path::new("/") {
                return Err(forbidden(
                    field,
                    p,
                    "binding the host's root exposes every host file",
                ));
            }
            if let Some(why) = writable.then(|| system_directory(p)).flatten() {
                return Err(forbidden(field, p, why));
            }
            if reserved_destination(p) {
                return Err(forbidden(
                    field,
                    p,
                    "warden builds /proc, /dev, /tmp and /workspace itself; bind a path below another directory",
                ));
            }
            if home.starts_with(p) || p.starts_with(home) {
                return Err(forbidden(
                    field,
                    p,
                    "the sandbox's own home (`filesystem.home`, /home/sandbox unless set) is mounted by warden itself; bind another path (such as one below /home/NAME), or share package caches with `filesystem.caches`",
                ));
            }
            binds.push(Bind {
                path: p.clone(),
                writable,
            });
        }
    }
    Ok(binds)
}

/// The volumes of `entries` (`filesystem.volumes`), each checked; a
/// writable one's host directory is never one of the host's system
/// directories, as for a writable bind.
pub(super) fn volumes(
    entries: &[String],
    home: &Path,
) -> Result<Vec<crate::VolumeMount>, ResolveError> {
    let volumes = crate::volumes::resolve(entries, home)?;
    for v in volumes.iter().filter(|v| v.writable) {
        if let Some(why) = system_directory(&v.host) {
            return Err(Field::Volumes.invalid(Problem::ForbiddenPath {
                path: v.host.clone(),
                why,
            }));
        }
    }
    Ok(volumes)
}

/// The globs of `filesystem.runs_on_host`, each checked.
pub(super) fn runs_on_host(layer: &Layer) -> Result<Vec<String>, ResolveError> {
    let globs = layer.texts(Field::RunsOnHost);
    for g in &globs {
        check_glob(g)?;
    }
    Ok(globs)
}

/// Where commands start inside: a path inside the sandbox, written
/// whole (absolute, no `..`).
pub(super) fn workdir(given: Option<&str>) -> Result<Option<PathBuf>, ResolveError> {
    match given.map(Path::new) {
        Some(w) if !w.is_absolute() => {
            Err(Field::Workdir.invalid(Problem::RelativePath(w.to_path_buf())))
        }
        Some(w) if w.components().any(|c| c == std::path::Component::ParentDir) => {
            Err(Field::Workdir.invalid(Problem::ForbiddenPath {
                path: w.to_path_buf(),
                why: "write it without `..`",
            }))
        }
        w => Ok(w.map(Path::to_path_buf)),
    }
}

/// Where the sandbox's own home is mounted (`filesystem.home`): `/root`
/// or `/home/NAME`, a place no system directory, bind or mount of
/// warden's own is, written whole. `None`: the default,
/// [`crate::HOME_MOUNT`].
pub(super) fn home_at(given: Option<&str>) -> Result<Option<PathBuf>, ResolveError> {
    let Some(text) = given else {
        return Ok(None);
    };
    let bad = || Field::HomeDir.invalid(Problem::BadHome(text.to_string()));
    if text == "/root" {
        return Ok(Some(PathBuf::from(text)));
    }
    let name = text.strip_prefix("/home/").ok_or_else(bad)?;
    let plain = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !plain {
        return Err(bad());
    }
    Ok(Some(PathBuf::from(text)))
}

pub(super) fn check_absolute(field: Field, p: &Path) -> Result<(), ResolveError> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err(field.invalid(Problem::RelativePath(p.to_path_buf())))
    }
}

/// Host directories no writable bind or workspace may be, and why: the
/// host's own programs, libraries, configuration and boot files (and
/// anything below them), and the roots of its state and of its users'
/// homes (a directory below those, such as a project under /home or a
/// database under /var/lib, may be bound). Compared after `.` and `..` are
/// taken out of the path.
const SYSTEM_DIRECTORIES: &[(&str, bool, &str)] = &[
    // (directory, also everything below it, why)
    (
        "/etc",
        true,
        "the host's configuration would be writable from the sandbox",
    ),
    (
        "/usr",
        true,
        "the host's programs and libraries would be writable from the sandbox",
    ),
    (
        "/bin",
        true,
        "the host's programs would be writable from the sandbox",
    ),
    (
        "/sbin",
        true,
        "the host's programs would be writable from the sandbox",
    ),
    (
        "/lib",
        true,
        "the host's libraries would be writable from the sandbox",
    ),
    (
        "/lib32",
        true,
        "the host's libraries would be writable from the sandbox",
    ),
    (
        "/lib64",
        true,
        "the host's libraries would be writable from the sandbox",
    ),
    (
        "/libx32",
        true,
        "the host's libraries would be writable from the sandbox",
    ),
    (
        "/boot",
        true,
        "the host's kernel and boot loader would be writable from the sandbox",
    ),
    (
        "/var",
        false,
        "the host's logs, spool and package state would be writable from the sandbox",
    ),
    (
        "/var/lib",
        false,
        "the host's package and service state would be writable from the sandbox",
    ),
    (
        "/var/log",
        true,
        "the host's logs would be writable from the sandbox",
    ),
    (
        "/home",
        false,
        "every user's home would be writable from the sandbox",
    ),
    (
        "/root",
        false,
        "root's home would be writable from the sandbox",
    ),
    (
        "/run",
        false,
        "the host's sockets and runtime state would be writable from the sandbox",
    ),
    (
        "/sys",
        true,
        "the kernel's settings would be writable from the sandbox",
    ),
    (
        "/opt",
        false,
        "the host's installed software would be writable from the sandbox",
    ),
    (
        "/srv",
        false,
        "the host's served data would be writable from the sandbox",
    ),
];

/// Why `p` may not be made writable, when it is a system directory.
fn system_directory(p: &Path) -> Option<&'static str> {
    use std::path::Component;
    let mut clean = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => clean.push(n),
            Component::ParentDir => {
                clean.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    SYSTEM_DIRECTORIES
        .iter()
        .find(|(dir, below, _)| clean == Path::new(dir) || (*below && clean.starts_with(dir)))
        .map(|(_, _, why)| *why)
}

/// Destinations that warden assembles itself and that a bind must not replace.
fn reserved_destination(p: &Path) -> bool {
    ["/proc", "/dev", "/tmp", WORKSPACE_MOUNT]
        .iter()
        .any(|r| p == Path::new(r))
}

/// A `filesystem.runs_on_host` glob: relative to the workspace, and one the
/// review's matcher reads (`*`, `?`, `[...]`, `**`).
pub(super) fn check_glob(g: &str) -> Result<(), ResolveError> {
    let bad = |why: &str| {
        Err(Field::RunsOnHost.invalid(Problem::BadGlob {
            entry: g.to_string(),
            why: why.to_string(),
        }))
    };
    if g.is_empty() {
        return bad("it is empty");
    }
    if g.starts_with('/') {
        return bad("it is absolute; globs are relative to the workspace");
    }
    if g.split('/').any(|c| c == "..") {
        return bad("it climbs out with '..'");
    }
    let mut depth = 0i32;
    for c in g.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth > 0 => depth -= 1,
            _ => {}
        }
    }
    if depth != 0 {
        return bad("a '[' is not closed");
    }
    if g.split('/').any(|c| c.contains("**") && c != "**") {
        return bad("'**' must be a whole path component");
    }
    Ok(())
}

//! Volumes: host directories bound at another path inside the sandbox
//! (`filesystem.volumes`, `--volume HOST:INSIDE[:ro]`). The host side is
//! the owner's to name (the row reaches the host); the daemon's E2B door
//! sets it for a volume it keeps itself, never from a caller's text. The
//! inside side is checked here for every door: absolute, written whole,
//! and never over what warden assembles itself or the host's system
//! directories the sandbox is shown.

use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

use crate::error::{Problem, ResolveError};
use crate::fields::Field;
use crate::WORKSPACE_MOUNT;

/// One volume: a host directory bound at `inside`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    /// The directory on the host.
    pub host: PathBuf,
    /// Where it is mounted inside the sandbox.
    pub inside: PathBuf,
    pub writable: bool,
}

/// Places inside that warden assembles itself, or that hold the kernel's
/// and the sandbox's own machinery: a volume is mounted neither on one
/// nor below it.
const RESERVED: &[&str] = &[
    "/proc",
    "/dev",
    "/sys",
    "/tmp",
    "/run",
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/var",
    "/root",
    WORKSPACE_MOUNT,
];

/// Why a volume may not be mounted at `inside` in a sandbox whose home is
/// at `home`; `None` when it may. A mount point is written whole
/// (absolute, no `.`, `..`, `//` or trailing `/`), is never `/`, never on
/// or below a place of [`RESERVED`], never the home or above it (below
/// the home is the sandbox's own), and never on one of the host's other
/// system directories (`/home`, `/opt`, `/srv`, `/mnt` itself is allowed).
pub fn inside_refusal(inside: &Path, home: &Path) -> Option<&'static str> {
    let Some(text) = inside.to_str() else {
        return Some("a mount point is text");
    };
    if let Some(why) = inside_text_refusal(text) {
        return Some(why);
    }
    if !inside.is_absolute() {
        return Some("a mount point is an absolute path inside the sandbox, such as /mnt/data");
    }
    let parts: Vec<&str> = text.split('/').skip(1).collect();
    let plain = parts
        .iter()
        .all(|p| !p.is_empty() && *p != "." && *p != "..");
    if !plain
        || !inside
            .components()
            .skip(1)
            .all(|c| matches!(c, Component::Normal(_)))
    {
        return Some(
            "a mount point is written whole: no `.`, `..`, `//` or trailing `/` (such as /mnt/data)",
        );
    }
    if RESERVED
        .iter()
        .any(|r| inside == Path::new(r) || inside.starts_with(r))
    {
        return Some("warden assembles the sandbox's system directories, /proc, /dev, /sys, /tmp, /run and /workspace itself; mount a volume elsewhere, such as below /mnt");
    }
    if home.starts_with(inside) {
        return Some("it would cover the sandbox's home; mount a volume below it or elsewhere, such as below /mnt");
    }
    if ["/home", "/opt", "/srv"]
        .iter()
        .any(|d| inside == Path::new(d))
    {
        return Some("it would cover a directory of the host's the sandbox is shown; mount a volume below it or elsewhere, such as below /mnt");
    }
    None
}

/// Why `text` cannot be a path inside a sandbox whatever its place; `None`
/// when it can. A NUL, a control character (C0, DEL, C1) or an oversized
/// name is refused at the door rather than failing at the sandbox's start
/// (the kernel refuses a name over NAME_MAX, a path over PATH_MAX) or
/// reaching, as escape sequences, whatever prints a spec.
pub fn inside_text_refusal(text: &str) -> Option<&'static str> {
    /// The kernel's NAME_MAX and PATH_MAX (less its NUL).
    const NAME_MAX: usize = 255;
    const PATH_MAX: usize = 4095;
    if text.chars().any(|c| c.is_control()) {
        return Some("a path inside the sandbox holds no NUL and no control character");
    }
    if text.len() > PATH_MAX {
        return Some("a path inside the sandbox is at most 4095 bytes");
    }
    if text.split('/').any(|p| p.len() > NAME_MAX) {
        return Some("each name of a path inside the sandbox is at most 255 bytes");
    }
    None
}

/// One `filesystem.volumes` entry, `HOST:INSIDE` (read-write) or
/// `HOST:INSIDE:ro` (`:rw` too), checked.
fn parse(entry: &str, home: &Path) -> Result<VolumeMount, ResolveError> {
    let bad = |why: &'static str| {
        Field::Volumes.invalid(Problem::BadVolume {
            entry: entry.to_string(),
            why,
        })
    };
    let mut parts = entry.split(':');
    let (Some(host), Some(inside)) = (parts.next(), parts.next()) else {
        return Err(bad(
            "write HOST:INSIDE or HOST:INSIDE:ro, such as /srv/data:/mnt/data:ro",
        ));
    };
    let writable = match parts.next() {
        None | Some("rw") => true,
        Some("ro") => false,
        Some(_) => return Err(bad("the third part, when given, is ro or rw")),
    };
    if parts.next().is_some() {
        return Err(bad(
            "write HOST:INSIDE or HOST:INSIDE:ro (a path holds no `:`)",
        ));
    }
    let host = PathBuf::from(host);
    if !host.is_absolute() {
        return Err(bad("the host directory is an absolute path"));
    }
    if host == Path::new("/") {
        return Err(bad("binding the host's root exposes every host file"));
    }
    let inside = PathBuf::from(inside);
    if let Some(why) = inside_refusal(&inside, home) {
        return Err(bad(why));
    }
    Ok(VolumeMount {
        host,
        inside,
        writable,
    })
}

/// The volumes of `entries`, each checked; two at one mount point, or one
/// below another, are refused (which one shows would be an accident of
/// order).
pub(crate) fn resolve(entries: &[String], home: &Path) -> Result<Vec<VolumeMount>, ResolveError> {
    let mut out: Vec<VolumeMount> = Vec::new();
    for e in entries {
        let v = parse(e, home)?;
        if out
            .iter()
            .any(|o| o.inside.starts_with(&v.inside) || v.inside.starts_with(&o.inside))
        {
            return Err(Field::Volumes.invalid(Problem::BadVolume {
                entry: e.clone(),
                why: "another volume is mounted there, or above or below it",
            }));
        }
        out.push(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const HOME: &str = "/home/user";

    #[test]
    fn a_mount_point_with_a_control_character_or_an_oversized_name_is_refused() {
        let long_name = format!("/mnt/{}", "n".repeat(256));
        let long_path = format!("/mnt{}", "/abcdefgh".repeat(460));
        for bad in [
            "/mnt/a\0b",
            "/mnt/\u{1b}[31mred\u{7}",
            "/mnt/line\nbreak",
            "/mnt/del\u{7f}",
            "/mnt/c1\u{9b}",
            long_name.as_str(),
            long_path.as_str(),
        ] {
            assert!(
                inside_refusal(Path::new(bad), Path::new(HOME)).is_some(),
                "{bad:?}"
            );
        }
        let fits = format!("/mnt/{}", "n".repeat(255));
        assert_eq!(inside_refusal(Path::new(&fits), Path::new(HOME)), None);
        assert_eq!(
            inside_refusal(Path::new("/mnt/données"), Path::new(HOME)),
            None
        );
    }

    #[test]
    fn a_mount_point_over_what_warden_assembles_or_written_loosely_is_refused() {
        for bad in [
            "/",
            "",
            "mnt/data",
            "/proc",
            "/proc/x",
            "/dev",
            "/sys/fs",
            "/tmp",
            "/etc",
            "/etc/ssl",
            "/usr/local",
            "/workspace",
            "/workspace/sub",
            "/home",
            "/home/user",
            "/mnt/../etc",
            "/mnt/./data",
            "/mnt//data",
            "/mnt/data/",
            "/..",
        ] {
            assert!(
                inside_refusal(Path::new(bad), Path::new(HOME)).is_some(),
                "{bad:?} was accepted"
            );
        }
        for good in ["/mnt/data", "/data", "/home/user/data", "/srv/shared"] {
            assert_eq!(
                inside_refusal(Path::new(good), Path::new(HOME)),
                None,
                "{good}"
            );
        }
    }

    #[test]
    fn an_entry_names_an_absolute_host_directory_and_a_mode() {
        let home = Path::new(HOME);
        let v = parse("/srv/data:/mnt/data:ro", home).unwrap();
        assert_eq!(
            v,
            VolumeMount {
                host: "/srv/data".into(),
                inside: "/mnt/data".into(),
                writable: false
            }
        );
        assert!(parse("/srv/data:/mnt/data", home).unwrap().writable);
        for bad in [
            "/srv/data",
            "data:/mnt/data",
            "/:/mnt/data",
            "/srv/data:/mnt/data:rx",
            "/srv/data:/mnt/data:ro:x",
            "/srv/data:/proc",
        ] {
            assert!(parse(bad, home).is_err(), "{bad:?} was accepted");
        }
        assert!(resolve(&["/a:/mnt/x".into(), "/b:/mnt/x/y".into()], home).is_err());
    }
}

//! File operations in a long-lived sandbox: what a caller asks (through the
//! supervisor's control socket, then the spawn channel), done by the
//! sandbox's init inside the sandbox (`warden_jail::files` serves them, one
//! name at a time, never through a link). A relative path is relative to
//! the workspace; an absolute one names a place of the sandbox's own root
//! as its processes see it, never the host's, and only in one of the
//! sandbox's own writable places ([`SERVED`]). [`place`] and [`components`] are the rule both
//! sides apply to them.

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

/// Entries a recursive removal deletes per request; past this it answers
/// EAGAIN and the caller asks again, so the init is never busy for long.
pub const REMOVE_BUDGET: usize = 2000;
/// The top-level directories of the sandbox's root an absolute path may
/// be in, and why: the sandbox's own writable places. Everything else
/// (the host's system directories shown read-only, `/proc`, where the
/// init could open its own memory, `/sys`, `/dev`) is refused before
/// anything is opened: a caller with the files scope alone reads no more
/// of the host's files than before.
pub const SERVED: &[(&str, &str)] = &[
    ("workspace", "the workspace, as a relative path names it"),
    (
        "home",
        "the sandbox's own home (/home/sandbox, or where `filesystem.home` puts it)",
    ),
    (
        "root",
        "the sandbox's own home when `filesystem.home` is /root",
    ),
    ("tmp", "the sandbox's own /tmp"),
];

/// Where a path starts: the workspace, or the sandbox's own root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    Workspace,
    Root,
}

/// One file operation; a path is relative to the workspace, or absolute
/// in the sandbox's own root ([`place`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FileOp {
    /// Open a regular file to read; its descriptor comes back.
    Read { path: String },
    /// Create a new file (it must not exist) with `mode` to write; its
    /// descriptor comes back.
    Create { path: String, mode: u32 },
    /// Open a directory to list; its descriptor comes back.
    List { path: String },
    /// Make a directory (with its missing parents when `parents`).
    Mkdir { path: String, parents: bool },
    /// Rename `from` to `to` (replacing a file there).
    Rename { from: String, to: String },
    /// Remove a file or an empty directory; with `recursive`, a tree (up to
    /// [`REMOVE_BUDGET`] entries per request: EAGAIN says ask again).
    Remove { path: String, recursive: bool },
}

/// The names of a path relative to the workspace: EXDEV for `..` or an
/// absolute path, EINVAL for a NUL byte.
pub fn components(path: &str) -> Result<Vec<&str>, Errno> {
    if path.contains('\0') {
        return Err(Errno::EINVAL);
    }
    if path.starts_with('/') {
        return Err(Errno::EXDEV);
    }
    let mut out = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => continue,
            ".." => return Err(Errno::EXDEV),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Where `path` starts and its names: a relative path in the workspace
/// (as [`components`]), an absolute one in the sandbox's root; EXDEV for
/// `..`, EINVAL for a NUL byte, EACCES outside the places of [`SERVED`].
pub fn place(path: &str) -> Result<(Base, Vec<&str>), Errno> {
    if !path.starts_with('/') {
        return Ok((Base::Workspace, components(path)?));
    }
    let names = components(path.trim_start_matches('/'))?;
    if !names
        .first()
        .is_some_and(|top| SERVED.iter().any(|(n, _)| n == top))
    {
        return Err(Errno::EACCES);
    }
    Ok((Base::Root, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absolute_path_is_in_the_sandboxs_own_writable_places_only() {
        assert_eq!(place("a/b"), Ok((Base::Workspace, vec!["a", "b"])));
        assert_eq!(place("/tmp/x"), Ok((Base::Root, vec!["tmp", "x"])));
        assert_eq!(place("/"), Err(Errno::EACCES));
        assert_eq!(place("/etc/passwd"), Err(Errno::EACCES));
        assert_eq!(place("/usr/bin"), Err(Errno::EACCES));
        assert_eq!(
            place("/home/user/x"),
            Ok((Base::Root, vec!["home", "user", "x"]))
        );
        assert_eq!(place("/tmp/../etc/shadow"), Err(Errno::EXDEV));
        assert_eq!(place("/proc/1/mem"), Err(Errno::EACCES));
        assert_eq!(place("//proc/self/environ"), Err(Errno::EACCES));
        assert_eq!(place("/./dev/tty"), Err(Errno::EACCES));
        assert_eq!(place("/sys"), Err(Errno::EACCES));
        assert_eq!(place("/tmp/a\0"), Err(Errno::EINVAL));
    }

    #[test]
    fn dot_dot_and_absolute_paths_are_refused_before_anything_is_opened() {
        assert_eq!(components("../etc/passwd"), Err(Errno::EXDEV));
        assert_eq!(components("a/../../b"), Err(Errno::EXDEV));
        assert_eq!(components("/etc/passwd"), Err(Errno::EXDEV));
        assert_eq!(components("a\0b"), Err(Errno::EINVAL));
        assert_eq!(components("a//./b/"), Ok(vec!["a", "b"]));
    }

    #[test]
    fn operations_are_tagged_by_kind_on_the_wire() {
        let op = FileOp::Create {
            path: "a".into(),
            mode: 0o644,
        };
        let text = serde_json::to_string(&op).unwrap();
        assert_eq!(text, r#"{"kind":"create","path":"a","mode":420}"#);
        assert_eq!(serde_json::from_str::<FileOp>(&text).unwrap(), op);
    }
}

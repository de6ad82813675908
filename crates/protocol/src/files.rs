//! File operations in a long-lived sandbox's workspace: what a caller asks
//! (through the supervisor's control socket, then the spawn channel), done
//! by the sandbox's init inside the sandbox (`warden_jail::files` serves
//! them, one name at a time, never through a link). Paths are relative to
//! the workspace; [`components`] is the rule both sides apply to them.

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

/// Entries a recursive removal deletes per request; past this it answers
/// EAGAIN and the caller asks again, so the init is never busy for long.
pub const REMOVE_BUDGET: usize = 2000;
/// One file operation; paths are relative to the workspace.
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

#[cfg(test)]
mod tests {
    use super::*;

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

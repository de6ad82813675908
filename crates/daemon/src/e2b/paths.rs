//! Paths of the E2B API in warden's terms. An E2B sandbox's user works in
//! its home directory, `/home/user`; a warden sandbox's files API reaches
//! its workspace, `/workspace`. So the home directory is the workspace: a
//! path under `/home/user` (or relative, as envd takes it against the
//! home directory) names the same place under `/workspace`, and paths
//! answered back are under `/workspace`. Anything else outside the
//! workspace is refused by the files API itself, as natively.

/// E2B's default user's home directory.
pub const E2B_HOME: &str = "/home/user";

/// The path the native files API takes for an E2B path.
pub fn to_warden(path: &str) -> String {
    match path.strip_prefix(E2B_HOME) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            format!("{}{rest}", warden_policy::WORKSPACE_MOUNT)
        }
        _ if path == "~" => warden_policy::WORKSPACE_MOUNT.to_string(),
        _ => match path.strip_prefix("~/") {
            Some(rest) => format!("{}/{rest}", warden_policy::WORKSPACE_MOUNT),
            None => path.to_string(),
        },
    }
}

/// The absolute path inside the sandbox of a path relative to the
/// workspace.
pub fn absolute(rel: &str) -> String {
    if rel.is_empty() {
        warden_policy::WORKSPACE_MOUNT.to_string()
    } else {
        format!("{}/{rel}", warden_policy::WORKSPACE_MOUNT)
    }
}

/// A working directory for a command: the E2B path mapped, the workspace
/// when none is given (E2B starts commands in the home directory).
pub fn cwd(path: Option<&str>) -> String {
    match path {
        None | Some("") => warden_policy::WORKSPACE_MOUNT.to_string(),
        Some(p) if p.starts_with('/') || p.starts_with('~') => to_warden(p),
        Some(p) => format!("{}/{p}", warden_policy::WORKSPACE_MOUNT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_directory_is_the_workspace_and_nothing_else_moves() {
        assert_eq!(to_warden("/home/user"), "/workspace");
        assert_eq!(to_warden("/home/user/a/b"), "/workspace/a/b");
        assert_eq!(to_warden("/home/username/a"), "/home/username/a");
        assert_eq!(to_warden("~/x"), "/workspace/x");
        assert_eq!(to_warden("x/y"), "x/y");
        assert_eq!(to_warden("/etc/passwd"), "/etc/passwd");
        assert_eq!(cwd(None), "/workspace");
        assert_eq!(cwd(Some("sub")), "/workspace/sub");
        assert_eq!(absolute(""), "/workspace");
        assert_eq!(absolute("a/b"), "/workspace/a/b");
    }
}

//! Paths of the E2B API in warden's terms. An E2B sandbox's user works in
//! its home directory, `/home/user`: the door makes every sandbox with
//! that home and that user name (`filesystem.home`, `process.user`), so
//! the path is the same for files and for commands. A relative path (and
//! `~`) is taken against the sandbox's home directory, as envd takes it
//! (a sandbox made natively has its own, `/home/sandbox` unless its spec
//! moved it); any other absolute path is the sandbox's own (its `/tmp`,
//! its workspace at `/workspace`), which the files API reaches beneath
//! the sandbox's root, never the host's.

/// E2B's default user's home directory, the home of every sandbox the
/// door makes.
pub const E2B_HOME: &str = "/home/user";

/// E2B's default user's name, the name the sandbox's one user has in
/// every sandbox the door makes.
pub const E2B_USER: &str = "user";

/// The home directory of sandbox `id` inside it, as its stored spec
/// says; E2B's when it cannot be read (the call then fails as for a
/// sandbox out of reach: callers are let in before they ask).
pub fn home(app: &crate::app::App, id: &str) -> String {
    let Ok(sb) = app.sandbox(id) else {
        return E2B_HOME.to_string();
    };
    warden_runtime::state::read_json::<warden_runtime::state::Stored>(
        &sb.dir().join(warden_runtime::state::STORED),
    )
    .map(|s| s.spec.filesystem.home_mount().display().to_string())
    .unwrap_or_else(|_| E2B_HOME.to_string())
}

/// The absolute path inside the sandbox of an E2B path, for a sandbox
/// whose home is `home`.
pub fn to_warden(home: &str, path: &str) -> String {
    match path {
        "" | "~" => home.to_string(),
        p if p.starts_with('/') => p.to_string(),
        p => match p.strip_prefix("~/") {
            Some(rest) => format!("{home}/{rest}"),
            None => format!("{home}/{p}"),
        },
    }
}

/// The absolute path inside the sandbox of a path as the files API takes
/// it: relative to the workspace, or absolute already.
pub fn absolute(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else if path.is_empty() {
        warden_policy::WORKSPACE_MOUNT.to_string()
    } else {
        format!("{}/{path}", warden_policy::WORKSPACE_MOUNT)
    }
}

/// A working directory for a command: the E2B path mapped, the home
/// directory when none is given (E2B starts commands there).
pub fn cwd(home: &str, path: Option<&str>) -> String {
    to_warden(home, path.unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_and_the_tilde_are_in_the_home_and_absolute_ones_stay() {
        let h = E2B_HOME;
        assert_eq!(to_warden(h, "/home/user/a/b"), "/home/user/a/b");
        assert_eq!(to_warden(h, "~/x"), "/home/user/x");
        assert_eq!(to_warden(h, "~"), "/home/user");
        assert_eq!(to_warden(h, "x/y"), "/home/user/x/y");
        assert_eq!(to_warden("/home/sandbox", "x"), "/home/sandbox/x");
        assert_eq!(to_warden(h, "/tmp/x"), "/tmp/x");
        assert_eq!(to_warden(h, "/workspace/x"), "/workspace/x");
        assert_eq!(cwd(h, None), "/home/user");
        assert_eq!(cwd(h, Some("sub")), "/home/user/sub");
        assert_eq!(cwd(h, Some("/tmp")), "/tmp");
        assert_eq!(absolute(""), "/workspace");
        assert_eq!(absolute("a/b"), "/workspace/a/b");
        assert_eq!(absolute("/tmp/a"), "/tmp/a");
    }
}

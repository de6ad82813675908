//! The read rules of a sandbox with an exec allowlist, carved around the
//! program directories (`exec_rules::PROGRAM_DIRS`).
//!
//! Why Landlock and not the mount: the kernel checks a mount's `noexec`
//! in `may_open`, before the file-open hook where Landlock decides, so an
//! exec refused by a `noexec` mount never reaches Landlock and leaves no
//! audit record (measured on 6.18: `/usr/bin/curl` under a sealed
//! `/usr/bin` gave none, a file on a read-only bind gave one). The program
//! directories were sealed `noexec` only so that the loader run directly
//! could not map their other programs; refusing to *open* those programs
//! for reading does the same (the loader maps a file it has opened), and
//! Landlock makes that refusal itself, with its record. So beneath a
//! program directory an executable file gets no right at all unless the
//! allowlist names it: neither executed nor read, each refusal logged.
//! Its directories stay listable and its other files readable.
//!
//! Landlock's rules only add rights, so the tree's one read rule (`/`) is
//! replaced by rules on the siblings of every path leading to a program
//! directory; the ancestors themselves get only the right to be listed.

use landlock::{AccessFs, BitFlags};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Rules granting `read` beneath `root`, except the executable files
/// beneath `sealed` (canonical directories). Symbolic links get no rule:
/// what they lead to is judged on its own path, and a rule on `/bin`
/// would land on `/usr/bin`.
pub(super) fn rules(
    root: &Path,
    read: BitFlags<AccessFs>,
    file_rights: BitFlags<AccessFs>,
    sealed: &[PathBuf],
) -> Vec<(PathBuf, BitFlags<AccessFs>)> {
    let mut out = Vec::new();
    let real = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    walk(&real, read, file_rights, sealed, &mut out);
    out
}

fn walk(
    path: &Path,
    read: BitFlags<AccessFs>,
    file_rights: BitFlags<AccessFs>,
    sealed: &[PathBuf],
    out: &mut Vec<(PathBuf, BitFlags<AccessFs>)>,
) {
    if sealed.iter().any(|s| path.starts_with(s)) {
        out.push((path.to_path_buf(), read & AccessFs::ReadDir));
        inside_sealed(path, read & file_rights, out);
        return;
    }
    if !sealed.iter().any(|s| s.starts_with(path)) {
        out.push((path.to_path_buf(), read));
        return;
    }
    // An ancestor of a program directory: listed, its entries ruled one
    // by one. An entry that cannot be listed gets nothing (fail closed).
    out.push((path.to_path_buf(), read & AccessFs::ReadDir));
    let Ok(dir) = std::fs::read_dir(path) else {
        return;
    };
    for e in dir.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            walk(&e.path(), read, file_rights, sealed, out);
        } else {
            out.push((e.path(), read & file_rights));
        }
    }
}

/// Beneath a program directory: every file that is not executable stays
/// readable; executable ones get nothing here (the allowed ones get their
/// own rule).
fn inside_sealed(
    dir: &Path,
    file_read: BitFlags<AccessFs>,
    out: &mut Vec<(PathBuf, BitFlags<AccessFs>)>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            inside_sealed(&e.path(), file_read, out);
        } else if kind.is_file()
            && e.metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o111 == 0)
        {
            out.push((e.path(), file_read));
        }
    }
}

/// The program directories as they are inside the sandbox, each once,
/// leaving out those a writable place holds (a place the sandbox writes
/// stays readable and is sealed `noexec` instead).
pub(super) fn sealed_dirs(writable: &[PathBuf]) -> Vec<PathBuf> {
    let writable: Vec<PathBuf> = writable
        .iter()
        .filter_map(|w| std::fs::canonicalize(w).ok())
        .collect();
    let mut out: Vec<PathBuf> = Vec::new();
    for d in crate::exec_rules::PROGRAM_DIRS {
        let Ok(real) = std::fs::canonicalize(d) else {
            continue;
        };
        if real.is_dir() && !out.contains(&real) && !writable.iter().any(|w| real.starts_with(w)) {
            out.push(real);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use landlock::ABI;

    #[test]
    fn a_program_directorys_executables_get_no_rule_and_its_siblings_keep_theirs() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for d in ["usr/bin/sub", "usr/lib", "etc"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        for (f, mode) in [
            ("usr/bin/curl", 0o755),
            ("usr/bin/README", 0o644),
            ("usr/bin/sub/tool", 0o755),
            ("usr/top-file", 0o644),
        ] {
            std::fs::write(r.join(f), b"x").unwrap();
            std::fs::set_permissions(r.join(f), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::os::unix::fs::symlink("usr/bin", r.join("bin")).unwrap();
        let read = AccessFs::from_read(ABI::V7) & !AccessFs::Execute;
        let file = AccessFs::from_file(ABI::V7);
        let real = std::fs::canonicalize(r).unwrap();
        let rules = rules(r, read, file, &[real.join("usr/bin")]);
        let got = |p: &str| {
            rules
                .iter()
                .find(|(q, _)| *q == real.join(p))
                .map(|(_, a)| *a)
        };
        assert_eq!(got(""), Some(read & AccessFs::ReadDir));
        assert_eq!(got("usr"), Some(read & AccessFs::ReadDir));
        assert_eq!(got("usr/lib"), Some(read));
        assert_eq!(got("etc"), Some(read));
        assert_eq!(got("usr/top-file"), Some(read & file));
        assert_eq!(got("usr/bin"), Some(read & AccessFs::ReadDir));
        assert_eq!(got("usr/bin/README"), Some(read & file));
        assert_eq!(got("usr/bin/curl"), None);
        assert_eq!(got("usr/bin/sub/tool"), None);
        assert_eq!(got("bin"), None, "a link is never ruled");
    }
}

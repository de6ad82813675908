//! What a revoked token leaves on disk: its package caches
//! (`STATE/token-caches/tHEX/`, with what their write-backs held back,
//! kept under `STATE/held-back/`) and its "always" answers
//! (`STATE/token-grants/tHEX/`), kept per principal for its next
//! sandboxes. Once the token is revoked (by itself or with the token that
//! made it) nothing will use them again, yet they would stay for ever,
//! counted on the host's disk. They are removed when the token is revoked,
//! or, while a sandbox of the token is still recorded (it may run, or be
//! started again by the owner, with those directories bound), when its
//! last sandbox is removed.
//!
//! Removal goes by descriptor and never follows a link
//! (`warden_workspace::fsutil::remove_tree`): a link a sandbox planted in
//! its cache is removed, never what it leads to.

use std::path::{Path, PathBuf};

use crate::db::Db;

/// The kinds of a token's own directories below warden's state.
const KINDS: &[&str] = &["token-caches", "token-grants"];

/// The token id a directory name of [`KINDS`] stands for: `t` and the
/// id's bytes in hexadecimal (`warden_runtime::lifecycle::Owner`).
fn token_of_dir(name: &str) -> Option<String> {
    let hex = name.strip_prefix('t')?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Whether what `token` left may go: it is revoked and no sandbox of it
/// is recorded. A directory of a token the records do not know is left.
fn may_go(db: &Db, token: &str) -> bool {
    let revoked = matches!(db.token(token), Ok(Some(t)) if t.revoked);
    revoked && matches!(db.sandboxes_of_token(token), Ok(s) if s.is_empty())
}

/// Remove the caches and grants of every revoked token of `db` that has no
/// sandbox left, below warden's state directory `state`; the directories
/// removed (one that cannot be removed is tried again at the next sweep).
pub fn forget_revoked(state: &Path, db: &Db) -> Vec<PathBuf> {
    let mut gone = Vec::new();
    for kind in KINDS {
        let Ok(entries) = std::fs::read_dir(state.join(kind)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(token) = name.to_str().and_then(token_of_dir) else {
                continue;
            };
            if !may_go(db, &token) {
                continue;
            }
            let dir = e.path();
            // What the caches' write-backs held back goes first: a
            // removal that fails leaves the caches to count it and to
            // find it again at the next sweep.
            let held = match *kind {
                "token-caches" => warden_runtime::owners_files::held_back_of_caches(state, &dir),
                _ => Vec::new(),
            };
            let held_gone = held
                .iter()
                .all(|h| warden_workspace::fsutil::remove_tree(h).is_ok());
            if held_gone && warden_workspace::fsutil::remove_tree(&dir).is_ok() {
                gone.push(dir);
            }
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_runtime::lifecycle::Owner;

    #[test]
    fn a_token_s_directory_name_reads_back_as_its_id_and_nothing_else_does() {
        let state = Path::new("/st");
        for id in ["fe6203fe09ea", "a/../b", ""] {
            let dir = Owner::Token(id).caches_dir(state);
            let name = dir.file_name().unwrap().to_str().unwrap();
            assert_eq!(token_of_dir(name).as_deref(), Some(id));
        }
        for odd in ["caches", "t6", "tzz", "x6161"] {
            assert_eq!(token_of_dir(odd), None, "{odd}");
        }
    }
}

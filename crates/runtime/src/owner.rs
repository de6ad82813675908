//! Whose a sandbox is, for what warden keeps on its owner's behalf beyond
//! one sandbox: snapshots (each owner has its own names and sees only its
//! own), a profile's package caches and a project's "always" answers
//! (the owner's sandboxes share theirs; each token's sandboxes share
//! theirs, never another's). The
//! doors say who: the machine's owner (the CLI, the OCI verbs, the
//! daemon's socket) or a token of the daemon's, by its id; a door never
//! invents another identity. This module only names; it makes nothing.

use std::path::{Path, PathBuf};

/// Who makes or uses a sandbox, a snapshot or a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner<'a> {
    Machine,
    /// A token of the daemon's, by its id (never its secret).
    Token(&'a str),
}

/// The step a token's view of the host's free disk space is rounded down
/// to: a token is never told that space, and no answer it gets (a 507
/// `no_disk`, the default disk budget it is given) may tell it closer
/// than this. One GiB: coarse against bisection (a token bisecting the
/// disk budget at which it is refused learns a whole number of GiB, and
/// sees the owner's disk use move only when it crosses one), fine enough
/// that a host with a few GiB free still serves tokens.
pub const FREE_SPACE_STEP: u64 = 1 << 30;

impl Owner<'_> {
    /// The free space `free` of warden's state's file system as this
    /// owner's requests are held to it: exact for the machine's owner
    /// (who is told it); for a token, rounded down to a whole
    /// [`FREE_SPACE_STEP`].
    pub fn free_space_held_to(&self, free: u64) -> u64 {
        match self {
            Owner::Machine => free,
            Owner::Token(_) => free - free % FREE_SPACE_STEP,
        }
    }

    /// As a snapshot records its owner.
    pub fn label(&self) -> String {
        match self {
            Owner::Machine => "owner".to_string(),
            Owner::Token(id) => format!("token:{id}"),
        }
    }

    /// The directory of this owner's package caches in warden's state
    /// `state`, one directory per profile below it: the machine's owner's
    /// in `caches/` (where they always were), each token's in
    /// `token-caches/` under a name of its own. The name is the token's id
    /// in hexadecimal, byte by byte: one id gives one name, two ids never
    /// the same one, and nothing an id holds (a `/`, a `..`) is a path.
    pub fn caches_dir(&self, state: &Path) -> PathBuf {
        match self {
            Owner::Machine => state.join("caches"),
            Owner::Token(id) => state.join("token-caches").join(token_dir(id)),
        }
    }

    /// The directory below which this owner's "always" answers for each
    /// project are kept (`grants/PROJECT.yaml` under it): the state
    /// itself for the machine's owner (where they always were), each
    /// token's `token-grants/tHEX`, so that one token's answer never
    /// widens another's (or the owner's) sandboxes over the same
    /// workspace.
    pub fn grants_base(&self, state: &Path) -> PathBuf {
        match self {
            Owner::Machine => state.to_path_buf(),
            Owner::Token(id) => state.join("token-grants").join(token_dir(id)),
        }
    }
}

/// A token's directory name: `t` and its id in hexadecimal, byte by byte.
fn token_dir(id: &str) -> String {
    let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
    format!("t{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_token_has_caches_of_its_own_and_none_is_the_owner_s() {
        let state = Path::new("/st");
        let dirs: Vec<PathBuf> = [
            Owner::Machine,
            Owner::Token("fe6203fe09ea"),
            Owner::Token("54809aba4baa"),
            Owner::Token("../caches"),
            Owner::Token(""),
        ]
        .iter()
        .map(|o| o.caches_dir(state))
        .collect();
        assert_eq!(dirs[0], Path::new("/st/caches"));
        assert_eq!(
            dirs[1],
            Path::new("/st/token-caches/t666536323033666530396561")
        );
        for (i, a) in dirs.iter().enumerate() {
            // One directory under the state's, nothing climbing out.
            assert!(a.starts_with(state));
            assert!(a
                .components()
                .all(|c| !matches!(c, std::path::Component::ParentDir)));
            for b in &dirs[i + 1..] {
                assert!(!a.starts_with(b) && !b.starts_with(a), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn a_token_s_grants_are_its_own_and_the_owner_s_stay_where_they_were() {
        let state = Path::new("/st");
        assert_eq!(Owner::Machine.grants_base(state), state);
        let a = Owner::Token("aa").grants_base(state);
        let b = Owner::Token("ab").grants_base(state);
        assert_eq!(a, Path::new("/st/token-grants/t6161"));
        assert_ne!(a, b);
        assert!(!a.join("grants").starts_with(state.join("grants")));
    }
}

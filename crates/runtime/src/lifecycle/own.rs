//! A copy is its maker's sandbox: the package caches and grants file its
//! spec keeps are re-pointed at its new owner's own.

use super::{LifecycleError, Owner};
use crate::state::{self, Stored};
use std::path::{Path, PathBuf};
use warden_workspace::Sandbox;

/// Make copy `sb` its new owner's: a package cache or grants file its
/// spec keeps from another principal (a token's `token-caches/tHEX`,
/// `token-grants/tHEX`; the machine owner's `caches/`, `grants/`) is
/// re-pointed at `owner`'s own (`state`: warden's state directory), the
/// same file or directory below it. A copy is its maker's sandbox: the
/// owner's copy of a token's sandbox must not write its "always" answers
/// into that token's file, nor share that token's caches (charged to the
/// token's disk). Whether anything was re-pointed.
pub fn make_own(sb: &Sandbox, state: &Path, owner: Owner<'_>) -> Result<bool, LifecycleError> {
    let file = sb.dir().join(state::STORED);
    let mut stored: Stored = state::read_json(&file)?;
    let mut changed = false;
    let caches = owner.caches_dir(state);
    for c in &mut stored.spec.filesystem.caches {
        if let Some(p) = repointed(
            &c.host,
            state,
            "token-caches",
            &state.join("caches"),
            &caches,
        ) {
            c.host = p;
            changed = true;
        }
    }
    if !stored.sinks.grants_into_profile {
        let base = owner.grants_base(state);
        let theirs = stored.sinks.grants.as_deref().and_then(|g| {
            repointed(
                g,
                state,
                "token-grants",
                &state.join("grants"),
                &base.join("grants"),
            )
        });
        if let Some(p) = theirs {
            stored.sinks.grants = Some(p);
            changed = true;
        }
    }
    if changed {
        state::write_json(&file, &stored)?;
    }
    Ok(changed)
}

/// `path` below `mine` when it lies below another principal's directory
/// of the same kind: a token's (`STATE/TOKENS/tHEX/SUB/...`, what is under
/// `SUB` kept: `grants` for grants files, nothing for caches) or the
/// machine owner's (`machine/...`). `mine`: the new owner's directory of
/// that kind (`STATE/caches`, `STATE/grants`, or a token's).
fn repointed(
    path: &Path,
    state: &Path,
    tokens: &str,
    machine: &Path,
    mine: &Path,
) -> Option<PathBuf> {
    let sub = if tokens == "token-grants" {
        "grants"
    } else {
        ""
    };
    let (theirs, rest) = if let Ok(r) = path.strip_prefix(state.join(tokens)) {
        let mut parts = r.components();
        let token = state.join(tokens).join(parts.next()?).join(sub);
        let rest = parts.as_path().strip_prefix(sub).ok()?.to_path_buf();
        (token, rest)
    } else {
        (
            machine.to_path_buf(),
            path.strip_prefix(machine).ok()?.to_path_buf(),
        )
    };
    (theirs != mine).then(|| mine.join(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_principal_s_cache_or_grants_file_is_re_pointed_at_the_new_owner_s_own() {
        let st = Path::new("/st");
        let machine_c = st.join("caches");
        let machine_g = st.join("grants");
        let tok = |s: &str| st.join("token-caches").join(s);
        let tokg = |s: &str| st.join("token-grants").join(s).join("grants");
        // A token's cache and grants file, for the owner's copy.
        let c = repointed(
            &tok("t61/prof/pip"),
            st,
            "token-caches",
            &machine_c,
            &machine_c,
        );
        assert_eq!(c, Some(st.join("caches/prof/pip")));
        let g = repointed(
            &tokg("t61").join("p.yaml"),
            st,
            "token-grants",
            &machine_g,
            &machine_g,
        );
        assert_eq!(g, Some(st.join("grants/p.yaml")));
        // The owner's, for a token's copy; another token's.
        let c = repointed(
            &machine_c.join("prof/pip"),
            st,
            "token-caches",
            &machine_c,
            &tok("t62"),
        );
        assert_eq!(c, Some(tok("t62").join("prof/pip")));
        let g = repointed(
            &tokg("t61").join("p.yaml"),
            st,
            "token-grants",
            &machine_g,
            &tokg("t62"),
        );
        assert_eq!(g, Some(tokg("t62").join("p.yaml")));
        // One's own stays, and so does what lies elsewhere.
        assert_eq!(
            repointed(
                &tok("t62/prof"),
                st,
                "token-caches",
                &machine_c,
                &tok("t62")
            ),
            None
        );
        assert_eq!(
            repointed(
                &machine_g.join("p.yaml"),
                st,
                "token-grants",
                &machine_g,
                &machine_g
            ),
            None
        );
        assert_eq!(
            repointed(
                Path::new("/elsewhere/p.yaml"),
                st,
                "token-grants",
                &machine_g,
                &machine_g
            ),
            None
        );
    }
}

//! Labels a door keeps for itself. A sandbox's labels are its maker's
//! (the native API's `labels`, the E2B door's `metadata`), except the
//! namespaces a door writes its own record in: the E2B door keeps a
//! sandbox's template, what its timeout does, the names its client
//! allowed and whether it is paused in `e2b.` labels, and reads them back
//! to decide (a sandbox with `e2b.template` is one it made, and gets its
//! own envd access tokens; `e2b.paused` is resumed on connect). A label
//! of a reserved namespace set through any other door would make that
//! door's record say what the caller chose, so every door but the one
//! that owns the namespace refuses it, the owner's calls included (the
//! owner has the CLI for what it wants to do): 400 with the reason
//! `reserved_label` at the label's JSON pointer (`/labels/e2b.template`).
//!
//! MCP keeps its own in `mcp-` labels (`mcp-session`, the session that
//! made a sandbox; `mcp-lease`, the process it is leased to, which the
//! reaper of dead sessions reads to remove it), refused likewise
//! through every other door.
//!
//! Which door a request came through is the router's to say, not the
//! request's: the E2B door's router runs each of its handlers [`within`]
//! its door, MCP runs each of its in-process calls within its own, and a
//! handler of the native API called from there (its create) is then
//! that door's.

use axum::http::StatusCode;
use std::collections::BTreeMap;
use std::future::Future;

use crate::error::ApiError;

/// A door that may own a namespace of labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// The native API.
    Native,
    /// The E2B-compatible door.
    E2b,
    /// MCP (`warden mcp`, the daemon's `/mcp`), whose tools call the
    /// native API in-process, each call [`within`] this door.
    Mcp,
}

/// The reserved namespaces: the prefix, the door that owns it, and what
/// it keeps there.
const RESERVED: &[(&str, Door, &str)] = &[
    (
        "e2b.",
        Door::E2b,
        "the E2B door's own record of a sandbox (its template, what its timeout does, the names its client allowed, whether it is paused)",
    ),
    // `mcp-lease` names the process a sandbox is leased to: a sandbox
    // whose holder is gone is removed by the next MCP server, as the
    // owner. Set by a caller, it would have the reaper remove a sandbox
    // when the caller chose, or name a live process so that one of its
    // sandboxes passed for a session's; `mcp-session` says which session
    // made it.
    (
        "mcp-",
        Door::Mcp,
        "MCP's own record of a sandbox (the session that made it, the process it is leased to)",
    ),
];

tokio::task_local! {
    static DOOR: Door;
}

/// Run `f` as `door`'s.
pub async fn within<F: Future>(door: Door, f: F) -> F::Output {
    DOOR.scope(door, f).await
}

/// The door the running request came through.
fn current() -> Door {
    DOOR.try_with(|d| *d).unwrap_or(Door::Native)
}

/// Whether the running request is one of MCP's tools' calls (model-facing).
pub fn model_facing() -> bool {
    current() == Door::Mcp
}

/// `labels` as the running request's door may set them.
pub fn check(labels: &BTreeMap<String, String>) -> Result<(), ApiError> {
    check_for(current(), labels)
}

/// `labels` as `door` may set them: none in a namespace another door owns.
pub fn check_for(door: Door, labels: &BTreeMap<String, String>) -> Result<(), ApiError> {
    for key in labels.keys() {
        let Some((prefix, _, what)) = RESERVED
            .iter()
            .find(|(prefix, owner, _)| *owner != door && key.starts_with(prefix))
        else {
            continue;
        };
        let mut e = ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("label {key:?}: labels beginning `{prefix}` are {what}; choose another key"),
        )
        .with_field(Some(&format!("/labels/{}", pointer_token(key))));
        e.problem.reason = Some("reserved_label".into());
        return Err(e);
    }
    Ok(())
}

/// A key as one token of a JSON pointer (RFC 6901: `~` is `~0`, `/` is
/// `~1`).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(keys: &[&str]) -> BTreeMap<String, String> {
        keys.iter().map(|k| (k.to_string(), "x".into())).collect()
    }

    #[test]
    fn a_reserved_label_is_refused_at_its_pointer_except_by_the_door_that_owns_it() {
        let e = check_for(Door::Native, &labels(&["team", "e2b.template"])).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.problem.reason.as_deref(), Some("reserved_label"));
        assert_eq!(e.problem.field.as_deref(), Some("/labels/e2b.template"));
        assert!(check_for(Door::E2b, &labels(&["e2b.template", "team"])).is_ok());
        assert!(check_for(Door::Native, &labels(&["team", "e2b", "warden.keep"])).is_ok());
        for door in [Door::Native, Door::E2b] {
            for key in ["mcp-lease", "mcp-session"] {
                let e = check_for(door, &labels(&[key])).unwrap_err();
                assert_eq!(e.problem.reason.as_deref(), Some("reserved_label"));
            }
        }
        assert!(check_for(Door::Mcp, &labels(&["mcp-lease", "mcp-session"])).is_ok());
        assert!(check_for(Door::Mcp, &labels(&["e2b.template"])).is_err());
        let e = check_for(Door::Native, &labels(&["e2b.a/b~c"])).unwrap_err();
        assert_eq!(e.problem.field.as_deref(), Some("/labels/e2b.a~1b~0c"));
    }

    #[tokio::test]
    async fn the_door_is_the_one_the_request_runs_within() {
        assert!(check(&labels(&["e2b.paused"])).is_err());
        let inside = within(Door::E2b, async { check(&labels(&["e2b.paused"])) }).await;
        assert!(inside.is_ok());
    }
}

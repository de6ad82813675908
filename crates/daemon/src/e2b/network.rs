//! E2B's network options: `network` at create, and `update_network` (`PUT
//! /sandboxes/{id}/network`) onto the native live allowlist change (`PATCH
//! /v1/sandboxes/{id}/egress`), under the same trust: what an E2B client
//! adds is a caller's entry (public addresses only, never a name the owner
//! pinned to an address of the host), whatever its token's scopes.
//!
//! warden decides by the name a program asks for, never by an address it
//! picked, so an address or a range in `allowOut` is refused with what to
//! give instead; `denyOut` needs no rule (what is not allowed is denied).
//! The names the template (the owner's profile) allows are the
//! template's: an update replaces the names the client gave (at create or
//! by an earlier update, kept in the sandbox's `e2b.allow_out` label) and
//! leaves the template's.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use std::sync::Arc;

use super::control::{error, from_api};
use super::lifecycle::{set_labels, ALLOW_OUT};
use super::{permit, E2b};
use crate::api::EgressPatch;
use crate::auth::Caller;
use crate::routes::{egress, Body};

/// E2B's network options (create's `network`, and the whole body of an
/// update, which also takes `allowInternetAccess`).
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct Network {
    #[serde(default)]
    pub allow_out: Option<Vec<String>>,
    #[serde(default)]
    pub deny_out: Option<Vec<String>>,
    #[serde(default)]
    pub rules: Option<serde_json::Value>,
    #[serde(default)]
    pub egress_proxy: Option<serde_json::Value>,
    #[serde(default)]
    pub dns_servers: Option<serde_json::Value>,
    #[serde(default)]
    #[allow(dead_code)]
    pub allow_internet_access: Option<bool>,
}

/// The egress allowlist E2B's network options ask for, by name.
pub(super) fn domains_of(net: &Network) -> Result<Vec<String>, String> {
    if net.rules.is_some() || net.egress_proxy.is_some() || net.dns_servers.is_some() {
        return Err("network.rules, egressProxy and dnsServers are not supported: warden's egress proxy decides by name (allow_out), and secrets are given through a warden profile (the template)".into());
    }
    let mut out = Vec::new();
    for entry in net.allow_out.iter().flatten() {
        let e = entry.trim();
        if e.parse::<std::net::IpAddr>().is_ok() || e.contains('/') {
            return Err(format!(
                "network.allow_out {e:?} is an address or a range: warden allows egress by name (give the host names the sandbox may reach)"
            ));
        }
        if e.contains(',') {
            return Err(format!("network.allow_out {e:?} is not a name"));
        }
        out.push(e.to_ascii_lowercase());
    }
    for entry in net.deny_out.iter().flatten() {
        if entry.trim().is_empty() {
            return Err("network.deny_out holds an empty entry".into());
        }
    }
    Ok(out)
}

/// The names the client gave, as the label keeps them.
pub(super) fn given(labels: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    labels
        .get(ALLOW_OUT)
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The label value for `names`.
pub(super) fn label_of(names: &[String]) -> String {
    names.join(",")
}

/// `PUT /sandboxes/{id}/network`: 204, or 409 when the sandbox is paused
/// or was made without an egress proxy (nothing to change live).
pub async fn update(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(d) = permit(
        &e.app,
        &caller,
        "PATCH",
        "/v1/sandboxes/{id}/egress",
        Some(&id),
    ) {
        return d.response();
    }
    let net: Network = match super::control::optional_body(&body) {
        Ok(n) => n,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let wanted = match domains_of(&net) {
        Ok(d) => d,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let info = match super::control::running(&e, &id).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    if info.state != "running" {
        return error(
            StatusCode::CONFLICT,
            format!(
                "sandbox {id} is paused: connect to it (resume it) first, then change its network"
            ),
        );
    }
    let before = given(&info.labels);
    let patch = EgressPatch {
        allow: wanted.clone(),
        remove: before
            .iter()
            .filter(|n| !wanted.contains(n))
            .cloned()
            .collect(),
    };
    let changed = egress::patch(
        State(e.app.clone()),
        Extension(caller),
        Path(id.clone()),
        Body(patch),
    )
    .await;
    match changed {
        Ok(Json(_)) => {
            let label = label_of(&wanted);
            let kept = set_labels(&e.app, &id, move |l| {
                l.insert(ALLOW_OUT.into(), label);
            })
            .await;
            if let Err(r) = kept {
                return r;
            }
            StatusCode::NO_CONTENT.into_response()
        }
        Err(err) if err.status == StatusCode::CONFLICT => error(
            StatusCode::CONFLICT,
            format!(
                "{}; through E2B: create the sandbox with network={{\"allow_out\": [...]}} (or from a template whose profile sets egress.domains) to change its network later",
                err.problem.message
            ),
        ),
        Err(err) => from_api(super::control::in_e2b_words(err)),
    }
}

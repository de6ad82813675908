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

use super::answer::error;
use super::control::{from_api, set_labels};
use super::record::ALLOW_OUT;
use super::{permit, E2b};
use crate::api::EgressPatch;
use crate::app::App;
use crate::auth::Caller;
use crate::body::Body;
use crate::routes::egress;
use warden_policy::NetworkSpec;

/// E2B's network options (create's `network`, and the whole body of an
/// update, which also takes `allowInternetAccess`). An option this type
/// does not name is refused, never taken and ignored: a client of a later
/// SDK learns what warden does not do rather than believing it done.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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
    /// Sent by the SDK in snake case, as E2B's API names it.
    #[serde(default, alias = "allow_internet_access")]
    pub allow_internet_access: Option<bool>,
    /// Whether the sandbox's ports answer without its traffic access
    /// token: warden's never do (`false` is what warden gives).
    #[serde(default)]
    pub allow_public_traffic: Option<bool>,
    /// A Host header for every request relayed to the sandbox's ports:
    /// warden relays the client's own.
    #[serde(default)]
    pub mask_request_host: Option<serde_json::Value>,
    /// Ports inside that serve HTTPS: warden relays plain HTTP to them.
    #[serde(default)]
    pub https_ports: Option<serde_json::Value>,
}

/// Why the port options of `net` cannot be had, when one of them asks for
/// what warden's port relay does not do (`null`, an empty list and
/// `allowPublicTraffic: false` are what it does).
fn port_options_refused(net: &Network) -> Option<String> {
    if net.allow_public_traffic == Some(true) {
        return Some("network.allowPublicTraffic: true is not supported: warden relays to a sandbox's ports only for a caller with its traffic access token (or a token of the daemon); omit it or set it to false".into());
    }
    if net
        .mask_request_host
        .as_ref()
        .is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
    {
        return Some("network.maskRequestHost is not supported: warden relays each request to the sandbox's port with the Host header the client sent; omit it".into());
    }
    if net
        .https_ports
        .as_ref()
        .is_some_and(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Some("network.httpsPorts is not supported: warden relays plain HTTP (and WebSocket) to a sandbox's ports; serve plain HTTP on the port inside, or omit it".into());
    }
    None
}

/// What E2B's options ask of a sandbox's egress, in warden's terms.
///
/// E2B allows everything by default, `denyOut` takes addresses and ranges
/// away, and `allowOut` gives back (an allowed entry always wins over a
/// denied one); `allowInternetAccess: false` is `denyOut: ["0.0.0.0/0"]`.
/// In warden the template (the owner's profile) plays the part of
/// "everything": a sandbox reaches what its template allows and the
/// client's `allowOut` names, never more. So denying all traffic takes
/// the template's reach away (leaving `allowOut`), and denying an address
/// or a range is already so for a template that reaches nothing; for one
/// that reaches names, warden (which decides by name, never by an address
/// a program picked) cannot deny an address to them, and says so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Wanted {
    /// The names the client allows (`allowOut`), lowercased.
    pub allow: Vec<String>,
    /// All traffic denied: the template's reach taken away.
    pub deny_all: bool,
    /// Addresses and ranges denied, other than all traffic.
    pub deny: Vec<String>,
}

impl Wanted {
    /// Whether anything beyond the client's own names is denied.
    pub fn denies(&self) -> bool {
        self.deny_all || !self.deny.is_empty()
    }
}

/// An address or a range (`ADDR/LEN`), and whether it covers every
/// address of its family.
fn range_of(entry: &str) -> Option<bool> {
    let (addr, len) = match entry.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (entry, None),
    };
    let addr: std::net::IpAddr = addr.parse().ok()?;
    let most = if addr.is_ipv4() { 32 } else { 128 };
    match len {
        None => Some(false),
        Some(l) => {
            let l: u8 = l.parse().ok()?;
            (l <= most).then_some(l == 0)
        }
    }
}

/// What `net` (with `internet`, create's or the update's
/// `allowInternetAccess`) asks, or why it cannot be had.
pub(super) fn wanted_of(net: &Network, internet: Option<bool>) -> Result<Wanted, String> {
    if net.rules.is_some() || net.egress_proxy.is_some() || net.dns_servers.is_some() {
        return Err("network.rules, egressProxy and dnsServers are not supported: warden's egress proxy decides by name (allow_out), and secrets are given through a warden profile (the template)".into());
    }
    if let Some(why) = port_options_refused(net) {
        return Err(why);
    }
    let mut out = Wanted {
        deny_all: internet == Some(false),
        ..Wanted::default()
    };
    for entry in net.allow_out.iter().flatten() {
        let e = entry.trim();
        if range_of(e).is_some() || e.contains('/') {
            return Err(format!(
                "network.allow_out {e:?} is an address or a range: warden allows egress by name (give the host names the sandbox may reach)"
            ));
        }
        if e.contains(',') {
            return Err(format!("network.allow_out {e:?} is not a name"));
        }
        out.allow.push(e.to_ascii_lowercase());
    }
    for entry in net.deny_out.iter().flatten() {
        let e = entry.trim();
        match range_of(e) {
            Some(true) => out.deny_all = true,
            Some(false) => out.deny.push(e.to_string()),
            None if e.is_empty() => {
                return Err("network.deny_out holds an empty entry".into());
            }
            None => {
                return Err(format!(
                    "network.deny_out {e:?} is not an address or a range (CIDR): deny rules take addresses, not names; a name the sandbox may not reach is one left out of allow_out"
                ))
            }
        }
    }
    Ok(out)
}

/// The egress allowlist E2B's network options ask for, by name (the
/// door's mapping, as its tests read it).
#[cfg(test)]
pub(super) fn domains_of(net: &Network) -> Result<Vec<String>, String> {
    wanted_of(net, net.allow_internet_access).map(|w| w.allow)
}

/// What a sandbox's template (the owner's profile, as the sandbox was
/// made from it) lets it reach besides the client's names.
#[derive(Debug, Default)]
pub(super) struct TemplateReach {
    /// The owner's allowlist entries, as written.
    pub names: Vec<String>,
    /// Reach that is not a name on the list, which the door cannot take
    /// away live: the host's ports, ask mode, request rules.
    pub other: Option<&'static str>,
}

impl TemplateReach {
    fn any(&self) -> bool {
        !self.names.is_empty() || self.other.is_some()
    }
}

/// The reach of sandbox `id`'s template, from the spec it was made with
/// (before any live change).
pub(super) fn template_reach(app: &App, id: &str) -> Result<TemplateReach, String> {
    let sb = app.sandbox(id).map_err(|e| e.problem.message)?;
    let stored: warden_runtime::state::Stored =
        warden_runtime::state::read_json(&sb.dir().join(warden_runtime::state::STORED))
            .map_err(|e| format!("the sandbox's spec cannot be read: {e}"))?;
    let NetworkSpec::Egress(egress) = &stored.spec.network else {
        return Ok(TemplateReach::default());
    };
    let other = if !egress.host_ports.is_empty() {
        Some("ports of the host (egress.host_ports)")
    } else if egress.ask {
        Some("names a person allows when asked (egress.ask)")
    } else if !egress.requests.is_empty() {
        Some("requests its rules allow (egress.requests)")
    } else {
        None
    };
    Ok(TemplateReach {
        names: egress
            .domains
            .iter()
            .filter(|d| !d.caller)
            .map(|d| d.source.clone())
            .collect(),
        other,
    })
}

/// Why `wanted` cannot be had for a sandbox whose template reaches
/// `reach`; `None` when it can.
pub(super) fn refusal(wanted: &Wanted, reach: &TemplateReach) -> Option<String> {
    if let (true, Some(other)) = (wanted.deny_all, reach.other) {
        return Some(format!(
            "network: all traffic cannot be denied to this sandbox: its template lets it reach {other}, which warden cannot take away through E2B; use a template (warden profile) without it"
        ));
    }
    match wanted.deny.first() {
        Some(d) if !wanted.deny_all && reach.any() => Some(format!(
            "network.deny_out {d:?}: warden allows egress by name and cannot deny an address to the names this sandbox's template allows; deny all traffic (\"0.0.0.0/0\", or allow_internet_access=False) and list in allow_out the names the sandbox may reach"
        )),
        _ => None,
    }
}

/// Record in `labels` the template's names the door took away.
pub(super) fn keep_denied(
    labels: &mut std::collections::BTreeMap<String, String>,
    names: &[String],
) {
    if names.is_empty() {
        labels.remove(DENIED);
    } else {
        labels.insert(DENIED.into(), label_of(names));
    }
}

/// Keep the template's `names` off a sandbox that is made but not yet
/// started: its first start applies the removal as any live change (the
/// proxy never allows them, not even for a moment).
pub(super) fn deny_before_start(app: &App, id: &str, names: &[String]) -> Result<(), String> {
    use warden_runtime::allowlist::{Changes, EGRESS_CHANGES};
    if names.is_empty() {
        return Ok(());
    }
    let sb = app.sandbox(id).map_err(|e| e.problem.message)?;
    let changes = Changes {
        removed: names.to_vec(),
        ..Changes::default()
    };
    warden_runtime::state::write_json(&sb.dir().join(EGRESS_CHANGES), &changes)
        .map_err(|e| format!("the sandbox's allowlist cannot be kept: {e}"))
}

/// The label that keeps the template's names the door took away (all
/// traffic denied): only those are given back by an update that no
/// longer denies it, never a name the owner took away himself.
pub(super) const DENIED: &str = "e2b.denied";

/// The label that keeps, on a copy (a fork, a sandbox made from a
/// snapshot), the template's names its spec may lack because the door
/// took them from its source: they stay the template's for every update.
pub(super) const TEMPLATE: &str = "e2b.template";

/// The door's record of a sandbox as a copy of it carries it: the
/// template's names the door took away (still taken away in the copy),
/// and every template name the copy's spec may lack.
pub(super) fn carried(
    labels: &std::collections::BTreeMap<String, String>,
) -> (Vec<String>, Vec<String>) {
    let denied = listed_in(labels, DENIED);
    let mut template = listed_in(labels, TEMPLATE);
    for n in &denied {
        if !template.contains(n) {
            template.push(n.clone());
        }
    }
    (denied, template)
}

/// Record `carried`'s names in a copy's `labels`.
pub(super) fn keep_carried(
    labels: &mut std::collections::BTreeMap<String, String>,
    denied: &[String],
    template: &[String],
) {
    keep_denied(labels, denied);
    if template.is_empty() {
        labels.remove(TEMPLATE);
    } else {
        labels.insert(TEMPLATE.into(), label_of(template));
    }
}

/// The names the client gave, as the label keeps them.
pub(super) fn given(labels: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    listed_in(labels, ALLOW_OUT)
}

/// The names label `key` keeps.
fn listed_in(labels: &std::collections::BTreeMap<String, String>, key: &str) -> Vec<String> {
    labels
        .get(key)
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
/// or was made without an egress proxy (nothing to change live) while the
/// update allows names. An update replaces the whole configuration, as
/// E2B's does: the client's names are `allowOut`'s, and the template's
/// reach is there unless all traffic is denied.
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
    let wanted = match wanted_of(&net, net.allow_internet_access) {
        Ok(w) => w,
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
    let reach = match template_reach(&e.app, &id) {
        Ok(r) => r,
        Err(why) => return error(StatusCode::INTERNAL_SERVER_ERROR, why),
    };
    if let Some(why) = refusal(&wanted, &reach) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let before = given(&info.labels);
    let listed = match change(&e, &caller, &id, EgressPatch::default()).await {
        Ok(l) => l,
        // No proxy: nothing reaches out, which is all an update that
        // allows no name asks.
        Err(r) if r.status() == StatusCode::CONFLICT && wanted.allow.is_empty() => {
            return StatusCode::NO_CONTENT.into_response()
        }
        Err(r) => return r,
    };
    // The client's: what it allows now, less what it allowed before.
    let mut remove: Vec<String> = before
        .iter()
        .filter(|n| !wanted.allow.contains(n))
        .cloned()
        .collect();
    // The template's: taken away when all traffic is denied, given back
    // (as the owner's, which they are) when an update no longer denies it
    // (those the door took away, never one the owner removed).
    let taken = listed_in(&info.labels, DENIED);
    let (mut restore, on_list) = (Vec::new(), |n: &String| listed.contains(n));
    let mut denied = Vec::new();
    // A copy (a fork) runs under its source's configuration, the door's
    // removals applied: the template's names it took away are no longer
    // in the copy's spec, only in the label the copy carries, which only
    // this door writes, and only with the template's names.
    // A copy's record also names the template's names it was made
    // without (`e2b.template`), so one given back to it is taken away
    // again by a later update that denies all traffic.
    let mut template: Vec<String> = reach.names.clone();
    for n in taken.iter().chain(listed_in(&info.labels, TEMPLATE).iter()) {
        if !template.contains(n) {
            template.push(n.clone());
        }
    }
    for name in &template {
        if wanted.allow.contains(name) {
            continue;
        }
        match (wanted.deny_all, on_list(name)) {
            (true, true) => {
                remove.push(name.clone());
                denied.push(name.clone());
            }
            (true, false) if taken.contains(name) => denied.push(name.clone()),
            (false, false) if taken.contains(name) => restore.push(name.clone()),
            _ => {}
        }
    }
    remove.retain(|n| on_list(n));
    let patch = EgressPatch {
        allow: wanted.allow.clone(),
        remove,
    };
    if let Err(r) = change(&e, &caller, &id, patch).await {
        return r;
    }
    if !restore.is_empty() {
        let patch = EgressPatch {
            allow: restore,
            remove: Vec::new(),
        };
        if let Err(r) = change(&e, &Caller::Owner, &id, patch).await {
            return r;
        }
    }
    let label = label_of(&wanted.allow);
    let kept = set_labels(&e.app, &id, move |l| {
        l.insert(ALLOW_OUT.into(), label);
        keep_denied(l, &denied);
    })
    .await;
    if let Err(r) = kept {
        return r;
    }
    StatusCode::NO_CONTENT.into_response()
}

/// One live change of sandbox `id`'s allowlist by `caller`; the list as
/// it is after it.
async fn change(
    e: &E2b,
    caller: &Caller,
    id: &str,
    patch: EgressPatch,
) -> Result<Vec<String>, Response> {
    let changed = egress::patch(
        State(e.app.clone()),
        Extension(caller.clone()),
        Path(id.to_string()),
        Body(patch),
    )
    .await;
    match changed {
        Ok(Json(list)) => Ok(list.allow),
        Err(err) if err.status == StatusCode::CONFLICT => Err(error(
            StatusCode::CONFLICT,
            format!(
                "{}; through E2B: create the sandbox with network={{\"allow_out\": [...]}} (or from a template whose profile sets egress.domains) to change its network later",
                err.problem.message
            ),
        )),
        Err(err) => Err(from_api(super::control::in_e2b_words(err))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(json: serde_json::Value) -> Network {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn all_traffic_denied_is_what_allow_internet_access_false_says() {
        // The SDK sends it in snake case.
        let n = net(serde_json::json!({"allow_internet_access": false}));
        assert!(wanted_of(&n, n.allow_internet_access).unwrap().deny_all);
        for all in ["0.0.0.0/0", "::/0"] {
            let n = net(serde_json::json!({"denyOut": [all], "allowOut": ["a.example"]}));
            let w = wanted_of(&n, None).unwrap();
            assert!(w.deny_all && w.deny.is_empty(), "{all}");
            assert_eq!(w.allow, ["a.example"]);
        }
        let n = net(serde_json::json!({"denyOut": ["10.0.0.0/8", "192.0.2.1"]}));
        let w = wanted_of(&n, Some(true)).unwrap();
        assert!(!w.deny_all);
        assert_eq!(w.deny, ["10.0.0.0/8", "192.0.2.1"]);
    }

    #[test]
    fn a_deny_entry_that_is_no_address_or_range_is_refused() {
        for bad in ["example.com", "10.0.0.0/33", "1.2.3.4/x", ""] {
            let n = net(serde_json::json!({ "denyOut": [bad] }));
            assert!(wanted_of(&n, None).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_address_is_denied_only_where_the_template_reaches_nothing() {
        let some = Wanted {
            deny: vec!["192.0.2.1".into()],
            ..Wanted::default()
        };
        assert!(refusal(&some, &TemplateReach::default()).is_none());
        let names = TemplateReach {
            names: vec!["api.example.com".into()],
            other: None,
        };
        assert!(refusal(&some, &names).is_some());
        // Denying all traffic takes the names away, and needs no address.
        let all = Wanted {
            deny_all: true,
            ..some
        };
        assert!(refusal(&all, &names).is_none());
        let ports = TemplateReach {
            names: Vec::new(),
            other: Some("ports of the host (egress.host_ports)"),
        };
        assert!(refusal(&all, &ports).is_some());
    }
}

//! Warm pools: sandboxes of a profile made and started ahead of demand, so
//! that a create answers in the time of a database update.
//!
//! A pooled sandbox belongs to nobody: it is hidden from every route until
//! a create takes it. A create takes one only when the create, resolved
//! as if it were made as that very sandbox, gives the spec the sandbox
//! runs in everything but its allowed names (so a profile edited since in
//! anything else, or an inline document that changes limits, mounts,
//! secrets or pinned hosts, never gets a stale sandbox: it is made cold);
//! it must name no workspace and no id of its own. What is the claim's own
//! is applied at hand-out, before anyone can use it: its allowed names
//! (the running proxy's list changed live, names the claim does not allow
//! removed; a sandbox whose change fails is discarded, never handed out),
//! its labels, its owner (and that owner's quota), its TTL. A pooled sandbox is taken out of the pool in one database
//! statement, so it is never handed out twice. The pools are filled again
//! in the background; sandboxes of a pool that died are removed.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use warden_runtime::lifecycle::{self, CreateRequest};
use warden_runtime::resolve::{Context, Input, ProfileSource};
use warden_workspace::Sandbox;

use crate::api::SandboxInfo;
use crate::app::App;
use crate::auth::Caller;
use crate::db::SandboxRow;
use crate::error::{chain, ApiError};

/// One pool of the daemon's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// A profile by name (`warden profile list`).
    pub profile: String,
    /// How many started sandboxes wait for a create.
    pub size: usize,
}

/// The largest pool: each waiting sandbox holds a supervisor and an init.
pub const MAX_POOL_SIZE: usize = 256;

/// How often the pools are checked even when nothing was taken (a pooled
/// sandbox that died is replaced).
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// What a create asks for, as far as the pool is concerned.
pub struct Claim<'a> {
    pub profile: &'a str,
    pub input: &'a Input,
    pub caller: &'a Caller,
    pub labels: std::collections::BTreeMap<String, String>,
    pub ttl: Option<Duration>,
}

/// Hand out a pooled sandbox for `claim`, or `None` when none fits (the
/// create is then made cold). Blocking.
pub fn claim(app: &Arc<App>, claim: Claim<'_>) -> Result<Option<SandboxInfo>, ApiError> {
    if !app.pools.iter().any(|p| p.profile == claim.profile) {
        return Ok(None);
    }
    let candidates = app
        .db()?
        .pooled(Some(claim.profile))
        .map_err(|e| ApiError::internal(chain(&e)))?;
    for (id, _) in candidates {
        let Ok(sb) = app.store.get(&id) else {
            let _ = app.db()?.take_pooled(&id);
            continue;
        };
        if !lifecycle::liveness(&sb).running() {
            discard(app, &id);
            continue;
        }
        let Some(delta) = fits(app, &sb, claim.input) else {
            // Another create may fit it; a profile edited since (beyond its
            // names) makes every one stale, and the refill replaces them.
            continue;
        };
        if !app
            .db()?
            .take_pooled(&id)
            .map_err(|e| ApiError::internal(chain(&e)))?
        {
            // Another create took it first.
            continue;
        }
        // The claim's names, applied before anyone can use it: should the
        // change fail, the sandbox is never handed out.
        if !delta.is_empty() {
            let by = format!(
                "a create from the pool of {}{}",
                claim.profile,
                claim
                    .caller
                    .token_id()
                    .map(|t| format!(" by token {t}"))
                    .unwrap_or_default()
            );
            let changed = warden_runtime::client::Connection::open(&lifecycle::control(&sb))
                .and_then(|c| c.set_egress(delta.allow.clone(), delta.remove.clone(), &by));
            if changed.is_err() {
                discard(app, &id);
                continue;
            }
        }
        let handed = hand_out(app, &sb, &claim);
        app.pool_wake.notify_one();
        return match handed {
            Ok(info) => Ok(Some(info)),
            Err(e) => {
                // Not this owner's (its quota): back in the pool.
                let _ = app.db()?.insert_pooled(&id, claim.profile);
                Err(e)
            }
        };
    }
    Ok(None)
}

/// What must change in `sb`'s allowlist for it to be made as `input`:
/// the entries to add and to remove. `None` when `input`, resolved as if it
/// were made as `sb`, differs from the spec `sb` runs in anything but its
/// allowed names (limits, mounts, secrets, network mode, pinned hosts, ...).
fn fits(app: &App, sb: &Sandbox, input: &Input) -> Option<Delta> {
    let stored = warden_runtime::state::read_json::<warden_runtime::state::Stored>(
        &sb.dir().join(warden_runtime::state::STORED),
    )
    .ok()?;
    let ctx = Context {
        catalog: &app.catalog,
        defaults: &app.defaults,
        state_dir: Some(&app.state_dir),
        otlp: false,
        id: sb.name(),
    };
    let r = warden_runtime::resolve::resolve(input.clone(), &ctx, Some(sb)).ok()?;
    if r.sinks.audit_log != stored.sinks.audit_log {
        return None;
    }
    let mut want = serde_json::to_value(&r.spec).ok()?;
    let mut have = serde_json::to_value(&stored.spec).ok()?;
    let wanted = take_domains(&mut want);
    let had = take_domains(&mut have);
    if want != have {
        return None;
    }
    Some(Delta {
        allow: wanted
            .iter()
            .filter(|d| !had.contains(d))
            .cloned()
            .collect(),
        remove: had
            .iter()
            .filter(|d| !wanted.contains(d))
            .cloned()
            .collect(),
    })
}

/// Entries to add to and remove from a pooled sandbox's allowlist.
#[derive(Debug, Default, PartialEq, Eq)]
struct Delta {
    allow: Vec<String>,
    remove: Vec<String>,
}

impl Delta {
    fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.remove.is_empty()
    }
}

/// The allowed names of a spec (as written: `source`), taken out of it.
fn take_domains(spec: &mut serde_json::Value) -> Vec<String> {
    let Some(domains) = spec
        .pointer_mut("/network/Egress/domains")
        .map(serde_json::Value::take)
    else {
        return Vec::new();
    };
    domains
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d.get("source").and_then(|s| s.as_str()).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Make `sb` the claim's: its owner's quota, its record, its TTL.
fn hand_out(app: &Arc<App>, sb: &Sandbox, claim: &Claim<'_>) -> Result<SandboxInfo, ApiError> {
    let one_at_a_time = app.quota_lock.lock();
    if let Caller::Token(t) = claim.caller {
        crate::routes::sandboxes::within_quota(app, t, sb)?;
    }
    let row = SandboxRow {
        id: sb.name().to_string(),
        created_ms: warden_runtime::state::now_ms(),
        labels: claim.labels.clone(),
        profile: Some(claim.profile.to_string()),
        token: claim.caller.token_id().map(str::to_string),
    };
    app.db()?
        .insert_sandbox(&row)
        .map_err(|e| ApiError::internal(chain(&e)))?;
    drop(one_at_a_time);
    if claim.ttl.is_some() {
        warden_runtime::client::Connection::open(&lifecycle::control(sb))
            .and_then(|c| c.set_ttl(claim.ttl))
            .map_err(|e| {
                ApiError::internal(format!(
                    "cannot set the TTL of {}: {}",
                    sb.name(),
                    chain(&e)
                ))
            })?;
    }
    Ok(app.info(sb, Some(&row)))
}

/// Take `id` out of the pool and remove it (it died, or is stale).
fn discard(app: &App, id: &str) {
    if let Ok(db) = app.db() {
        let _ = db.take_pooled(id);
    }
    let _ = lifecycle::remove(&app.store, id, true);
}

/// Make one sandbox for the pool of `profile`. Blocking.
fn make_one(app: &App, profile: &str) -> Result<String, String> {
    let id = format!("sb-{}", crate::auth::random_id(6));
    let ctx = Context {
        catalog: &app.catalog,
        defaults: &app.defaults,
        state_dir: Some(&app.state_dir),
        otlp: false,
        id: &id,
    };
    let input = Input {
        profile: Some(ProfileSource::Named(profile.to_string())),
        ..Default::default()
    };
    let req = CreateRequest {
        workspace: None,
        profile_name: Some(profile.to_string()),
        input,
        ttl: None,
        one_shot: false,
    };
    let (sb, _) = lifecycle::create(&app.store, &id, req, &ctx).map_err(|e| chain(&e))?;
    // In the pool (hidden) before it runs, so that no route sees it half
    // made.
    let recorded = app
        .db()
        .map_err(|e| e.problem.message)
        .and_then(|db| db.insert_pooled(&id, profile).map_err(|e| chain(&e)));
    if let Err(e) = recorded {
        let _ = lifecycle::remove(&app.store, &id, true);
        return Err(e);
    }
    if let Err(e) = lifecycle::start(&app.state_dir, &sb, &app.exe) {
        discard(app, &id);
        return Err(chain(&e));
    }
    Ok(id)
}

/// Keep every pool full, until the daemon stops. Failures are said once
/// per profile and retried at the next check.
pub async fn refill(app: Arc<App>) {
    let mut failing: std::collections::HashSet<String> = Default::default();
    loop {
        for pool in app.pools.clone() {
            while let Ok(ready) = app.db().and_then(|db| {
                db.pooled(Some(&pool.profile))
                    .map_err(|e| ApiError::internal(chain(&e)))
            }) {
                // Dead ones go, and stale ones (their profile changed
                // since in more than its names, which a hand-out puts
                // right): both are made again below.
                let mut alive = 0;
                for (id, _) in &ready {
                    let fresh = Input {
                        profile: Some(ProfileSource::Named(pool.profile.clone())),
                        ..Default::default()
                    };
                    match app.store.get(id) {
                        Ok(sb)
                            if lifecycle::liveness(&sb).running()
                                && fits(&app, &sb, &fresh).is_some() =>
                        {
                            alive += 1
                        }
                        _ => {
                            let (a, id) = (app.clone(), id.clone());
                            let _ = tokio::task::spawn_blocking(move || discard(&a, &id)).await;
                        }
                    }
                }
                if alive >= pool.size {
                    break;
                }
                let (a, profile) = (app.clone(), pool.profile.clone());
                match tokio::task::spawn_blocking(move || make_one(&a, &profile)).await {
                    Ok(Ok(_)) => {
                        failing.remove(&pool.profile);
                    }
                    Ok(Err(e)) => {
                        if failing.insert(pool.profile.clone()) {
                            tracing::warn!("cannot fill the pool of {}: {e}", pool.profile);
                        }
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        tokio::select! {
            _ = app.pool_wake.notified() => {}
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

/// At start: pooled sandboxes of a profile no longer pooled are removed.
pub fn reconcile(app: &App) -> Vec<String> {
    let mut notes = Vec::new();
    let Ok(pooled) = app
        .db()
        .and_then(|db| db.pooled(None).map_err(|e| ApiError::internal(chain(&e))))
    else {
        return notes;
    };
    for (id, profile) in pooled {
        if !app.pools.iter().any(|p| p.profile == profile) {
            discard(app, &id);
            notes.push(format!(
                "pooled sandbox {id} of {profile} is removed: {profile} has no pool now"
            ));
        }
    }
    notes
}

/// At a graceful stop: the pools' sandboxes are the daemon's own, nobody
/// else's, so they go with it (after a `kill -9` they stay, and the next
/// start takes them back into its pools or removes them). Blocking.
pub fn drain(app: &App) {
    let Ok(pooled) = app
        .db()
        .and_then(|db| db.pooled(None).map_err(|e| ApiError::internal(chain(&e))))
    else {
        return;
    };
    for (id, _) in pooled {
        discard(app, &id);
    }
}

//! Warm pools: sandboxes of a profile made and started ahead of demand, so
//! that a create answers in the time of a database update.
//!
//! A pooled sandbox belongs to nobody: it is hidden from every route until
//! a create takes it. A create takes one only when the create, resolved
//! as if it were made as that very sandbox, gives exactly the spec the
//! sandbox runs (so a profile edited since, or an inline document that
//! changes anything, never gets a stale or wider sandbox: it is made cold);
//! it must name no workspace and no id of its own. What is the claim's own
//! is applied at hand-out: its labels, its owner (and that owner's quota),
//! its TTL. A pooled sandbox is taken out of the pool in one database
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
        if !fits(app, &sb, claim.input) {
            // Another create may fit it (an inline document that changes
            // nothing); a profile edited since makes every one stale, and
            // the refill replaces them as they are discarded at start.
            continue;
        }
        if !app
            .db()?
            .take_pooled(&id)
            .map_err(|e| ApiError::internal(chain(&e)))?
        {
            // Another create took it first.
            continue;
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

/// Whether `input`, resolved as if it were made as `sb`, gives exactly
/// the spec `sb` runs.
fn fits(app: &App, sb: &Sandbox, input: &Input) -> bool {
    let Ok(stored) = warden_runtime::state::read_json::<warden_runtime::state::Stored>(
        &sb.dir().join(warden_runtime::state::STORED),
    ) else {
        return false;
    };
    let ctx = Context {
        catalog: &app.catalog,
        defaults: &app.defaults,
        state_dir: Some(&app.state_dir),
        otlp: false,
        id: sb.name(),
    };
    match warden_runtime::resolve::resolve(input.clone(), &ctx, Some(sb)) {
        Ok(r) => {
            let (Ok(want), Ok(have)) = (
                serde_json::to_value(&r.spec),
                serde_json::to_value(&stored.spec),
            ) else {
                return false;
            };
            want == have && r.sinks.audit_log == stored.sinks.audit_log
        }
        Err(_) => false,
    }
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
                // since): both are made again below.
                let mut alive = 0;
                for (id, _) in &ready {
                    let fresh = Input {
                        profile: Some(ProfileSource::Named(pool.profile.clone())),
                        ..Default::default()
                    };
                    match app.store.get(id) {
                        Ok(sb) if lifecycle::liveness(&sb).running() && fits(&app, &sb, &fresh) => {
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

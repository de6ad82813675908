//! Warm pools: sandboxes of a profile made and started ahead of demand, so
//! that a create answers in the time of a database update.
//!
//! A pooled sandbox belongs to nobody: it is hidden from every route until
//! a create takes it. A create takes one only when the create, resolved
//! as if it were made as that very sandbox, gives the spec the sandbox
//! runs in everything the field table does not say a running sandbox can
//! take ([`warden_policy::fit`]: its allowed names, and a disk budget
//! nobody asked for): so a profile edited since in anything else, or an
//! inline document that changes limits, mounts, secrets, pinned hosts or
//! an option added later, never gets a stale sandbox: it is made cold;
//! it must name no workspace and no id of its own. What is the claim's own
//! is applied at hand-out, before anyone can use it: its allowed names
//! (the running proxy's list changed live, names the claim does not allow
//! removed; a sandbox whose change fails is discarded, never handed out),
//! its labels, its owner (and that owner's quota), its TTL. A pooled sandbox is taken out of the pool in one database
//! statement, so it is never handed out twice. The pools are filled again
//! in the background; sandboxes of a pool that died are removed.

use std::sync::Arc;
use std::time::Duration;

use warden_policy::fit::AllowlistDelta;
use warden_policy::Trust;
use warden_runtime::lifecycle::{self, CreateRequest, Owner};
use warden_runtime::resolve::{Context, Input, ProfileSource};
use warden_workspace::Sandbox;

use crate::api::SandboxInfo;
use crate::app::App;
use crate::auth::Caller;
use crate::db::SandboxRow;
use crate::error::{chain, ApiError};

// The pools' configuration, where the cli and the daemon's settings
// name it.
use crate::settings::PoolSpec;

/// What a pool aims at now, and how many creates led it there.
pub fn target(app: &App, pool: &PoolSpec) -> (usize, usize) {
    let demand = pool
        .window()
        .map(|w| app.pool_demand.recent(&pool.profile, w))
        .unwrap_or(0);
    (pool.target(demand), demand)
}

/// Each pool's state, for `GET /v1/pools`.
pub fn status(app: &App) -> Result<Vec<crate::api::PoolStatus>, ApiError> {
    let pooled = app
        .db()?
        .pooled(None)
        .map_err(|e| ApiError::internal(chain(&e)))?;
    Ok(app
        .pools
        .iter()
        .map(|p| {
            let (target, demand) = target(app, p);
            crate::api::PoolStatus {
                profile: p.profile.clone(),
                size: p.size,
                max: p.max,
                window_seconds: p.window().map(|w| w.as_secs()),
                demand,
                target,
                ready: pooled.iter().filter(|(_, prof)| *prof == p.profile).count(),
            }
        })
        .collect())
}

/// A create that a pool of `profile` could serve came: counted for
/// autoscale, and the refill woken when the pool may grow.
pub fn note_demand(app: &App, profile: &str) {
    if let Some(pool) = app.pools.iter().find(|p| p.profile == profile) {
        if let Some(w) = pool.window() {
            app.pool_demand.record(profile, w);
            app.pool_wake.notify_one();
        }
    }
}

/// How often the pools are checked even when nothing was taken (a pooled
/// sandbox that died is replaced).
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// What a create asks for, as far as the pool is concerned.
pub struct Claim<'a> {
    pub profile: &'a str,
    pub input: &'a Input,
    pub caller: &'a Caller,
    /// What the caller may name and reach (the trust rule's).
    pub trust: Trust,
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
        // A sandbox that took a pooled one's name (removed behind the
        // daemon's back) is not pooled: its entry goes, the sandbox is
        // left as it is, never handed out.
        if !app
            .db()?
            .is_pooled_sandbox(&sb)
            .map_err(|e| ApiError::internal(chain(&e)))?
        {
            let _ = app.db()?.take_pooled(&id);
            continue;
        }
        if !lifecycle::liveness(&sb).running() {
            // Not running: one the refill is making at this moment (it
            // enters the pool before it starts), or a dead one, which the
            // refill replaces. Never removed from here: removing one
            // being started left it running outside the pool, handed to
            // nobody.
            continue;
        }
        let Some(delta) = fits(app, &sb, claim.input, claim.trust, claim.caller.owner()) else {
            // Another create may fit it; a profile edited since (beyond its
            // names) makes every one stale, and the refill replaces them.
            continue;
        };
        // A claimant over its quota is refused before the sandbox is
        // touched (checked again, under the lock, as it is handed out): a
        // refused claim neither changes a pooled sandbox nor costs the
        // pool one.
        if let Caller::Token(t) = claim.caller {
            let _one_at_a_time = app.quota_lock.lock();
            crate::quota::within_quota(app, t, &sb)?;
        }
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
            let control = lifecycle::control(&sb);
            let open = || warden_runtime::client::Connection::open(&control);
            let changed = open()
                .and_then(|c| {
                    c.set_egress(delta.allow.clone(), delta.remove.clone(), &by, Trust::Owner)
                })
                .and_then(|_| match delta.allow_by_caller.is_empty() {
                    true => Ok(Vec::new()),
                    false => open().and_then(|c| {
                        c.set_egress(
                            delta.allow_by_caller.clone(),
                            Vec::new(),
                            &by,
                            Trust::Caller,
                        )
                    }),
                });
            if changed.is_err() {
                discard(app, &id);
                continue;
            }
        }
        let handed = hand_out(app, &sb, &claim);
        app.pool_wake.notify_one();
        return match handed {
            Ok(info) => Ok(Some(info)),
            Err(e) if delta.is_empty() => {
                // Not this owner's (its quota), and untouched: back in
                // the pool.
                let _ = app.db()?.insert_pooled(&sb, claim.profile);
                Err(e)
            }
            Err(e) => {
                // Its allowlist is the claimant's now, and its log names
                // the claimant: never handed to anyone else.
                discard(app, &id);
                Err(e)
            }
        };
    }
    Ok(None)
}

/// What must change in `sb`'s allowlist for it to be made as `input`.
/// `None` when `input`, resolved as if it were made as `sb`, differs from
/// the spec `sb` runs in anything the field table does not say a running
/// sandbox can take (see [`warden_policy::fit`]: its allowed names are
/// changed live; a disk budget nobody asked for is alike whatever its
/// size; anything else, a new option included, makes `sb` stale).
fn fits(
    app: &App,
    sb: &Sandbox,
    input: &Input,
    trust: Trust,
    owner: Owner<'_>,
) -> Option<AllowlistDelta> {
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
        trust,
        owner,
    };
    let r = warden_runtime::resolve::resolve(input.clone(), &ctx, Some(sb)).ok()?;
    // A pooled sandbox is made as the owner's: its grants file is the
    // owner's, and a token's claim (given its own) never fits it.
    if r.sinks.audit_log != stored.sinks.audit_log || r.sinks.grants != stored.sinks.grants {
        return None;
    }
    warden_policy::fit::fit(&r.spec, &stored.spec)
}

/// Make `sb` the claim's: its owner's quota, its record, its TTL.
fn hand_out(app: &Arc<App>, sb: &Sandbox, claim: &Claim<'_>) -> Result<SandboxInfo, ApiError> {
    let one_at_a_time = app.quota_lock.lock();
    if let Caller::Token(t) = claim.caller {
        crate::quota::within_quota(app, t, sb)?;
    }
    let row = SandboxRow::of(
        sb,
        claim.labels.clone(),
        Some(claim.profile.to_string()),
        claim.caller.token_id().map(str::to_string),
    );
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
        // Nothing should hold a credential for a pooled sandbox; whatever
        // does ends with it.
        let _ = db.remove_sandbox(id);
    }
    if let Err(e) = lifecycle::remove(&app.store, id, true) {
        tracing::warn!("cannot remove the pooled sandbox {id}: {}", chain(&e));
    }
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
        // A pool's profile is named over the API: a plain name of the
        // catalogue, whoever asked for the pool.
        trust: Trust::Caller,
        // Made as the owner's: a profile's caches bound in it are the
        // owner's, so it fits the owner's creates only; a token's create
        // of a profile with caches resolves to the token's own caches,
        // never fits, and is made cold.
        owner: Owner::Machine,
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
        .and_then(|db| db.insert_pooled(&sb, profile).map_err(|e| chain(&e)));
    if let Err(e) = recorded {
        let _ = lifecycle::remove(&app.store, &id, true);
        return Err(e);
    }
    let started = crate::secret_programs::allowed(app, &Caller::Owner, &sb)
        .map_err(|e| e.problem.message)
        .and_then(|()| lifecycle::start(&app.state_dir, &sb, &app.exe).map_err(|e| chain(&e)));
    if let Err(e) = started {
        discard(app, &id);
        return Err(e);
    }
    Ok(id)
}

/// Keep every pool full, until `stop` turns true. Failures are said once
/// per profile and retried at the next check.
///
/// The daemon waits for this to return before it drains the pools: a
/// sandbox being made runs on a blocking thread that aborting the task
/// would not stop, and one made after the drain looked would outlive the
/// daemon.
pub async fn refill(app: Arc<App>, mut stop: tokio::sync::watch::Receiver<bool>) {
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
                let mut alive_ids = Vec::new();
                for (id, _) in &ready {
                    let fresh = Input {
                        profile: Some(ProfileSource::Named(pool.profile.clone())),
                        ..Default::default()
                    };
                    match app.store.get(id) {
                        Ok(sb)
                            if lifecycle::liveness(&sb).running()
                                && fits(&app, &sb, &fresh, Trust::Caller, Owner::Machine)
                                    .is_some() =>
                        {
                            alive_ids.push(id.clone())
                        }
                        _ => {
                            let (a, id) = (app.clone(), id.clone());
                            let _ = tokio::task::spawn_blocking(move || discard(&a, &id)).await;
                        }
                    }
                }
                let alive = alive_ids.len();
                let (target, _) = target(&app, &pool);
                if alive > target {
                    // Demand fell: the newest beyond the target go.
                    let extra: Vec<String> = alive_ids
                        .iter()
                        .rev()
                        .take(alive - target)
                        .cloned()
                        .collect();
                    let a = app.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        for id in extra {
                            discard(&a, &id);
                        }
                    })
                    .await;
                    break;
                }
                if alive >= target || *stop.borrow() {
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
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            _ = app.pool_wake.notified() => {}
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = stop.changed() => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Demand;
    use crate::settings::DEFAULT_WINDOW;

    #[test]
    fn an_autoscaled_pool_aims_at_demand_between_its_size_and_its_max() {
        let p = PoolSpec {
            max: Some(5),
            ..PoolSpec::fixed("p", 2)
        };
        assert_eq!(
            [0, 2, 4, 9].map(|d| p.target(d)),
            [2, 2, 4, 5],
            "clamped to size..=max"
        );
        assert_eq!(
            PoolSpec::fixed("p", 3).target(100),
            3,
            "fixed pools ignore demand"
        );
        assert_eq!(p.window(), Some(DEFAULT_WINDOW));
        assert_eq!(PoolSpec::fixed("p", 3).window(), None);
    }

    #[test]
    fn a_pool_that_cannot_be_kept_is_refused_with_the_reason() {
        let bad = [
            (PoolSpec::fixed("p", 0), "size 0"),
            (
                PoolSpec::fixed("p", crate::settings::MAX_POOL_SIZE + 1),
                "size 257",
            ),
            (
                PoolSpec {
                    max: Some(1),
                    ..PoolSpec::fixed("p", 2)
                },
                "max 1",
            ),
            (
                PoolSpec {
                    window_seconds: Some(5),
                    ..PoolSpec::fixed("p", 2)
                },
                "give max as well",
            ),
            (
                PoolSpec {
                    max: Some(4),
                    window_seconds: Some(0),
                    ..PoolSpec::fixed("p", 2)
                },
                "window_seconds 0",
            ),
        ];
        for (p, why) in bad {
            let e = p.check().unwrap_err();
            assert!(e.contains(why), "{p:?}: {e}");
        }
    }

    #[test]
    fn demand_counts_only_the_creates_within_the_window() {
        let d = Demand::default();
        d.record("a", Duration::from_secs(60));
        d.record("a", Duration::from_secs(60));
        d.record("b", Duration::from_secs(60));
        assert_eq!(d.recent("a", Duration::from_secs(60)), 2);
        assert_eq!(d.recent("c", Duration::from_secs(60)), 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(d.recent("a", Duration::from_millis(10)), 0);
    }
}

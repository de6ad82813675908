//! E2B's volumes (`e2b.Volume`: `POST /volumes`, `GET /volumes`, `GET
//! /volumes/{id}`, `DELETE /volumes/{id}`) onto directories the daemon
//! makes and keeps in its own state, owner-only:
//!
//! ```text
//! STATE/e2b/volumes/ID/
//!   meta.json   id, name, the token that made it, when
//!   data/       the volume's files
//! ```
//!
//! A volume belongs to the token that made it: another token neither
//! lists, reads nor deletes it, and is answered exactly as for one that
//! does not exist (the daemon's owner sees every one). A caller names a
//! volume, never a host path: its directory is the daemon's choice, under
//! a random ID. A create's `volumeMounts` names the caller's volumes, or
//! those the owner declared and lets it mount ([`super::declared`]), and
//! where they go ([`mounts_of`]); the door writes their directories into
//! the new sandbox's spec as `filesystem.volumes` ([`attach`]), where a
//! writable one's writes are held within the sandbox's disk limit while
//! it runs and merged into the volume when it stops (the jail's `kept`).
//! A kept volume's bytes count against the token's disk quota
//! ([`bytes_of_token`]), with what its merges held back (the owner's
//! files its sandboxes wrote over, kept under the state's `held-back/`),
//! which its delete removes. Not
//! done yet: E2B's volume content API (a volume's files without a
//! sandbox), whose address the SDK derives from the domain answered
//! here, the door's own `.localhost` one, so those calls fail to connect
//! rather than going anywhere else.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::answer::error;
use super::declared::{invalid_name, MAX_NAME};
use super::{permit, E2b};
use crate::app::App;
use crate::auth::Caller;

/// The most volumes one token keeps.
const MAX_PER_TOKEN: usize = 16;

/// Creates and deletes one at a time, so that two creates of one name
/// cannot both pass the check that it is free.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `meta.json` of one volume.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    id: String,
    name: String,
    /// The token that made it; `None`: the daemon's owner.
    token: Option<String>,
    created_ms: u64,
}

/// `POST /volumes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewVolume {
    name: String,
}

/// A volume as E2B answers its create and get (`VolumeAndToken`).
#[derive(Serialize)]
struct Shown {
    #[serde(rename = "volumeID")]
    volume_id: String,
    name: String,
    /// E2B's credential for its volume content API, which warden does
    /// not serve: empty, so nothing that could stand for the caller's
    /// power is handed out for it.
    token: String,
    /// The door's own `.localhost` domain: the SDK derives the content
    /// API's address from it, which then never leaves this machine.
    domain: String,
}

/// A volume as E2B lists it.
#[derive(Serialize)]
struct Listed {
    #[serde(rename = "volumeID")]
    volume_id: String,
    name: String,
}

fn shown(m: Meta) -> Shown {
    Shown {
        volume_id: m.id,
        name: m.name,
        token: String::new(),
        domain: super::answer::sandbox_domain(),
    }
}

/// Where the daemon keeps the door's volumes.
fn root(app: &App) -> PathBuf {
    // Where the owner's files' closure knows a volume's `data/` for a
    // place of the sandboxes' own.
    app.state_dir
        .join(warden_runtime::owners_files::TOKEN_VOLUMES)
}

/// Whether `caller` may see volume `m`.
fn sees(caller: &Caller, m: &Meta) -> bool {
    match caller {
        Caller::Owner => true,
        Caller::Token(_) => caller.token_id() == m.token.as_deref(),
    }
}

/// Every volume the daemon keeps, as its records say; one whose record
/// cannot be read is left out (and never shown to anyone).
fn all(app: &App) -> Vec<Meta> {
    let Ok(dir) = std::fs::read_dir(root(app)) else {
        return Vec::new();
    };
    let mut out: Vec<Meta> = dir
        .flatten()
        .filter_map(|d| {
            let id = d.file_name().to_str()?.to_string();
            let m: Meta = warden_runtime::state::read_json(&d.path().join("meta.json")).ok()?;
            (m.id == id).then_some(m)
        })
        .collect();
    out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    out
}

/// Volume `id` of `caller`'s, found by its ID or its name.
fn find(e: &E2b, caller: &Caller, id: &str) -> Option<Meta> {
    all(&e.app)
        .into_iter()
        .filter(|m| sees(caller, m))
        .find(|m| m.id == id || m.name == id)
}

fn not_found(id: &str) -> Response {
    let shown: String = id.chars().take(MAX_NAME + 1).collect();
    error(
        StatusCode::NOT_FOUND,
        format!("no volume {shown:?} of this caller's"),
    )
}

/// Run `f` on the blocking pool; a failure of the pool is a 500.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(|_| {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the volume request did not complete",
        )
    })
}

/// `POST /volumes`: 201 with the new volume.
pub async fn create(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "POST", "/v1/sandboxes", None) {
        return d.response();
    }
    let body: NewVolume = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(err) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the request body does not fit: {err}"),
            )
        }
    };
    if let Some(why) = invalid_name(&body.name) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let made = blocking(move || make(&e, &caller, body.name)).await;
    match made {
        Ok(Ok(m)) => (StatusCode::CREATED, Json(shown(m))).into_response(),
        Ok(Err((status, why))) => error(status, why),
        Err(r) => r,
    }
}

/// Make volume `name` of `caller`'s: its directory and record.
fn make(e: &E2b, caller: &Caller, name: String) -> Result<Meta, (StatusCode, String)> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    sweep(&e.app);
    let token = caller.token_id().map(str::to_string);
    let mine: Vec<Meta> = all(&e.app)
        .into_iter()
        .filter(|m| m.token == token)
        .collect();
    if mine.iter().any(|m| m.name == name) {
        return Err((
            StatusCode::CONFLICT,
            format!("volume {name:?} exists already; delete it first or choose another name"),
        ));
    }
    // A name the caller mounts from the owner's declared volumes stays
    // the owner's: one of its own of that name would make a mount
    // ambiguous.
    if super::declared::find(
        &e.app.e2b_volumes,
        caller,
        owner_made(&e.app, caller),
        &name,
    )
    .is_some()
    {
        return Err((
            StatusCode::CONFLICT,
            format!("volume {name:?} is one the daemon's owner declared; mount it by that name, or choose another name"),
        ));
    }
    if token.is_some() && mine.len() >= MAX_PER_TOKEN {
        return Err((
            StatusCode::TOO_MANY_REQUESTS,
            format!("this token keeps {MAX_PER_TOKEN} volumes already, the most one token may keep: delete one first"),
        ));
    }
    let meta = Meta {
        id: format!("vol-{}", crate::auth::random_id(8)),
        name,
        token,
        created_ms: warden_runtime::state::now_ms(),
    };
    let failed = |what: &str, err: String| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the volume cannot be {what}: {err}"),
        )
    };
    let root = root(&e.app);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&root)
        .map_err(|err| failed("made", err.to_string()))?;
    // Made under a name no listing reads, and renamed whole: a volume is
    // never seen half-made.
    let tmp = root.join(format!(".{}.partial", meta.id));
    let written = (|| {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp)
            .map_err(|err| err.to_string())?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(tmp.join("data"))
            .map_err(|err| err.to_string())?;
        warden_runtime::state::write_json(&tmp.join("meta.json"), &meta)
            .map_err(|err| err.to_string())?;
        std::fs::rename(&tmp, root.join(&meta.id)).map_err(|err| err.to_string())
    })();
    if let Err(err) = written {
        let _ = remove_leftover(&tmp);
        return Err(failed("made", err));
    }
    Ok(meta)
}

/// `GET /volumes`: the caller's volumes.
pub async fn list(State(e): State<Arc<E2b>>, Extension(caller): Extension<Caller>) -> Response {
    if let Err(d) = permit(&e.app, &caller, "GET", "/v1/sandboxes", None) {
        return d.response();
    }
    let listed = blocking(move || {
        all(&e.app)
            .into_iter()
            .filter(|m| sees(&caller, m))
            .map(|m| Listed {
                volume_id: m.id,
                name: m.name,
            })
            .collect::<Vec<_>>()
    })
    .await;
    match listed {
        Ok(l) => Json(l).into_response(),
        Err(r) => r,
    }
}

/// `GET /volumes/{id}`: one of the caller's volumes, by ID or name.
pub async fn get(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "GET", "/v1/sandboxes", None) {
        return d.response();
    }
    let asked = id.clone();
    match blocking(move || find(&e, &caller, &asked)).await {
        Ok(Some(m)) => Json(shown(m)).into_response(),
        Ok(None) => not_found(&id),
        Err(r) => r,
    }
}

/// `DELETE /volumes/{id}`: 204, or 404 (the SDK's `False`) for a volume
/// that is not the caller's, or 409 while a running sandbox mounts it
/// (its writes are merged into the volume when it stops: stop it
/// first). Its directory is removed without following any link a
/// sandbox could have planted in it, and without recursion: a sandbox
/// can make a chain of directories deeper than any stack.
pub async fn delete(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "POST", "/v1/sandboxes", None) {
        return d.response();
    }
    let asked = id.clone();
    let removed = blocking(move || {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        sweep(&e.app);
        let Some(m) = find(&e, &caller, &asked) else {
            return Ok(Gone::NotFound);
        };
        let dir = root(&e.app).join(&m.id);
        if let Some(user) = running_user(&e.app, &dir.join("data")) {
            return Ok(Gone::Busy(user));
        }
        // The lock a stopping sandbox's merge into the volume holds: a
        // merge either ends before the volume goes, or finds it gone and
        // writes nothing (never into a directory no listing counts).
        let data = std::fs::File::open(dir.join("data")).map_err(|err| err.to_string())?;
        let _merges_held = nix::fcntl::Flock::lock(data, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, err)| err.to_string())?;
        // What its merges held back (the owner's files its sandboxes
        // wrote over) goes with it, first: a removal that fails leaves
        // the volume listed and counted, and a later volume given the
        // same directory identity never inherits it.
        if let Some(held) = held_back(&e.app, &dir.join("data")) {
            warden_workspace::fsutil::remove_tree(&held).map_err(|err| {
                format!("what its merges held back ({}) cannot be removed: {err}", held.display())
            })?;
        }
        // Out of the listing first (a rename is whole), then removed; a
        // removal that fails leaves `.ID.deleted`, which still counts
        // against its token ([`bytes_of_token`]) until a sweep ends it.
        let gone = root(&e.app).join(format!(".{}.deleted", m.id));
        std::fs::rename(&dir, &gone).map_err(|err| err.to_string())?;
        remove_leftover(&gone).map_err(|_| {
            "its files could not all be removed now; they still count against this caller's disk quota and are removed later".to_string()
        })?;
        Ok::<Gone, String>(Gone::Removed)
    })
    .await;
    match removed {
        Ok(Ok(Gone::Removed)) => StatusCode::NO_CONTENT.into_response(),
        Ok(Ok(Gone::NotFound)) => not_found(&id),
        Ok(Ok(Gone::Busy(user))) => error(
            StatusCode::CONFLICT,
            format!("the volume is mounted by running sandbox {user}: kill or pause it first, then delete the volume"),
        ),
        Ok(Err(why)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the volume cannot be deleted: {why}"),
        ),
        Err(r) => r,
    }
}

/// What a delete did.
enum Gone {
    Removed,
    NotFound,
    /// A running sandbox (named) mounts it.
    Busy(String),
}

/// The running sandbox that mounts the volume directory `data`, if any.
fn running_user(app: &App, data: &std::path::Path) -> Option<String> {
    use warden_runtime::state::{read_json, Stored, STORED};
    let listed = std::fs::read_dir(app.state_dir.join("sandboxes")).ok()?;
    listed.flatten().find_map(|d| {
        let name = d.file_name().to_str()?.to_string();
        let sb = app.store.get(&name).ok()?;
        let stored: Stored = read_json(&sb.dir().join(STORED)).ok()?;
        let mounts = stored
            .spec
            .filesystem
            .volumes
            .iter()
            .any(|v| v.host == data);
        (mounts && warden_runtime::lifecycle::liveness(&sb).running()).then_some(name)
    })
}

/// Remove a volume's directory that no listing reads any more: its data
/// first, so that its `meta.json` (which names the token it counts
/// against) goes last. Never recursive on the stack, never through a link.
fn remove_leftover(dir: &std::path::Path) -> Result<(), warden_workspace::fsutil::FsError> {
    warden_workspace::fsutil::remove_tree(&dir.join("data"))?;
    warden_workspace::fsutil::remove_tree(dir)
}

/// A volume left half made (`.ID.partial`) or half deleted
/// (`.ID.deleted`: a removal that failed, or a daemon that stopped in
/// the middle).
fn is_leftover(name: &str) -> bool {
    name.starts_with('.') && (name.ends_with(".deleted") || name.ends_with(".partial"))
}

/// Remove what volumes left half made or half deleted; what cannot be
/// removed now stays, counted against its token, for the next sweep.
/// Called with [`ONE_AT_A_TIME`] held (a `.partial` is being made only
/// under it).
fn sweep(app: &App) {
    let Ok(listed) = std::fs::read_dir(root(app)) else {
        return;
    };
    for d in listed.flatten() {
        if d.file_name().to_str().is_some_and(is_leftover) {
            let _ = remove_leftover(&d.path());
        }
    }
}

/// The bytes of files the volumes of token `token` hold on the host's
/// disk: they outlive its sandboxes and count against its disk quota as
/// its snapshots do. Read beneath each volume's directory, so a link a
/// sandbox planted there is never entered.
pub(crate) fn bytes_of_token(app: &App, token: &str) -> u64 {
    let kept = all(app)
        .into_iter()
        .filter(|m| m.token.as_deref() == Some(token))
        .map(|m| root(app).join(&m.id));
    // A volume deleted (or made) half way holds its bytes until a sweep
    // removes them: they count as long as they are there.
    let left = std::fs::read_dir(root(app))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|d| d.file_name().to_str().is_some_and(is_leftover))
        .filter(|d| {
            warden_runtime::state::read_json::<Meta>(&d.path().join("meta.json"))
                .is_ok_and(|m| m.token.as_deref() == Some(token))
        })
        .map(|d| d.path());
    // `tree_size` answers `u64::MAX` for a tree it cannot measure: the
    // quota then refuses, never takes it as empty. What a volume's merges
    // held back is its own too: its sandboxes wrote it.
    kept.chain(left)
        .map(|dir| {
            let data = dir.join("data");
            let held = held_back(app, &data)
                .filter(|h| h.symlink_metadata().is_ok())
                .map_or(0, |h| warden_workspace::fsutil::tree_size(&h));
            warden_workspace::fsutil::tree_size(&data).saturating_add(held)
        })
        .fold(0, u64::saturating_add)
}

/// Where what the merges of the volume directory `data` held back is
/// kept, if `data` can be read.
fn held_back(app: &App, data: &std::path::Path) -> Option<PathBuf> {
    warden_runtime::owners_files::held_back_of(&app.state_dir, data)
}

/// One mount of E2B's create body (`volumeMounts`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Mount {
    name: String,
    path: String,
}

/// The volumes of `caller`'s that a create's `volumeMounts` asks for,
/// each at a mount point checked as any volume's is (beside a home at
/// `home`): a volume is named, never a host path, and one that is not
/// the caller's is not found. What does not fit is said at its place in
/// the E2B body.
pub(super) fn mounts_of(
    app: &App,
    caller: &Caller,
    value: Option<&serde_json::Value>,
    home: &std::path::Path,
) -> Result<Vec<warden_policy::VolumeMount>, String> {
    let mounts: Vec<Mount> = match value {
        None | Some(serde_json::Value::Null) => return Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|err| format!("volumeMounts: {err}: a list of {{name, path}}"))?,
    };
    let mine: Vec<Meta> = all(app).into_iter().filter(|m| sees(caller, m)).collect();
    let mut out: Vec<warden_policy::VolumeMount> = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        let inside = PathBuf::from(&m.path);
        if let Some(why) = warden_policy::volumes::inside_refusal(&inside, home) {
            return Err(format!("volumeMounts[{i}].path {:?}: {why}", m.path));
        }
        if out
            .iter()
            .any(|o| o.inside.starts_with(&inside) || inside.starts_with(&o.inside))
        {
            return Err(format!(
                "volumeMounts[{i}].path {:?}: another volume is mounted there, or above or below it",
                m.path
            ));
        }
        let shown: String = m.name.chars().take(MAX_NAME + 1).collect();
        // The caller's own first, then one the owner declared and lets
        // it mount (a name is looked up, never read as a path: a
        // declared volume's directory is the owner's text).
        let (host, writable) = match mine.iter().find(|v| v.name == m.name) {
            Some(v) => (root(app).join(&v.id).join("data"), true),
            None => match super::declared::find(&app.e2b_volumes, caller, owner_made(app, caller), &m.name) {
                // A writable volume's writes are merged into its directory
                // when the sandbox stops: never into the owner's
                // configuration for a token (`crate::app::App::holds_configuration`).
                Some(d)
                    if d.writable
                        && !matches!(caller, Caller::Owner)
                        && app.holds_configuration(&d.path) =>
                {
                    return Err(format!(
                        "volumeMounts[{i}].name {shown:?}: the volume's directory holds a file the daemon owner's configuration is read from (a profile, a file a profile extends or names, the daemon's settings), which no token's sandbox writes; the owner declares it read-only, or keeps that file elsewhere"
                    ));
                }
                Some(d) => (d.path.clone(), d.writable),
                None => {
                    return Err(format!(
                        "volumeMounts[{i}].name {shown:?}: no volume of that name of this caller's (make one with Volume.create)"
                    ))
                }
            },
        };
        out.push(warden_policy::VolumeMount {
            host,
            inside,
            writable,
        });
    }
    Ok(out)
}

/// Why sandbox spec `spec` cannot take volumes; `None` when it can. Only
/// the process backend mounts them, and a writable one only where the
/// sandbox's disk limit holds what is written into it while it runs
/// (a sandbox writing without end into a volume would otherwise fill the
/// host's disk).
fn attach_refusal(
    spec: &warden_policy::SandboxSpec,
    mounts: &[warden_policy::VolumeMount],
) -> Option<String> {
    if spec.isolation != warden_policy::Isolation::Process {
        return Some(format!(
            "volumeMounts: the template runs sandboxes with `isolation: {}`, which does not mount volumes; use a template of the process backend",
            match spec.isolation {
                warden_policy::Isolation::Vm => "vm",
                warden_policy::Isolation::Gvisor => "gvisor",
                warden_policy::Isolation::Process => "process",
            }
        ));
    }
    if spec.filesystem.disk.is_none() && mounts.iter().any(|m| m.writable) {
        return Some(
            "volumeMounts: the template's sandboxes have no disk limit to hold what is written into a volume; the daemon's owner gives it `resources.disk`".into(),
        );
    }
    None
}

/// Why [`attach`] did not give the volumes.
pub(super) enum AttachError {
    /// The sandbox cannot take them (a 400).
    Refused(String),
    /// Its record could not be read or written.
    Failed(String),
}

/// Give sandbox `id` (made, not started) the volumes `mounts`: written
/// into its stored spec, which its start reads. The door is the daemon
/// and the directories are its own: the host paths are the daemon's
/// choice, never the caller's.
pub(super) fn attach(
    app: &App,
    id: &str,
    mounts: Vec<warden_policy::VolumeMount>,
) -> Result<(), AttachError> {
    use warden_runtime::state::{read_json, write_json, Stored, STORED};
    let sb = app
        .sandbox(id)
        .map_err(|e| AttachError::Failed(e.problem.message))?;
    let path = sb.dir().join(STORED);
    let mut stored: Stored = read_json(&path)
        .map_err(|err| AttachError::Failed(format!("the sandbox's spec cannot be read: {err}")))?;
    if let Some(why) = attach_refusal(&stored.spec, &mounts) {
        return Err(AttachError::Refused(why));
    }
    stored.spec.filesystem.volumes.extend(mounts);
    write_json(&path, &stored)
        .map_err(|err| AttachError::Failed(format!("the sandbox's spec cannot be kept: {err}")))
}

/// Whether the owner made `caller`'s token (none made it over the API):
/// only such a token is matched by a declared volume's listed name (see
/// [`super::declared::may_mount`]). Unknown (the records unread): no.
fn owner_made(app: &crate::app::App, caller: &Caller) -> bool {
    match caller {
        Caller::Owner => true,
        Caller::Token(t) => app
            .db()
            .ok()
            .and_then(|db| db.maker_of(&t.id).ok())
            .is_some_and(|maker| maker.is_none()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_name_is_never_a_path_nor_unbounded() {
        for bad in [
            "",
            "/",
            "..",
            "a/b",
            "../etc",
            "a\0b",
            ".hidden",
            "-flag",
            "name with space",
            &"x".repeat(MAX_NAME + 1),
        ] {
            assert!(invalid_name(bad).is_some(), "{bad:?}");
        }
        for good in ["data", "my-volume_2", &"x".repeat(MAX_NAME)] {
            assert!(invalid_name(good).is_none(), "{good:?}");
        }
    }
}

//! envd's filesystem service (`filesystem.Filesystem`) and its `/files`
//! upload and download routes, on the native files API
//! ([`crate::routes::files`], [`crate::routes::watch`]): every path is
//! resolved by the sandbox's own init, beneath the workspace or the
//! sandbox's own root and through no link, exactly as natively. Relative
//! E2B paths are in the home directory, `/home/user` ([`super::paths`]).

use axum::body::Body as HttpBody;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::StreamExt;
use serde::Deserialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_protocol::files::FileOp;

use super::connect::{self, Code, RpcError};
use super::{paths, permit, E2b, Target};
use crate::api::{FileEntry, MoveRequest};
use crate::auth::Caller;
use crate::body::Body;
use crate::credential::Credential;
use crate::error::ApiError;
use crate::routes::files::{self, FileQuery};
use crate::routes::watch::{self, FileChange, WatchQuery};

/// Most events a polling watcher keeps between two polls.
const MAX_EVENTS: usize = 10_000;
/// How long a polling watcher lives without a poll: the SDK's watch handle
/// polls when its user asks, and one never stopped would otherwise hold
/// one of the daemon's files watches for as long as its sandbox runs.
const WATCHER_IDLE: Duration = Duration::from_secs(300);
/// The name the native files API writes an upload under before renaming
/// it over the file asked for ([`crate::routes::files`]): a watch reports
/// the file the client wrote, never this.
const UPLOAD_PREFIX: &str = ".warden-upload-";

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PathRequest {
    path: String,
    depth: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MoveRpc {
    source: String,
    destination: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct WatchRequest {
    path: String,
    recursive: bool,
    watcher_id: String,
}

fn query(
    path: Option<String>,
) -> Result<Query<FileQuery>, axum::extract::rejection::QueryRejection> {
    Ok(Query(FileQuery {
        path,
        mode: None,
        recursive: None,
    }))
}

fn permissions(kind: &str, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        "dir" => 'd',
        "symlink" => 'l',
        _ => '-',
    });
    for shift in [6u32, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// `filesystem.EntryInfo` in its JSON mapping.
fn entry_info(e: &FileEntry) -> serde_json::Value {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(e.modified_ms);
    serde_json::json!({
        "name": e.name,
        "type": match e.kind.as_str() {
            "dir" => "FILE_TYPE_DIRECTORY",
            "symlink" => "FILE_TYPE_SYMLINK",
            "file" => "FILE_TYPE_FILE",
            _ => "FILE_TYPE_UNSPECIFIED",
        },
        "path": paths::absolute(&e.path),
        "size": e.size.to_string(),
        "mode": e.mode,
        "permissions": permissions(&e.kind, e.mode),
        "owner": "user",
        "group": "user",
        "modifiedTime": humantime::format_rfc3339_millis(t).to_string(),
        "isSymlink": e.kind == "symlink",
    })
}

/// The path as the files API takes it (relative to the workspace, or
/// absolute in the sandbox) of an E2B path in sandbox `sb`.
fn rel(e: &E2b, sb: &str, path: &str) -> Result<String, RpcError> {
    let home = paths::home(&e.app, sb);
    Ok(files::inside_of(
        &e.app,
        sb,
        Some(&paths::to_warden(&home, path)),
    )?)
}

/// The directory holding `rel` and its name: `("", name)` in the
/// workspace, `("/", name)` at the top of the sandbox's root.
fn split(rel: &str) -> (&str, &str) {
    match rel.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some(parts) => parts,
        None => ("", rel),
    }
}

/// The entries of directory `rel` (relative to the workspace).
async fn entries(e: &E2b, sb: &str, rel: &str) -> Result<Vec<FileEntry>, RpcError> {
    let Json(list) = files::list(
        State(e.app.clone()),
        Path(sb.to_string()),
        query(Some(rel.to_string())),
    )
    .await?;
    Ok(list.entries)
}

/// What `rel` is, looked up in its directory (never through a link).
async fn stat(e: &E2b, sb: &str, rel: &str) -> Result<FileEntry, RpcError> {
    if rel.is_empty() || rel == "/" {
        // The workspace, or the root, itself: it exists while the sandbox
        // runs.
        entries(e, sb, rel).await?;
        return Ok(FileEntry {
            name: if rel.is_empty() { "workspace" } else { "/" }.into(),
            path: rel.to_string(),
            kind: "dir".into(),
            size: 0,
            mode: 0o755,
            modified_ms: 0,
        });
    }
    let (dir, name) = split(rel);
    entries(e, sb, dir)
        .await?
        .into_iter()
        .find(|x| x.name == name)
        .ok_or_else(|| {
            RpcError::new(
                Code::NotFound,
                format!("no {:?} in the sandbox", paths::absolute(rel)),
            )
        })
}

/// `POST /filesystem.Filesystem/{method}`.
pub async fn rpc(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Extension(credential): Extension<Credential>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(sb) = super::sandbox_header(&headers) else {
        return RpcError::new(Code::InvalidArgument, "no E2b-Sandbox-Id header").into_response();
    };
    let allowed = permit(
        &e.app,
        &caller,
        "GET",
        "/v1/sandboxes/{id}/files",
        Some(&sb),
    );
    let streaming = method == "WatchDir";
    let codec = match connect::Codec::of(&headers, "filesystem.Filesystem", &method, streaming) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if streaming {
        if let Err(why) = allowed {
            return codec.stream_error(RpcError::new(Code::PermissionDenied, why));
        }
        return match codec.stream_request::<WatchRequest>(&body) {
            Ok(req) => watch_stream(e, sb, req, credential, codec).await,
            Err(r) => *r,
        };
    }
    if let Err(why) = allowed {
        return RpcError::new(Code::PermissionDenied, why).into_response();
    }
    let shared = e.clone();
    let e = &*e;
    let who = caller.token_id().map(str::to_string);
    let result = match method.as_str() {
        "Stat" => match codec.request::<PathRequest>(&body) {
            Ok(r) => rpc_stat(e, &sb, r).await,
            Err(resp) => return *resp,
        },
        "ListDir" => match codec.request::<PathRequest>(&body) {
            Ok(r) => list_dir(e, &sb, r).await,
            Err(resp) => return *resp,
        },
        "MakeDir" => match codec.request::<PathRequest>(&body) {
            Ok(r) => make_dir(e, &sb, r).await,
            Err(resp) => return *resp,
        },
        "Move" => match codec.request::<MoveRpc>(&body) {
            Ok(r) => move_entry(e, &sb, r).await,
            Err(resp) => return *resp,
        },
        "Remove" => match codec.request::<PathRequest>(&body) {
            Ok(r) => remove(e, &sb, r).await,
            Err(resp) => return *resp,
        },
        "CreateWatcher" => match codec.request::<WatchRequest>(&body) {
            Ok(r) => create_watcher(&shared, &sb, r, who, credential).await,
            Err(resp) => return *resp,
        },
        "GetWatcherEvents" => match codec.request::<WatchRequest>(&body) {
            Ok(r) => watcher_events(e, &sb, who.as_deref(), r),
            Err(resp) => return *resp,
        },
        "RemoveWatcher" => match codec.request::<WatchRequest>(&body) {
            Ok(r) => remove_watcher(e, &sb, who.as_deref(), r),
            Err(resp) => return *resp,
        },
        other => Err(RpcError::new(
            Code::Unimplemented,
            format!("filesystem.Filesystem/{other} is not served by warden"),
        )),
    };
    codec.response(result)
}

async fn rpc_stat(e: &E2b, sb: &str, r: PathRequest) -> Result<serde_json::Value, RpcError> {
    let rel = rel(e, sb, &r.path)?;
    Ok(serde_json::json!({ "entry": entry_info(&stat(e, sb, &rel).await?) }))
}

async fn list_dir(e: &E2b, sb: &str, r: PathRequest) -> Result<serde_json::Value, RpcError> {
    let depth = r.depth.unwrap_or(1).clamp(1, 64);
    let root = rel(e, sb, &r.path)?;
    let mut out = Vec::new();
    let mut todo = VecDeque::from([(root, 1u32)]);
    while let Some((dir, d)) = todo.pop_front() {
        for entry in entries(e, sb, &dir).await? {
            if entry.kind == "dir" && d < depth {
                todo.push_back((entry.path.clone(), d + 1));
            }
            out.push(entry_info(&entry));
        }
    }
    Ok(serde_json::json!({ "entries": out }))
}

async fn make_dir(e: &E2b, sb: &str, r: PathRequest) -> Result<serde_json::Value, RpcError> {
    let rel = rel(e, sb, &r.path)?;
    match stat(e, sb, &rel).await {
        Ok(_) => {
            return Err(RpcError::new(
                Code::AlreadyExists,
                format!("{:?} exists already", paths::absolute(&rel)),
            ))
        }
        Err(err) if err.code == Code::NotFound => {}
        Err(err) => return Err(err),
    }
    let op = FileOp::Mkdir {
        path: rel.clone(),
        parents: true,
    };
    files::run(&e.app, sb, op, &rel).await?;
    Ok(serde_json::json!({ "entry": entry_info(&stat(e, sb, &rel).await?) }))
}

async fn move_entry(e: &E2b, sb: &str, r: MoveRpc) -> Result<serde_json::Value, RpcError> {
    let home = paths::home(&e.app, sb);
    let req = MoveRequest {
        from: paths::to_warden(&home, &r.source),
        to: paths::to_warden(&home, &r.destination),
    };
    files::rename(State(e.app.clone()), Path(sb.to_string()), Body(req)).await?;
    let to = rel(e, sb, &r.destination)?;
    Ok(serde_json::json!({ "entry": entry_info(&stat(e, sb, &to).await?) }))
}

async fn remove(e: &E2b, sb: &str, r: PathRequest) -> Result<serde_json::Value, RpcError> {
    let q = Ok(Query(FileQuery {
        path: Some(paths::to_warden(&paths::home(&e.app, sb), &r.path)),
        mode: None,
        recursive: Some(true),
    }));
    files::remove(State(e.app.clone()), Path(sb.to_string()), q).await?;
    Ok(serde_json::json!({}))
}

/// A polling watch: the native watch's changes, kept until asked for. Its
/// native watch holds its place among the caller's long-lived answers
/// ([`crate::leases`]) until it is removed or ends unpolled.
pub struct Watcher {
    sandbox: String,
    /// The token that made it (`None`: the owner), which alone may poll it.
    owner: Option<String>,
    events: Arc<Mutex<Vec<serde_json::Value>>>,
    /// When it was last polled (or made).
    polled: Mutex<std::time::Instant>,
    task: tokio::task::JoinHandle<()>,
    expiry: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Watcher {
    pub fn sandbox(&self) -> &str {
        &self.sandbox
    }

    fn idle(&self) -> Duration {
        self.polled
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or(Duration::ZERO)
    }

    fn touch(&self) {
        if let Ok(mut t) = self.polled.lock() {
            *t = std::time::Instant::now();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(t) = self.expiry.get_mut().ok().and_then(Option::take) {
            t.abort();
        }
    }
}

/// Whether `name` (a path relative to the workspace) is an upload's
/// temporary file.
fn is_upload_temp(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.strip_prefix(UPLOAD_PREFIX)
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// E2B's events for one native change, names relative to the watched
/// directory `root`.
fn fs_events(root: &str, c: &FileChange) -> Vec<serde_json::Value> {
    let name = |p: &str| -> String {
        if root.is_empty() {
            p.to_string()
        } else {
            p.strip_prefix(root)
                .map(|r| r.trim_start_matches('/').to_string())
                .unwrap_or_else(|| p.to_string())
        }
    };
    let ev = |p: &str, t: &str| serde_json::json!({"name": name(p), "type": t});
    match c {
        // An upload's temporary file is warden's, not the client's: its
        // life is told as the file it becomes (written, as envd writes a
        // file in place).
        FileChange::Created { path, .. }
        | FileChange::Modified { path }
        | FileChange::Removed { path, .. }
            if is_upload_temp(path) =>
        {
            Vec::new()
        }
        FileChange::Moved { from, path, .. } if is_upload_temp(from) => {
            vec![ev(path, "EVENT_TYPE_CREATE"), ev(path, "EVENT_TYPE_WRITE")]
        }
        FileChange::Created { path, .. } => vec![ev(path, "EVENT_TYPE_CREATE")],
        FileChange::Modified { path } => vec![ev(path, "EVENT_TYPE_WRITE")],
        FileChange::Removed { path, .. } => vec![ev(path, "EVENT_TYPE_REMOVE")],
        FileChange::Moved { from, path, .. } => {
            vec![ev(from, "EVENT_TYPE_RENAME"), ev(path, "EVENT_TYPE_CREATE")]
        }
        _ => Vec::new(),
    }
}

/// Start the native watch of `rel` and hand each change to `each`; returns
/// once the watch is in place.
async fn native_watch(
    e: &E2b,
    sb: &str,
    rel: &str,
    recursive: bool,
    credential: Credential,
    each: impl FnMut(FileChange) -> bool + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, RpcError> {
    let q = Ok(Query(WatchQuery {
        path: Some(rel.to_string()),
        recursive: Some(recursive),
    }));
    // The watch carries the credential it was opened with and ends with
    // it (the native watch's own rule), a polling watcher's too.
    let sse = watch::watch(
        State(e.app.clone()),
        Path(sb.to_string()),
        Extension(credential),
        q,
    )
    .await?;
    let mut stream = sse.into_response().into_body().into_data_stream();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let mut each = each;
    let task = tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut buf = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(at) = buf.find("\n\n") {
                let record: String = buf.drain(..at + 2).collect();
                for line in record.lines() {
                    let Some(data) = line.strip_prefix("data:") else {
                        continue;
                    };
                    let Ok(change) = serde_json::from_str::<FileChange>(data.trim()) else {
                        continue;
                    };
                    if matches!(change, FileChange::Ready { .. }) {
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                        continue;
                    }
                    if !each(change) {
                        return;
                    }
                }
            }
        }
    });
    let _ = tokio::time::timeout(Duration::from_secs(10), ready_rx).await;
    Ok(task)
}

async fn create_watcher(
    e: &Arc<E2b>,
    sb: &str,
    r: WatchRequest,
    owner: Option<String>,
    credential: Credential,
) -> Result<serde_json::Value, RpcError> {
    let root = rel(e, sb, &r.path)?;
    // How many a caller holds is the daemon's one ledger's to bound (the
    // native watch below takes its place there, as WatchDir's does): no
    // count of the door's own.
    let id = format!("w-{}", crate::auth::random_id(8));
    let sink: Arc<Mutex<Vec<serde_json::Value>>> = Arc::new(Mutex::new(Vec::new()));
    let s = sink.clone();
    let r2 = root.clone();
    let task = native_watch(e, sb, &root, r.recursive, credential, move |c| {
        if let Ok(mut v) = s.lock() {
            if v.len() < MAX_EVENTS {
                v.extend(fs_events(&r2, &c));
            }
        }
        true
    })
    .await?;
    let w = Arc::new(Watcher {
        sandbox: sb.to_string(),
        owner,
        events: sink,
        polled: Mutex::new(std::time::Instant::now()),
        task,
        expiry: Mutex::new(None),
    });
    // The watcher ends by itself once nobody polls it.
    let (table, watcher, wid) = (Arc::downgrade(e), Arc::downgrade(&w), id.clone());
    let expiry = tokio::spawn(async move {
        loop {
            tokio::time::sleep(WATCHER_IDLE / 10).await;
            let (Some(e), Some(w)) = (table.upgrade(), watcher.upgrade()) else {
                return;
            };
            if w.idle() >= WATCHER_IDLE {
                if let Ok(mut t) = e.watchers.lock() {
                    t.remove(&wid);
                }
                return;
            }
        }
    });
    if let Ok(mut slot) = w.expiry.lock() {
        *slot = Some(expiry);
    }
    lock_watchers(e)?.insert(id.clone(), w);
    Ok(serde_json::json!({ "watcherId": id }))
}

fn lock_watchers(
    e: &E2b,
) -> Result<std::sync::MutexGuard<'_, std::collections::HashMap<String, Arc<Watcher>>>, RpcError> {
    e.watchers
        .lock()
        .map_err(|_| RpcError::new(Code::Internal, "the watcher table lock is poisoned"))
}

/// The watcher `id` of sandbox `sb`, when `owner` made it: another
/// caller's is answered as one that does not exist.
fn watcher_of(e: &E2b, sb: &str, owner: Option<&str>, id: &str) -> Result<Arc<Watcher>, RpcError> {
    match lock_watchers(e)?.get(id) {
        Some(w) if w.sandbox == sb && w.owner.as_deref() == owner => Ok(w.clone()),
        _ => Err(RpcError::new(
            Code::NotFound,
            format!("no watcher {id:?} in sandbox {sb} (a watcher not polled for {} minutes ends by itself)", WATCHER_IDLE.as_secs() / 60),
        )),
    }
}

fn watcher_events(
    e: &E2b,
    sb: &str,
    owner: Option<&str>,
    r: WatchRequest,
) -> Result<serde_json::Value, RpcError> {
    let w = watcher_of(e, sb, owner, &r.watcher_id)?;
    w.touch();
    let events: Vec<serde_json::Value> = w
        .events
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default();
    Ok(serde_json::json!({ "events": events }))
}

fn remove_watcher(
    e: &E2b,
    sb: &str,
    owner: Option<&str>,
    r: WatchRequest,
) -> Result<serde_json::Value, RpcError> {
    watcher_of(e, sb, owner, &r.watcher_id)?;
    lock_watchers(e)?.remove(&r.watcher_id);
    Ok(serde_json::json!({}))
}

/// `WatchDir`: the changes as a stream.
async fn watch_stream(
    e: Arc<E2b>,
    sb: String,
    r: WatchRequest,
    credential: Credential,
    codec: connect::Codec,
) -> Response {
    let root = match rel(&e, &sb, &r.path) {
        Ok(p) => p,
        Err(err) => return codec.stream_error(err),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<serde_json::Value>(256);
    let r2 = root.clone();
    let task = match native_watch(&e, &sb, &root, r.recursive, credential, move |c| {
        fs_events(&r2, &c)
            .into_iter()
            .all(|ev| tx.try_send(ev).is_ok() || !tx.is_closed())
    })
    .await
    {
        Ok(t) => t,
        Err(err) => return codec.stream_error(err),
    };
    let (out, response) = codec.channel();
    tokio::spawn(async move {
        let mut rx = rx;
        let _guard = AbortOnDrop(task);
        if out.send(&serde_json::json!({"start": {}})).await.is_none() {
            return;
        }
        loop {
            match tokio::time::timeout(Duration::from_secs(50), rx.recv()).await {
                Ok(Some(ev)) => {
                    if out
                        .send(&serde_json::json!({ "filesystem": ev }))
                        .await
                        .is_none()
                    {
                        return;
                    }
                }
                Ok(None) => {
                    out.finish(None).await;
                    return;
                }
                Err(_) => {
                    if out
                        .send(&serde_json::json!({"keepalive": {}}))
                        .await
                        .is_none()
                    {
                        return;
                    }
                }
            }
        }
    });
    response
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The `/files` query (its `username`, `signature` and
/// `signature_expiration` were checked before: [`super::envd_auth`]).
#[derive(Debug, Deserialize)]
pub struct FilesQuery {
    #[serde(default)]
    path: Option<String>,
}

/// An error of the `/files` routes: `{"code": STATUS, "message": ...}`,
/// which the SDK maps by status (404 NotFoundException, 401
/// AuthenticationException, 429 RateLimitException, 507
/// NotEnoughSpaceException).
fn files_error(e: ApiError) -> Response {
    let status = match e.status.as_u16() {
        409 | 422 => StatusCode::BAD_REQUEST,
        _ => e.status,
    };
    (
        status,
        Json(serde_json::json!({"code": status.as_u16(), "message": e.problem.message})),
    )
        .into_response()
}

fn files_permit(e: &E2b, caller: &Caller, method: &str, sb: &str) -> Result<(), connect::Refused> {
    permit(&e.app, caller, method, "/v1/sandboxes/{id}/files", Some(sb)).map_err(|why| {
        Box::new(files_error(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            why,
        )))
    })
}

/// `GET /files?path=`: the file's bytes (the native read). A signed URL
/// reads the file it was signed for.
pub async fn download(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Extension(target): Extension<Target>,
    q: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let sb = target.sandbox;
    if let Err(r) = files_permit(&e, &caller, "GET", &sb) {
        return *r;
    }
    let Ok(Query(q)) = q else {
        return files_error(ApiError::bad_request("the query does not fit: ?path=FILE"));
    };
    let asked = target.signed_path.or(q.path);
    // E2B's MCP gateway keeps its token here; warden's is the door's.
    if asked.as_deref() == Some(super::mcp::TOKEN_FILE) {
        return super::mcp::token_file(e, caller, sb).await;
    }
    let home = paths::home(&e.app, &sb);
    let path = asked.map(|p| paths::to_warden(&home, &p));
    match files::read(State(e.app.clone()), Path(sb), query(path)).await {
        Ok(r) => r,
        Err(err) => files_error(err),
    }
}

/// Make the directory a file is written into, as envd does.
async fn parent_dirs(e: &E2b, sb: &str, rel: &str) -> Result<(), ApiError> {
    let (dir, _) = split(rel);
    if dir.is_empty() || dir == "/" {
        return Ok(());
    }
    let op = FileOp::Mkdir {
        path: dir.to_string(),
        parents: true,
    };
    files::run(&e.app, sb, op, dir).await?;
    Ok(())
}

/// Write one file (the native write: beside it, then renamed over it).
async fn write_one(
    e: &E2b,
    sb: &str,
    path: &str,
    body: HttpBody,
) -> Result<serde_json::Value, ApiError> {
    let warden = paths::to_warden(&paths::home(&e.app, sb), path);
    let rel = files::inside_of(&e.app, sb, Some(&warden))?;
    parent_dirs(e, sb, &rel).await?;
    let q = Ok(Query(FileQuery {
        path: Some(warden),
        mode: None,
        recursive: None,
    }));
    files::write(
        State(e.app.clone()),
        Path(sb.to_string()),
        q,
        HeaderMap::new(),
        body,
    )
    .await?;
    let name = rel.rsplit('/').next().unwrap_or(&rel).to_string();
    Ok(serde_json::json!({"name": name, "type": "file", "path": paths::absolute(&rel)}))
}

/// `POST /files`: one file as `application/octet-stream` (`?path=`), or
/// any number as `multipart/form-data`, each part's file name its path
/// unless `?path=` names one (as envd takes it). A signed URL writes the
/// file it was signed for, whatever the parts are named.
pub async fn upload(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Extension(target): Extension<Target>,
    headers: HeaderMap,
    q: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    let sb = target.sandbox;
    if let Err(r) = files_permit(&e, &caller, "PUT", &sb) {
        return *r;
    }
    let Ok(Query(mut q)) = q else {
        return files_error(ApiError::bad_request("the query does not fit: ?path=FILE"));
    };
    if target.signed_path.is_some() {
        q.path = target.signed_path;
    }
    if headers.get(header::CONTENT_ENCODING).is_some() {
        return files_error(ApiError::bad_request(
            "compressed uploads (gzip=True) are not taken: upload without gzip",
        ));
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut written = Vec::new();
    if ct.starts_with("multipart/form-data") {
        let mut mp = match Multipart::from_request(req, &()).await {
            Ok(m) => m,
            Err(err) => return files_error(ApiError::bad_request(err.body_text())),
        };
        loop {
            let field = match mp.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(err) => return files_error(ApiError::bad_request(err.body_text())),
            };
            let Some(path) = q
                .path
                .clone()
                .or_else(|| field.file_name().map(str::to_string))
            else {
                return files_error(ApiError::bad_request(
                    "a part names no file: give each part a file name (its path)",
                ));
            };
            // The part is streamed into the native write (which holds the
            // files API's size limit), not gathered in memory first.
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
            let body = HttpBody::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
            let feed = async move {
                let mut field = field;
                loop {
                    match field.chunk().await {
                        Ok(Some(chunk)) => {
                            if tx.send(Ok(chunk)).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => return,
                        Err(err) => {
                            let _ = tx.send(Err(std::io::Error::other(err.body_text()))).await;
                            return;
                        }
                    }
                }
            };
            let (result, ()) = tokio::join!(write_one(&e, &sb, &path, body), feed);
            match result {
                Ok(v) => written.push(v),
                Err(err) => return files_error(err),
            }
        }
    } else {
        let Some(path) = q.path.clone() else {
            return files_error(ApiError::bad_request("name the file with ?path="));
        };
        match write_one(&e, &sb, &path, req.into_body()).await {
            Ok(v) => written.push(v),
            Err(err) => return files_error(err),
        }
    }
    Json(written).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_as_ls_prints_them() {
        assert_eq!(permissions("file", 0o644), "-rw-r--r--");
        assert_eq!(permissions("dir", 0o755), "drwxr-xr-x");
    }

    #[test]
    fn a_change_is_named_relative_to_the_watched_directory() {
        let c = FileChange::Modified {
            path: "d/sub/f".into(),
        };
        assert_eq!(fs_events("d", &c)[0]["name"], "sub/f");
        assert_eq!(fs_events("", &c)[0]["name"], "d/sub/f");
    }

    #[test]
    fn an_upload_is_named_as_the_file_written_never_its_temporary_name() {
        let temp = "d/.warden-upload-0a1b2c3d4e5f6a7b";
        let made = FileChange::Created {
            path: temp.into(),
            kind: crate::routes::watch::Kind::File,
        };
        assert!(fs_events("d", &made).is_empty());
        let moved = FileChange::Moved {
            from: temp.into(),
            path: "d/x.txt".into(),
            kind: crate::routes::watch::Kind::File,
        };
        let names: Vec<_> = fs_events("d", &moved)
            .iter()
            .map(|e| e["name"].as_str().unwrap_or("").to_string())
            .collect();
        assert_eq!(names, ["x.txt", "x.txt"]);
        let own = FileChange::Created {
            path: "d/.warden-upload-notes.txt".into(),
            kind: crate::routes::watch::Kind::File,
        };
        assert_eq!(fs_events("d", &own).len(), 1);
    }
}

//! envd's directory watchers on the native watch ([`crate::routes::watch`]):
//! the polling ones (`CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`),
//! each kept in the door's table until removed or left unpolled, and the
//! streamed one (`WatchDir`); each native change told as E2B's events.
//!
//! This file never resolves a path itself (the parent's `rel` does, through
//! the sandbox's init) and keeps no count of watches of its own: the
//! native watch takes its place in the daemon's one ledger.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::StreamExt;
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::rel;
use crate::credential::Credential;
use crate::e2b::connect::{self, Code, RpcError};
use crate::e2b::E2b;
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
#[serde(rename_all = "camelCase", default)]
pub(super) struct WatchRequest {
    path: String,
    recursive: bool,
    watcher_id: String,
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

pub(super) async fn create_watcher(
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

pub(super) fn watcher_events(
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

pub(super) fn remove_watcher(
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
pub(super) async fn watch_stream(
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
            // A client that left ends the watch (its thread, its inotify
            // instance, its place) now, not at the next keepalive of a
            // quiet directory.
            let next = tokio::select! {
                () = out.closed() => return,
                next = tokio::time::timeout(Duration::from_secs(50), rx.recv()) => next,
            };
            match next {
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

#[cfg(test)]
mod tests {
    use super::*;

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

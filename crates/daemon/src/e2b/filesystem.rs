//! envd's filesystem service (`filesystem.Filesystem`) and its `/files`
//! upload and download routes, on the native files API
//! ([`crate::routes::files`], [`crate::routes::watch`]): every path is
//! resolved by the sandbox's own init, beneath the workspace or the
//! sandbox's own root and through no link, exactly as natively. Relative
//! E2B paths are in the home directory, `/home/user` ([`super::paths`]).
//!
//! This file holds the service's calls on paths (stat, list, make, move,
//! remove) and the path helpers the others share; the watchers (polling
//! and streamed) are [`watchers`]'s, the `/files` routes [`transfer`]'s.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use warden_protocol::files::FileOp;

use super::connect::{self, Code, RpcError};
use super::{paths, permit, E2b};
use crate::api::{FileEntry, MoveRequest};
use crate::auth::Caller;
use crate::body::Body;
use crate::credential::Credential;
use crate::routes::files::{self, FileQuery};

mod transfer;
mod watchers;

pub use transfer::{download, upload};
pub use watchers::Watcher;
use watchers::{create_watcher, remove_watcher, watch_stream, watcher_events, WatchRequest};

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

fn query(
    path: Option<String>,
) -> Result<Query<FileQuery>, axum::extract::rejection::QueryRejection> {
    Ok(Query(FileQuery {
        path,
        mode: None,
        recursive: None,
        after: None,
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

/// A page of directory `rel`'s entries (relative to the workspace).
async fn page(e: &E2b, sb: &str, rel: &str) -> Result<crate::api::FileList, RpcError> {
    Ok(files::list_in(&e.app, sb, Some(rel.to_string()), None).await?)
}

/// The entries of directory `rel` (relative to the workspace). The E2B
/// API has no pages: a directory with more than one page of entries is
/// refused, saying so, rather than read whole.
async fn entries(e: &E2b, sb: &str, rel: &str) -> Result<Vec<FileEntry>, RpcError> {
    let list = page(e, sb, rel).await?;
    if list.next.is_some() {
        return Err(too_many(rel));
    }
    Ok(list.entries)
}

fn too_many(rel: &str) -> RpcError {
    RpcError::new(
        Code::ResourceExhausted,
        format!(
            "{:?} has more than {} entries; list it in pages (the API's files/list with `after`) or a directory below it",
            paths::absolute(rel),
            files::LIST_PAGE
        ),
    )
}

/// What `rel` is, looked up in its directory (never through a link),
/// however many entries the directory has.
async fn stat(e: &E2b, sb: &str, rel: &str) -> Result<FileEntry, RpcError> {
    if rel.is_empty() || rel == "/" {
        // The workspace, or the root, itself: it exists while the sandbox
        // runs.
        page(e, sb, rel).await?;
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
    files::entry_in(&e.app, sb, dir, name)
        .await?
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
            // Among the token's places while it reads (see
            // [`crate::leases`]), as the API's list is.
            Ok(r) => match e.app.leases.take(&credential, crate::leases::Kind::List) {
                Ok(_lease) => list_dir(e, &sb, r).await,
                Err(refused) => Err(refused.into()),
            },
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
    let mut todo = VecDeque::from([(root.clone(), 1u32)]);
    while let Some((dir, d)) = todo.pop_front() {
        for entry in entries(e, sb, &dir).await? {
            if entry.kind == "dir" && d < depth {
                todo.push_back((entry.path.clone(), d + 1));
            }
            out.push(entry_info(&entry));
            // However deep, one answer holds one page of entries.
            if out.len() > files::LIST_PAGE {
                return Err(too_many(&root));
            }
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
        after: None,
    }));
    files::remove(State(e.app.clone()), Path(sb.to_string()), q).await?;
    Ok(serde_json::json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_as_ls_prints_them() {
        assert_eq!(permissions("file", 0o644), "-rw-r--r--");
        assert_eq!(permissions("dir", 0o755), "drwxr-xr-x");
    }
}

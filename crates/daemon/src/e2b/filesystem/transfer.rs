//! envd's `/files` routes: a download (`GET`) and an upload (`POST`, one
//! file or a multipart form of many) on the native files API's read and
//! write, a signed URL limited to the file it was signed for, and their
//! errors in the shape the SDK maps by status.
//!
//! This file never writes a file itself: the native write does (beside
//! the file, then renamed over it, within the files API's size limit),
//! resolved by the sandbox's own init.

use axum::body::Body as HttpBody;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use std::sync::Arc;
use warden_protocol::files::FileOp;

use super::{query, split};
use crate::auth::Caller;
use crate::e2b::{connect, paths, permit, E2b, Target};
use crate::error::ApiError;
use crate::routes::files::{self, FileQuery};

/// The `/files` query (its `username`, `signature` and
/// `signature_expiration` were checked before: [`crate::e2b::envd_auth`]).
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
    if asked.as_deref() == Some(crate::e2b::mcp::TOKEN_FILE) {
        return crate::e2b::mcp::token_file(e, caller, sb).await;
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
        after: None,
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

//! Files in a sandbox: read, write (streamed, any size, any bytes), list,
//! make directories, move, remove; in its workspace (a relative path, or
//! one under /workspace) or in the sandbox's other own places (its home,
//! `/tmp`), as its processes see them.
//!
//! The daemon never resolves a path of the sandbox itself: the sandbox's
//! own init does, inside the sandbox, one name at a time beneath the
//! workspace or the sandbox's root and never through a link (see
//! `warden_jail::files`), and hands back the file it opened; the daemon
//! only reads or writes that descriptor. A path with `..`, through a link
//! anywhere on the way, or outside the workspace, the home and `/tmp`
//! (the host's system directories the sandbox sees, `/proc`) is refused
//! with 400.

use axum::body::Body as HttpBody;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use futures_util::StreamExt;
use nix::errno::Errno;
use serde::Deserialize;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_protocol::files::FileOp;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::lifecycle;

use super::sandboxes::blocking;
use crate::api::{FileEntry, FileList, MkdirRequest, MoveRequest};
use crate::app::App;
use crate::body::Body;
use crate::error::{chain, ApiError, Problem};

/// The code of a file operation refused for want of space in the
/// sandbox's workspace (507).
pub const WORKSPACE_FULL: &str = "workspace_full";

/// Rounds of a recursive removal (each up to
/// `warden_protocol::files::REMOVE_BUDGET` entries) before it gives up.
const MAX_REMOVE_ROUNDS: usize = 5000;
/// Bytes read from a file per chunk of the answer.
const CHUNK: usize = 256 * 1024;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct FileQuery {
    /// Relative to the workspace, or absolute inside the sandbox.
    pub path: Option<String>,
    /// `PUT`: the new file's mode, octal (`0644` when not given).
    pub mode: Option<String>,
    /// `DELETE`: a directory with everything in it.
    pub recursive: Option<bool>,
    /// `list`: only the names after this one (a page's `next`).
    pub after: Option<String>,
}

/// The most entries one list answers: a directory of hundreds of
/// thousands of long names would otherwise be read, stat'ed and held
/// whole, and answered as one body of a hundred megabytes, by as many
/// lists as a token sends at once. Past it the answer carries `next`.
pub const LIST_PAGE: usize = 10_000;

type QueryResult = Result<Query<FileQuery>, axum::extract::rejection::QueryRejection>;

/// The path relative to the workspace, as the init takes it.
pub(crate) fn relative(path: Option<&str>) -> Result<String, ApiError> {
    let Some(path) = path else {
        return Err(ApiError::bad_request(
            "name the file with `?path=`: relative to the workspace, or absolute under /workspace",
        ));
    };
    let rest = match path.strip_prefix(warden_policy::WORKSPACE_MOUNT) {
        Some(r) if r.is_empty() || r.starts_with('/') => r.trim_start_matches('/'),
        _ if path.starts_with('/') => {
            return Err(ApiError::bad_request(format!(
            "{path:?} is outside the sandbox's workspace: give a path under {} or relative to it",
            warden_policy::WORKSPACE_MOUNT
        )))
        }
        _ => path,
    };
    let names = warden_protocol::files::components(rest).map_err(|_| {
        ApiError::bad_request(format!(
            "{path:?} leaves the sandbox's workspace (`..` is not taken, nor a NUL byte)"
        ))
    })?;
    Ok(names.join("/"))
}

/// The path as the init takes it for the files API: relative to the
/// workspace for one in it (what every backend serves), absolute in the
/// sandbox's own root for one elsewhere (the process backend's init
/// serves those; elsewhere they are refused).
pub(crate) fn inside(path: Option<&str>) -> Result<String, ApiError> {
    let Some(path) = path else {
        return Err(ApiError::bad_request(
            "name the file with `?path=`: relative to the workspace, or absolute inside the sandbox",
        ));
    };
    let in_workspace = match path.strip_prefix(warden_policy::WORKSPACE_MOUNT) {
        Some(r) => r.is_empty() || r.starts_with('/'),
        None => !path.starts_with('/'),
    };
    if in_workspace {
        return relative(Some(path));
    }
    match warden_protocol::files::place(path) {
        Ok((_, names)) => Ok(format!("/{}", names.join("/"))),
        Err(Errno::EACCES) => Err(ApiError::bad_request(format!(
            "{path:?} is not in one of the sandbox's own places the files API opens: the workspace, its home (/home/..., /root) and /tmp"
        ))),
        Err(_) => Err(ApiError::bad_request(format!(
            "{path:?}: `..` is not taken, nor a NUL byte"
        ))),
    }
}

/// [`inside`] for sandbox `id`, where an absolute path under one of its
/// volumes' mount points (`filesystem.volumes`) is taken too: the init
/// serves it beneath the volume's own mount, as the sandbox's commands
/// see it. Looked up only for a path [`inside`] refuses.
pub(crate) fn inside_of(app: &App, id: &str, path: Option<&str>) -> Result<String, ApiError> {
    let refused = match inside(path) {
        Ok(p) => return Ok(p),
        Err(e) => e,
    };
    let Some(rest) = path.and_then(|p| p.strip_prefix('/')) else {
        return Err(refused);
    };
    let Ok(names) = warden_protocol::files::components(rest) else {
        return Err(refused);
    };
    let on_a_volume = volume_points(app, id).iter().any(|v| {
        let points: Vec<&str> = v.split('/').filter(|n| !n.is_empty()).collect();
        names.len() >= points.len() && points.iter().zip(&names).all(|(a, b)| a == b)
    });
    match on_a_volume {
        true => Ok(format!("/{}", names.join("/"))),
        false => Err(refused),
    }
}

/// Where sandbox `id`'s volumes are mounted inside, as its stored spec
/// says; none when it cannot be read.
fn volume_points(app: &App, id: &str) -> Vec<String> {
    use warden_runtime::state::{read_json, Stored, STORED};
    let Ok(sb) = app.sandbox(id) else {
        return Vec::new();
    };
    let Ok(stored) = read_json::<Stored>(&sb.dir().join(STORED)) else {
        return Vec::new();
    };
    stored
        .spec
        .filesystem
        .volumes
        .iter()
        .filter_map(|v| v.inside.to_str().map(str::to_string))
        .collect()
}

/// What an errno of the init means for a request about `path`.
pub(crate) fn file_error(errno: Errno, path: &str) -> ApiError {
    let shown = if path.is_empty() { "/workspace" } else { path };
    match errno {
        Errno::ENOENT => ApiError::not_found(format!("no {shown:?} in the sandbox")),
        Errno::ELOOP => ApiError::bad_request(format!(
            "{shown:?} goes through a symbolic link; the files API follows none (a link could lead anywhere)"
        )),
        // Absolute paths outside the workspace are served by the process
        // backend's init only; across file systems, a move is refused.
        Errno::EXDEV if path.starts_with('/') => ApiError::bad_request(format!(
            "{shown:?} is outside the sandbox's workspace, which is all this sandbox's files API reaches (a gVisor or VM sandbox), or a move between two file systems of the sandbox"
        )),
        Errno::EXDEV => ApiError::bad_request(format!("{shown:?} leaves the sandbox's workspace")),
        Errno::EISDIR => ApiError::bad_request(format!(
            "{shown:?} is a directory: list it with GET .../files/list"
        )),
        Errno::ENOTDIR => {
            ApiError::bad_request(format!("a part of {shown:?} is not a directory"))
        }
        Errno::ENXIO => ApiError::bad_request(format!(
            "{shown:?} is not a regular file (a FIFO, socket or device): the files API does not open those"
        )),
        Errno::EINVAL => ApiError::bad_request(format!("{shown:?}: not a file this operation takes (the workspace itself?)")),
        Errno::EEXIST => ApiError::conflict(format!("{shown:?} exists already")),
        Errno::ENOTEMPTY => ApiError::conflict(format!(
            "{shown:?} is a directory that is not empty: add `?recursive=true` to remove it with what it holds"
        )),
        Errno::EACCES | Errno::EPERM | Errno::EROFS => ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("the sandbox may not do this to {shown:?}: {}", errno.desc()),
        ),
        // The sandbox's own disk limit (`/resources/disk`) or the file
        // system under its workspace: not a token's quota (`quota`), which
        // the caller passes by removing a sandbox; this passes by
        // removing files of this sandbox.
        Errno::ENOSPC | Errno::EDQUOT => ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            WORKSPACE_FULL,
            format!("no space left for {shown:?} in the sandbox's workspace (its disk limit, `resources.disk`, or the file system under it): remove files of the sandbox, or make it again with a larger one"),
        ),
        Errno::ENOMEDIUM => ApiError::conflict(
            "this sandbox has no workspace the files API can reach (none was given, or it runs degraded, without a mount namespace)",
        ),
        e => ApiError::internal(format!("{shown:?}: {}", e.desc())),
    }
}

/// Ask sandbox `id`'s init for `op` (blocking).
fn ask(app: &App, id: &str, op: FileOp) -> Result<(Errno, Option<OwnedFd>), ApiError> {
    let sb = app.sandbox(id)?;
    let conn = Connection::open(&lifecycle::control(&sb)).map_err(|e| match e {
        ClientError::NotAnswering { .. } => ApiError::supervisor(&e),
        e if e.is_busy() => ApiError::supervisor(&e),
        _ => ApiError::not_running(format!("sandbox {id} is not running: start it first")),
    })?;
    conn.file(op).map_err(|e| match e {
        ClientError::FilesUnsupported | ClientError::Refused(_) => ApiError::conflict(chain(&e)),
        e @ ClientError::Rejected { .. } => super::pause::refusal(id, e),
        e => ApiError::supervisor(&e),
    })
}

/// Do `op`: the init's errno (`None`: done) and the descriptor it
/// opened, if any.
pub(crate) async fn run_raw(
    app: &Arc<App>,
    id: &str,
    op: FileOp,
) -> Result<(Option<Errno>, Option<OwnedFd>), ApiError> {
    let (a, i) = (app.clone(), id.to_string());
    let (errno, fd) = blocking(move || ask(&a, &i, op)).await?;
    Ok(((errno as i32 != 0).then_some(errno), fd))
}

/// Do `op`; its descriptor when it opened one.
pub(crate) async fn run(
    app: &Arc<App>,
    id: &str,
    op: FileOp,
    path: &str,
) -> Result<Option<OwnedFd>, ApiError> {
    match run_raw(app, id, op).await? {
        (None, fd) => Ok(fd),
        (Some(errno), _) => Err(file_error(errno, path)),
    }
}

pub(crate) fn opened(fd: Option<OwnedFd>) -> Result<OwnedFd, ApiError> {
    fd.ok_or_else(|| ApiError::internal("the sandbox's init answered without the file"))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", params(("id" = String, Path), FileQuery),
    responses((status = 200, description = "the file's bytes", content_type = "application/octet-stream"),
        (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn read(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    query: QueryResult,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let path = inside_of(&app, &id, q.path.as_deref())?;
    let fd = opened(run(&app, &id, FileOp::Read { path: path.clone() }, &path).await?)?;
    let file = std::fs::File::from(fd);
    let len = file
        .metadata()
        .map(|m| m.len())
        .map_err(|e| ApiError::internal(format!("{path:?}: {e}")))?;
    // What the answer says it carries, even should the file grow meanwhile.
    let file = tokio::fs::File::from_std(file).take(len);
    let stream = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(bytes::Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CACHE_CONTROL, "no-store")
        .header(header::CONTENT_LENGTH, len)
        .body(HttpBody::from_stream(stream))
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// The mode a `PUT` asked for.
fn mode_of(mode: Option<&str>) -> Result<u32, ApiError> {
    let Some(m) = mode else { return Ok(0o644) };
    match u32::from_str_radix(m, 8) {
        Ok(v) if v <= 0o777 => Ok(v),
        _ => Err(ApiError::bad_request(format!(
            "mode {m:?}: octal permission bits, at most 0777 (e.g. 0644; setuid, setgid and sticky are not taken)"
        ))),
    }
}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/files", params(("id" = String, Path), FileQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 204, description = "written (created or replaced, at once)"),
        (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem),
        (status = 413, body = Problem), (status = 507, body = Problem)),
    security(("token" = [])))]
pub async fn write(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    query: QueryResult,
    headers: HeaderMap,
    body: HttpBody,
) -> Result<StatusCode, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let path = inside_of(&app, &id, q.path.as_deref())?;
    let mode = mode_of(q.mode.as_deref())?;
    let limit = app.limits.file_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("a file written through the API is at most {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let Some((dir, name)) = path.rsplit_once('/').or(Some(("", path.as_str()))) else {
        return Err(file_error(Errno::EINVAL, &path));
    };
    if name.is_empty() {
        return Err(file_error(Errno::EISDIR, &path));
    }
    // Written beside the file under a name of its own, then renamed over
    // it: a reader sees the old file or the new one, and a failed upload
    // leaves nothing.
    let temp_name = format!(".warden-upload-{}", crate::auth::random_id(8));
    let temp = if dir.is_empty() && !path.starts_with('/') {
        temp_name
    } else {
        format!("{dir}/{temp_name}")
    };
    let fd = opened(
        run(
            &app,
            &id,
            FileOp::Create {
                path: temp.clone(),
                mode,
            },
            &path,
        )
        .await?,
    )?;
    let mut file = tokio::fs::File::from_std(std::fs::File::from(fd));
    let copied = async {
        let mut stream = body.into_data_stream();
        let mut total: u64 = 0;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::bad_request(format!("the request body broke off: {e}")))?;
            total += chunk.len() as u64;
            if total > limit {
                return Err(too_large());
            }
            file.write_all(&chunk).await.map_err(|e| {
                file_error(
                    e.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::EIO),
                    &path,
                )
            })?;
        }
        file.flush()
            .await
            .map_err(|e| ApiError::internal(format!("{path:?}: {e}")))
    }
    .await;
    drop(file);
    let done = match copied {
        Ok(()) => {
            run(
                &app,
                &id,
                FileOp::Rename {
                    from: temp.clone(),
                    to: path.clone(),
                },
                &path,
            )
            .await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = done {
        let _ = run(
            &app,
            &id,
            FileOp::Remove {
                path: temp,
                recursive: false,
            },
            &path,
        )
        .await;
        return Err(e);
    }
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files", params(("id" = String, Path), FileQuery),
    responses((status = 204), (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn remove(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    query: QueryResult,
) -> Result<StatusCode, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let path = inside_of(&app, &id, q.path.as_deref())?;
    let op = FileOp::Remove {
        path: path.clone(),
        recursive: q.recursive.unwrap_or(false),
    };
    // A large tree goes in rounds (the init answers EAGAIN after each);
    // a sandbox that makes files as fast as they go does not keep the
    // request forever.
    for _ in 0..MAX_REMOVE_ROUNDS {
        match run_raw(&app, &id, op.clone()).await?.0 {
            None => return Ok(StatusCode::NO_CONTENT),
            Some(Errno::EAGAIN) => continue,
            Some(errno) => return Err(file_error(errno, &path)),
        }
    }
    Err(ApiError::conflict(format!(
        "{path:?} still has entries after {MAX_REMOVE_ROUNDS} rounds of removal (something in the sandbox keeps making them)"
    )))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/list", params(("id" = String, Path), FileQuery),
    responses((status = 200, body = FileList), (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn list(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    axum::Extension(credential): axum::Extension<crate::credential::Credential>,
    query: QueryResult,
) -> Result<Json<FileList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    // Reading a page of a large directory takes a thread a while: the
    // lists a token runs at once are among its places.
    let _lease = app.leases.take(&credential, crate::leases::Kind::List)?;
    Ok(Json(list_in(&app, &id, q.path, q.after).await?))
}

/// A page of directory `path`'s entries (relative to the workspace, or
/// absolute inside the sandbox), those after `after`; the caller holds
/// the place of the list.
pub(crate) async fn list_in(
    app: &Arc<App>,
    id: &str,
    path: Option<String>,
    after: Option<String>,
) -> Result<FileList, ApiError> {
    let path = inside_of(app, id, Some(path.as_deref().unwrap_or("")))?;
    let fd = opened(run(app, id, FileOp::List { path: path.clone() }, &path).await?)?;
    let after = after.unwrap_or_default().into_bytes();
    let (entries, more) = blocking(move || entries_of(fd, &path, &after, LIST_PAGE)).await?;
    let next = if more {
        entries.last().map(|e| e.name.clone())
    } else {
        None
    };
    Ok(FileList { entries, next })
}

/// The entry `name` of directory `dir` (as the files API takes paths),
/// looked at without following a link, without listing the directory:
/// `None` when there is none.
pub(crate) async fn entry_in(
    app: &Arc<App>,
    id: &str,
    dir: &str,
    name: &str,
) -> Result<Option<FileEntry>, ApiError> {
    let dir = inside_of(app, id, Some(dir))?;
    let fd = opened(run(app, id, FileOp::List { path: dir.clone() }, &dir).await?)?;
    let name = std::ffi::CString::new(name)
        .map_err(|_| ApiError::bad_request("a file name holds no NUL byte"))?;
    blocking(move || Ok(entry_at(&fd, &name, &dir))).await
}

/// The first `page` entries of an opened directory in name order whose
/// names sort after `after`, each looked at without following a link,
/// and whether it has more. Only a page of names is held at any time,
/// however many the directory has.
pub(crate) fn entries_of(
    fd: OwnedFd,
    path: &str,
    after: &[u8],
    page: usize,
) -> Result<(Vec<FileEntry>, bool), ApiError> {
    use std::collections::BinaryHeap;
    let failed = |e: Errno| ApiError::internal(format!("cannot list {path:?}: {}", e.desc()));
    let mut dir = nix::dir::Dir::from_fd(fd).map_err(failed)?;
    // The page's names and one more, the largest on top.
    let mut names: BinaryHeap<std::ffi::CString> = BinaryHeap::new();
    for entry in dir.iter() {
        let entry = entry.map_err(failed)?;
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." || bytes <= after {
            continue;
        }
        if names.len() > page {
            if names.peek().is_some_and(|top| top.as_c_str() <= name) {
                continue;
            }
            names.pop();
        }
        names.push(name.to_owned());
    }
    let mut names = names.into_sorted_vec();
    let more = names.len() > page;
    names.truncate(page);
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        out.extend(entry_at(&dir, &name, path));
    }
    Ok((out, more))
}

/// The entry `name` of the directory open as `dir` (shown under `path`),
/// without following a link; `None` when it is gone.
fn entry_at(dir: &impl std::os::fd::AsFd, name: &std::ffi::CStr, path: &str) -> Option<FileEntry> {
    use nix::sys::stat::SFlag;
    let st = nix::sys::stat::fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .ok()?;
    let kind = match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => "file",
        SFlag::S_IFDIR => "dir",
        SFlag::S_IFLNK => "symlink",
        _ => "other",
    };
    let name = name.to_string_lossy().into_owned();
    Some(FileEntry {
        path: match path {
            "" => name.clone(),
            "/" => format!("/{name}"),
            _ => format!("{path}/{name}"),
        },
        name,
        kind: kind.to_string(),
        size: st.st_size.max(0) as u64,
        mode: st.st_mode & 0o7777,
        modified_ms: (st.st_mtime.max(0) as u64) * 1000
            + (st.st_mtime_nsec.max(0) as u64) / 1_000_000,
    })
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/mkdir", params(("id" = String, Path)), request_body = MkdirRequest,
    responses((status = 204, description = "made, with its missing parents (or there already)"),
        (status = 400, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn mkdir(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Body(req): Body<MkdirRequest>,
) -> Result<StatusCode, ApiError> {
    let path = inside_of(&app, &id, Some(&req.path)).map_err(|e| e.with_field(Some("/path")))?;
    let op = FileOp::Mkdir {
        path: path.clone(),
        parents: true,
    };
    run(&app, &id, op, &path).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/move", params(("id" = String, Path)), request_body = MoveRequest,
    responses((status = 204), (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn rename(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Body(req): Body<MoveRequest>,
) -> Result<StatusCode, ApiError> {
    let from = inside_of(&app, &id, Some(&req.from)).map_err(|e| e.with_field(Some("/from")))?;
    let to = inside_of(&app, &id, Some(&req.to)).map_err(|e| e.with_field(Some("/to")))?;
    run(
        &app,
        &id,
        FileOp::Rename {
            from: from.clone(),
            to,
        },
        &from,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

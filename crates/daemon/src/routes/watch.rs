//! Changes in a sandbox's workspace as server-sent events: created,
//! modified, removed, moved, each with its path relative to the
//! workspace.
//!
//! Confined as the files API is: the sandbox's own init opens the watched
//! directory inside the sandbox, beneath `/workspace`, one name at a time
//! and through no link (a path that leaves is 400), and hands the daemon
//! the directory it opened; the daemon watches that directory's inode
//! (inotify on `/proc/self/fd/N`, which names exactly the descriptor) and
//! reaches subdirectories only from it, one name at a time with
//! `O_NOFOLLOW | O_DIRECTORY`: a symbolic link, wherever it points, is
//! never entered, so nothing outside the workspace is ever watched. What
//! is watched is the sandbox's own view (through its overlay, when it has
//! one), so its changes are seen as it made them.

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::convert::Infallible;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use warden_protocol::files::FileOp;

use super::files::{inside, opened, run};
use super::sandboxes::blocking;
use crate::app::App;
use crate::error::{ApiError, Problem};

/// Most directories one watch follows (each is an inotify watch).
const MAX_DIRS: usize = 8192;
/// Most watch streams open at once in this daemon: each takes one of the
/// inotify instances the kernel counts per user (128 by default), which
/// the daemon's user shares with everything else it runs, so token
/// holders may not take them all.
const MAX_WATCHES: usize = 32;
/// Of [`MAX_WATCHES`], the places only the owner takes: nothing token
/// holders hold together makes the owner's socket wait for a watch.
const OWNER_RESERVE: usize = 8;
/// The most watches one token (or session) holds at once: half of what
/// the tokens may hold together, so one alone never leaves every other
/// refused, whatever its lease bound.
const WATCHES_PER_TOKEN: usize = (MAX_WATCHES - OWNER_RESERVE) / 2;
/// The code of a refusal by a bound of the watches ([`too_many_watches`],
/// and the host's or the daemon's inotify watches running out): not
/// `quota`, which is a token's quotas, set by its owner, that only
/// removing something passes; a watch bound passes when a watch ends.
pub const TOO_MANY_WATCHES: &str = "too_many_watches";

/// 429 `too_many_watches`, the bound it met named as the session
/// ledger's are (`details.bound`, `details.limit`).
fn too_many_watches(bound: &str, limit: usize, message: String) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        TOO_MANY_WATCHES,
        message,
    )
    .with_details(serde_json::json!({ "bound": bound, "limit": limit }))
}

/// Watch streams open now, by holder.
static BY_HOLDER: std::sync::Mutex<Option<HashMap<String, usize>>> = std::sync::Mutex::new(None);
/// Watch streams open now.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// The most inotify watches (watched directories) all of the daemon's
/// watch streams hold together: the kernel counts them per user
/// (`fs.inotify.max_user_watches`), and the daemon's user (root, often)
/// shares that count with every other program it runs, so the daemon
/// keeps to a quarter of it, and never more than this.
const MAX_DIRS_ALL: usize = 32768;
/// Directories watched now, by every stream.
static DIRS_HELD: AtomicUsize = AtomicUsize::new(0);

/// The daemon's budget of inotify watches, read from the host once.
fn dirs_budget() -> usize {
    static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(8192);
        (host / 4).clamp(1, MAX_DIRS_ALL)
    })
}

/// One more directory watched, within the daemon's budget.
fn take_dir() -> bool {
    DIRS_HELD
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < dirs_budget()).then_some(n + 1)
        })
        .is_ok()
}

fn give_dirs(n: usize) {
    let _ = DIRS_HELD.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
        Some(h.saturating_sub(n))
    });
}

/// A place among the [`MAX_WATCHES`], given back when dropped.
struct Slot {
    /// Who holds it: none for the owner.
    holder: Option<String>,
}

impl Slot {
    /// A place for the owner (any of them) or a token holder (at most
    /// [`WATCHES_PER_TOKEN`], among all but the [`OWNER_RESERVE`]).
    fn take(holder: Option<String>) -> Result<Slot, ApiError> {
        let mut by = BY_HOLDER
            .lock()
            .map_err(|_| ApiError::internal("the daemon's watch count is poisoned"))?;
        let by = by.get_or_insert_with(HashMap::new);
        let bound = match &holder {
            None => MAX_WATCHES,
            Some(h) => {
                let mine = by.get(h).copied().unwrap_or(0);
                if mine >= WATCHES_PER_TOKEN {
                    return Err(too_many_watches(
                        "per_token",
                        WATCHES_PER_TOKEN,
                        format!("you hold {mine} files watches, the most one token holds at once; close one (or watch a common parent recursively) and ask again"),
                    ));
                }
                MAX_WATCHES - OWNER_RESERVE
            }
        };
        let taken = OPEN.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < bound).then_some(n + 1)
        });
        match taken {
            Ok(_) => {
                if let Some(h) = &holder {
                    *by.entry(h.clone()).or_insert(0) += 1;
                }
                Ok(Slot { holder })
            }
            // Filled by others' watches too, which end without this
            // caller: it passes by itself, so it says when to ask again.
            Err(_) => {
                let mut e = too_many_watches(
                    "per_daemon",
                    bound,
                    format!("{bound} files watches are open on this daemon already, the most it holds for you; ask again once one ends (Retry-After), or close one of yours (or watch a common parent recursively)"),
                );
                e.retry_after = Some(crate::error::BUSY_RETRY_AFTER);
                Err(e)
            }
        }
    }
}

impl Slot {
    /// A place, waiting a little for one when all are taken: a watch
    /// whose client has just gone gives its place back only when its
    /// thread next looks (within [`POLL_MS`]), and a client that closed
    /// one watch and opens another must not be refused for that moment.
    async fn wait(holder: Option<String>) -> Result<Slot, ApiError> {
        let deadline =
            tokio::time::Instant::now() + std::time::Duration::from_millis(u64::from(POLL_MS) * 3);
        loop {
            match Slot::take(holder.clone()) {
                Ok(s) => return Ok(s),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::SeqCst);
        if let (Some(h), Ok(mut by)) = (&self.holder, BY_HOLDER.lock()) {
            if let Some(map) = by.as_mut() {
                if let Some(n) = map.get_mut(h) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        map.remove(h);
                    }
                }
            }
        }
    }
}

/// How often the watching thread looks whether its client is still there.
const POLL_MS: u16 = 200;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// A directory relative to the workspace, or absolute inside the
    /// sandbox (the workspace itself when not given).
    pub path: Option<String>,
    /// Its subdirectories too, and those made later (default false).
    pub recursive: Option<bool>,
}

/// One change, as a server-sent event's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileChange {
    /// The watch is in place: every change from now on is reported.
    Ready {
        path: String,
    },
    Created {
        path: String,
        kind: Kind,
    },
    Modified {
        path: String,
    },
    Removed {
        path: String,
        kind: Kind,
    },
    /// Renamed inside the watched tree.
    Moved {
        from: String,
        path: String,
        kind: Kind,
    },
    /// The kernel's queue overflowed: changes were lost; list again.
    Overflow,
    /// The watched directory itself was removed or moved; the stream ends.
    Gone {
        path: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
}

fn kind_of(mask: EventMask) -> Kind {
    if mask.contains(EventMask::ISDIR) {
        Kind::Dir
    } else {
        Kind::File
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Open `name` beneath `dir` as a directory, following no link and
/// crossing into nothing else (a mount point, a magic link).
fn open_dir(dir: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(Errno::EINVAL);
    }
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .mode(Mode::empty())
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        );
    nix::fcntl::openat2(dir, name, how)
}

/// The watches of one stream: each watched directory's path relative to
/// the workspace.
struct Watcher {
    inotify: Inotify,
    /// The watched directory, as the init opened it.
    root: OwnedFd,
    root_rel: String,
    recursive: bool,
    dirs: HashMap<WatchDescriptor, String>,
    /// A rename's first half (cookie, path, kind) read at the end of one
    /// read of the queue: its second half may come in the next read.
    moved_from: Option<(u32, String, Kind)>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        give_dirs(self.dirs.len());
    }
}

/// How long a rename's first half waits for its second before it is
/// reported as a removal (the file left the watched tree).
const PAIR_MS: u16 = 50;

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
        | WatchMask::EXCL_UNLINK
}

impl Watcher {
    fn new(root: OwnedFd, root_rel: String, recursive: bool) -> Result<Watcher, ApiError> {
        let inotify = Inotify::init().map_err(|e| match e.raw_os_error() {
            Some(libc_emfile) if libc_emfile == Errno::EMFILE as i32 => ApiError::new(
                axum::http::StatusCode::INSUFFICIENT_STORAGE,
                TOO_MANY_WATCHES,
                "the host has no inotify instance left for the daemon's user (fs.inotify.max_user_instances); close other watches and ask again",
            )
            .with_details(serde_json::json!({ "bound": "host_instances" })),
            _ => ApiError::internal(format!("cannot start watching: {e}")),
        })?;
        let mut w = Watcher {
            inotify,
            root,
            root_rel,
            recursive,
            dirs: HashMap::new(),
            moved_from: None,
        };
        let fd = nix::unistd::dup(&w.root)
            .map_err(|e| ApiError::internal(format!("cannot start watching: {e}")))?;
        let rel = w.root_rel.clone();
        w.add_tree(fd, rel, None).map_err(|e| match e {
            Errno::ENOSPC | Errno::EMFILE => ApiError::new(
                axum::http::StatusCode::INSUFFICIENT_STORAGE,
                TOO_MANY_WATCHES,
                format!("the daemon's watches follow as many directories as it lets them all follow together (a quarter of the host's fs.inotify.max_user_watches), or this watch reached its own bound ({MAX_DIRS} directories); watch a smaller tree and ask again"),
            )
            .with_details(serde_json::json!({ "bound": "directories" })),
            e => ApiError::internal(format!("cannot watch: {}", e.desc())),
        })?;
        Ok(w)
    }

    /// The directory `fd` (at `rel`) below `self.root`.
    fn open_rel(&self, rel: &str) -> Result<OwnedFd, Errno> {
        let below = if self.root_rel.is_empty() {
            rel
        } else {
            rel.strip_prefix(&self.root_rel)
                .map(|r| r.trim_start_matches('/'))
                .ok_or(Errno::EXDEV)?
        };
        let mut cur = nix::unistd::dup(&self.root)?;
        for name in below.split('/').filter(|n| !n.is_empty()) {
            cur = open_dir(cur.as_fd(), name)?;
        }
        Ok(cur)
    }

    /// Watch `fd` (at `rel`) and, when recursive, every directory below
    /// it; with `found`, what is already there is reported as created (it
    /// may have been made before its watch was).
    fn add_tree(
        &mut self,
        fd: OwnedFd,
        rel: String,
        mut found: Option<&mut Vec<FileChange>>,
    ) -> Result<(), Errno> {
        let mut stack = vec![(fd, rel)];
        while let Some((fd, rel)) = stack.pop() {
            if self.dirs.len() >= MAX_DIRS || !take_dir() {
                return Err(Errno::ENOSPC);
            }
            let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
            let wd = match self.inotify.watches().add(&proc_path, mask()) {
                Ok(wd) => wd,
                Err(e) => {
                    give_dirs(1);
                    return Err(Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio())));
                }
            };
            if self.dirs.insert(wd, rel.clone()).is_some() {
                // The same directory again (inotify gives it the watch it
                // had): one watch, counted once.
                give_dirs(1);
            }
            if !self.recursive {
                continue;
            }
            let Ok(mut dir) = nix::dir::Dir::from_fd(fd) else {
                continue;
            };
            let mut entries = Vec::new();
            for e in dir.iter().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name == "." || name == ".." {
                    continue;
                }
                let is_dir = e.file_type() == Some(nix::dir::Type::Directory);
                entries.push((name, is_dir));
            }
            for (name, is_dir) in entries {
                let path = join(&rel, &name);
                if let Some(f) = found.as_deref_mut() {
                    f.push(FileChange::Created {
                        path: path.clone(),
                        kind: if is_dir { Kind::Dir } else { Kind::File },
                    });
                }
                if is_dir {
                    // A link is not a directory here (d_type of the entry
                    // itself), and open_dir refuses one swapped in since.
                    if let Ok(sub) = open_dir(dir.as_fd(), &name) {
                        stack.push((sub, path));
                    }
                }
            }
        }
        Ok(())
    }

    /// `wd` is no longer watched: its place in the daemon's budget is free.
    fn unwatched(&mut self, wd: &WatchDescriptor) {
        if self.dirs.remove(wd).is_some() {
            give_dirs(1);
        }
    }

    /// Stop watching `rel` and everything below it.
    fn forget_tree(&mut self, rel: &str) {
        let prefix = format!("{rel}/");
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, r)| *r == rel || r.starts_with(&prefix))
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in gone {
            self.unwatched(&wd);
            let _ = self.inotify.watches().remove(wd);
        }
    }

    /// A new directory at `path`: watched, with what it holds already.
    fn grew(&mut self, path: &str, out: &mut Vec<FileChange>) {
        if !self.recursive {
            return;
        }
        if let Ok(fd) = self.open_rel(path) {
            let _ = self.add_tree(fd, path.to_string(), Some(out));
        }
    }

    /// The changes one read of the kernel's queue holds; `None` when the
    /// watched directory itself is gone.
    fn translate(&mut self, buf: &mut [u8]) -> Result<Vec<FileChange>, Errno> {
        let mut raw = Vec::new();
        {
            let events = match self.inotify.read_events(buf) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(Vec::new()),
                Err(e) => return Err(Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio()))),
            };
            for e in events {
                let name = e.name.map(|n| n.to_string_lossy().into_owned());
                raw.push((e.wd.clone(), e.mask, e.cookie, name));
            }
        }
        let mut out: Vec<FileChange> = Vec::new();
        let mut moved_from = self.moved_from.take();
        let flush_from = |m: &mut Option<(u32, String, Kind)>, out: &mut Vec<FileChange>| {
            if let Some((_, path, kind)) = m.take() {
                out.push(FileChange::Removed { path, kind });
            }
        };
        for (wd, mask, cookie, name) in raw {
            if mask.contains(EventMask::Q_OVERFLOW) {
                out.push(FileChange::Overflow);
                continue;
            }
            let Some(dir) = self.dirs.get(&wd).cloned() else {
                continue;
            };
            if mask.contains(EventMask::IGNORED) {
                self.unwatched(&wd);
                if dir == self.root_rel {
                    flush_from(&mut moved_from, &mut out);
                    out.push(FileChange::Gone { path: dir });
                    return Ok(out);
                }
                continue;
            }
            if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
                if dir == self.root_rel {
                    flush_from(&mut moved_from, &mut out);
                    out.push(FileChange::Gone { path: dir });
                    return Ok(out);
                }
                continue;
            }
            let Some(name) = name else { continue };
            let path = join(&dir, &name);
            let kind = kind_of(mask);
            if !mask.contains(EventMask::MOVED_TO) {
                flush_from(&mut moved_from, &mut out);
            }
            if mask.contains(EventMask::CREATE) {
                out.push(FileChange::Created {
                    path: path.clone(),
                    kind,
                });
                if kind == Kind::Dir {
                    self.grew(&path, &mut out);
                }
            } else if mask.contains(EventMask::DELETE) {
                out.push(FileChange::Removed { path, kind });
            } else if mask.intersects(EventMask::MODIFY | EventMask::CLOSE_WRITE) {
                let change = FileChange::Modified { path };
                if out.last() != Some(&change) {
                    out.push(change);
                }
            } else if mask.contains(EventMask::MOVED_FROM) {
                if kind == Kind::Dir {
                    // Its watches go: wherever it went, it is followed
                    // again only if it lands inside the watched tree.
                    self.forget_tree(&path);
                }
                moved_from = Some((cookie, path, kind));
            } else if mask.contains(EventMask::MOVED_TO) {
                match moved_from.take() {
                    Some((c, from, _)) if c == cookie => out.push(FileChange::Moved {
                        from,
                        path: path.clone(),
                        kind,
                    }),
                    other => {
                        moved_from = other;
                        flush_from(&mut moved_from, &mut out);
                        out.push(FileChange::Created {
                            path: path.clone(),
                            kind,
                        });
                    }
                }
                if kind == Kind::Dir {
                    self.grew(&path, &mut out);
                }
            }
        }
        // A first half last in this read waits for the next one.
        self.moved_from = moved_from;
        Ok(out)
    }

    /// The rename's first half that found no second half in time: the
    /// file left the watched tree.
    fn unpaired(&mut self) -> Option<FileChange> {
        self.moved_from
            .take()
            .map(|(_, path, kind)| FileChange::Removed { path, kind })
    }

    /// Send changes until the client goes or the directory does.
    fn run(mut self, tx: mpsc::Sender<Result<SseEvent, Infallible>>) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if tx.is_closed() {
                return;
            }
            let mut fds = [PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
            let wait = if self.moved_from.is_some() {
                PAIR_MS
            } else {
                POLL_MS
            };
            match poll(&mut fds, PollTimeout::from(wait)) {
                Ok(0) => {
                    if let Some(c) = self.unpaired() {
                        if !send(&tx, &c) {
                            return;
                        }
                    }
                    continue;
                }
                Err(Errno::EINTR) => continue,
                Ok(_) => {}
                Err(_) => return,
            }
            let changes = match self.translate(&mut buf) {
                Ok(c) => c,
                Err(_) => return,
            };
            for c in changes {
                let end = matches!(c, FileChange::Gone { .. });
                if !send(&tx, &c) || end {
                    return;
                }
            }
        }
    }
}

fn send(tx: &mpsc::Sender<Result<SseEvent, Infallible>>, c: &FileChange) -> bool {
    let Ok(data) = serde_json::to_string(c) else {
        return true;
    };
    tx.blocking_send(Ok(SseEvent::default().data(data))).is_ok()
}

fn libc_eio() -> i32 {
    Errno::EIO as i32
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/watch", params(("id" = String, Path), WatchQuery),
    responses((status = 200, description = "text/event-stream of FileChange (JSON): `ready` first, then each change as it happens; with `recursive`, what a directory holds when it is made or moved in is reported as `created` (it may have changed before its watch was in place)", body = FileChange),
        (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem),
        (status = 429, description = "`too_many_watches`: the caller's watches (`details.bound` `per_token`), or the daemon's for all tokens (`per_daemon`, with Retry-After), are as many as it holds at once; or `too_many_sessions`, the session ledger's bounds", body = Problem),
        (status = 507, description = "`too_many_watches`: the host's inotify instances (`host_instances`) or the directories the daemon's watches may follow (`directories`) are used up", body = Problem)),
    security(("token" = [])))]
pub async fn watch(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    axum::Extension(credential): axum::Extension<crate::credential::Credential>,
    query: Result<Query<WatchQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let path = inside(Some(q.path.as_deref().unwrap_or("")))?;
    let recursive = q.recursive.unwrap_or(false);
    // Held by the watching thread, as its place among the daemon's
    // watches is (see [`crate::leases`]).
    let lease = app.leases.take(&credential, crate::leases::Kind::Watch)?;
    // Keyed as the session ledger keys a place: a token minted for a
    // token, or made by it, holds watches among that token's.
    let slot = Slot::wait(app.leases.holder_of(&credential)).await?;
    // The init opens the directory inside the sandbox (a link, `..` or a
    // file refused there), and hands it over.
    let fd = opened(run(&app, &id, FileOp::List { path: path.clone() }, &path).await?)?;
    let rel = path.clone();
    let watcher = blocking(move || Watcher::new(fd, rel, recursive)).await?;
    let (tx, rx) = mpsc::channel::<Result<SseEvent, Infallible>>(256);
    std::thread::spawn(move || {
        let _held = (slot, lease);
        if send(&tx, &FileChange::Ready { path }) {
            watcher.run(tx);
        }
    });
    // The watch ends when its token is revoked or its session ends.
    let stream = futures_util::StreamExt::take_until(
        ReceiverStream::new(rx),
        Box::pin(app.revoked(credential)),
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

//! Snapshots of a sandbox's state and the sandboxes made from them, and
//! forks: new sandboxes that start from a sandbox's current files.
//!
//! What is carried is the state on disk: the workspace layer and the home
//! ([`warden_workspace::saved`] copies them, reflinked where the file
//! system allows), with the source's resolved spec. The process backend
//! carries no process (saving processes needs CRIU, which does not work on
//! every kernel, this one's included): a sandbox made from a snapshot or a
//! fork starts with the files and runs nothing until asked. A VM that can
//! be paused to disk is the exception: its saved memory is carried too
//! (one pause to disk, the state copied, the source resumed), and a copy's
//! first start restores it with an identity of its own. A running
//! source is paused while its state is copied, so that the copy is of one
//! moment, and resumed after. Each new sandbox is its own: its name, its
//! identity (the id its credentials are bound to), its hostname, its
//! layer, its audit log.

use super::own_dir::{undone, OwnDir};
use super::{control, own_workspace, record, LifecycleError};
use crate::client::{ClientError, Connection};
use crate::protocol::Refusal;
use crate::state::{self, Stored};
use std::path::{Path, PathBuf};
use warden_audit::WorkspaceAction;
use warden_workspace::saved::{self, Saved, SavedInfo, StateOf};
use warden_workspace::{CreateOptions, Layout, Sandbox, Store};

pub use crate::owner::Owner;

/// The snapshots `owner` may see.
pub fn snapshots(store: &Store, owner: Owner<'_>) -> Result<Vec<SavedInfo>, LifecycleError> {
    let saved = Saved::open(store.root())?;
    Ok(saved.list(&owner.label()))
}

/// Delete snapshot `name` of `owner`.
pub fn delete_snapshot(
    store: &Store,
    name: &str,
    owner: Owner<'_>,
) -> Result<SavedInfo, LifecycleError> {
    let saved = Saved::open(store.root())?;
    Ok(saved.delete(name, &owner.label())?)
}

/// Paused for the time of a copy (when it runs, and was not paused
/// already), resumed when dropped. Copies of one sandbox are made one at
/// a time (a lock file in its directory, of any process): two copies made
/// at once would otherwise pause and resume under each other, one thawing
/// the sandbox while the other still copies, or finding it paused by the
/// other and reading the record of that pause before it was written.
struct Held<'a> {
    sb: &'a Sandbox,
    resume: bool,
    /// Where the source's memory lies saved while it is held (a VM paused
    /// to disk for the copy, or found so), or why it is not.
    memory: Result<PathBuf, String>,
    // Released when dropped, after the resume (fields drop after `drop`).
    _one_at_a_time: std::fs::File,
}

/// The lock that makes one sandbox's copies one at a time.
const COPY_LOCK: &str = ".copy.lock";

/// Wait until no copy of `sb` is being made, and keep others from
/// starting one while the returned file is open: taken by each copy, and
/// by what would pull the files from under one (a removal, a restore of
/// the layer).
pub fn no_copy_meanwhile(sb: &Sandbox) -> Result<std::fs::File, LifecycleError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = sb.dir().join(COPY_LOCK);
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .and_then(|f| f.lock().map(|()| f))
        .map_err(|source| LifecycleError::Create { path, source })
}

/// Why a sandbox's copy carries no memory, when the source is no VM.
const NOT_A_VM: &str = "its processes run in the process backend, whose memory no copy carries (saving processes needs CRIU, which does not work on this kernel)";

impl<'a> Held<'a> {
    /// Hold `sb` for a copy; `memory`: a running VM is paused to disk
    /// (its memory saved, then restored when dropped), and where that is
    /// refused it is paused in place and the copy carries its files only,
    /// the refusal kept as why.
    /// A sandbox whose last supervisor ended before saving its layer is
    /// refused ([`LifecycleError::ChangesLost`]): its saved layer is not
    /// its state, and no copy passes it off as such.
    fn hold(sb: &'a Sandbox, why: &str, memory: bool) -> Result<Held<'a>, LifecycleError> {
        let lock = no_copy_meanwhile(sb)?;
        // Asked under the copy lock: no start between this and the copy.
        if !super::liveness(sb).running() && sb.changes_lost() {
            return Err(LifecycleError::ChangesLost {
                name: sb.name().to_string(),
            });
        }
        let saved = sb.dir().join(crate::supervisor::VM_PAUSED);
        let is_vm = memory
            && effective(sb.dir())
                .is_ok_and(|s| crate::backend::Backend::of(&s.spec) == crate::backend::Backend::Vm);
        let on_disk = |otherwise: &str| {
            if warden_vm::pause::is_paused(&saved) {
                Ok(saved.clone())
            } else {
                Err(otherwise.to_string())
            }
        };
        let memory = if !memory {
            Err(String::new())
        } else if !is_vm {
            Err(NOT_A_VM.to_string())
        } else {
            on_disk("the VM is not running, and no memory of it is saved")
        };
        let held = |resume, memory| Held {
            sb,
            resume,
            memory,
            _one_at_a_time: lock,
        };
        if !super::liveness(sb).running() {
            return Ok(held(false, memory));
        }
        let mut memory = memory;
        if is_vm {
            match Connection::open(&control(sb)).and_then(|c| c.pause_with(why, true)) {
                Ok(()) => return Ok(held(true, on_disk("the VM's saved memory is missing"))),
                Err(ClientError::Rejected {
                    code: Refusal::Conflict,
                    ..
                }) if super::paused_since(sb).is_some() => {
                    return Ok(held(
                        false,
                        on_disk("the VM is paused in place (its memory is in its VMM, not saved)"),
                    ))
                }
                // Refused (no --rootfs, a process holding a share, an
                // older supervisor): paused in place below, files only.
                Err(e) => memory = Err(e.to_string()),
            }
        }
        let held = |resume| held(resume, memory);
        match Connection::open(&control(sb)).and_then(|c| c.pause(why)) {
            Ok(()) => Ok(held(true)),
            // Paused already: copied as it is, and left paused.
            Err(ClientError::Rejected {
                code: Refusal::Conflict,
                ..
            }) if super::paused_since(sb).is_some() => Ok(held(false)),
            // No freezer (rootless without a delegated cgroup), or an older
            // supervisor: copied while it runs.
            Err(ClientError::Rejected {
                code: Refusal::Unsupported,
                ..
            })
            | Err(ClientError::Unsupported(_)) => Ok(held(false)),
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.resume {
            if let Ok(c) = Connection::open(&control(self.sb)) {
                let _ = c.resume("the copy of its state is made");
            }
        }
    }
}

/// Save sandbox `sb`'s state (its layer and home, with its spec) as
/// snapshot `name`, owned by `owner`; a running sandbox is paused for the
/// copy. `room`: what `owner`'s disk quota has room for
/// ([`warden_workspace::saved::Room`]; [`warden_workspace::saved::unbounded`]
/// for no quota), asked under the store's lock; a snapshot that takes
/// more is refused, before its copy when its size says so, after it (and
/// removed) when the layer grew or the quota filled meanwhile: its last
/// check and its landing happen within one asking.
pub fn snapshot(
    store: &Store,
    sb: &Sandbox,
    name: &str,
    owner: Owner<'_>,
    room: warden_workspace::saved::Room<'_>,
) -> Result<SavedInfo, LifecycleError> {
    warden_workspace::validate_name("snapshot name", name)?;
    let saved = Saved::open(store.root())?;
    // The spec the snapshot keeps is the one the sandbox runs under now,
    // read while the sandbox is held (no live change falls between its
    // files and its spec) and handed to the save in memory: the save
    // writes it into its own temporary directory under the store's lock,
    // where no other save (another owner's of the same name included)
    // can put another.
    // A VM that can be paused to disk keeps its memory in the snapshot
    // (counted in its size and digest); one that cannot, its files only.
    let info = {
        let held = Held::hold(sb, &format!("snapshot {name}"), true)?;
        let spec = serde_json::to_vec_pretty(&effective(sb.dir())?).map_err(|e| {
            LifecycleError::Refused(format!("the sandbox's spec cannot be saved: {e}"))
        })?;
        let state = StateOf {
            memory: held.memory.clone().ok(),
            ..StateOf::of(sb)
        };
        saved.save(name, &owner.label(), sb, &state, &spec, room)?
    };
    // A copy of the sandbox's state (its files, its home, a VM's memory
    // with the secrets in it) that its log does not show is the gap the
    // log is there to close: a snapshot that cannot be recorded is
    // deleted, and the caller told why. Nothing has used it yet.
    let recorded = record(
        sb,
        WorkspaceAction::Snapshot,
        Vec::new(),
        format!(
            "its state saved as snapshot {name} ({} bytes{})",
            info.bytes,
            if info.memory {
                ", its memory with it"
            } else {
                ""
            }
        ),
    );
    if let Err(source) = recorded {
        let _ = saved.delete(name, &owner.label());
        return Err(LifecycleError::NotRecorded {
            what: format!("snapshot {name}"),
            name: sb.name().to_string(),
            source: Box::new(source),
        });
    }
    Ok(info)
}

/// The configuration sandbox directory `dir` runs under: its spec as
/// made (`sandbox.json`) with the live changes every start applies
/// (`egress.json`: `warden egress`, the API's `PATCH .../egress`, "always"
/// answers, the E2B door's network updates) applied, a caller's additions
/// still marked as a caller's. A copy made from the spec alone would
/// reach again what was taken away from its source.
fn effective(dir: &Path) -> Result<Stored, LifecycleError> {
    let mut stored: Stored = state::read_json(&dir.join(state::STORED))?;
    crate::allowlist::apply_saved(dir, &mut stored.spec);
    crate::programs::apply_saved(dir, &mut stored.spec);
    Ok(stored)
}

/// What a new sandbox is copied from.
struct Source<'a> {
    /// The sandbox it comes from (its name), for the new one's spec and
    /// audit log.
    name: &'a str,
    workspace: &'a Path,
    own_workspace: bool,
    layout: Layout,
    profile: Option<String>,
    /// The source's configuration: its resolved spec with its live
    /// changes applied ([`effective`]).
    stored: Stored,
    state: StateOf,
    /// What the new sandbox's log says it was made from.
    detail: String,
}

/// Make sandbox `name` from snapshot `snap` of `owner` (another owner's is
/// not found); a damaged snapshot is refused before anything is made, and
/// so is one whose copy takes more than `room()`, the bytes `owner`'s
/// disk quota has room for (`u64::MAX`: no quota).
pub fn create_from_snapshot(
    store: &Store,
    name: &str,
    snap: &str,
    owner: Owner<'_>,
    room: &dyn Fn() -> u64,
) -> Result<Sandbox, LifecycleError> {
    warden_workspace::validate_name("sandbox name", name)?;
    let saved = Saved::open(store.root())?;
    let info = saved.get(snap, &owner.label())?;
    saved.verify(&info)?;
    let room = room();
    if info.bytes > room {
        return Err(saved::SavedError::OverQuota {
            owner: owner.label(),
            would: info.bytes,
            room,
        }
        .into());
    }
    let stored: Stored = state::read_json(&saved.dir(&info).join("spec.json"))?;
    make_copy(
        store,
        name,
        Source {
            name: &info.source,
            workspace: &info.workspace,
            own_workspace: info.own_workspace,
            layout: info.layout,
            profile: info.profile.clone(),
            stored,
            state: saved::state_of(&saved, &info),
            detail: format!("made from snapshot {snap} (of sandbox {})", info.source),
        },
    )
}

/// The names `fork` gives: `NAME-fork-K` for the first free K.
fn fork_names(store: &Store, parent: &str, count: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut k = 1;
    while names.len() < count && k < 10_000 {
        let n = format!("{parent}-fork-{k}");
        if store.get(&n).is_err() && !own_workspace(store, &n).exists() {
            names.push(n);
        }
        k += 1;
    }
    names
}

/// Make `count` new sandboxes from sandbox `sb`'s current files (a
/// running one paused for the copy, its processes not carried): the
/// sandboxes made, none started. All or nothing: a failure removes those
/// made so far.
pub fn fork(store: &Store, sb: &Sandbox, count: usize) -> Result<Vec<Sandbox>, LifecycleError> {
    fork_as(store, sb, count, false).map(|f| f.made)
}

/// What a fork made, and whether it carried its source's memory.
#[derive(Debug)]
pub struct Forked {
    /// The sandboxes made, none started.
    pub made: Vec<Sandbox>,
    /// `Ok`: each new sandbox's first start restores the source VM's
    /// memory as a copy of its own (its processes going on, reseeded,
    /// with its own hostname); `Err`: its files only, and why.
    pub memory: Result<(), String>,
}

/// [`fork`], carrying the memory of a VM source that can be paused to
/// disk (a `--rootfs` VM, running, no process holding a share): paused to
/// disk once, its saved state copied into each new sandbox, resumed.
/// Where it cannot be, the forks carry its files only and
/// [`Forked::memory`] says why.
pub fn fork_with_memory(
    store: &Store,
    sb: &Sandbox,
    count: usize,
) -> Result<Forked, LifecycleError> {
    fork_as(store, sb, count, true)
}

fn fork_as(
    store: &Store,
    sb: &Sandbox,
    count: usize,
    memory: bool,
) -> Result<Forked, LifecycleError> {
    let names = fork_names(store, sb.name(), count);
    if names.len() < count {
        return Err(LifecycleError::Refused(format!(
            "no free names for {count} forks of {}",
            sb.name()
        )));
    }
    let own = std::fs::canonicalize(own_workspace(store, sb.name()))
        .is_ok_and(|o| o == sb.meta().workspace);
    let mut made: Vec<Sandbox> = Vec::new();
    let mut carried = Err(String::new());
    let done = (|| {
        let held = Held::hold(sb, &format!("fork into {count}"), memory)?;
        carried = held.memory.as_ref().map(drop).map_err(Clone::clone);
        // Read while the source is held: no live change falls between
        // the copy of its files and that of its configuration.
        let stored = effective(sb.dir())?;
        for n in &names {
            let copy = make_copy(
                store,
                n,
                Source {
                    name: sb.name(),
                    workspace: &sb.meta().workspace,
                    own_workspace: own,
                    layout: sb.meta().layout,
                    profile: sb.meta().profile.clone(),
                    stored: stored.clone(),
                    state: StateOf {
                        memory: held.memory.clone().ok(),
                        ..StateOf::of(sb)
                    },
                    detail: format!("a fork of sandbox {}", sb.name()),
                },
            )?;
            made.push(copy);
        }
        Ok::<(), LifecycleError>(())
    })();
    if let Err(e) = done {
        for m in &made {
            let _ = super::remove(store, m.name(), true);
        }
        return Err(e);
    }
    // As a snapshot's: forks of a sandbox that its log does not show are
    // removed (none of them was started yet), and the caller told why.
    let recorded = record(
        sb,
        WorkspaceAction::Fork,
        Vec::new(),
        format!(
            "forked into {}{}",
            names.join(", "),
            if carried.is_ok() {
                " with its memory"
            } else {
                ""
            }
        ),
    );
    if let Err(source) = recorded {
        for m in &made {
            let _ = super::remove(store, m.name(), true);
        }
        return Err(LifecycleError::NotRecorded {
            what: format!("the fork into {}", names.join(", ")),
            name: sb.name().to_string(),
            source: Box::new(source),
        });
    }
    Ok(Forked {
        made,
        memory: carried,
    })
}

/// Copy the VM state saved in `saved` (memory, devices, their record,
/// the channel's half-read frame) into `to`'s directory, where its first
/// start restores it as a copy. The state holds the guest's memory,
/// secrets included: it stays in the sandbox's owner-only directory. The
/// guest's RAM file is a sparse copy of its own, never a link: no VMM
/// holds a file another maps (`warden_vm::ram`).
fn copy_memory(saved: &Path, to: &Sandbox) -> Result<(), LifecycleError> {
    let dst = to.dir().join(crate::supervisor::VM_COPY);
    warden_vm::ram::copy_saved(saved, &dst).map_err(|e| {
        LifecycleError::Refused(format!(
            "the saved memory of the fork's source cannot be copied into {}: {e}",
            to.name(),
        ))
    })
}

/// Make sandbox `name` as a copy of `src`: its own workspace (an empty
/// one of its own when the source had one), the source's spec with the
/// source's own paths turned into the new sandbox's and a hostname of its
/// own, and the source's state copied in. Nothing stays of a failed one.
fn make_copy(store: &Store, name: &str, src: Source<'_>) -> Result<Sandbox, LifecycleError> {
    warden_workspace::validate_name("sandbox name", name)?;
    let own = own_workspace(store, name);
    // A name held by another sandbox is refused before its own workspace
    // (maybe that sandbox's) is touched ([`super::own_dir`]).
    let own_dir = if src.own_workspace {
        Some(OwnDir::take(store, name, &own)?)
    } else {
        None
    };
    let workspace = match &own_dir {
        Some(o) => o.path().to_path_buf(),
        None => src.workspace.to_path_buf(),
    };
    let mut opts = CreateOptions::new(workspace);
    opts.profile = src.profile.clone();
    opts.layout = src.layout;
    let sb = match store.create(name, &opts) {
        Ok(sb) => sb,
        Err(e) => return Err(undone(store, name, own_dir, e.into(), false)),
    };
    let filled = (|| {
        let mut stored = src.stored;
        let from_dir = store.root().join("sandboxes").join(src.name);
        let mut moves: Vec<(PathBuf, PathBuf)> = vec![(from_dir, sb.dir().to_path_buf())];
        if src.own_workspace {
            moves.push((own_workspace(store, src.name), own.clone()));
        }
        stored = rebased(stored, &moves)?;
        // Whatever the stored spec says, the new sandbox runs on its own
        // state only: a spec that names another sandbox's layer, home,
        // audit log or workspace is not its source's, and is refused.
        if let Some(p) = foreign_state(&stored, store, &sb) {
            return Err(LifecycleError::Refused(format!(
                "the spec of {}'s copy names {}, the state of another sandbox: nothing was made",
                src.name,
                p.display()
            )));
        }
        if stored.spec.hostname == "warden" || stored.spec.hostname == hostname_of(src.name) {
            stored.spec.hostname = hostname_of(name);
        }
        state::write_json(&sb.dir().join(state::STORED), &stored)?;
        saved::copy_state(&src.state, &sb)?;
        if let Some(memory) = &src.state.memory {
            copy_memory(memory, &sb)?;
        }
        Ok::<(), LifecycleError>(())
    })();
    if let Err(e) = filled {
        return Err(undone(store, name, own_dir, e, true));
    }
    // A copy whose making is not in its own log is not made.
    if let Err(source) = record(&sb, WorkspaceAction::Create, Vec::new(), src.detail) {
        let e = LifecycleError::NotRecorded {
            what: format!("sandbox {name}"),
            name: name.to_string(),
            source: Box::new(source),
        };
        return Err(undone(store, name, own_dir, e, true));
    }
    Ok(sb)
}

/// The first path in `stored` (the new sandbox `sb`'s spec, rebased) that
/// lies in the store's state of a sandbox other than `sb`: under
/// `ROOT/sandboxes/` outside `sb`'s directory, or under `ROOT/workspaces/`
/// outside `sb`'s workspace (a copy that shares its source's workspace
/// keeps naming it: that is the workspace `sb` was made over).
fn foreign_state(stored: &Stored, store: &Store, sb: &Sandbox) -> Option<PathBuf> {
    let v = serde_json::to_value(stored).ok()?;
    let mut roots = vec![store.root().to_path_buf()];
    roots.extend(std::fs::canonicalize(store.root()));
    let mut own = vec![
        sb.dir().to_path_buf(),
        sb.meta().workspace.clone(),
        own_workspace(store, sb.name()),
    ];
    own.extend(std::fs::canonicalize(sb.dir()));
    foreign_in(&v, &roots, &own)
}

/// The first string of `v` that is a path under `ROOT/sandboxes/` or
/// `ROOT/workspaces/` (for one of `roots`) and under none of `own`.
fn foreign_in(v: &serde_json::Value, roots: &[PathBuf], own: &[PathBuf]) -> Option<PathBuf> {
    let mut found = None;
    visit_strings(v, &mut |s| {
        let p = Path::new(s);
        let state = roots
            .iter()
            .any(|r| p.starts_with(r.join("sandboxes")) || p.starts_with(r.join("workspaces")));
        if found.is_none() && state && !own.iter().any(|o| p.starts_with(o)) {
            found = Some(p.to_path_buf());
        }
    });
    found
}

fn visit_strings(v: &serde_json::Value, f: &mut dyn FnMut(&str)) {
    match v {
        serde_json::Value::String(s) => f(s),
        serde_json::Value::Array(a) => a.iter().for_each(|x| visit_strings(x, f)),
        serde_json::Value::Object(o) => o.values().for_each(|x| visit_strings(x, f)),
        _ => {}
    }
}

/// A sandbox name as a hostname: `_` is not a hostname's character.
fn hostname_of(name: &str) -> String {
    let mut h: String = name.replace('_', "-");
    h.truncate(63);
    h.trim_end_matches(['-', '.']).to_string()
}

/// `stored` with every path under one of `moves`' old directories moved
/// under its new one (the source's layer, home, audit log, own workspace).
fn rebased(stored: Stored, moves: &[(PathBuf, PathBuf)]) -> Result<Stored, LifecycleError> {
    let bad = |e: serde_json::Error| {
        LifecycleError::Refused(format!("the source's spec cannot be copied: {e}"))
    };
    let mut v = serde_json::to_value(&stored).map_err(bad)?;
    rebase_value(&mut v, moves);
    serde_json::from_value(v).map_err(bad)
}

fn rebase_value(v: &mut serde_json::Value, moves: &[(PathBuf, PathBuf)]) {
    match v {
        serde_json::Value::String(s) => {
            for (from, to) in moves {
                if let Ok(rest) = Path::new(s.as_str()).strip_prefix(from) {
                    *s = to.join(rest).to_string_lossy().into_owned();
                    break;
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| rebase_value(x, moves)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| rebase_value(x, moves)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_source_move_to_the_copy_and_others_stay() {
        let mut v = serde_json::json!({
            "home": "/s/sandboxes/a/home",
            "upper": ["/s/sandboxes/a/upper", "/s/sandboxes/ab/upper"],
            "project": "/home/me/project",
        });
        rebase_value(
            &mut v,
            &[(
                PathBuf::from("/s/sandboxes/a"),
                PathBuf::from("/s/sandboxes/b"),
            )],
        );
        assert_eq!(v["home"], "/s/sandboxes/b/home");
        assert_eq!(v["upper"][0], "/s/sandboxes/b/upper");
        assert_eq!(v["upper"][1], "/s/sandboxes/ab/upper");
        assert_eq!(v["project"], "/home/me/project");
    }

    #[test]
    fn a_spec_naming_another_sandboxs_layer_home_log_or_workspace_is_found() {
        let roots = [PathBuf::from("/s")];
        let own = [
            PathBuf::from("/s/sandboxes/new"),
            PathBuf::from("/s/workspaces/new"),
        ];
        let mine = serde_json::json!({
            "upper": "/s/sandboxes/new/upper",
            "ws": "/s/workspaces/new",
            "rw": ["/home/me/project"],
        });
        assert_eq!(foreign_in(&mine, &roots, &own), None);
        for theirs in [
            "/s/sandboxes/victim/upper",
            "/s/sandboxes/victim/home",
            "/s/sandboxes/victim/audit.jsonl",
            "/s/workspaces/victim",
            "/s/sandboxes/newer/upper",
        ] {
            let v =
                serde_json::json!({ "a": [{ "b": theirs }], "upper": "/s/sandboxes/new/upper" });
            assert_eq!(
                foreign_in(&v, &roots, &own),
                Some(PathBuf::from(theirs)),
                "{theirs}"
            );
        }
    }

    #[test]
    fn a_sandbox_name_makes_a_hostname() {
        assert_eq!(hostname_of("my_box-fork-2"), "my-box-fork-2");
    }
}

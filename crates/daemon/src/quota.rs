//! What a token may take of the host: how many sandboxes, how much
//! memory, disk, processes and open files each may be given, and how
//! much all of its sandboxes together. The owner's own calls are bounded
//! by none of it. Each start of a token's sandbox is held to its quotas
//! again ([`start`]).
//!
//! Three checks, made when a token's sandbox has just been made and
//! before it is recorded (under [`App::quota_lock`], so that two creates
//! at once cannot both pass; a refused sandbox is removed):
//!
//! 1. **Each sandbox within the host's defaults.** A token's sandbox gets
//!    at most the memory, disk, processes (`resources.pids`) and open
//!    files per process (`resources.open_files`) the host gives a
//!    sandbox by default,
//!    unless a profile of the owner's that the request names sets more
//!    (the owner's profile is then the ceiling, as the trust rule holds
//!    it; the disk of the memory it grants, half of it, comes with it).
//! 2. **The token's quotas**: sandboxes at once, memory limits together
//!    (each at what its cgroup may hold, `warden_runtime::backend::memory_held`:
//!    a gVisor sandbox's limit and runsc's sentry and gofer beside it, a
//!    VM's guest RAM and the VMM's overhead), processes together (each at
//!    its `resources.pids`: a share of the host's PID space; by default
//!    room for as many default sandboxes as the token may have),
//!    disk budgets together (with its sandboxes' audit logs and its
//!    snapshots, which are on the host's disk too). A token's own record
//!    sets them (`warden token create --max-sandboxes --max-memory
//!    --max-pids`); where it does not, the daemon's configuration does
//!    (`quotas:`), and where that does not, the defaults here.
//! 3. **The host's disk, reserved.** What warden may write for a sandbox
//!    (its disk budget and its commands' kept output) is reserved against
//!    the free space of the state's file system, summed over every
//!    sandbox there: a crowd of sandboxes, each within the free space
//!    alone, cannot together promise more than there is. A sandbox's
//!    reservation ends when it is removed.
//!
//! A fork makes up to 16 copies at once: before it copies anything, it
//! reserves the quota of all of them (as many sandboxes as it makes, each
//! of its source's sizes) under the same lock ([`reserve`]), so a token at
//! its quota writes no copy, and forks at once cannot each pass alone.
//! The reservation counts in every check until each copy is recorded (or
//! the fork gives up). What each copy reserves of the disk quota is what
//! it will hold ([`copy_disk`]): its disk budget, or its copy of the
//! source's layer and home where that is more (a kernel that cannot hold
//! the layer in a tmpfs of the budget's size leaves it unbounded on
//! disk), and for a running VM its saved memory (the guest's RAM at
//! most), which lies beside the budget, not in it.
//!
//! A VM's saved memory in a sandbox's directory (a pause to disk's
//! `vm-paused`, a fork's `vm-copy` until its first start restores it)
//! counts against the disk quota as a snapshot's does: it is on the
//! host's disk, outside the sandbox's disk budget. Each copy is counted
//! at its full size, though copies of one save link one base file of the
//! guest's RAM (`warden_vm::ram`): the most they would take were each its
//! own, as a snapshot's copy is priced, never less than they take.
//!
//! A refusal names the JSON pointer and a reason code; it never tells a
//! token the host's free space.

use axum::http::StatusCode;
use warden_policy::{format_size, Field};
use warden_workspace::Sandbox;

use crate::app::App;
use crate::db::TokenRow;
use crate::error::{chain, spec_pointer, ApiError};
use crate::reserved::Tally;
use crate::settings::Quotas;

mod start;
pub(crate) use start::may_start;

/// Sandboxes a token may have at once when nothing says otherwise.
const DEFAULT_SANDBOXES: u64 = 16;
/// How many default sandboxes a token's memory and disk quotas hold
/// when nothing says otherwise.
const DEFAULT_SHARE: u64 = 8;

/// The bounds one token is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) sandboxes: u64,
    pub(crate) memory: u64,
    pub(crate) pids: u64,
    pub(crate) disk: u64,
}

/// What `token` is held to now: its record's quotas, else the daemon's
/// `quotas:`, else the defaults, less what the tokens it made over the
/// API were given (a child's quotas are carved out of its maker's, so
/// the maker and its children together hold no more than the maker
/// alone). The disk goes with the memory (a sandbox's default disk is
/// half its memory): a token made by a token has the share of its
/// maker's disk quota that its memory quota is of its maker's, and the
/// maker keeps the rest. A token it makes over the API
/// is compared with these (`routes::tokens`).
pub(crate) fn bounds_of(app: &App, token: &TokenRow) -> Result<Bounds, ApiError> {
    let db = app.db()?;
    let internal = |e: crate::db::DbError| ApiError::internal(chain(&e));
    let maker = match db.maker_of(&token.id).map_err(internal)? {
        Some(id) => db.token(&id).map_err(internal)?,
        None => None,
    };
    let children = db.children_of(&token.id).map_err(internal)?;
    drop(db);
    Ok(carved(
        &app.quotas,
        &app.defaults,
        token,
        maker.as_ref(),
        &children,
    ))
}

/// `token`'s bounds, made by `maker`, having made `children` (see
/// [`bounds_of`]).
fn carved(
    quotas: &Quotas,
    defaults: &warden_policy::Defaults,
    token: &TokenRow,
    maker: Option<&TokenRow>,
    children: &[TokenRow],
) -> Bounds {
    let whole = quotas.for_token(defaults, token);
    let mut b = whole;
    if let Some(m) = maker {
        let of = quotas.for_token(defaults, m);
        b.disk = share(of.disk, whole.memory, of.memory);
    }
    for c in children {
        let given = quotas.for_token(defaults, c);
        b.sandboxes = b.sandboxes.saturating_sub(given.sandboxes);
        b.memory = b.memory.saturating_sub(given.memory);
        b.pids = b.pids.saturating_sub(given.pids);
    }
    b.disk = share(b.disk, b.memory, whole.memory);
    b
}

/// `part` of `of` parts of `total` (rounded down; 0 of 0 parts is 0).
fn share(total: u64, part: u64, of: u64) -> u64 {
    if of == 0 {
        return 0;
    }
    (u128::from(total) * u128::from(part.min(of)) / u128::from(of)) as u64
}

/// Whether `maker` has room for a child held to `child` beside what it
/// holds: the child's quotas are taken from the maker's ledger as a
/// sandbox's sizes are (429 `quota` when they do not fit). Under
/// [`App::quota_lock`].
pub(crate) fn room_for_child(app: &App, maker: &TokenRow, child: Bounds) -> Result<(), ApiError> {
    let whole = bounds_of(app, maker)?;
    let tally = Tally {
        sandboxes: child.sandboxes,
        memory: child.memory,
        pids: child.pids,
        disk: share(whole.disk, child.memory, whole.memory),
        host_disk: 0,
    };
    check(app, maker, None, tally)
}

impl Quotas {
    /// What `token` is held to, on a host whose sandboxes get
    /// `defaults` when they ask nothing.
    fn for_token(&self, defaults: &warden_policy::Defaults, token: &TokenRow) -> Bounds {
        let memory = defaults.memory;
        let sandboxes = token
            .max_sandboxes
            .or(self.sandboxes)
            .unwrap_or(DEFAULT_SANDBOXES);
        Bounds {
            sandboxes,
            memory: token
                .max_memory
                .or(self.memory)
                .unwrap_or(memory.saturating_mul(DEFAULT_SHARE)),
            // What the owner gave the token: its own quota, or the
            // configuration's, or room for as many default sandboxes as
            // it may have.
            pids: token
                .max_pids
                .map(std::num::NonZeroU64::get)
                .or(self.pids)
                .unwrap_or(defaults.pids.saturating_mul(sandboxes)),
            disk: self
                .disk
                .unwrap_or(default_disk(memory).saturating_mul(DEFAULT_SHARE)),
        }
    }
}

/// The disk a sandbox gets by default with the host's default memory
/// (half of it, as resolution gives when none is asked).
fn default_disk(memory: u64) -> u64 {
    memory / 2
}

/// What a sandbox was made with: its memory limit and its disk budget
/// (none when nothing of it is kept on disk).
fn sizes_of(sb: &Sandbox) -> (u64, Option<u64>) {
    match stored_spec(sb) {
        Some(spec) => (
            spec.resources.memory.value,
            spec.filesystem.disk.map(|d| d.bytes),
        ),
        None => (0, None),
    }
}

pub(crate) fn stored_spec(sb: &Sandbox) -> Option<warden_policy::SandboxSpec> {
    warden_runtime::state::stored_spec(sb.dir())
}

/// What a sandbox counts against a token's memory quota: what its
/// cgroup may hold (see [`memory_held`]), not only the limit it asked.
fn held_of(sb: &Sandbox) -> u64 {
    stored_spec(sb).map_or(0, |spec| memory_held(&spec))
}

/// The processes and threads a sandbox's cgroup may hold.
fn pids_of(sb: &Sandbox) -> u64 {
    stored_spec(sb).map_or(0, |spec| spec.resources.pids.value)
}

/// The host memory a sandbox may hold: what its backend's cgroup allows
/// (`warden_runtime::backend::memory_held`): its limit, for gVisor runsc's
/// sentry and gofer beside it, for a VM the guest's RAM (which is not the
/// spec's default limit when none was asked) and the VMM beside it.
fn memory_held(spec: &warden_policy::SandboxSpec) -> u64 {
    warden_runtime::backend::memory_held(spec)
}

/// The bytes a sandbox's audit log holds now.
fn audit_log_bytes(sb: &Sandbox) -> u64 {
    std::fs::metadata(sb.dir().join("audit.jsonl")).map_or(0, |m| m.len())
}

/// What is reserved on the host for a sandbox: the disk budget its maker
/// asked for, and the kept output of its commands that budget allows. A
/// budget nobody asked for (the default, half the memory limit) is not
/// reserved: most sandboxes write little, and reserving every default
/// would refuse the fifth sandbox of an ordinary host; those are bounded
/// by the token's own disk quota instead.
fn host_disk_of(sb: &Sandbox) -> u64 {
    match stored_spec(sb).and_then(|s| s.filesystem.disk) {
        Some(d) if d.asked => d
            .bytes
            .saturating_add(warden_runtime::output::budget_of_sandbox(sb.dir())),
        _ => 0,
    }
}

/// The most `field` a token's sandbox may be given: the host's default,
/// or more where a profile of the owner's that the request names sets
/// more (the trust rule already holds a caller's value under it). `read`
/// reads the field's value out of a profile (a size or a count).
fn ceiling(
    app: &App,
    field: Field,
    host: u64,
    profiles: &[String],
    read: fn(&warden_policy::compose::Layer, Field) -> Option<u64>,
) -> u64 {
    profiles
        .iter()
        .filter_map(|name| {
            warden_policy::compose::compose(
                &app.catalog,
                Some(name),
                &warden_policy::compose::Layer::default(),
            )
            .ok()
        })
        .filter_map(|c| read(&c.merged, field))
        .fold(host, u64::max)
}

fn refused(code: &str, pointer: &str, message: String) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message).with_field(Some(pointer))
}

/// 429 `quota` at no field.
pub(crate) fn over_quota_of(message: String) -> ApiError {
    over_quota(None, message)
}

fn over_quota(pointer: Option<&str>, message: String) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "quota", message).with_field(pointer)
}

/// What a sandbox takes of the host that a token's is held to the host's
/// defaults for: its memory limit, its disk budget (none when nothing of
/// it is kept on disk), its processes and threads, and the files each of
/// its processes may hold open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Asked {
    pub(crate) memory: u64,
    pub(crate) disk: Option<u64>,
    pub(crate) pids: u64,
    pub(crate) open_files: u64,
}

impl Asked {
    /// What `spec` asks.
    pub(crate) fn of(spec: &warden_policy::SandboxSpec) -> Asked {
        Asked {
            memory: spec.resources.memory.value,
            disk: spec.filesystem.disk.map(|d| d.bytes),
            pids: spec.resources.pids.value,
            open_files: spec.resources.open_files,
        }
    }
}

/// Whether a token's sandbox `new` (just made, from a request that named
/// the owner's `profiles`) stays within what the host gives a sandbox by
/// default.
pub(crate) fn within_host_defaults(
    app: &App,
    new: &Sandbox,
    profiles: &[String],
) -> Result<(), ApiError> {
    let asked = stored_spec(new).map(|s| Asked::of(&s)).unwrap_or_default();
    sizes_within_host_defaults(app, asked, profiles)
}

/// The refusal of `field` asked above the most a token's sandbox is
/// given: 422 `above_default` at the field's pointer.
fn above_default(field: Field, what: &str, asked: String, most: String) -> ApiError {
    refused(
        "above_default",
        &spec_pointer(field).unwrap_or_default(),
        format!(
            "{asked} is more {what} than a token's sandbox is given ({most}, the host's default, unless a profile of the owner's sets more): ask for at most that, or leave it out"
        ),
    )
}

/// Whether a token's sandbox asking `asked` stays within what the host
/// gives a sandbox by default, or what the owner's `profiles` set above
/// it now: a copy's spec is held to it as a create's is.
pub(crate) fn sizes_within_host_defaults(
    app: &App,
    asked: Asked,
    profiles: &[String],
) -> Result<(), ApiError> {
    use warden_policy::compose::Layer;
    let host_memory = app.defaults.memory;
    let most = ceiling(app, Field::Memory, host_memory, profiles, Layer::bytes);
    if asked.memory > most {
        return Err(above_default(
            Field::Memory,
            "memory",
            format_size(asked.memory),
            format_size(most),
        ));
    }
    // A sandbox's default disk is half its memory: where the owner's
    // profile grants more memory than the host's default, the disk that
    // memory brings is granted with it (a caller taking what the owner's
    // profile gives is not asking for more).
    let most = ceiling(app, Field::Disk, default_disk(most), profiles, Layer::bytes);
    if let Some(d) = asked.disk.filter(|d| *d > most) {
        return Err(above_default(
            Field::Disk,
            "disk",
            format_size(d),
            format_size(most),
        ));
    }
    // Processes and open files: each a share of a table the whole host
    // shares (pid_max, fs.file-max), so a token's sandbox is held to the
    // host's default as its memory is.
    let counts = [
        (Field::Pids, "processes", asked.pids, app.defaults.pids),
        (
            Field::OpenFiles,
            "open files per process",
            asked.open_files,
            app.defaults.open_files,
        ),
    ];
    for (field, what, n, host) in counts {
        let most = ceiling(app, field, host, profiles, Layer::count);
        if n > most {
            return Err(above_default(field, what, n.to_string(), most.to_string()));
        }
    }
    Ok(())
}

/// The bytes of a VM's saved memory and devices a sandbox keeps in its
/// own directory, outside its disk budget: paused to disk (`vm-paused`),
/// or a fork's copy of its source's awaiting its first start
/// (`vm-copy`). A tree that cannot be measured counts as full.
fn saved_memory_bytes(sb: &Sandbox) -> u64 {
    use warden_runtime::supervisor::{VM_COPY, VM_PAUSED};
    [VM_PAUSED, VM_COPY]
        .iter()
        .map(|n| warden_workspace::fsutil::tree_size(&sb.dir().join(n)))
        .fold(0, u64::saturating_add)
}

/// What a sandbox holds of a token's disk quota: its disk budget and the
/// VM memory it keeps saved beside it.
fn disk_of(sb: &Sandbox) -> u64 {
    sizes_of(sb)
        .1
        .unwrap_or(0)
        .saturating_add(saved_memory_bytes(sb))
}

/// What a sandbox takes of a token's quotas and of the host's disk.
fn tally_of(sb: &Sandbox) -> Tally {
    Tally {
        sandboxes: 1,
        memory: held_of(sb),
        pids: pids_of(sb),
        disk: disk_of(sb),
        host_disk: host_disk_of(sb),
    }
}

/// What one copy a fork makes of `source` will hold of the disk quota,
/// measured before anything is copied: its disk budget (the source's),
/// or its copy of the source's layer and home where that is more, and the
/// source's saved memory where a VM's is carried: what lies saved of it
/// already, else, for a running VM (which the fork pauses to disk), its
/// guest's RAM, the most its saved memory takes. A fork that then carries
/// files only reserved more than it used, and gives it back when each
/// copy is counted as itself.
fn copy_disk(source: &Sandbox) -> u64 {
    let budget = sizes_of(source).1.unwrap_or(0);
    let (files, memory) = held_files_and_memory(source);
    budget.max(files).saturating_add(memory)
}

/// What a snapshot of `source` will hold, measured before anything is
/// copied: its layer and home, and the VM memory it keeps (what lies
/// saved already, else a running VM's guest RAM, the most it takes).
pub(crate) fn snapshot_disk(source: &Sandbox) -> u64 {
    let (files, memory) = held_files_and_memory(source);
    files.saturating_add(memory)
}

/// The bytes of `source`'s layer and home, and of the VM memory a copy
/// of it carries.
fn held_files_and_memory(source: &Sandbox) -> (u64, u64) {
    use warden_runtime::backend::Backend;
    let state = warden_workspace::saved::StateOf::of(source);
    let files = warden_workspace::fsutil::tree_size(&state.upper).saturating_add(
        state
            .home
            .as_deref()
            .map(warden_workspace::fsutil::tree_size)
            .unwrap_or(0),
    );
    let memory = match stored_spec(source) {
        Some(spec) if Backend::of(&spec) == Backend::Vm => {
            let saved = source.dir().join(warden_runtime::supervisor::VM_PAUSED);
            if warden_vm::pause::is_paused(&saved) {
                warden_workspace::fsutil::tree_size(&saved)
            } else if warden_runtime::lifecycle::liveness(source).running() {
                memory_held(&spec).saturating_sub(warden_vm::backend::cgroup_memory(0, None))
            } else {
                0
            }
        }
        _ => 0,
    };
    (files, memory)
}

/// A fork's quota, held from before its copies are made until each is
/// recorded; what is left of it is given back when it is dropped.
pub(crate) struct Reservation<'a> {
    app: &'a App,
    token: String,
    each: Tally,
    left: u64,
}

impl Reservation<'_> {
    /// One reserved copy is about to be checked and recorded as itself
    /// (called under [`App::quota_lock`]): it stops counting as reserved.
    pub(crate) fn take_one(&mut self) {
        if self.left > 0 {
            self.left -= 1;
            self.app.pending.change(&self.token, |t| t.minus(self.each));
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let left = self.each.times(self.left);
        self.app.pending.change(&self.token, |t| t.minus(left));
    }
}

/// Reserve, for `token`, `count` copies of `source` (each of its sizes),
/// before any is made: 429 (or 507 for the host's disk) when they would
/// not all fit, and then nothing is reserved.
pub(crate) fn reserve<'a>(
    app: &'a App,
    token: &TokenRow,
    source: &Sandbox,
    count: u64,
) -> Result<Reservation<'a>, ApiError> {
    // Measured before the lock: the walk of a large layer holds up no
    // other token's check.
    let disk = copy_disk(source);
    let each = Tally {
        disk,
        ..tally_of(source)
    };
    reserve_tally(app, token, each, count).map_err(|mut e| {
        if e.status == StatusCode::TOO_MANY_REQUESTS
            && e.problem.field.as_deref() == spec_pointer(Field::Disk).as_deref()
        {
            e.problem.message.push_str(&format!(
                " (a fork into {count}: each copy holds {}, its disk budget or its copy of the source's layer and home, whichever is more, and a VM's saved memory)",
                format_size(disk)
            ));
        }
        e
    })
}

/// Reserve, for `token`, `count` times `each` under [`App::quota_lock`],
/// checked as a create is against what the token has and what is
/// reserved already: 429 (or 507 for the host's disk) when it would not
/// fit, and then nothing is reserved. Forks, snapshots and sandboxes made
/// from snapshots reserve through here, so a create and any of them at
/// once cannot each pass alone.
pub(crate) fn reserve_tally<'a>(
    app: &'a App,
    token: &TokenRow,
    each: Tally,
    count: u64,
) -> Result<Reservation<'a>, ApiError> {
    let _one_at_a_time = app.quota_lock.lock().unwrap_or_else(|p| p.into_inner());
    check(app, token, None, each.times(count))?;
    app.pending.change(&token.id, |t| t.plus(each.times(count)));
    Ok(Reservation {
        app,
        token: token.id.clone(),
        each,
        left: count,
    })
}

/// A snapshot's disk, reserved for `token` from before its copy is made
/// until it is counted as itself (its reservation dropped when the save
/// is done or failed): `bytes` of the disk quota, no sandbox.
pub(crate) fn reserve_snapshot<'a>(
    app: &'a App,
    token: &TokenRow,
    bytes: u64,
) -> Result<Reservation<'a>, ApiError> {
    let each = Tally {
        disk: bytes,
        ..Tally::default()
    };
    reserve_tally(app, token, each, 1).map_err(|mut e| {
        e.problem.message.push_str(&format!(
            " (a snapshot: it holds {}, its source's layer and home and a VM's saved memory)",
            format_size(bytes)
        ));
        e
    })
}

/// The sandbox a copy of a snapshot makes, reserved for `token` before
/// it is copied: one sandbox of the snapshot's memory, and of disk its
/// budget or the snapshot's bytes, whichever is more.
pub(crate) fn reserve_from_snapshot<'a>(
    app: &'a App,
    token: &TokenRow,
    spec: &warden_policy::SandboxSpec,
    bytes: u64,
) -> Result<Reservation<'a>, ApiError> {
    let budget = spec.filesystem.disk.map_or(0, |d| d.bytes);
    let each = Tally {
        sandboxes: 1,
        memory: memory_held(spec),
        pids: spec.resources.pids.value,
        disk: budget.max(bytes),
        host_disk: spec
            .filesystem
            .disk
            .filter(|d| d.asked)
            .map_or(0, |d| d.bytes),
    };
    reserve_tally(app, token, each, 1)
}

impl Reservation<'_> {
    /// The disk this reservation still holds.
    pub(crate) fn disk(&self) -> u64 {
        self.each.disk.saturating_mul(self.left)
    }
}

/// Whether the token may have the sandbox `new` (just made) besides the
/// ones it has, and the host's disk can hold what warden may write for
/// it besides what it holds for every other sandbox: 429 when not.
pub(crate) fn within_quota(app: &App, token: &TokenRow, new: &Sandbox) -> Result<(), ApiError> {
    check(app, token, Some(new.name()), tally_of(new))
}

/// Whether the token may have `new` more (sandboxes not yet recorded,
/// `recorded_as` the one among its rows that is one of them) besides
/// what it has and what its forks in flight reserved.
fn check(
    app: &App,
    token: &TokenRow,
    recorded_as: Option<&str>,
    new: Tally,
) -> Result<(), ApiError> {
    let bounds = bounds_of(app, token)?;
    let mine = sandboxes_of(app, token, recorded_as)?;
    let reserved = app.pending.of(&token.id);
    let have = (mine.len() as u64).saturating_add(reserved.sandboxes);
    if have.saturating_add(new.sandboxes) > bounds.sandboxes {
        return Err(over_quota(
            None,
            format!(
                "token {} may have {} sandbox(es) at once and has {}: {}",
                token.id,
                bounds.sandboxes,
                have,
                if new.sandboxes > 1 {
                    format!(
                        "{} more do not fit; ask for fewer or remove some first",
                        new.sandboxes
                    )
                } else {
                    "remove one first".to_string()
                }
            ),
        ));
    }
    let memory = new.memory;
    let used: u64 = mine
        .iter()
        .map(held_of)
        .fold(reserved.memory, u64::saturating_add);
    if used.saturating_add(memory) > bounds.memory {
        return Err(over_quota(
            spec_pointer(Field::Memory).as_deref(),
            format!(
                "token {} may have {} of memory limits in all (a gVisor sandbox counted with runsc beside it, a VM sandbox with its VMM beside its guest); its sandboxes have {} and this one asks {}: ask for less (resources.memory) or remove a sandbox",
                token.id,
                format_size(bounds.memory),
                format_size(used),
                format_size(memory)
            ),
        ));
    }
    let pids: u64 = mine
        .iter()
        .map(pids_of)
        .fold(reserved.pids, u64::saturating_add);
    if pids.saturating_add(new.pids) > bounds.pids {
        return Err(over_quota(
            spec_pointer(Field::Pids).as_deref(),
            format!(
                "token {} may have {} processes in all (each sandbox counted at its resources.pids); its sandboxes have {} and this one asks {}: ask for fewer (resources.pids) or remove a sandbox",
                token.id, bounds.pids, pids, new.pids
            ),
        ));
    }
    let disk = new.disk;
    // A sandbox's audit log is on the host's disk too, and grows with
    // what the sandbox does (up to its byte budget): counted as it is.
    let used = disk_used(app, &token.id, &mine, reserved.disk);
    if used.saturating_add(disk) > bounds.disk {
        return Err(over_quota(
            spec_pointer(Field::Disk).as_deref(),
            format!(
                "token {} may have {} of disk budgets in all; its sandboxes, snapshots and volumes have {} (audit logs included) and this one asks {}: ask for less (resources.disk) or remove a sandbox",
                token.id,
                format_size(bounds.disk),
                format_size(used),
                format_size(disk)
            ),
        ));
    }
    if !host_disk_holds(app, recorded_as, new.host_disk)? {
        // The host's free space is the owner's to know, not a token's.
        return Err(ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "no_disk",
            "the daemon's host has no room left to reserve this sandbox's disk budget: ask for less (resources.disk) or remove a sandbox",
        )
        .with_field(spec_pointer(Field::Disk).as_deref()));
    }
    Ok(())
}

/// The sandboxes recorded to `token` (but `except`) that are in the
/// store.
fn sandboxes_of(
    app: &App,
    token: &TokenRow,
    except: Option<&str>,
) -> Result<Vec<Sandbox>, ApiError> {
    let rows = app
        .db()?
        .sandboxes_of_token(&token.id)
        .map_err(|e| ApiError::internal(chain(&e)))?;
    Ok(rows
        .into_iter()
        .filter(|r| Some(r.id.as_str()) != except)
        .filter_map(|r| app.store.get(&r.id).ok())
        .collect())
}

/// The disk a token's quota counts as used: its sandboxes' disk budgets,
/// audit logs and saved VM memory, what its forks in flight reserved, its
/// snapshots, its volumes and its package caches (its own, kept for its
/// next sandboxes of each profile: measured as the host pays for them).
fn disk_used(app: &App, token: &str, mine: &[Sandbox], reserved: u64) -> u64 {
    let caches = warden_runtime::lifecycle::Owner::Token(token).caches_dir(&app.state_dir);
    mine.iter()
        .map(|s| disk_of(s).saturating_add(audit_log_bytes(s)))
        .fold(reserved, u64::saturating_add)
        .saturating_add(snapshot_bytes(app, token))
        .saturating_add(crate::e2b::volume_bytes(app, token))
        .saturating_add(cache_bytes(&caches))
}

/// The bytes a token's caches hold; none kept yet is none.
fn cache_bytes(dir: &std::path::Path) -> u64 {
    match dir.symlink_metadata() {
        Ok(_) => warden_workspace::fsutil::tree_size(dir),
        Err(_) => 0,
    }
}

/// The bytes of disk a token's quota has room for now: what a snapshot,
/// or the copy of one into a new sandbox, may take before it is made
/// (checked again when the copy is done). 0 when it cannot be known.
pub(crate) fn disk_room(app: &App, token: &TokenRow) -> u64 {
    let Ok(bounds) = bounds_of(app, token) else {
        return 0;
    };
    let Ok(rows) = app.db().and_then(|db| {
        db.sandboxes_of_token(&token.id)
            .map_err(|e| ApiError::internal(chain(&e)))
    }) else {
        return 0;
    };
    let mine: Vec<Sandbox> = rows
        .into_iter()
        .filter_map(|r| app.store.get(&r.id).ok())
        .collect();
    let reserved = app.pending.of(&token.id);
    bounds
        .disk
        .saturating_sub(disk_used(app, &token.id, &mine, reserved.disk))
}

/// The bytes the snapshots a token made hold on the host's disk: they
/// outlive its sandboxes and count against its disk quota as they do.
fn snapshot_bytes(app: &App, token: &str) -> u64 {
    warden_workspace::saved::Saved::open(app.store.root())
        .map(|saved| {
            saved
                .list(&warden_runtime::lifecycle::Owner::Token(token).label())
                .iter()
                .map(|i| i.bytes)
                .fold(0, u64::saturating_add)
        })
        .unwrap_or(0)
}

/// Whether the state's file system can hold `new` more bytes warden may
/// write (for sandboxes not yet counted, `recorded_as` the one of them in
/// the store) besides what every other sandbox in the store, and every
/// fork in flight, may still write.
fn host_disk_holds(app: &App, recorded_as: Option<&str>, new: u64) -> Result<bool, ApiError> {
    let Some(free) = free_space(&app.state_dir) else {
        return Ok(true);
    };
    let others: u64 = app
        .store
        .list()
        .map_err(|e| ApiError::internal(chain(&e)))?
        .iter()
        .filter(|e| Some(e.name.as_str()) != recorded_as)
        .filter_map(|e| app.store.get(&e.name).ok().map(|s| (e, s)))
        // What each may still write: what it wrote is already out of the
        // free space, and is not counted twice.
        .map(|(e, s)| host_disk_of(&s).saturating_sub(e.changes_bytes))
        .fold(app.pending.host_disk(), u64::saturating_add);
    Ok(others.saturating_add(new) <= free)
}

/// The owner's profiles a create names: its `profile` and its spec's
/// `extends` (plain names of the owner's catalogue: the trust rule
/// refuses anything else before this is asked).
pub(crate) fn profiles_named(body: &crate::api::CreateSandbox) -> Vec<String> {
    let mut names: Vec<String> = body.profile.iter().cloned().collect();
    let extends = body.spec.as_ref().and_then(|s| s.get("extends"));
    match extends {
        Some(serde_json::Value::String(s)) => names.push(s.clone()),
        Some(serde_json::Value::Array(list)) => names.extend(
            list.iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_string),
        ),
        _ => {}
    }
    names.retain(|n| warden_policy::trust::is_catalog_name(n));
    names
}

/// A create's error as its caller may see it: a token is not told the
/// free space of the host's disk (the owner is).
pub(crate) fn as_caller_sees(
    caller: &crate::auth::Caller,
    e: warden_runtime::lifecycle::LifecycleError,
) -> ApiError {
    use warden_runtime::lifecycle::LifecycleError;
    use warden_runtime::resolve::ResolveError;
    let over_free = |e: &warden_policy::ResolveError| {
        matches!(e.problem(), warden_policy::Problem::DiskOverFree { .. })
    };
    let hidden = matches!(caller, crate::auth::Caller::Token(_))
        && match &e {
            LifecycleError::Resolve(r) => match r.as_ref() {
                ResolveError::Spec(s) => over_free(s),
                ResolveError::InProfile { error, .. } => over_free(error),
                _ => false,
            },
            _ => false,
        };
    if !hidden {
        return e.into();
    }
    ApiError::new(
        StatusCode::INSUFFICIENT_STORAGE,
        "no_disk",
        "the daemon's host has no room for this disk budget: ask for less (resources.disk)",
    )
    .with_field(spec_pointer(Field::Disk).as_deref())
}

/// Free space (for an unprivileged user) of the file system holding `dir`.
fn free_space(dir: &std::path::Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_quotas_read_sizes_and_refuse_zero() {
        let q: Quotas =
            serde_saphyr::from_str("sandboxes: 3\nmemory: 2G\ndisk: 512M\npids: 4096\n").unwrap();
        assert_eq!(
            q,
            Quotas {
                sandboxes: Some(3),
                memory: Some(2 << 30),
                disk: Some(512 << 20),
                pids: Some(4096),
            }
        );
        assert!(q.check().is_ok());
        for zero in ["sandboxes: 0\n", "pids: 0\n"] {
            let zero: Quotas = serde_saphyr::from_str(zero).unwrap();
            assert!(zero.check().is_err());
        }
        assert!(serde_saphyr::from_str::<Quotas>("memory: lots\n").is_err());
    }

    #[test]
    fn a_token_s_processes_follow_its_sandboxes_unless_the_configuration_or_the_token_says_otherwise(
    ) {
        let defaults = warden_policy::Defaults::for_host(warden_policy::HostFacts {
            total_memory: 8 << 30,
            cpus: 2,
            pid_max: 1 << 22,
        });
        let (mut token, _) = crate::auth::new_token("t", &[], None);
        let none = Quotas::default();
        let pids = |q: &Quotas, t: &TokenRow| q.for_token(&defaults, t).pids;
        assert_eq!(pids(&none, &token), defaults.pids * DEFAULT_SANDBOXES);
        token.max_sandboxes = Some(32);
        assert_eq!(pids(&none, &token), defaults.pids * 32);
        let configured = Quotas {
            pids: Some(4096),
            ..Quotas::default()
        };
        assert_eq!(pids(&configured, &token), 4096);
        token.max_pids = std::num::NonZeroU64::new(100);
        assert_eq!(pids(&configured, &token), 100);
    }

    #[test]
    fn a_makers_children_are_carved_out_of_its_bounds_so_together_they_hold_no_more() {
        let defaults = warden_policy::Defaults::for_host(warden_policy::HostFacts {
            total_memory: 8 << 30,
            cpus: 2,
            pid_max: 1 << 22,
        });
        let q = Quotas::default();
        let (maker, _) = crate::auth::new_token("maker", &[], None);
        let whole = q.for_token(&defaults, &maker);
        let child = |sandboxes: u64, memory: u64, pids: u64| {
            let (mut t, _) = crate::auth::new_token("child", &[], None);
            t.max_sandboxes = Some(sandboxes);
            t.max_memory = Some(memory);
            t.max_pids = std::num::NonZeroU64::new(pids);
            t
        };
        let kids = [
            child(4, whole.memory / 4, 10),
            child(4, whole.memory / 4, 10),
        ];
        let left = carved(&q, &defaults, &maker, None, &kids);
        let given: Vec<Bounds> = kids
            .iter()
            .map(|k| carved(&q, &defaults, k, Some(&maker), &[]))
            .collect();
        let sum = |f: fn(&Bounds) -> u64| f(&left) + given.iter().map(f).sum::<u64>();
        assert_eq!(sum(|b| b.sandboxes), whole.sandboxes);
        assert_eq!(sum(|b| b.memory), whole.memory);
        assert_eq!(sum(|b| b.pids), whole.pids);
        assert!(sum(|b| b.disk) <= whole.disk);
        assert_eq!(given[0].disk, whole.disk / 4);
        // No children: the maker keeps all of it.
        assert_eq!(carved(&q, &defaults, &maker, None, &[]), whole);
    }
}

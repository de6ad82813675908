//! A sandbox's spec, resolved once, whichever front door asked: the CLI's
//! flags, an API request's JSON, a profile by name or given inline. The
//! front door turns what it was given into an [`Input`]; everything from
//! there (composing the profile, secrets, the workspace layer of a named
//! sandbox, where events go, the checks that keep warden's own state out
//! of reach) happens here, one code path for all of them.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use warden_policy::compose::{
    compose_source, Catalog, ComposeError, Layer, Origin, SourceText, Val,
};
use warden_policy::{
    Defaults, Field, HostFacts, KeptWorkspace, Placement, SandboxSpec, SecretSpec, Trust,
};
use warden_workspace::{Layout, Sandbox, Store};

use crate::owner::Owner;
use crate::state::{self, SinkConfig};

/// Where the profile comes from.
#[derive(Debug, Clone)]
pub enum ProfileSource {
    /// A name (user directory, then built-in) or, for the owner, a path
    /// to a YAML file.
    Named(String),
    /// A profile document given whole as JSON (an API request's `spec`);
    /// `label` names it in messages, and each of its values is placed at
    /// its JSON pointer. It has the trust of whoever the door serves
    /// ([`Context::trust`]).
    Inline {
        label: String,
        body: serde_json::Value,
    },
}

/// What a front door was asked for.
#[derive(Debug, Clone, Default)]
pub struct Input {
    pub profile: Option<ProfileSource>,
    /// Values given directly (the command line's flags, the options a
    /// door reads by the field table), over the profile's: lists add to
    /// it, a map's entry (a secret) replaces the profile's of its name,
    /// any other value replaces it. Each value keeps whose it is.
    pub flags: Layer,
    /// Whether the caller's standard input is a terminal (a profile's
    /// unset `tty` follows it).
    pub stdin_is_terminal: bool,
    /// Where "always" answers to `--ask` are kept (`--ask-save`).
    pub ask_save: AskSave,
}

/// Where "always" answers to `--ask` are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AskSave {
    /// The project's grants file in warden's state directory (runs with a
    /// workspace only).
    #[default]
    Project,
    /// The profile file in use (`egress.domains`), edited in place.
    Profile,
}

/// What resolution needs from the caller's world.
pub struct Context<'a> {
    pub catalog: &'a Catalog,
    pub defaults: &'a Defaults,
    /// warden's state directory: hidden from every bind, never writable
    /// by a sandbox; plain runs with an overlay keep their layer there.
    pub state_dir: Option<&'a Path>,
    /// Whether this build can send events to an OpenTelemetry collector.
    pub otlp: bool,
    /// A fresh identifier for a plain run (its audit log's and overlay's
    /// names).
    pub id: &'a str,
    /// Whom the door serves: the owner, or a caller held to the trust rule
    /// (names of the catalogue only, nothing that reaches the host) for
    /// everything it sent: the profile it names and the document it gives.
    /// No default: each door says it.
    pub trust: Trust,
    /// Whose sandbox this is: the profile's caches it binds are that
    /// owner's (the machine's owner's sandboxes share theirs, each
    /// token's sandboxes theirs, never another's). No default either.
    pub owner: Owner<'a>,
}

/// A spec resolved, with where its events go.
pub struct Resolved {
    pub spec: SandboxSpec,
    pub sinks: SinkConfig,
    /// A plain run with an overlay: the sandbox made for its layer (kept
    /// for review after the run).
    pub kept: Option<(Store, Sandbox)>,
    /// Lines for the person (what the host cannot give, said once).
    pub notices: Vec<String>,
    /// Where a profile file set each secret (`FILE:LINE:COL`, by the
    /// secret's name): kept with a named sandbox's spec, so that a start
    /// refused for a secret names its line ([`crate::state::Stored`]).
    pub secret_origins: std::collections::BTreeMap<String, String>,
}

/// Where a profile file set each secret of `merged`, `FILE:LINE:COL`
/// (a flag's or a request body's secret has no line to name).
fn secret_origins(merged: &Layer) -> std::collections::BTreeMap<String, String> {
    let Some(warden_policy::compose::Slot::Map(items)) = merged.slots.get(&Field::Secret) else {
        return Default::default();
    };
    items
        .iter()
        .filter(|(_, set)| set.origin.pointer().is_none())
        .filter_map(|(name, set)| {
            let (file, pos) = set.origin.place()?;
            Some((name.clone(), format!("{file}:{pos}")))
        })
        .collect()
}

/// Why a spec could not be resolved. Nothing is left behind by a refused
/// resolution.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Compose(#[from] ComposeError),
    /// A value from a profile file (or inline document) is wrong there.
    #[error("{place}: {message}")]
    InProfile {
        place: String,
        /// For a document given as JSON: the JSON pointer of the value.
        pointer: Option<String>,
        message: String,
        field: Field,
        /// The error itself (its message is already in `message`, worded
        /// for the profile: not a source, so it is not said twice).
        error: Box<warden_policy::ResolveError>,
    },
    #[error(transparent)]
    Spec(#[from] warden_policy::ResolveError),
    #[error(
        "an overlay workspace (`filesystem.mode`) needs a `filesystem.workspace` to lay the overlay over"
    )]
    OverlayWithoutWorkspace,
    #[error("this warden was built without the otlp feature: a profile's otlp_endpoint cannot be honoured")]
    NoOtlp,
    #[error("warden has no state directory: set WARDEN_STATE_DIR, XDG_STATE_HOME or HOME to an absolute path (or give `audit_log FILE` or `no_audit_log`)")]
    NoStateDir,
    #[error(
        "cannot create the audit log directory {path} (give `audit_log FILE` or `no_audit_log`)"
    )]
    AuditDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {path} in warden's state directory for the sandbox's home or caches")]
    OwnDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Grants(#[from] crate::grants::GrantsError),
    #[error(transparent)]
    Programs(#[from] crate::programs::ProgramsError),
    #[error("--ask-save profile: {why}")]
    AskSave { why: String },
    #[error(transparent)]
    Store(#[from] warden_workspace::StoreError),
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error(transparent)]
    Desktop(#[from] crate::desktop::DesktopError),
}

impl ResolveError {
    /// The option the error is about, when it is about one.
    pub fn field(&self) -> Option<Field> {
        match self {
            ResolveError::Compose(e) => e.field(),
            ResolveError::InProfile { field, .. } => Some(*field),
            ResolveError::Spec(e) => e.field(),
            ResolveError::OverlayWithoutWorkspace => Some(Field::Workspace),
            ResolveError::NoOtlp => Some(Field::OtlpEndpoint),
            ResolveError::Desktop(_) => Some(Field::Desktop),
            _ => None,
        }
    }
}

/// The host's memory, cores and pid_max, for the defaults that are sized
/// from them and the limits that may not exceed them.
pub fn host_facts() -> HostFacts {
    let total_memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(4 << 30);
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(1 << 22);
    HostFacts {
        total_memory,
        cpus,
        pid_max,
    }
}

/// Where profiles and presets are found, from an environment (`HOME`,
/// `XDG_CONFIG_HOME`).
pub fn catalog(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Catalog {
    let home = var("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let config_dir = var("XDG_CONFIG_HOME")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")))
        .map(|c| c.join("warden"));
    Catalog { home, config_dir }
}

/// The directory name of a profile's caches: its name, with anything but
/// letters, digits, `.`, `-` and `_` replaced (a name is never a path);
/// `default` without a profile.
fn cache_label(profile: Option<&str>) -> String {
    match profile.map(str::trim).filter(|n| !n.is_empty()) {
        None => "default".to_string(),
        Some(name) => {
            let clean: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if clean.starts_with('.') {
                format!("_{clean}")
            } else {
                clean
            }
        }
    }
}

/// UTC time to the second, for file names that sort by time.
pub fn stamp() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    now.trim_end_matches('Z')
        .replace([':', '-'], "")
        .replace('T', "-")
}

/// Resolve `input` into a spec. `sandbox`: the named sandbox whose
/// workspace layer the spec mounts (create), else a plain run (whose
/// overlay makes a sandbox of its own, returned in [`Resolved::kept`]).
pub fn resolve(
    input: Input,
    ctx: &Context<'_>,
    sandbox: Option<&Sandbox>,
) -> Result<Resolved, ResolveError> {
    let mut kept = None;
    match resolve_inner(input, ctx, sandbox, &mut kept, Effects::Make) {
        Ok(mut r) => {
            r.kept = kept;
            Ok(r)
        }
        Err(e) => {
            // Nothing of a refused run stays: the sandbox made for its
            // overlay goes too.
            if let Some((store, sb)) = kept {
                let _ = store.remove(sb.name());
            }
            Err(e)
        }
    }
}

/// Resolve `input` as a plain run would, with every check and refusal of
/// [`resolve`], leaving nothing on disk: no sandbox for an overlay, no
/// home, caches or audit directories (`warden profile validate`). The
/// checks that keep warden's state out of reach are made against
/// `ctx.state_dir` itself.
pub fn resolve_dry(input: Input, ctx: &Context<'_>) -> Result<Resolved, ResolveError> {
    let mut kept = None;
    resolve_inner(input, ctx, None, &mut kept, Effects::Dry)
}

/// The profile a door names. A caller's name is a plain name of the
/// owner's catalogue, and what it names is then read as the caller's own
/// document `{"extends": [NAME]}`: the owner's file composes as the
/// owner's, and what is wrong in it is concealed from the caller.
fn named(name: &str, ctx: &Context<'_>) -> Result<SourceText, ResolveError> {
    match (ctx.trust, ctx.catalog.profile_for(name, ctx.trust)) {
        (Trust::Owner, found) => Ok(found?),
        (Trust::Caller, Ok(_)) => Ok(SourceText {
            label: "request".into(),
            dir: None,
            text: String::new(),
            body: Some(serde_json::json!({ "extends": [name] })),
            trust: Trust::Caller,
        }),
        // Where the owner's file is and why it cannot be read are the
        // owner's to see.
        (Trust::Caller, Err(ComposeError::Read { .. })) => {
            Err(ResolveError::Compose(ComposeError::owners_profile()))
        }
        (Trust::Caller, Err(e)) => Err(e.into()),
    }
}

/// A resolution error as whom the door serves may see it: a caller is
/// told that a profile of the owner's does not resolve, never the value
/// or the file.
fn as_the_caller_sees(e: ResolveError, trust: Trust, merged: &Layer) -> ResolveError {
    match e {
        // A value of the owner's files a caller's request cannot resolve:
        // the caller learns that, never the value or the file.
        ResolveError::InProfile { pointer: None, .. } if trust == Trust::Caller => {
            ResolveError::Compose(ComposeError::owners_profile())
        }
        // Not placed, but about a field the owner's files set: the same.
        // (A value the door itself gave, such as an OCI bundle's own
        // limits, is the caller's to be told about.)
        ResolveError::Spec(e) if trust == Trust::Caller && owners_files_set(merged, e.field()) => {
            ResolveError::Compose(ComposeError::owners_profile())
        }
        e => e,
    }
}

/// Whether any value of `field` (any field, for none) came from a file
/// of the owner's catalogue.
fn owners_files_set(merged: &Layer, field: Option<Field>) -> bool {
    let from_file = |o: &Origin| matches!(o, Origin::File { .. } | Origin::Preset { .. });
    merged.slots.iter().any(|(f, slot)| {
        field.is_none_or(|want| *f == want)
            && match slot {
                warden_policy::compose::Slot::One(s) => from_file(&s.origin),
                warden_policy::compose::Slot::List(items) => {
                    items.iter().any(|s| from_file(&s.origin))
                }
                warden_policy::compose::Slot::Map(items) => {
                    items.iter().any(|(_, s)| from_file(&s.origin))
                }
            }
    })
}

/// A named sandbox's own values over the flags: its workspace, seen
/// through its layer, and its audit log unless one was given.
fn as_named_sandbox(flags: &mut Layer, sb: &Sandbox) {
    let at = || Origin::CommandLine;
    flags.add_one(
        Field::Workspace,
        Val::Path(sb.meta().workspace.clone()),
        at(),
    );
    flags.add_one(
        Field::Overlay,
        Val::Mode(warden_policy::profile::WorkspaceMode::Overlay),
        at(),
    );
    if flags.get(Field::AuditLog).is_none() && flags.get(Field::NoAuditLog).is_none() {
        flags.add_one(
            Field::AuditLog,
            Val::Path(sb.dir().join("audit.jsonl")),
            at(),
        );
    }
}

/// The profile file "always" answers go into, for `--ask-save profile`:
/// one of the person's own files.
fn ask_save_file(
    source: Option<&SourceText>,
    ask_save: AskSave,
) -> Result<Option<PathBuf>, ResolveError> {
    match (source, ask_save) {
    (_, AskSave::Project) => Ok(None),
    (Some(src), AskSave::Profile) if src.dir.is_some() => Ok(Some(PathBuf::from(&src.label))),
    (Some(src), AskSave::Profile) => {
        Err(ResolveError::AskSave {
            why: format!(
                "{} is not a file warden can write; save a copy with `warden profile show NAME > FILE` and run with --profile FILE",
                src.label
            ),
        })
    }
    (None, AskSave::Profile) => {
        Err(ResolveError::AskSave {
            why: "this run has no profile; pass --profile FILE, or leave --ask-save out to keep answers for the project".into(),
        })
    }}
}

/// The merged values resolved into a spec with warden's own facts; a
/// value the resolver refuses is said where the profile or the request's
/// body gave it.
fn spec_of(
    merged: &Layer,
    placement: &Placement,
    defaults: &Defaults,
) -> Result<SandboxSpec, ResolveError> {
    // Variables that hold secrets are never copied, not even here: the
    // supervisor moves them out of reach of the sandbox's init itself.
    let hidden: Vec<String> = merged
        .pairs(Field::Secret)
        .iter()
        .filter_map(|s| SecretSpec::parse(s).ok())
        .filter_map(|s| s.source_variable().map(str::to_string))
        .collect();
    let host_env = warden_jail::secrets::host_environment(&hidden);
    match merged.resolve(placement, defaults, &host_env) {
        Ok(spec) => Ok(spec),
        Err(e) => match warden_policy::validate::locate(merged, &e) {
            origin @ warden_policy::compose::Origin::Body { .. } => Err(ResolveError::InProfile {
                place: origin.to_string(),
                pointer: origin.pointer().map(str::to_string),
                message: e.describe_for_profile(),
                field: e.field().unwrap_or(Field::Profile),
                error: Box::new(e),
            }),
            origin => match origin.place() {
                Some((file, pos)) => Err(ResolveError::InProfile {
                    place: format!("{file}:{pos}"),
                    pointer: None,
                    message: e.describe_for_profile(),
                    field: e.field().unwrap_or(Field::Profile),
                    error: Box::new(e),
                }),
                None => Err(e.into()),
            },
        },
    }
}

/// Overlay where this kernel mounts overlayfs inside a user namespace
/// (5.11 and later, with overlay built in or loaded); otherwise a copy of
/// the workspace (reflinked where the file system can), with a notice to
/// say so.
pub fn layout_for_host() -> (Layout, Option<String>) {
    // A test shows the copy on a host that has overlayfs.
    let forced_copy = warden_policy::TestHooks::current().no_overlay;
    let has_overlay = std::fs::read_to_string("/proc/filesystems")
        .map(|f| {
            f.lines()
                .any(|l| l.split_whitespace().last() == Some("overlay"))
        })
        .unwrap_or(false);
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if !forced_copy && has_overlay && (major, minor) >= (5, 11) {
        (Layout::Overlay, None)
    } else {
        (Layout::Copy, Some(format!(
            "overlayfs cannot be mounted in a user namespace on this kernel ({release}): the sandbox works on a copy of the workspace (reflinked where the file system allows), and `warden diff` compares whole trees"
        )))
    }
}

/// The home and caches live in warden's state: made now, owner-only (the
/// jail binds what exists, and refuses what does not).
fn make_own_dirs(spec: &SandboxSpec) -> Result<(), ResolveError> {
    let mut own_dirs: Vec<&Path> = spec
        .filesystem
        .caches
        .iter()
        .map(|c| c.host.as_path())
        .collect();
    if let warden_policy::Home::Dir(d) = &spec.filesystem.home {
        own_dirs.push(d);
    }
    for dir in own_dirs {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| ResolveError::OwnDir {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    Ok(())
}

/// Whether a resolution leaves anything on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effects {
    /// Made what the spec needs: an overlay's sandbox, the home and caches
    /// directories, the audit log's directory.
    Make,
    /// Only resolved (`warden profile validate`): nothing is made, and
    /// what would be is named where it would be.
    Dry,
}

fn resolve_inner(
    mut input: Input,
    ctx: &Context<'_>,
    sandbox: Option<&Sandbox>,
    kept: &mut Option<(Store, Sandbox)>,
    effects: Effects,
) -> Result<Resolved, ResolveError> {
    let mut notices = Vec::new();
    if let Some(sb) = sandbox {
        as_named_sandbox(&mut input.flags, sb);
    }
    let source = match &input.profile {
        None => None,
        Some(ProfileSource::Named(name)) => Some(named(name, ctx)?),
        Some(ProfileSource::Inline { label, body }) => Some(SourceText {
            label: label.clone(),
            dir: None,
            text: String::new(),
            body: Some(body.clone()),
            trust: ctx.trust,
        }),
    };
    // The profile file "always" answers go into: one of the person's own.
    let profile_file = ask_save_file(source.as_ref(), input.ask_save)?;
    let composed = compose_source(ctx.catalog, source, &input.flags)?.into_valid()?;
    let merged = &composed.merged;
    // Where the run is recorded: the flags', else the profile's.
    let otlp_endpoint = merged.text(Field::OtlpEndpoint);
    if otlp_endpoint.is_some() && !ctx.otlp {
        return Err(ResolveError::NoOtlp);
    }
    let mut placement = Placement {
        stdin_is_terminal: input.stdin_is_terminal,
        // A named sandbox needs no command to be created: `exec` without
        // one runs a shell.
        default_command: match sandbox {
            Some(_) => vec!["sh".to_string()],
            None => Vec::new(),
        },
        rootless: !warden_jail::host::is_root(),
        ..Placement::default()
    };
    placement.workspace =
        kept_workspace(merged, &input, ctx, sandbox, kept, effects, &mut notices)?;
    if let Some(KeptWorkspace::Overlay(_)) = &placement.workspace {
        // The layer is written to the sandbox's directory when it stops
        // (dry: to the state directory it would be made in).
        let dir = sandbox
            .or(kept.as_ref().map(|(_, sb)| sb))
            .map(|sb| sb.dir());
        placement.disk_free = dir
            .or(ctx.state_dir)
            .and_then(free_space)
            .map(|f| ctx.owner.free_space_held_to(f));
    }
    // A named sandbox keeps its home with its state, so that it persists
    // from one exec to the next; a run gets a fresh one.
    if let Some(sb) = sandbox {
        placement.home_dir = Some(sb.dir().join("home"));
    }
    // Caches are shared by the sandboxes of one owner and one profile:
    // one directory of warden's state per owner and profile name, so a
    // token's sandbox never reads what another token's (or the owner's)
    // wrote into a cache, nor writes what they read.
    if let (Some(state), false) = (ctx.state_dir, merged.list(Field::Caches).is_empty()) {
        placement.cache_dir = Some(
            ctx.owner
                .caches_dir(state)
                .join(cache_label(composed.name.as_deref())),
        );
    }
    // What is kept (a home, caches' writes) is bounded by the free space
    // of the state's file system too.
    if placement.disk_free.is_none()
        && (placement.home_dir.is_some() || placement.cache_dir.is_some())
    {
        placement.disk_free = ctx
            .state_dir
            .and_then(free_space)
            .map(|f| ctx.owner.free_space_held_to(f));
    }
    let ask = merged.on(Field::Ask);
    // Names answered "always" for this project before are allowed, and
    // new ones are written to the same file.
    if profile_file.is_some() && !ask {
        return Err(ResolveError::AskSave {
            why: "it keeps the answers of `egress.ask`, which this run does not have: add `egress.ask`".into(),
        });
    }
    let workspace = match &placement.workspace {
        Some(KeptWorkspace::Copy(dir)) => Some(dir.clone()),
        _ => merged.path(Field::Workspace),
    };
    // Ask rules keep their "always" answers in the same file, as
    // request rules (and take only those: names stay `egress.ask`'s).
    let asks_requests = !merged.list(Field::AskRequest).is_empty();
    let mut granted_requests = Vec::new();
    let mut granted_programs = Vec::new();
    let grants = match (ctx.state_dir, &workspace) {
        // The profile's own domains are already in the layer.
        _ if profile_file.is_some() => profile_file.clone(),
        (Some(state), Some(ws)) if ask || asks_requests => {
            // A named sandbox's layer stands for its project.
            let project = sandbox
                .map(|sb| sb.meta().workspace.clone())
                .unwrap_or_else(|| ws.clone());
            // The owner's answers for its own sandboxes, a token's for
            // that token's: never one principal's for another's.
            let file = crate::grants::file_for(&ctx.owner.grants_base(state), &project);
            if ask {
                placement.granted_domains = crate::grants::load(&file)?;
                // Programs answered "always" widen an allowlist the run
                // has (`crate::programs::apply`).
                granted_programs = crate::programs::load(&crate::programs::file_beside(&file))?;
            }
            granted_requests = crate::grants::load_requests(&file)?;
            Some(file)
        }
        _ => None,
    };
    // No bind shows warden's own state (stored specs, logs, sockets).
    placement
        .hidden
        .extend(ctx.state_dir.map(Path::to_path_buf));
    let mut spec = spec_of(merged, &placement, ctx.defaults)
        .map_err(|e| as_the_caller_sees(e, ctx.trust, merged))?;
    crate::grants::apply_requests(&mut spec, &granted_requests);
    crate::programs::apply(&mut spec.allow_exec, &granted_programs);
    // A desktop's programs are looked for now, so that a host without
    // them is told what to install before anything is made.
    crate::desktop::check_programs(&spec)?;
    if matches!(&spec.network, warden_policy::NetworkSpec::Egress(e) if e.learn) {
        notices.push(
            "egress learning mode: every name no rule allows is allowed and recorded, the host's own services excepted; the profile lines this run needs are printed at its end".to_string(),
        );
    }
    // Nothing the sandbox may write holds warden's own state (a copy
    // the store keeps is the sandbox's own).
    let own_layer = match &placement.workspace {
        Some(KeptWorkspace::Copy(dir)) => Some(dir.clone()),
        _ => None,
    };
    if let Some(state) = ctx.state_dir {
        state::check_state_kept_out(&spec, state, own_layer.as_deref())?;
        state::check_socket_kept_out(&spec, state)?;
    }
    if effects == Effects::Make {
        make_own_dirs(&spec)?;
    }
    let audit_log = match (merged.no_audit_log(), merged.path(Field::AuditLog)) {
        (true, _) => None,
        (false, Some(p)) => Some(p),
        (false, None) => Some(audit_file(ctx, effects)?),
    };
    Ok(Resolved {
        spec,
        sinks: SinkConfig {
            json_events: merged.path(Field::JsonEvents),
            audit_log,
            otlp_endpoint,
            grants,
            grants_into_profile: profile_file.is_some(),
        },
        kept: None,
        notices,
        secret_origins: secret_origins(merged),
    })
}

/// Where the store keeps the workspace of a named sandbox, or of a plain
/// run with an overlay (asked for, or by the profile), which writes into
/// a sandbox of the state store named after the run, kept for review.
/// Dry, the run's sandbox is not made: its directories are named where
/// the store would make them.
fn kept_workspace(
    merged: &Layer,
    input: &Input,
    ctx: &Context<'_>,
    sandbox: Option<&Sandbox>,
    kept: &mut Option<(Store, Sandbox)>,
    effects: Effects,
    notices: &mut Vec<String>,
) -> Result<Option<KeptWorkspace>, ResolveError> {
    if let Some(sb) = sandbox {
        return Ok(Some(kept_as(sb.meta().layout, sb.upper(), sb.work())));
    }
    if !merged.overlay() {
        return Ok(None);
    }
    let state = ctx.state_dir.ok_or(ResolveError::NoStateDir)?;
    let ws = merged
        .path(Field::Workspace)
        .ok_or(ResolveError::OverlayWithoutWorkspace)?;
    let (layout, notice) = layout_for_host();
    notices.extend(notice);
    let name = format!("run-{}", ctx.id);
    if effects == Effects::Dry {
        let dir = state.join("sandboxes").join(name);
        return Ok(Some(kept_as(layout, dir.join("upper"), dir.join("work"))));
    }
    let store = Store::open(state)?;
    let mut opts = warden_workspace::CreateOptions::new(ws);
    opts.profile = match &input.profile {
        Some(ProfileSource::Named(n)) => Some(n.clone()),
        _ => None,
    };
    opts.layout = layout;
    opts.runs_on_host = merged.texts(Field::RunsOnHost);
    let sb = store.create(&name, &opts)?;
    let found = kept_as(sb.meta().layout, sb.upper(), sb.work());
    *kept = Some((store, sb));
    Ok(Some(found))
}

/// A sandbox's workspace as its layout keeps it: a layer over the
/// project, or (no overlayfs here) a copy it works on.
fn kept_as(layout: warden_workspace::Layout, upper: PathBuf, work: PathBuf) -> KeptWorkspace {
    match layout {
        warden_workspace::Layout::Overlay => {
            KeptWorkspace::Overlay(warden_policy::OverlayDirs { upper, work })
        }
        warden_workspace::Layout::Copy => KeptWorkspace::Copy(upper),
    }
}

/// The audit log of a run that names none: a new file in the state's
/// `audit` directory (made now; named only, dry).
fn audit_file(ctx: &Context<'_>, effects: Effects) -> Result<PathBuf, ResolveError> {
    let dir = ctx.state_dir.ok_or(ResolveError::NoStateDir)?.join("audit");
    if effects == Effects::Make {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|source| ResolveError::AuditDir {
                path: dir.clone(),
                source,
            })?;
    }
    Ok(dir.join(format!("{}-{}.jsonl", stamp(), ctx.id)))
}

/// Free space (for an unprivileged user) of the file system holding `dir`.
fn free_space(dir: &std::path::Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

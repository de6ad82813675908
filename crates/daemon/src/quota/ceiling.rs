//! Each token's sandbox within the host's defaults: at most the memory,
//! disk, processes and open files per process the host gives a sandbox by
//! default, unless a profile of the owner's that the request names sets
//! more.

use warden_policy::{format_size, Field};
use warden_workspace::Sandbox;

use super::bounds::default_disk;
use super::measure::stored_spec;
use super::refused;
use crate::app::App;
use crate::error::{spec_pointer, ApiError};

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

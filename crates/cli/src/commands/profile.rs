//! `warden profile` and `warden preset`.

use super::catalog;
use clap::Subcommand;
use warden_policy::compose::{compose, Catalog, Composed, Layer, Severity};
use warden_policy::Defaults;
use warden_runtime::resolve::{Context, Input, ProfileSource, ResolveError};

#[derive(Subcommand)]
pub enum ProfileCommand {
    /// Check profile files (or names); exit 0 only when all are valid (warnings allowed)
    Validate {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
    },
    /// Print a profile fully resolved: after extends, presets and defaults
    Show {
        #[arg(value_name = "NAME|PATH")]
        name: String,
        /// Print JSON instead of YAML
        #[arg(long)]
        json: bool,
        /// Name the origin of each value (file:line:column, preset, default)
        #[arg(long)]
        explain: bool,
    },
    /// List the profiles warden knows (built in and in the user's directory)
    List,
    /// Would this profile allow a destination, and by which rule? (exit 0 when allowed)
    Check {
        #[arg(value_name = "NAME|PATH")]
        name: String,
        #[arg(value_name = "DOMAIN[:PORT]")]
        destination: String,
    },
    /// Print the JSON Schema of profile files
    Schema,
}

#[derive(Subcommand)]
pub enum PresetCommand {
    /// List the presets (built in and in the user's directory)
    List {
        /// Print the domains of one preset
        #[arg(long, value_name = "NAME")]
        show: Option<String>,
    },
}

/// Exit status of `warden profile` and `warden preset` when the answer is
/// no (invalid, not allowed) or the profile cannot be read.
pub const EXIT_NO: u8 = 1;

/// Append a line to a command's output.
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// Append text to a command's output.
macro_rules! outp {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = write!($out, $($arg)*);
    }};
}

/// Write a command's output to stdout; a reader that went away (`| head`)
/// is not an error.
pub fn emit(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

pub fn profile(cmd: ProfileCommand, defaults: &Defaults) -> anyhow::Result<u8> {
    let mut out = String::new();
    let code = profile_to(cmd, defaults, &mut out);
    emit(&out);
    code
}

pub fn profile_to(
    cmd: ProfileCommand,
    defaults: &Defaults,
    out: &mut String,
) -> anyhow::Result<u8> {
    let catalog = catalog();
    let load = |name: &str| -> anyhow::Result<Composed> {
        Ok(compose(&catalog, Some(name), &Layer::default())?.into_valid()?)
    };
    match cmd {
        ProfileCommand::Validate { files } => {
            let mut ok = true;
            for file in &files {
                match validate_one(&catalog, file, defaults) {
                    Ok(warnings) => match warnings {
                        0 => outln!(out, "{file}: valid"),
                        n => outln!(out, "{file}: valid, {n} warning(s)"),
                    },
                    Err(()) => ok = false,
                }
            }
            Ok(if ok { 0 } else { EXIT_NO })
        }
        ProfileCommand::Show {
            name,
            json,
            explain,
        } => {
            let c = load(&name)?;
            if explain {
                let full = c.merged.with_defaults(defaults);
                let entries = full.entries();
                if json {
                    let v: Vec<serde_json::Value> = entries
                        .iter()
                        .map(|(k, v, o)| {
                            serde_json::json!({ "field": k, "value": v, "origin": o.to_string() })
                        })
                        .collect();
                    outln!(out, "{}", warden_audit::json::to_string_pretty(&v)?);
                } else {
                    let width = entries.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
                    for (k, v, o) in entries {
                        outln!(out, "{k:<width$}  {v}  # {o}");
                    }
                }
            } else if json {
                outln!(
                    out,
                    "{}",
                    warden_audit::json::to_string_pretty(&c.show(defaults))?
                );
            } else {
                outp!(out, "{}", serde_saphyr::to_string(&c.show(defaults))?);
            }
            Ok(0)
        }
        ProfileCommand::List => {
            for (name, label) in catalog.profile_names() {
                let description = compose(&catalog, Some(&name), &Layer::default())
                    .ok()
                    .and_then(|c| c.description)
                    .unwrap_or_default();
                outln!(out, "{name:<16} {description}  [{label}]");
            }
            Ok(0)
        }
        ProfileCommand::Check { name, destination } => {
            let c = load(&name)?;
            match warden_policy::validate::check(&c.merged, &destination)? {
                Some((rule, origin)) => {
                    outln!(
                        out,
                        "allowed: {destination} by `{}` ({origin})",
                        rule.source
                    );
                    Ok(0)
                }
                None => {
                    outln!(out, "denied: no rule of {name} allows {destination}");
                    Ok(EXIT_NO)
                }
            }
        }
        ProfileCommand::Schema => {
            outp!(out, "{}", warden_policy::profile::profile_schema());
            Ok(0)
        }
    }
}

/// Check one profile as `warden run --profile NAME` takes it, saying each
/// finding on stderr: first what only a profile has (names that do not
/// parse, entries another one covers, paths that do not exist, each at its
/// place), then everything `run` decides, by run's own resolution. The
/// number of warnings when it is valid.
fn validate_one(catalog: &Catalog, name: &str, defaults: &Defaults) -> Result<usize, ()> {
    let mut c = match compose(catalog, Some(name), &Layer::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: error: {:#}", anyhow::Error::from(e));
            return Err(());
        }
    };
    warden_policy::validate::validate(&mut c);
    for d in &c.diagnostics {
        eprintln!("{d}");
    }
    if c.has_errors() {
        return Err(());
    }
    if let Err(e) = resolve_as_run(name, &c, defaults) {
        eprintln!("{e}");
        return Err(());
    }
    Ok(c.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .count())
}

/// Resolve profile `name` through the resolution `warden run --profile
/// NAME -- CMD` goes through (`warden_runtime::resolve`, the same checks
/// and refusals, not a copy of them), dry: nothing is made on disk (no
/// layer for an overlay, no directories for the caches, the home or the
/// audit log), and the checks that keep warden's own state out of a
/// sandbox's reach are made against the real state directory. An error is
/// worded as run words it, at the file, line and column of the value when
/// it comes from the profile.
fn resolve_as_run(name: &str, c: &Composed, defaults: &Defaults) -> Result<(), String> {
    let mut flags = Layer::default();
    // A profile need not name the command: run is then given one.
    if c.merged.argv(warden_policy::Field::Command).is_empty() {
        flags.add_one(
            warden_policy::Field::Command,
            warden_policy::compose::Val::Argv(vec!["true".into()]),
            warden_policy::compose::Origin::CommandLine,
        );
    }
    let input = Input {
        profile: Some(ProfileSource::Named(name.to_string())),
        flags,
        ..Input::default()
    };
    let state = super::state_dir().ok();
    let catalog = catalog();
    let ctx = Context {
        catalog: &catalog,
        defaults,
        state_dir: state.as_deref(),
        otlp: cfg!(feature = "otlp"),
        id: "validate",
        // `profile validate` is the owner's, as `run --profile` is.
        trust: warden_policy::Trust::Owner,
        owner: warden_runtime::lifecycle::Owner::Machine,
    };
    let worded = |e: ResolveError| match e {
        // Already at its place in the file.
        ResolveError::InProfile { place, message, .. } => format!("{place}: error: {message}"),
        e => format!("{name}: error: {:#}", anyhow::Error::from(e)),
    };
    warden_runtime::resolve::resolve_dry(input, &ctx).map_err(worded)?;
    Ok(())
}

pub fn preset_list(show: Option<&str>) -> anyhow::Result<u8> {
    let mut out = String::new();
    let code = preset_list_to(show, &mut out);
    emit(&out);
    code
}

pub fn preset_list_to(show: Option<&str>, out: &mut String) -> anyhow::Result<u8> {
    let catalog = catalog();
    if let Some(name) = show {
        let (src, preset) = warden_policy::compose::load_preset(&catalog, name)?;
        if let Some(d) = &preset.description {
            outln!(out, "# {} [{}]", d.value, src.label);
        }
        for d in &preset.domains {
            outln!(out, "{}", d.value);
        }
        // Request rules in the words of the flags that take them.
        for (word, list) in [
            ("allow-request", &preset.allow_requests),
            ("deny-request", &preset.deny_requests),
            ("ask-request", &preset.ask_requests),
        ] {
            for r in list {
                outln!(out, "{word} {}", r.value);
            }
        }
        return Ok(0);
    }
    for (name, label) in catalog.preset_names() {
        let description = warden_policy::compose::load_preset(&catalog, &name)
            .ok()
            .and_then(|(_, p)| p.description.map(|d| d.value))
            .unwrap_or_default();
        outln!(out, "{name:<16} {description}  [{label}]");
    }
    Ok(0)
}

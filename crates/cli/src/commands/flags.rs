//! The flags of `warden run` and `warden create`, made from the field
//! table: each row with a flag is one clap argument (its long and short
//! form, value name, help and value parser come from the row), and what
//! the command line gave is read back into a layer of values by the same
//! table. No option is declared here; only how a command line spells the
//! kinds (a switch, `--flag[=BOOL]`, a repeated flag for a list).

use anyhow::Context as _;
use clap::{Arg, ArgAction, ArgMatches, Command};
use std::path::PathBuf;
use warden_policy::compose::{Layer, Origin};
use warden_policy::{Field, Kind, Shape, Trust, FIELDS};

/// Fields whose flag is not a value of the sandbox but of the command:
/// read by `run`/`create` themselves.
const OWN: &[Field] = &[
    Field::Profile,
    Field::Tty,
    Field::NoTty,
    Field::Detach,
    Field::AskSave,
    Field::EgressLearnFile,
];

/// clap's id of a field's argument: its long flag without dashes.
fn id(field: Field) -> &'static str {
    field.long().unwrap_or("")
}

/// The argument of one row of the table.
fn arg(field: Field) -> Option<Arg> {
    let long = field.long()?;
    let info = field.info();
    let mut a = Arg::new(long).long(long).help(info.doc);
    if let Some(c) = info.short {
        a = a.short(c);
    }
    let kind = field.kind();
    a = match (kind, info.value_name) {
        // A switch: present or not.
        (Kind::Switch | Kind::Bool | Kind::Mode, None) => a.action(ArgAction::SetTrue),
        // `--flag`, `--flag=true`, `--flag=false`.
        (Kind::Bool, Some(v)) if field.shape() == Shape::One => a
            .value_name(v)
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .value_parser(["true", "false"]),
        // A host path is the host's bytes, not necessarily UTF-8.
        (Kind::Path, v) => {
            let a = a
                .value_name(v.unwrap_or("PATH"))
                .value_parser(clap::value_parser!(PathBuf));
            match field.shape() {
                Shape::One => a.action(ArgAction::Set),
                Shape::List | Shape::Map => a.action(ArgAction::Append),
            }
        }
        (_, v) => {
            let a = a
                .value_name(v.unwrap_or("VALUE"))
                .value_parser(move |s: &str| match kind {
                    // Read in full when the layer is made (a map's entry,
                    // a secret's form): here only its kind's value.
                    Kind::Text | Kind::Secret => Ok(s.to_string()),
                    _ if field.shape() == Shape::Map => Ok(s.to_string()),
                    _ => kind.parse(s).map(|_| s.to_string()).map_err(|e| e.message),
                });
            match field.shape() {
                Shape::One => a.action(ArgAction::Set),
                Shape::List | Shape::Map => a.action(ArgAction::Append),
            }
        }
    };
    Some(a)
}

/// `warden run`'s and `warden create`'s arguments, from the table.
pub fn augment(cmd: Command) -> Command {
    let mut cmd = cmd;
    for info in FIELDS {
        if info.field == Field::OtlpEndpoint && !cfg!(feature = "otlp") {
            continue;
        }
        if let Some(a) = arg(info.field) {
            cmd = cmd.arg(a);
        }
    }
    cmd.mut_arg(id(Field::Tty), |a| a.conflicts_with(id(Field::NoTty)))
        .mut_arg(id(Field::AuditLog), |a| {
            a.conflicts_with(id(Field::NoAuditLog))
        })
        .mut_arg(id(Field::Detach), |a| {
            a.conflicts_with_all([id(Field::Tty), id(Field::Ask)])
        })
        .mut_arg(id(Field::AskSave), |a| {
            a.value_parser(["project", "profile"])
        })
        .arg(
            Arg::new("through-exec")
                .long("through-exec")
                .hide(true)
                .action(ArgAction::SetTrue)
                .help("(tests) run through a long-lived sandbox's supervisor and exec"),
        )
        .arg(
            Arg::new("command")
                .value_name("CMD")
                .num_args(0..)
                .last(true)
                .help("The command to run, after `--` (a profile's `command` when none)"),
        )
}

/// What the command line gave, each value as written.
#[derive(Debug, Clone, Default)]
pub struct Given {
    values: Vec<(Field, Vec<String>)>,
    /// Host paths, as given (not necessarily UTF-8).
    paths: Vec<(Field, Vec<PathBuf>)>,
    switches: Vec<Field>,
}

impl Given {
    /// Read the matches of [`augment`]'s arguments.
    pub fn from_matches(m: &ArgMatches) -> Given {
        let mut g = Given::default();
        for info in FIELDS {
            let Some(long) = info.field.long() else {
                continue;
            };
            if let Ok(found) = m.try_get_many::<PathBuf>(long) {
                if let Some(paths) = found {
                    g.paths.push((info.field, paths.cloned().collect()));
                }
                continue;
            }
            match m.try_get_many::<String>(long) {
                Ok(Some(vals)) => g
                    .values
                    .push((info.field, vals.map(String::to_string).collect())),
                Ok(None) => {}
                // A switch holds a bool.
                Err(_) => {
                    if let Ok(Some(true)) = m.try_get_one::<bool>(long) {
                        g.switches.push(info.field);
                    }
                }
            }
        }
        g
    }

    /// A one-value path field, when given.
    pub fn path(&self, field: Field) -> Option<&PathBuf> {
        self.paths
            .iter()
            .find(|(f, _)| *f == field)
            .and_then(|(_, v)| v.last())
    }

    /// Take a one-value path field out (the command reads it itself).
    pub fn take_path(&mut self, field: Field) -> Option<PathBuf> {
        let i = self.paths.iter().position(|(f, _)| *f == field)?;
        self.paths.remove(i).1.pop()
    }

    /// The text of a one-value field, when given.
    pub fn value(&self, field: Field) -> Option<&str> {
        self.values
            .iter()
            .find(|(f, _)| *f == field)
            .and_then(|(_, v)| v.last())
            .map(String::as_str)
    }

    /// Forget a switch or a field's values.
    pub fn clear(&mut self, field: Field) {
        self.switches.retain(|f| *f != field);
        self.values.retain(|(f, _)| *f != field);
        self.paths.retain(|(f, _)| *f != field);
    }

    /// Whether a field was given at all (a value or a switch).
    pub fn given(&self, field: Field) -> bool {
        self.switches.contains(&field)
            || self.values.iter().any(|(f, _)| *f == field)
            || self.paths.iter().any(|(f, _)| *f == field)
    }

    /// The sandbox's values the command line gave, by the table (paths
    /// made absolute against the working directory). The command line
    /// is the owner's.
    pub fn layer(&self) -> anyhow::Result<Layer> {
        let mut l = Layer::default();
        for field in &self.switches {
            let text = match field.kind() {
                Kind::Mode => "overlay",
                _ => "true",
            };
            if !OWN.contains(field) {
                add(&mut l, *field, text)?;
            }
        }
        for (field, values) in &self.values {
            if OWN.contains(field) {
                continue;
            }
            for v in values {
                add(&mut l, *field, v)?;
            }
        }
        for (field, paths) in &self.paths {
            if OWN.contains(field) {
                continue;
            }
            for p in paths {
                // `-` for `--json-events`: warden's standard output.
                let p = match (*field, p.as_os_str() == "-") {
                    (Field::JsonEvents, true) => p.clone(),
                    _ => super::absolute(p.clone())?,
                };
                let val = warden_policy::compose::Val::Path(p);
                match field.shape() {
                    Shape::One => l.add_one(*field, val, Origin::CommandLine),
                    _ => l.add_item(*field, val, Origin::CommandLine),
                }
            }
        }
        Ok(l)
    }
}

fn add(l: &mut Layer, field: Field, text: &str) -> anyhow::Result<()> {
    l.add_text(field, text, Origin::CommandLine, Trust::Owner)
        .with_context(|| format!("{field} {text:?}"))
}

//! A secret's entry in a document (`secrets: NAME: ...`): the one
//! structured value the reader knows, its source (`from_env`, `from_file`,
//! `from_command`) and hosts kept in the layer as `SOURCE@HOSTS`, beside
//! the `secrets.*` fields read by the table.
//!
//! This file never resolves a secret or reads its value: the resolver
//! does, from the layer, when the sandbox starts.

use super::tree::{Node, Place, Placed};
use super::{bad, given_before, keys_below, scalar, twice, unknown_key, wrong, Read, Reading};
use crate::fields::{Field, Kind, Shape};
use crate::layer::Val;

/// The parts of a secret's entry besides the `secrets.*` fields.
const SECRET_PARTS: &[&str] = &["from_env", "from_file", "from_command", "hosts"];

/// `secrets:`: each entry's source and hosts (the layer keeps them as
/// `SOURCE@HOSTS`, the form of `--secret`), and its `secrets.*` fields.
pub(super) fn secrets(node: &Placed<Node>, how: &Reading, out: &mut Read) {
    let entries = match &node.value {
        Node::Map(entries) => entries,
        Node::Null => return,
        _ => {
            return wrong(
                Field::Secret,
                node,
                "a section of `key: value` entries",
                out,
            )
        }
    };
    for (i, (name, entry)) in entries.iter().enumerate() {
        if given_before(entries, i) {
            twice(name, out);
            continue;
        }
        secret(name, entry, how, out);
    }
}

/// One secret's entry: its parts, then its value as `SOURCE@HOSTS`.
fn secret(name: &Placed<String>, entry: &Placed<Node>, how: &Reading, out: &mut Read) {
    let parts = match &entry.value {
        Node::Map(parts) => parts,
        _ => {
            return wrong(
                Field::Secret,
                entry,
                "a section of `key: value` entries",
                out,
            )
        }
    };
    let mut sources: Vec<(&str, &Place, String)> = Vec::new();
    let mut hosts: Vec<String> = Vec::new();
    let mut broken = false;
    for (j, (part, v)) in parts.iter().enumerate() {
        if given_before(parts, j) {
            twice(part, out);
            continue;
        }
        let star = format!("secrets.{}.{}", name.value, part.value);
        match Field::from_profile_key(&star) {
            // `secrets.*.in_body`: one value, by the secret's name.
            Some(field) if field.shape() == Shape::Map => {
                if let Some(val) = scalar(field, field.kind(), v, how, out) {
                    out.layer
                        .add_entry(field, name.value.clone(), val, (how.origin)(&v.place));
                }
                continue;
            }
            // `secrets.*.allow`: a list, each item the secret's.
            Some(field) => {
                match &v.value {
                    Node::List(items) => {
                        for item in items {
                            if let Some(Val::Text(text)) =
                                scalar(field, field.kind(), item, how, out)
                            {
                                let val = Val::Named {
                                    name: name.value.clone(),
                                    text,
                                };
                                out.layer.add_item(field, val, (how.origin)(&item.place));
                            }
                        }
                    }
                    Node::Null => {}
                    _ => wrong(
                        field,
                        v,
                        "a list here, such as [a, b] or lines that start with `- `",
                        out,
                    ),
                }
                continue;
            }
            None => {}
        }
        match part.value.as_str() {
            "from_env" => match v.value.scalar_text() {
                Some(t) => sources.push(("from_env", &v.place, format!("env:{t}"))),
                None => {
                    wrong(Field::Secret, v, "text", out);
                    broken = true;
                }
            },
            "from_file" => match &v.value {
                Node::Text(t) => match (how.path)(t) {
                    Ok(p) => sources.push(("from_file", &v.place, format!("file:{}", p.display()))),
                    Err(e) => {
                        bad(Field::Secret, &v.place, e, out);
                        broken = true;
                    }
                },
                _ => {
                    wrong(Field::Secret, v, "a path", out);
                    broken = true;
                }
            },
            "from_command" => match scalar(Field::Secret, Kind::Argv, v, how, out) {
                Some(Val::Argv(argv)) => match command_line(&argv) {
                    Some(line) => sources.push(("from_command", &v.place, line)),
                    None => {
                        bad(Field::Secret, &v.place, NUL_ARGUMENT.into(), out);
                        broken = true;
                    }
                },
                _ => broken = true,
            },
            "hosts" => match &v.value {
                Node::List(items) => {
                    for item in items {
                        match item.value.scalar_text() {
                            Some(t) => hosts.push(t),
                            None => {
                                wrong(Field::Secret, item, "text", out);
                                broken = true;
                            }
                        }
                    }
                }
                Node::Null => {}
                _ => {
                    wrong(
                        Field::Secret,
                        v,
                        "a list here, such as [a, b] or lines that start with `- `",
                        out,
                    );
                    broken = true;
                }
            },
            _ => {
                let mut known: Vec<&str> = SECRET_PARTS.to_vec();
                known.extend(keys_below("secrets.*."));
                unknown_key(part, &known, out);
                broken = true;
            }
        }
    }
    if let [(first, first_at, _), (second, second_at, _), ..] = sources.as_slice() {
        bad(
            Field::Secret,
            second_at,
            format!(
                "secret `{}` has a second source: `{second}` here and `{first}` at {}; give exactly one of from_env, from_file, from_command",
                name.value,
                match first_at {
                    Place::Line(p) => format!("line {}", p.line),
                    Place::Pointer(p) => p.clone(),
                }
            ),
            out,
        );
        return;
    }
    if broken {
        return;
    }
    // No source: kept in a form the resolver refuses with its own
    // message.
    let source = sources
        .first()
        .map(|(_, _, s)| s.clone())
        .unwrap_or_else(|| "env:".to_string());
    out.layer.add_entry(
        Field::Secret,
        name.value.clone(),
        Val::Text(format!("{source}@{}", hosts.join(","))),
        (how.origin)(&name.place),
    );
}

const NUL_ARGUMENT: &str =
    "an argument of the program holds a NUL byte, which no program can be given";

/// A `from_command` list as the layer keeps it: one `cmd:` line quoted as
/// a shell would quote it, which the resolver splits back element for
/// element (`[sh, -c, "pass show x"]` stays three arguments, never
/// `sh -c pass show x`). `None` when an argument holds a NUL byte.
fn command_line(argv: &[String]) -> Option<String> {
    shlex::try_join(argv.iter().map(String::as_str))
        .ok()
        .map(|line| format!("cmd:{line}"))
}

//! A profile document read by the field table, whichever door it came
//! through: a YAML file (each value placed at its line and column) or the
//! JSON body of an API request (each value placed at its JSON pointer).
//! Both become one [`Node`] tree; [`read`] walks it once, finds each key's
//! [`Field`] in the table and reads its value by the field's
//! [`Kind`](crate::fields::Kind) and [`Shape`], into one [`Layer`]. Every
//! problem is found in the same walk, each at its own place.
//!
//! Nothing here knows a section by name: a key is a field's key, a section
//! holding fields' keys, or unknown. The only structured value is a
//! secret's entry (its source and hosts, beside the `secrets.*` fields).
//!
//! The tree is built in [`tree`], a profile file's text read whole in
//! [`text`], a secret's entry in [`secrets`]; this file is the walk.

use std::path::PathBuf;

use crate::fields::{Door, Field, Kind, Shape, FIELDS};
use crate::layer::{Layer, Origin, Val};
use crate::profile::suggest;

mod secrets;
mod text;
mod tree;

pub use text::{parse_profile_tree, profile_domains, read_profile_text, MAX_FINDINGS};
pub use tree::{from_json, parse_yaml, Node, Place, Placed};

/// One problem found while reading a document.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The field, when the problem is about one's value.
    pub field: Option<Field>,
    pub place: Place,
    pub message: String,
    /// The stable reason code (`unknown_key`, `wrong_type`, `bad_value`,
    /// ...), the same for a profile file and a request's body.
    pub code: &'static str,
}

/// What a document says: its values by field, and the entries the loader
/// follows itself (the profiles it extends, the presets it names).
#[derive(Debug, Default)]
pub struct Read {
    pub layer: Layer,
    pub name: Option<Placed<String>>,
    pub description: Option<Placed<String>>,
    pub extends: Vec<Placed<String>>,
    pub presets: Vec<Placed<String>>,
    pub findings: Vec<Finding>,
}

/// How the values of one document are placed and its paths made whole.
pub struct Reading<'a> {
    /// The origin of a value written at a place.
    pub origin: &'a dyn Fn(&Place) -> Origin,
    /// A path as written, made absolute (`~`, the document's directory),
    /// or why it cannot be.
    pub path: &'a dyn Fn(&str) -> Result<PathBuf, String>,
    /// The door the document came through (a profile file, an API
    /// request's body): a field whose `doors:` cell leaves it out is
    /// refused at its key.
    pub door: Door,
}

/// Most entries of one list or map a document may hold.
pub const MAX_ENTRIES: usize = 1024;

/// Most parts (values, lists, maps) a whole document may hold.
pub const MAX_PARTS: usize = 16 * 1024;

/// Most profiles a document may extend, and presets it may name.
pub const MAX_NAMED: usize = 32;

/// The first place where a document is larger than any profile needs:
/// a list or map of more than [`MAX_ENTRIES`], or more than [`MAX_PARTS`]
/// in all. Checked before anything is read, so that what a caller sends
/// costs at most this much to read.
fn too_large(root: &Placed<Node>) -> Option<Finding> {
    let mut parts = 0usize;
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        parts += 1;
        let entries = match &node.value {
            Node::List(items) => {
                stack.extend(items.iter());
                items.len()
            }
            Node::Map(entries) => {
                stack.extend(entries.iter().map(|(_, v)| v));
                entries.len()
            }
            _ => 0,
        };
        if entries > MAX_ENTRIES {
            return Some(Finding {
            code: "too_many_entries",
                field: None,
                place: node.place.clone(),
                message: format!(
                    "{entries} entries here; a profile holds at most {MAX_ENTRIES} in one list or section"
                ),
            });
        }
        if parts > MAX_PARTS {
            return Some(Finding {
                code: "too_many_values",
                field: None,
                place: root.place.clone(),
                message: format!(
                    "the document has more than {MAX_PARTS} values; a profile holds fewer"
                ),
            });
        }
    }
    None
}

/// Read a document's values by the table.
pub fn read(root: &Placed<Node>, how: &Reading) -> Read {
    let mut out = Read::default();
    if let Some(f) = too_large(root) {
        out.findings.push(f);
        return out;
    }
    match &root.value {
        Node::Null => {}
        Node::Map(entries) => section(entries, "", how, &mut out),
        other => out.findings.push(Finding {
            code: "not_a_section",
            field: None,
            place: root.place.clone(),
            message: format!(
                "expected a section of `key: value` entries here, not {}",
                other.found()
            ),
        }),
    }
    out
}

/// The keys that may follow `prefix` (`egress.`): the next segment of
/// every field's key below it.
fn keys_below(prefix: &str) -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = FIELDS
        .iter()
        .filter_map(|i| i.profile_key?.strip_prefix(prefix))
        .map(|rest| rest.split('.').next().unwrap_or(rest))
        .filter(|k| *k != "*")
        .collect();
    keys.dedup();
    keys
}

fn unknown_key(key: &Placed<String>, known: &[&str], out: &mut Read) {
    let mut message = format!("unknown key `{}`", key.value);
    let best = crate::profile::elsewhere(&key.value)
        .or_else(|| suggest(&key.value, known.iter().copied()));
    if let Some(best) = best {
        message.push_str(&format!("; did you mean `{best}`?"));
    }
    if !known.is_empty() {
        message.push_str(&format!(" (known: {})", known.join(", ")));
    }
    out.findings.push(Finding {
        code: "unknown_key",
        field: None,
        place: key.place.clone(),
        message,
    });
}

/// Is `key` written earlier in `entries` than at `index`?
fn given_before(entries: &[(Placed<String>, Placed<Node>)], index: usize) -> bool {
    entries[..index]
        .iter()
        .any(|(k, _)| k.value == entries[index].0.value)
}

fn twice(key: &Placed<String>, out: &mut Read) {
    out.findings.push(Finding {
        code: "given_twice",
        field: None,
        place: key.place.clone(),
        message: format!("`{}` is given twice in this section; keep one", key.value),
    });
}

fn section(
    entries: &[(Placed<String>, Placed<Node>)],
    prefix: &str,
    how: &Reading,
    out: &mut Read,
) {
    for (i, (key, node)) in entries.iter().enumerate() {
        if given_before(entries, i) {
            twice(key, out);
            continue;
        }
        let full = format!("{prefix}{}", key.value);
        let field = FIELDS
            .iter()
            .find(|f| f.profile_key == Some(full.as_str()))
            .map(|f| f.field);
        match field {
            Some(field) if !field.settable_by(how.door) => not_this_door(field, key, how.door, out),
            Some(Field::Secret) => secrets::secrets(node, how, out),
            Some(field) => value(field, node, how, out),
            None if !keys_below(&format!("{full}.")).is_empty() => match &node.value {
                Node::Map(inner) => section(inner, &format!("{full}."), how, out),
                Node::Null => {}
                other => out.findings.push(Finding {
                    code: "not_a_section",
                    field: None,
                    place: node.place.clone(),
                    message: format!(
                        "expected a section of `key: value` entries here, not {}",
                        other.found()
                    ),
                }),
            },
            None => unknown_key(key, &keys_below(prefix), out),
        }
    }
}

/// A field the table keeps out of this door: refused at its key, with the
/// doors that take it.
fn not_this_door(field: Field, key: &Placed<String>, door: Door, out: &mut Read) {
    let elsewhere: Vec<&str> = field
        .doors()
        .iter()
        .filter(|d| field.settable_by(*d))
        .map(Door::where_given)
        .collect();
    out.findings.push(Finding {
        code: "not_this_door",
        field: Some(field),
        place: key.place.clone(),
        message: format!(
            "`{}` is not taken {}; it is given {}",
            field.profile_name(),
            door.where_given(),
            elsewhere.join(" or ")
        ),
    });
}

fn wrong(field: Field, node: &Placed<Node>, expected: &str, out: &mut Read) {
    out.findings.push(Finding {
        code: "wrong_type",
        field: Some(field),
        place: node.place.clone(),
        message: format!("expected {expected}, not {}", node.value.found()),
    });
}

fn bad(field: Field, place: &Place, message: String, out: &mut Read) {
    out.findings.push(Finding {
        code: "bad_value",
        field: Some(field),
        place: place.clone(),
        message,
    });
}

/// One value of `field`'s kind from a node.
fn scalar(
    field: Field,
    kind: Kind,
    node: &Placed<Node>,
    how: &Reading,
    out: &mut Read,
) -> Option<Val> {
    let n = &node.value;
    let val = match (kind, n) {
        (Kind::Bool | Kind::Switch, Node::Bool(b)) => Val::Bool(*b),
        (Kind::Count | Kind::Size | Kind::Duration, Node::Int(v)) => {
            let Ok(n) = u64::try_from(*v) else {
                let message = format!("{v} is negative; write a number of zero or more");
                bad(field, &node.place, message, out);
                return None;
            };
            match kind {
                Kind::Count => Val::Count(n),
                Kind::Size => Val::Size {
                    bytes: n,
                    text: n.to_string(),
                },
                _ => Val::Duration {
                    duration: std::time::Duration::from_secs(n),
                    text: format!("{n}s"),
                },
            }
        }
        (Kind::Count, Node::Float(v)) => {
            bad(
                field,
                &node.place,
                format!("{v} is not a whole number"),
                out,
            );
            return None;
        }
        (Kind::Cores, Node::Int(_) | Node::Float(_)) => {
            let c = match n {
                Node::Int(v) => *v as f64,
                Node::Float(v) => *v,
                _ => 0.0,
            };
            if c.is_finite() && c > 0.0 {
                Val::Cores(c)
            } else {
                bad(
                    field,
                    &node.place,
                    format!("{c} cores: write a positive number such as 0.5 or 2"),
                    out,
                );
                return None;
            }
        }
        (Kind::Port, Node::Int(v)) => match u16::try_from(*v) {
            Ok(p) if p > 0 => Val::Port(p),
            _ => {
                bad(
                    field,
                    &node.place,
                    format!("{v} is not a port number from 1 to 65535"),
                    out,
                );
                return None;
            }
        },
        (Kind::Argv, Node::List(items)) => {
            let mut argv = Vec::new();
            for item in items {
                match item.value.scalar_text() {
                    Some(t) => argv.push(t),
                    None => {
                        wrong(field, item, "text", out);
                        return None;
                    }
                }
            }
            Val::Argv(argv)
        }
        (Kind::Argv, _) => {
            wrong(
                field,
                node,
                "a list here, such as [a, b] or lines that start with `- `",
                out,
            );
            return None;
        }
        (Kind::Path, Node::Text(t)) => match (how.path)(t) {
            Ok(p) => Val::Path(p),
            Err(e) => {
                bad(field, &node.place, e, out);
                return None;
            }
        },
        (Kind::Text | Kind::Secret, n) if n.scalar_text().is_some() => {
            Val::Text(n.scalar_text().unwrap_or_default())
        }
        (Kind::Size | Kind::Duration | Kind::Mode, Node::Text(_) | Node::Float(_)) => {
            let text = n.scalar_text().unwrap_or_default();
            match kind.parse(&text) {
                Ok(v) => v,
                Err(e) => {
                    bad(field, &node.place, e.message, out);
                    return None;
                }
            }
        }
        (Kind::Count | Kind::Cores | Kind::Port, Node::Text(t)) => {
            let message = match kind {
                Kind::Count => format!("{t:?} is not a whole number"),
                Kind::Cores => format!("{t:?} is not a number of cores; write e.g. 0.5 or 2"),
                _ => format!("{t:?} is not a port number from 1 to 65535"),
            };
            bad(field, &node.place, message, out);
            return None;
        }
        (kind, _) => {
            wrong(field, node, kind.expecting(), out);
            return None;
        }
    };
    Some(val)
}

/// `field`'s value, of its shape, from a node.
fn value(field: Field, node: &Placed<Node>, how: &Reading, out: &mut Read) {
    let kind = field.kind();
    match (field.shape(), &node.value) {
        // An empty key is the same as none.
        (_, Node::Null) => {}
        (Shape::One, _) => {
            if let Some(val) = scalar(field, kind, node, how, out) {
                match (field, val) {
                    (Field::ProfileName | Field::Description, Val::Text(t)) => {
                        let p = Placed {
                            value: t,
                            place: node.place.clone(),
                        };
                        match field {
                            Field::ProfileName => out.name = Some(p),
                            _ => out.description = Some(p),
                        }
                    }
                    (_, val) => out.layer.add_one(field, val, (how.origin)(&node.place)),
                }
            }
        }
        (Shape::List, Node::List(items))
            if matches!(field, Field::Extends | Field::Presets) && items.len() > MAX_NAMED =>
        {
            bad(
                field,
                &node.place,
                format!("{} names here; give at most {MAX_NAMED}", items.len()),
                out,
            );
        }
        (Shape::List, Node::List(items)) => {
            for item in items {
                let Some(val) = scalar(field, kind, item, how, out) else {
                    continue;
                };
                match (field, val) {
                    (Field::Extends | Field::Presets, Val::Text(t)) => {
                        let p = Placed {
                            value: t,
                            place: item.place.clone(),
                        };
                        match field {
                            Field::Extends => out.extends.push(p),
                            _ => out.presets.push(p),
                        }
                    }
                    (_, val) => out.layer.add_item(field, val, (how.origin)(&item.place)),
                }
            }
        }
        (Shape::List, _) => wrong(
            field,
            node,
            "a list here, such as [a, b] or lines that start with `- `",
            out,
        ),
        (Shape::Map, Node::Map(entries)) => {
            for (i, (k, v)) in entries.iter().enumerate() {
                if given_before(entries, i) {
                    twice(k, out);
                    continue;
                }
                if let Some(val) = scalar(field, kind, v, how, out) {
                    out.layer
                        .add_entry(field, k.value.clone(), val, (how.origin)(&k.place));
                }
            }
        }
        (Shape::Map, _) => wrong(field, node, "a section of `key: value` entries", out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Pos;

    fn read_json(v: serde_json::Value) -> Read {
        let origin = |p: &Place| Origin::Body {
            label: "body".into(),
            pointer: p.pointer().unwrap_or_default().to_string(),
        };
        let path = |raw: &str| Ok(PathBuf::from(raw));
        read(
            &from_json(&v),
            &Reading {
                origin: &origin,
                path: &path,
                door: Door::Api,
            },
        )
    }

    fn read_yaml(text: &str) -> Read {
        let origin = |p: &Place| Origin::File {
            file: "f.yaml".into(),
            pos: p.pos(),
        };
        let path = |raw: &str| Ok(PathBuf::from(raw));
        read(
            &parse_yaml(text).unwrap(),
            &Reading {
                origin: &origin,
                path: &path,
                door: Door::Profile,
            },
        )
    }

    /// Where events go is not a request's to say, however deep a body
    /// would spell it; a profile file says it.
    #[test]
    fn a_body_sets_no_field_its_door_is_not_in_the_doors_column_of() {
        for (key, field) in [
            ("audit_log", Field::AuditLog),
            ("no_audit_log", Field::NoAuditLog),
            ("json_events", Field::JsonEvents),
            ("otlp_endpoint", Field::OtlpEndpoint),
        ] {
            let value = match field.kind() {
                Kind::Bool => serde_json::json!(true),
                _ => serde_json::json!("http://127.0.0.1:1/x"),
            };
            let body = read_json(serde_json::json!({ key: value, "hostname": "h" }));
            assert!(body.layer.get(field).is_none(), "{key}");
            let f = body
                .findings
                .iter()
                .find(|f| f.code == "not_this_door")
                .unwrap_or_else(|| panic!("{key}: {:?}", body.findings));
            assert_eq!(f.field, Some(field));
            assert_eq!(f.place, Place::Pointer(format!("/{key}")));
            assert!(f.message.contains("in a profile file"), "{}", f.message);
            // The rest of the body is read.
            assert!(body.layer.get(Field::Hostname).is_some());
            let text = match field.kind() {
                Kind::Bool => format!("{key}: true\n"),
                _ => format!("{key}: /tmp/x\n"),
            };
            let file = read_yaml(&text);
            assert!(file.findings.is_empty(), "{key}: {:?}", file.findings);
            assert!(file.layer.get(field).is_some(), "{key}");
        }
    }

    #[test]
    fn a_body_and_a_file_saying_the_same_give_the_same_values() {
        let body = read_json(serde_json::json!({
            "resources": {"memory": "512M", "pids": 64, "cpus": 0.5, "timeout": 30},
            "egress": {"domains": ["a.test", "b.test:22"], "allow_http": true},
            "env": {"set": {"A": "1", "B": 2}},
            "secrets": {"T": {"from_env": "X", "hosts": ["a.test"], "in_body": true, "allow": ["GET a.test/x"]}},
            "filesystem": {"mode": "overlay"}
        }));
        let file = read_yaml(
            "resources:\n  memory: 512M\n  pids: 64\n  cpus: 0.5\n  timeout: 30\n\
egress:\n  domains: [a.test, b.test:22]\n  allow_http: true\nenv:\n  set: {A: '1', B: 2}\n\
secrets:\n  T:\n    from_env: X\n    hosts: [a.test]\n    in_body: true\n    allow: ['GET a.test/x']\n\
filesystem:\n  mode: overlay\n",
        );
        assert!(body.findings.is_empty(), "{:?}", body.findings);
        assert!(file.findings.is_empty(), "{:?}", file.findings);
        // The same spec, wherever each value was written.
        let placement = crate::Placement {
            default_command: vec!["true".into()],
            workspace: Some(crate::KeptWorkspace::Overlay(crate::OverlayDirs {
                upper: "/state/upper".into(),
                work: "/state/work".into(),
            })),
            ..crate::Placement::default()
        };
        let defaults = crate::Defaults::for_host(crate::HostFacts {
            total_memory: 8 << 30,
            cpus: 2,
            pid_max: 1 << 22,
        });
        let host_env = [("X".to_string(), "token".to_string())];
        let spec = |l: &crate::compose::Layer| {
            let mut l = l.clone();
            l.add_one(
                Field::Workspace,
                crate::compose::Val::Path("/src/p".into()),
                crate::compose::Origin::CommandLine,
            );
            l.resolve(&placement, &defaults, &host_env)
        };
        assert_eq!(spec(&body.layer), spec(&file.layer));
        assert!(spec(&body.layer).is_ok(), "{:?}", spec(&body.layer));
        let b = &body.layer;
        assert_eq!(b.bytes(Field::Memory), Some(512 << 20));
        assert_eq!(b.pairs(Field::Env), ["A=1", "B=2"]);
        assert_eq!(b.pairs(Field::Secret), ["T=env:X@a.test"]);
        assert_eq!(b.names_set(Field::SecretInBody), ["T"]);
        assert!(b.overlay());
    }

    #[test]
    fn every_finding_of_a_body_is_at_its_json_pointer() {
        let r = read_json(serde_json::json!({
            "resources": {"memory": "lots", "pids": -1, "bogus": 1},
            "egress": {"domains": "a.test"},
            "secrets": {"T": {"from_env": "X", "from_file": "/f"}},
            "hostname": null,
            "tty": "yes"
        }));
        let at: Vec<(&str, Option<Field>)> = r
            .findings
            .iter()
            .map(|f| (f.place.pointer().unwrap_or(""), f.field))
            .collect();
        assert!(
            at.contains(&("/resources/memory", Some(Field::Memory))),
            "{at:?}"
        );
        assert!(
            at.contains(&("/resources/pids", Some(Field::Pids))),
            "{at:?}"
        );
        assert!(at.contains(&("/resources/bogus", None)), "{at:?}");
        assert!(
            at.contains(&("/egress/domains", Some(Field::AllowDomain))),
            "{at:?}"
        );
        assert!(
            at.contains(&("/secrets/T/from_file", Some(Field::Secret))),
            "{at:?}"
        );
        assert!(at.contains(&("/tty", Some(Field::Tty))), "{at:?}");
        assert_eq!(at.len(), 6, "{:?}", r.findings);
        let bogus = r.findings.iter().find(|f| f.message.contains("bogus"));
        assert!(
            bogus.is_some_and(|f| f.message.contains("known: memory, cpus")),
            "{:?}",
            r.findings
        );
    }

    #[test]
    fn a_key_written_as_a_flag_or_in_the_wrong_section_is_pointed_at_its_key() {
        let r = read_yaml("allow_domain: [a.test]\nresources:\n  domains: [b.test]\n");
        let messages: Vec<&str> = r.findings.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(r.findings.len(), 2, "{messages:?}");
        assert!(
            messages
                .iter()
                .all(|m| m.contains("did you mean `egress.domains`")),
            "{messages:?}"
        );
        assert_eq!(r.findings[1].place, Place::Line(Pos { line: 3, column: 3 }));
    }

    #[test]
    fn a_key_given_twice_in_a_file_is_said() {
        let (tree, errors) = parse_profile_tree("resources:\n  memory: 1G\n  memory: 2G\n");
        // The parser itself refuses the second, or the reader says it.
        let said = !errors.is_empty() || {
            let origin = |p: &Place| Origin::File {
                file: "f".into(),
                pos: p.pos(),
            };
            let path = |raw: &str| Ok(PathBuf::from(raw));
            !read(
                &tree,
                &Reading {
                    origin: &origin,
                    path: &path,
                    door: Door::Profile,
                },
            )
            .findings
            .is_empty()
        };
        assert!(said);
    }
}

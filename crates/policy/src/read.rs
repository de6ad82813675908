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

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;

use crate::fields::{Door, Field, Kind, Shape, FIELDS};
use crate::layer::{Layer, Origin, Val};
use crate::profile::{suggest, At, Pos};

/// Where a part of a document was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A line and column of a file.
    Line(Pos),
    /// A JSON pointer into a request's body.
    Pointer(String),
}

impl Place {
    /// The line and column, for a file's place (the start of the file
    /// for a body's).
    pub fn pos(&self) -> Pos {
        match self {
            Place::Line(p) => *p,
            Place::Pointer(_) => Pos::default(),
        }
    }

    /// The JSON pointer, for a body's place.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            Place::Pointer(p) => Some(p),
            Place::Line(_) => None,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Line(p) => write!(f, "{p}"),
            Place::Pointer(p) => f.write_str(p),
        }
    }
}

/// A part of a document and its place.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed<T> {
    pub value: T,
    pub place: Place,
}

/// A document's tree, as YAML and JSON both have it.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Text(String),
    List(Vec<Placed<Node>>),
    /// Entries in the order written; a key given twice is kept twice (the
    /// reader says so at the second).
    Map(Vec<(Placed<String>, Placed<Node>)>),
}

impl Node {
    /// What a person calls this node, for "expected X, not Y".
    fn found(&self) -> String {
        match self {
            Node::Null => "nothing".into(),
            Node::Bool(b) => format!("{b}"),
            Node::Int(n) => format!("the number {n}"),
            Node::Float(n) => format!("the number {n}"),
            Node::Text(t) => format!("the text {t:?}"),
            Node::List(_) => "a list".into(),
            Node::Map(_) => "a section".into(),
        }
    }

    /// A scalar's text (a number or a boolean as written).
    fn scalar_text(&self) -> Option<String> {
        match self {
            Node::Text(t) => Some(t.clone()),
            Node::Int(n) => Some(n.to_string()),
            Node::Float(n) => Some(n.to_string()),
            Node::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

/// The tree of a JSON value, each part placed at its JSON pointer.
pub fn from_json(value: &serde_json::Value) -> Placed<Node> {
    fn walk(v: &serde_json::Value, at: &str) -> Placed<Node> {
        use serde_json::Value as J;
        let value = match v {
            J::Null => Node::Null,
            J::Bool(b) => Node::Bool(*b),
            J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => Node::Int(i.into()),
                (_, Some(u), _) => Node::Int(u.into()),
                (_, _, Some(f)) => Node::Float(f),
                _ => Node::Text(n.to_string()),
            },
            J::String(s) => Node::Text(s.clone()),
            J::Array(items) => Node::List(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| walk(item, &format!("{at}/{i}")))
                    .collect(),
            ),
            J::Object(entries) => Node::Map(
                entries
                    .iter()
                    .map(|(k, item)| {
                        let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                        (
                            Placed {
                                value: k.clone(),
                                place: Place::Pointer(here.clone()),
                            },
                            walk(item, &here),
                        )
                    })
                    .collect(),
            ),
        };
        Placed {
            value,
            place: Place::Pointer(if at.is_empty() { "/".into() } else { at.into() }),
        }
    }
    walk(value, "")
}

/// A YAML node as the parser gives it, with its line and column.
struct YamlNode(Node);

impl<'de> Deserialize<'de> for YamlNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = YamlNode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Null))
            }
            fn visit_none<E: de::Error>(self) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Null))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<YamlNode, D::Error> {
                YamlNode::deserialize(d)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Bool(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Int(v.into())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Int(v.into())))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Int(v)))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<YamlNode, E> {
                Ok(YamlNode(match i128::try_from(v) {
                    Ok(v) => Node::Int(v),
                    Err(_) => Node::Text(v.to_string()),
                }))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Float(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Text(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<YamlNode, E> {
                Ok(YamlNode(Node::Text(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YamlNode, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<At<YamlNode>>()? {
                    items.push(placed(item));
                }
                Ok(YamlNode(Node::List(items)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<YamlNode, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = map.next_entry::<At<String>, At<YamlNode>>()? {
                    entries.push((
                        Placed {
                            value: k.value,
                            place: Place::Line(k.pos),
                        },
                        placed(v),
                    ));
                }
                Ok(YamlNode(Node::Map(entries)))
            }
        }
        d.deserialize_any(V)
    }
}

fn placed(at: At<YamlNode>) -> Placed<Node> {
    Placed {
        value: at.value.0,
        place: Place::Line(at.pos),
    }
}

/// Parse YAML text into a tree (an empty text is an empty document).
pub fn parse_yaml(text: &str) -> Result<Placed<Node>, crate::profile::ParseError> {
    let root = Placed {
        value: Node::Null,
        place: Place::Line(Pos { line: 1, column: 1 }),
    };
    if text.trim().is_empty() {
        return Ok(root);
    }
    match serde_saphyr::from_str::<Option<At<YamlNode>>>(text) {
        Ok(Some(at)) => Ok(placed(at)),
        Ok(None) => Ok(root),
        Err(e) => Err(crate::profile::yaml_error(&e)),
    }
}

/// Read a profile file's text by the table: its values and every problem
/// of it (parse-level ones included), each at its line and column. Paths
/// are kept as written.
pub fn read_profile_text(text: &str) -> (Read, Vec<crate::profile::ParseError>) {
    let (tree, mut errors) = parse_profile_tree(text);
    let origin = |p: &Place| Origin::File {
        file: String::new(),
        pos: p.pos(),
    };
    let path = |raw: &str| Ok(PathBuf::from(raw));
    let read = read(
        &tree,
        &Reading {
            origin: &origin,
            path: &path,
            door: Door::Profile,
        },
    );
    errors.extend(read.findings.iter().map(|f| crate::profile::ParseError {
        pos: f.place.pos(),
        message: f.message.clone(),
    }));
    (read, errors)
}

/// The `egress.domains` of a profile file's text, each at its place; the
/// first problem when the text is not a profile warden reads.
pub fn profile_domains(text: &str) -> Result<Vec<At<String>>, crate::profile::ParseError> {
    let (read, errors) = read_profile_text(text);
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    Ok(read
        .layer
        .list(Field::AllowDomain)
        .iter()
        .filter_map(|s| match (&s.val, &s.origin) {
            (Val::Text(t), Origin::File { pos, .. }) => Some(At {
                value: t.clone(),
                pos: *pos,
            }),
            _ => None,
        })
        .collect())
}

/// Parse a profile file's text into its tree with every problem of its
/// YAML said at once: the parser stops at its first error; each entry it
/// stops at is said, blanked out (its lines, and the lines nested below
/// it, become empty, so every other position stays where it was written)
/// and the text read again, up to [`MAX_FINDINGS`] times.
pub fn parse_profile_tree(text: &str) -> (Placed<Node>, Vec<crate::profile::ParseError>) {
    let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    let mut errors: Vec<crate::profile::ParseError> = Vec::new();
    for _ in 0..MAX_FINDINGS {
        match parse_yaml(&lines.join("\n")) {
            Ok(tree) => return (tree, errors),
            Err(e) => {
                let again = errors.contains(&e);
                if !again {
                    errors.push(e.clone());
                }
                if again || !blank_entry(&mut lines, usize::try_from(e.pos.line).unwrap_or(0)) {
                    break;
                }
            }
        }
    }
    let empty = Placed {
        value: Node::Null,
        place: Place::Line(Pos { line: 1, column: 1 }),
    };
    (empty, errors)
}

/// Parse-level findings of one file said at most.
pub const MAX_FINDINGS: usize = 64;

/// Blank the entry at `line` (1-based): the key or list item written there
/// (or, for a value on a line of its own, the key it belongs to) and the
/// lines nested below it. False when there is nothing to blank.
fn blank_entry(lines: &mut [String], line: usize) -> bool {
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let content = |l: &str| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    };
    let Some(mut start) = line.checked_sub(1).filter(|&i| i < lines.len()) else {
        return false;
    };
    if !content(&lines[start]) {
        return false;
    }
    let entry = |l: &str| {
        let t = l.trim_start();
        t.starts_with('-') || t.contains(':')
    };
    if !entry(&lines[start]) {
        // A value on a line of its own: its key is the line above it that
        // is indented less.
        let own = indent(&lines[start]);
        if let Some(k) = (0..start)
            .rev()
            .find(|&k| content(&lines[k]) && indent(&lines[k]) < own)
        {
            start = k;
        }
    }
    let base = indent(&lines[start]);
    lines[start].clear();
    for l in lines.iter_mut().skip(start + 1) {
        if content(l) && indent(l) <= base {
            break;
        }
        l.clear();
    }
    true
}

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
            Some(Field::Secret) => secrets(node, how, out),
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

/// The parts of a secret's entry besides the `secrets.*` fields.
const SECRET_PARTS: &[&str] = &["from_env", "from_file", "from_command", "hosts"];

/// `secrets:`: each entry's source and hosts (the layer keeps them as
/// `SOURCE@HOSTS`, the form of `--secret`), and its `secrets.*` fields.
fn secrets(node: &Placed<Node>, how: &Reading, out: &mut Read) {
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
                Some(Val::Argv(argv)) => {
                    sources.push(("from_command", &v.place, format!("cmd:{}", argv.join(" "))))
                }
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

#[cfg(test)]
mod tests {
    use super::*;

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

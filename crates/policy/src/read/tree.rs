//! A document's tree, whichever door it came through: a YAML file parsed
//! with each value placed at its line and column, or an API request's JSON
//! body with each value placed at its JSON pointer. Both become one
//! [`Node`] tree of [`Placed`] parts.
//!
//! This file only builds trees; it never knows a field, and reads no value
//! by the table (that is [`super::read`]'s walk).

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

use crate::profile::{At, Pos};

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
    pub(super) fn found(&self) -> String {
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
    pub(super) fn scalar_text(&self) -> Option<String> {
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

//! The JSON Schema of profile files (`schema/profile.schema.json`, and
//! `warden profile schema`), made from the field table: each row with a
//! profile key is one property, its type from the row's kind and shape,
//! its description from the row's doc and flag. Nothing is declared here
//! but how a kind is written in JSON Schema.

use serde_json::{json, Map, Value};

use crate::fields::{FieldInfo, Kind, Shape, FIELDS};

/// How a value of `kind` is written.
fn kind_schema(kind: Kind) -> Value {
    match kind {
        Kind::Text | Kind::Path | Kind::Secret => json!({ "type": "string" }),
        Kind::Bool | Kind::Switch => json!({ "type": "boolean" }),
        Kind::Size => json!({
            "description": "A byte size: a whole number with an optional unit K, M, G or T (powers of 1024), e.g. 512M, 4G.",
            "anyOf": [
                { "type": "string", "pattern": "^[0-9]+([KkMmGgTt]([Ii]?[Bb])?|[Bb])?$" },
                { "type": "integer", "minimum": 0 }
            ]
        }),
        Kind::Duration => json!({
            "description": "A duration such as 30s, 10m, 2h or 1h30m; a bare number is seconds.",
            "anyOf": [
                { "type": "string", "pattern": "^[0-9]" },
                { "type": "integer", "minimum": 0 }
            ]
        }),
        Kind::Count => json!({ "type": "integer", "minimum": 0 }),
        Kind::Cores => json!({ "type": "number", "exclusiveMinimum": 0 }),
        Kind::Port => json!({ "type": "integer", "minimum": 1, "maximum": 65535 }),
        Kind::Argv => json!({ "type": "array", "items": { "type": "string" } }),
        Kind::Mode => json!({ "enum": ["direct", "overlay"] }),
    }
}

/// A row's property: its kind in its shape, described, null allowed (an
/// empty key is the same as none).
fn property(info: &FieldInfo) -> Value {
    let value = kind_schema(info.kind);
    let mut node = match info.shape {
        Shape::One => value,
        Shape::List => json!({ "type": "array", "items": value }),
        Shape::Map => json!({ "type": "object", "additionalProperties": value }),
    };
    let description = match info.flag {
        Some(flag) => format!("{}. Flag: `{flag}`.", info.doc),
        None => format!("{}.", info.doc),
    };
    json!({
        "description": description,
        "anyOf": [node.take(), { "type": "null" }]
    })
}

/// An object of the given properties, nothing else.
fn section(properties: Map<String, Value>) -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": properties
    })
}

/// The properties of the section at `path` (made when missing), below
/// `props`; `*` is a map's entries (`secrets.*`).
fn place<'a>(
    props: &'a mut Map<String, Value>,
    path: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let Some((first, rest)) = path.split_first() else {
        return Some(props);
    };
    let obj = props
        .entry(first.to_string())
        .or_insert_with(|| section(Map::new()))
        .as_object_mut()?;
    // A field's own property (a map of sections: `secrets`): its value.
    let node = if obj.contains_key("anyOf") {
        obj.get_mut("anyOf")?.get_mut(0)?.as_object_mut()?
    } else {
        obj
    };
    match rest.split_first() {
        Some((&"*", after)) => {
            let entries = node
                .entry("additionalProperties")
                .or_insert_with(|| section(Map::new()));
            place(entries.get_mut("properties")?.as_object_mut()?, after)
        }
        _ => place(node.get_mut("properties")?.as_object_mut()?, rest),
    }
}

/// The parts of a secret's entry besides its `secrets.*` fields.
fn secret_entry() -> Value {
    let text = json!({ "type": "string" });
    section(Map::from_iter([
        (
            "from_env".to_string(),
            json!({ "description": "A variable of warden's own environment.", "type": "string" }),
        ),
        (
            "from_file".to_string(),
            json!({ "description": "A file on the host (one trailing newline is dropped).", "type": "string" }),
        ),
        (
            "from_command".to_string(),
            json!({
                "description": "A program and its arguments, run on the host without a shell, e.g. `[pass, show, github]` (one trailing newline is dropped).",
                "type": "array", "items": text
            }),
        ),
        (
            "hosts".to_string(),
            json!({
                "description": "The hosts the value may be sent to, written as in `egress.domains`.",
                "type": "array", "items": { "type": "string" }
            }),
        ),
    ]))
}

/// The JSON Schema of profile files, as committed in
/// `schema/profile.schema.json`.
pub fn profile_schema() -> String {
    let mut root = Map::new();
    for info in FIELDS {
        let Some(key) = info.profile_key else {
            continue;
        };
        let path: Vec<&str> = key.split('.').collect();
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        let mut prop = property(info);
        if info.kind == Kind::Secret {
            // A map of secrets, each a section of its source and hosts.
            if let Some(alts) = prop.get_mut("anyOf").and_then(|a| a.as_array_mut()) {
                alts[0] = json!({ "type": "object", "additionalProperties": secret_entry() });
            }
        }
        let Some(holder) = place(&mut root, parents) else {
            continue;
        };
        match holder.get_mut(*last) {
            // Already made as a section by a deeper key: keep what it
            // holds, take the row's description and type.
            Some(existing) => {
                if let (Some(e), Some(p)) = (existing.as_object_mut(), prop.as_object()) {
                    for (k, v) in p {
                        if k != "anyOf" || !e.contains_key("anyOf") {
                            e.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            None => {
                holder.insert(last.to_string(), prop);
            }
        }
    }
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "warden profile",
        "description": "One sandbox configuration for one agent. Every field is optional; flags of `warden run` override it.",
        "type": "object",
        "additionalProperties": false,
        "properties": root
    });
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

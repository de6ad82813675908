//! The field table as the API reads it: each option a request body may
//! set, by its JSON pointer, with its profile key, kind, shape, reach and
//! one line of doc, so that a client (the dashboard's create form) builds
//! a body from the table instead of spelling keys of its own. Read-only
//! and the same for every caller: it says what the API takes, not what a
//! caller may set (a caller sets only `reach: sandbox` fields; the trust
//! rule refuses the rest at create, by pointer).

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use warden_policy::{Door, Kind, Reach, Running, Shape, FIELDS};

/// `GET /v1/fields`.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct FieldList {
    /// In the table's order.
    pub fields: Vec<FieldEntry>,
}

/// One option of a create request's `spec`.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct FieldEntry {
    /// Where it goes in a `spec` document: `/resources/memory`.
    pub json: &'static str,
    /// Its key in a profile file: `resources.memory`.
    pub key: &'static str,
    /// What each value is: `size`, `duration`, `count`, `cores`, `port`,
    /// `path`, `text`, `bool`, `argv`, `mode`, `secret`.
    pub kind: &'static str,
    /// `one`, `list` or `map`.
    pub shape: &'static str,
    /// `sandbox` (any caller may set it), `host` (the owner only) or
    /// `catalog` (a name of the owner's catalogue).
    pub reach: &'static str,
    /// The kind in words (`list of domains`).
    pub ty: &'static str,
    /// One line: what it does.
    pub doc: &'static str,
    /// A running sandbox takes a change to it at once (the row's
    /// `running: applied`): the entries of `PATCH
    /// /v1/sandboxes/{id}/egress` are this field's.
    pub live: bool,
}

fn kind(k: Kind) -> &'static str {
    match k {
        Kind::Text => "text",
        Kind::Bool => "bool",
        Kind::Size => "size",
        Kind::Duration => "duration",
        Kind::Count => "count",
        Kind::Cores => "cores",
        Kind::Port => "port",
        Kind::Path => "path",
        Kind::Argv => "argv",
        Kind::Mode => "mode",
        Kind::Secret => "secret",
        Kind::Switch => "switch",
    }
}

/// The rows an API request may set.
pub fn entries() -> Vec<FieldEntry> {
    FIELDS
        .iter()
        .filter(|f| f.field.settable_by(Door::Api))
        .filter_map(|f| {
            Some(FieldEntry {
                json: f.json_path?,
                key: f.profile_key?,
                kind: kind(f.kind),
                shape: match f.shape {
                    Shape::One => "one",
                    Shape::List => "list",
                    Shape::Map => "map",
                },
                reach: match f.reach {
                    Reach::Sandbox => "sandbox",
                    Reach::Host => "host",
                    Reach::Catalog => "catalog",
                },
                ty: f.ty,
                doc: f.doc,
                live: f.running == Running::Applied,
            })
        })
        .collect()
}

#[utoipa::path(get, path = "/v1/fields",
    responses((status = 200, description = "the options a create request's spec may set, from the field table", body = FieldList)),
    security(("token" = [])))]
pub async fn list() -> Json<FieldList> {
    Json(FieldList { fields: entries() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_the_tables_api_rows_with_the_tables_pointers() {
        let rows = entries();
        let memory = rows.iter().find(|r| r.key == "resources.memory");
        assert_eq!(
            memory.map(|r| (r.json, r.kind, r.shape, r.reach)),
            Some(("/resources/memory", "size", "one", "sandbox"))
        );
        let domains = rows.iter().find(|r| r.key == "egress.domains");
        assert_eq!(domains.map(|r| r.shape), Some("list"));
        // The one field a running sandbox's allowlist change is of.
        let live: Vec<_> = rows.iter().filter(|r| r.live).map(|r| r.key).collect();
        assert_eq!(live, ["egress.domains"]);
        // Where events go is never a request's: not offered.
        assert!(rows.iter().all(|r| r.key != "json_events"), "{rows:?}");
    }
}

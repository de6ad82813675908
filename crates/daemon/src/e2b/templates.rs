//! E2B's templates as warden has them: a template is a profile of the
//! daemon owner's catalogue, named by its plain name. Listing them
//! (`GET /templates`, `/v2/templates`), looking one up by name
//! (`GET /templates/{id}`, `/templates/aliases/{alias}`, what the SDK's
//! `Template.exists` asks) are the native profile list
//! ([`crate::routes::profiles`]: the names a caller may create from,
//! never a profile's contents or where it is read from). Building one
//! (`Template.build`, `POST /v3/templates` and its steps) is refused: a
//! profile is the owner's to write on the daemon's host, and a caller who
//! could make one would name what reaches the host (files, pinned
//! addresses), which the trust rule gives the owner alone.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;
use std::sync::Arc;

use super::answer::error;
use super::answer::DEFAULT_TEMPLATE;
use super::{permit, E2b, ENVD_VERSION};
use crate::auth::Caller;
use crate::routes::profiles::ProfileEntry;

/// A template as E2B's API lists it (the SDK's `Template` model).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Template {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(rename = "buildID")]
    build_id: String,
    /// The profile's own limits are not read here: 0, as get_info says
    /// where a sandbox sets none.
    cpu_count: u32,
    #[serde(rename = "memoryMB")]
    memory_mb: u64,
    #[serde(rename = "diskSizeMB")]
    disk_size_mb: u64,
    public: bool,
    aliases: Vec<String>,
    names: Vec<String>,
    created_at: String,
    updated_at: String,
    created_by: Option<()>,
    last_spawned_at: Option<()>,
    spawn_count: u64,
    build_count: u64,
    envd_version: &'static str,
    build_status: &'static str,
    is_default: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
}

fn template(name: &str, description: Option<String>, now: &str) -> Template {
    Template {
        template_id: name.to_string(),
        build_id: name.to_string(),
        cpu_count: 0,
        memory_mb: 0,
        disk_size_mb: 0,
        public: false,
        aliases: vec![name.to_string()],
        names: vec![name.to_string()],
        created_at: now.to_string(),
        updated_at: now.to_string(),
        created_by: None,
        last_spawned_at: None,
        spawn_count: 0,
        build_count: 0,
        envd_version: ENVD_VERSION,
        build_status: "ready",
        is_default: name == DEFAULT_TEMPLATE,
        description,
    }
}

/// The profiles the caller may create from, with E2B's default template
/// (`base`, the default profile unless one has that name).
async fn profiles(e: &E2b, caller: &Caller) -> Result<Vec<ProfileEntry>, Response> {
    permit(&e.app, caller, "GET", "/v1/profiles", None).map_err(|d| d.response())?;
    let Json(list) = crate::routes::profiles::list(State(e.app.clone()))
        .await
        .map_err(super::control::from_api)?;
    let mut entries = list.profiles;
    if !entries.iter().any(|p| p.name == DEFAULT_TEMPLATE) {
        entries.insert(
            0,
            ProfileEntry {
                name: DEFAULT_TEMPLATE.into(),
                description: Some("warden's default profile (no network)".into()),
            },
        );
    }
    Ok(entries)
}

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// `GET /templates`, `/v2/templates`.
pub async fn list(State(e): State<Arc<E2b>>, Extension(caller): Extension<Caller>) -> Response {
    match profiles(&e, &caller).await {
        Ok(entries) => {
            let now = now();
            let out: Vec<Template> = entries
                .into_iter()
                .map(|p| template(&p.name, p.description, &now))
                .collect();
            Json(out).into_response()
        }
        Err(r) => r,
    }
}

/// `GET /templates/{id}`: the template of that name, with no builds.
pub async fn get_one(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    match profiles(&e, &caller).await {
        Ok(entries) => match entries.into_iter().find(|p| p.name == id) {
            Some(p) => Json(serde_json::json!({
                "templateID": p.name,
                "public": false,
                "aliases": [p.name],
                "names": [p.name],
                "builds": [],
            }))
            .into_response(),
            None => not_a_template(&id),
        },
        Err(r) => r,
    }
}

/// `GET /templates/aliases/{alias}` (`Template.exists`): 200 for a
/// profile the caller may create from, 404 for any other name.
pub async fn alias(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(alias): Path<String>,
) -> Response {
    match profiles(&e, &caller).await {
        Ok(entries) if entries.iter().any(|p| p.name == alias) => {
            Json(serde_json::json!({"templateID": alias, "public": false})).into_response()
        }
        Ok(_) => not_a_template(&alias),
        Err(r) => r,
    }
}

fn not_a_template(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("template {name:?} is not a profile of the daemon owner's catalogue (Template.list: GET /templates lists those you may create from)"),
    )
}

/// `Template.build` and its steps: refused, saying what to do instead
/// (the SDK raises its `BuildException` with this message).
pub async fn build_refused() -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        "Template.build is not supported: a template is a warden profile, which the daemon's owner writes on its host (a YAML file in its profiles directory, docs/profiles.md); a prepared root file system is given to a profile as `filesystem.rootfs`. Create from it by name (Sandbox.create(template=NAME)); GET /templates lists the names",
    )
}

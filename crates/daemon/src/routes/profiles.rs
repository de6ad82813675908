//! The profiles a caller may name at `POST /v1/sandboxes`: the owner's
//! catalogue (warden's built-in profiles and the owner's own directory),
//! each by its name and its one-line description, for a create form's
//! picker. Never a profile's contents nor where it is read from (a user
//! profile's path names the owner's home, and its rules are the owner's
//! to show). Profiles the daemon keeps for a step of its own (the code
//! interpreter's package fetch) are left out: no caller's sandbox is made
//! from them, and the E2B door refuses them by name.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;
use warden_policy::compose::{compose, Catalog, Layer};

use crate::app::App;
use crate::error::ApiError;

/// A description is shown on one line of a picker: longer text is cut.
const MOST_CHARS: usize = 160;

/// `GET /v1/profiles`.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct ProfileList {
    /// By name.
    pub profiles: Vec<ProfileEntry>,
}

/// A profile a caller may name as `profile`.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct ProfileEntry {
    pub name: String,
    /// The profile's `description`, on one line; absent when it has none
    /// (or does not read: creating from it says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[utoipa::path(get, path = "/v1/profiles",
    responses((status = 200, description = "the profiles a caller may name, by name", body = ProfileList)),
    security(("token" = [])))]
pub async fn list(State(app): State<Arc<App>>) -> Result<Json<ProfileList>, ApiError> {
    // Reading the owner's directory and composing each profile touches
    // the disk: off the async workers.
    let catalog = app.catalog.clone();
    let profiles = super::sandboxes::blocking(move || Ok(entries(&catalog))).await?;
    Ok(Json(ProfileList { profiles }))
}

/// The catalogue's names a caller may name, with their descriptions.
fn entries(catalog: &Catalog) -> Vec<ProfileEntry> {
    catalog
        .profile_names()
        .into_iter()
        .map(|(name, _where)| name)
        // A file whose name is no plain catalogue name cannot be named by
        // a caller (`trust::may_name_profile` refuses it): not offered.
        .filter(|name| warden_policy::trust::is_catalog_name(name))
        // The daemon's own profiles, which no caller may name on any door.
        .filter(|name| !warden_policy::trust::is_own_use(name))
        .map(|name| {
            let description = compose(catalog, Some(&name), &Layer::default())
                .ok()
                .and_then(|c| c.description)
                .and_then(|d| one_line(&d));
            ProfileEntry { name, description }
        })
        .collect()
}

/// `text` as one line of at most [`MOST_CHARS`] characters; `None` when
/// nothing is left.
fn one_line(text: &str) -> Option<String> {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return None;
    }
    if line.chars().count() <= MOST_CHARS {
        return Some(line);
    }
    let cut: String = line.chars().take(MOST_CHARS - 1).collect();
    Some(format!("{}…", cut.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_catalogue_is_offered_with_descriptions_but_not_the_daemons_own_profiles() {
        let list = entries(&Catalog::default());
        let names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
        assert!(names.contains(&"researcher"), "{names:?}");
        assert!(!names.contains(&"code-interpreter-v1-setup"), "{names:?}");
        let researcher = list.iter().find(|e| e.name == "researcher");
        assert!(researcher.and_then(|e| e.description.as_ref()).is_some());
    }

    #[test]
    fn a_long_or_broken_description_becomes_one_short_line() {
        assert_eq!(one_line(" a\n  b \t").as_deref(), Some("a b"));
        assert_eq!(one_line(" \n "), None);
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).map(|l| l.chars().count()), Some(MOST_CHARS));
    }
}

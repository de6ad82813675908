//! E2B's create (`POST /sandboxes`, `/v2/sandboxes`) and the sandbox as
//! create and connect answer it: the native create with the request in
//! warden's terms (a template is a profile of that name, or one of the
//! caller's snapshots; `timeout` the TTL; `metadata` the labels;
//! `envVars` the profile's `env.set`; `network` its `egress.domains`;
//! `lifecycle` what the timeout does, kept in the door's own `e2b.`
//! labels), and each caller's envd access token.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::answer::{access_token, created, error, refusal, DEFAULT_TEMPLATE};
use super::control::{from_api, in_e2b_words, set_labels};
use super::network::Wanted;
use super::record::{ttl_for, ALLOW_OUT, ON_TIMEOUT};
use super::{permit, E2b};
use crate::api::{CreateSandbox, SandboxInfo};
use crate::auth::Caller;
use crate::body::Body;
use crate::error::ApiError;
use crate::routes::sandboxes;
use warden_policy::layer::{Layer, Origin};
use warden_policy::{Field, Trust};

/// `POST /sandboxes` and `/v2/sandboxes` (NewSandbox / NewSandboxV2).
/// What a sandbox reaches is its template's allowlist and `allowOut`,
/// never more; `allowInternetAccess: false` (or `denyOut` of all traffic)
/// takes the template's away ([`super::network::Wanted`]). An option
/// this type does not name is refused (400), never taken and ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(default)]
    auto_pause: Option<bool>,
    #[serde(default)]
    auto_pause_memory: Option<bool>,
    #[serde(default)]
    auto_resume: Option<serde_json::Value>,
    #[serde(default)]
    network: Option<super::network::Network>,
    /// Sent by the SDK in snake case, as E2B's API names it.
    #[serde(default, alias = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    #[serde(default)]
    volume_mounts: Option<serde_json::Value>,
    #[serde(default)]
    mcp: Option<serde_json::Value>,
    /// Secured envd access: warden's always is (every sandbox call needs
    /// the envd access token), so `true` is what warden gives.
    #[serde(default)]
    secure: Option<bool>,
    /// Workload identity tokens: warden has none to give.
    #[serde(default)]
    iam: Option<serde_json::Value>,
}

/// Why create's `secure` or `iam` cannot be had: `secure: false` asks for
/// envd without its access token, a non-empty `iam.tokens` for workload
/// identity (an empty map or `null` enables nothing, as in E2B).
fn identity_refused(body: &NewSandbox) -> Option<&'static str> {
    if body.secure == Some(false) {
        return Some("secure: false is not supported: warden always requires the sandbox's envd access token; omit secure");
    }
    let tokens = body.iam.as_ref().and_then(|i| i.get("tokens"));
    let empty = |v: &serde_json::Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty());
    let iam_empty = body.iam.as_ref().is_none_or(|i| {
        i.is_null()
            || i.as_object()
                .is_some_and(|m| m.keys().all(|k| k == "tokens") && tokens.is_none_or(empty))
    });
    (!iam_empty).then_some(
        "iam (workload identity) is not supported: warden gives a sandbox no identity tokens; give credentials through a warden profile's secrets (the template), which the egress proxy substitutes towards their own hosts",
    )
}

/// A create the door refuses: its stable reason code (the body's
/// `error_code`) and its words. A refusal of the body's shape or values
/// is `invalid_body`; the door's own decisions carry their own code.
struct Refused(&'static str, String);

impl From<String> for Refused {
    fn from(message: String) -> Refused {
        Refused(INVALID_BODY, message)
    }
}

/// Reason code: the body does not fit, or a value in it is refused.
const INVALID_BODY: &str = "invalid_body";
/// Reason code: an option warden does not support (`secure: false`,
/// `iam`).
const UNSUPPORTED_OPTION: &str = "unsupported_option";
/// Reason code: a template that is a snapshot, asked for with what a
/// snapshot fixes (envs, network, volume mounts, mcp).
const SNAPSHOT_TEMPLATE: &str = "snapshot_template";
/// Reason code: a template that is not a plain name of the owner's
/// catalogue (a path).
const TEMPLATE_NOT_A_NAME: &str = "template_not_a_name";
/// Reason code: a template that is neither a profile of the owner's
/// catalogue nor one of the caller's snapshots.
const UNKNOWN_TEMPLATE: &str = "unknown_template";
/// Reason code: the daemon's own template (the code interpreter's
/// packages' fetch).
const DAEMON_TEMPLATE: &str = "daemon_template";

/// E2B's timeout when a create names none.
const DEFAULT_TIMEOUT: u64 = 300;

/// The labels of an E2B sandbox: the client's metadata (never a key of
/// the door's own, `e2b.`, which say what the door does with the
/// sandbox), its template, what its timeout does and the names it gave.
fn labels_of(body: &NewSandbox, domains: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut labels = body.metadata.clone().unwrap_or_default();
    if let Some(k) = labels.keys().find(|k| k.starts_with("e2b.")) {
        return Err(format!(
            "metadata.{k}: keys beginning `e2b.` are warden's own record of the sandbox; choose another key"
        ));
    }
    // Said here at the client's own key: the native create would point
    // at its `/labels`, a body this client never wrote.
    for (k, v) in &labels {
        if k.is_empty() || k.len() > 128 {
            return Err(format!("metadata.{k}: a metadata key is 1 to 128 bytes"));
        }
        if v.len() > 1024 {
            return Err(format!(
                "metadata.{k}: a metadata value is at most 1024 bytes ({} given)",
                v.len()
            ));
        }
    }
    // Another door's own record (MCP's `mcp-lease`, `mcp-session`): the
    // same refusal as natively, at the client's own key.
    if let Err(e) = crate::labels::check_for(crate::labels::Door::E2b, &labels) {
        let key = e
            .problem
            .field
            .as_deref()
            .and_then(|f| f.strip_prefix("/labels/"))
            .map(|k| k.replace("~1", "/").replace("~0", "~"))
            .unwrap_or_default();
        let why = e.problem.message;
        let why = why.split_once(": ").map_or(why.as_str(), |(_, w)| w);
        return Err(format!("metadata.{key}: {why}"));
    }
    if body.mcp.as_ref().is_some_and(|v| !v.is_null()) {
        labels.insert(super::mcp::LABEL.into(), "on".into());
    }
    labels.insert("e2b.template".into(), body.template_id.clone());
    if body
        .auto_resume
        .as_ref()
        .is_some_and(|v| v.get("enabled") == Some(&serde_json::Value::Bool(true)))
    {
        return Err("lifecycle auto_resume is not supported: a paused sandbox is resumed by connect() (Sandbox.connect(sandbox_id)), not by traffic".into());
    }
    if body.auto_pause == Some(true) {
        let mode = if body.auto_pause_memory == Some(false) {
            "pause-filesystem"
        } else {
            "pause"
        };
        labels.insert(ON_TIMEOUT.into(), mode.into());
    }
    if !domains.is_empty() {
        labels.insert(ALLOW_OUT.into(), super::network::label_of(domains));
    }
    Ok(labels)
}

/// What an E2B create sets of the sandbox, read into a layer by the field
/// table as a caller's values, each at its place in the E2B body
/// (`/envVars/NAME`, `/network/allowOut/N`): the door's own user and home
/// ([`super::paths`]), the client's variables and the names it allows
/// (`domains`, `allowOut` as read by [`super::network::wanted_of`]).
fn spec_layer(body: &NewSandbox, domains: &[String]) -> Result<Layer, String> {
    let at = |pointer: String| Origin::Body {
        label: "the E2B request".into(),
        pointer,
    };
    let mut layer = Layer::default();
    let mut add = |field: Field, text: &str, origin: Origin| {
        layer
            .add_text(field, text, origin.clone(), Trust::Caller)
            .map_err(|e| format!("{}: {e}", e2b_place(origin.pointer().unwrap_or(""))))
    };
    // E2B's user and its home, where commands start and relative paths
    // are: the same for commands and files.
    add(Field::HomeDir, super::paths::E2B_HOME, Origin::Default)?;
    add(Field::Workdir, super::paths::E2B_HOME, Origin::Default)?;
    add(Field::UserName, super::paths::E2B_USER, Origin::Default)?;
    for (name, value) in body.env_vars.iter().flatten() {
        // A map entry is read as NAME=VALUE: a name holding `=` would be
        // split elsewhere than the client meant.
        if name.contains('=') {
            return Err(format!("envVars.{name}: a variable's name holds no `=`"));
        }
        add(
            Field::Env,
            &format!("{name}={value}"),
            at(format!("/envVars/{name}")),
        )?;
    }
    for (i, d) in domains.iter().enumerate() {
        add(Field::AllowDomain, d, at(format!("/network/allowOut/{i}")))?;
    }
    Ok(layer)
}

/// A place in the E2B body, from its JSON pointer, as the client wrote
/// it: `/envVars/NAME` is `envVars.NAME`, `/network/allowOut/1` is
/// `network.allowOut[1]`.
fn e2b_place(pointer: &str) -> String {
    let mut out = String::new();
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        if !out.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) && !token.is_empty() {
            out.push_str(&format!("[{token}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&token);
        }
    }
    out
}

/// The native create request for an E2B one, what it asks of the
/// sandbox's egress, and the caller's volumes it mounts.
fn create_request(
    app: &crate::app::App,
    caller: &Caller,
    body: &NewSandbox,
) -> Result<(CreateSandbox, Wanted, Vec<warden_policy::VolumeMount>), Refused> {
    super::mcp::config_refused(body.mcp.as_ref())?;
    let mounts = super::volumes::mounts_of(
        app,
        caller,
        body.volume_mounts.as_ref(),
        std::path::Path::new(super::paths::E2B_HOME),
    )?;
    if let Some(why) = identity_refused(body) {
        return Err(Refused(UNSUPPORTED_OPTION, why.into()));
    }
    let profile = match body.template_id.as_str() {
        "" => None,
        DEFAULT_TEMPLATE if app.catalog.profile(DEFAULT_TEMPLATE).is_err() => None,
        // The SDK's template for a create with `mcp` and no template: the
        // default profile too, unless the owner wrote one of that name.
        super::mcp::TEMPLATE if app.catalog.profile(super::mcp::TEMPLATE).is_err() => None,
        // The daemon's own step that fetches the code interpreter's
        // packages: a client asking for it would get PyPI for nothing.
        super::interpreter::SETUP_PROFILE => {
            return Err(Refused(DAEMON_TEMPLATE, format!(
                "template {:?} is the daemon's own (it fetches the code interpreter's packages); use {:?}",
                super::interpreter::SETUP_PROFILE,
                super::interpreter::TEMPLATE
            )))
        }
        // An E2B client names a profile as every caller who is not the
        // owner does: a plain name of the owner's catalogue, never a path.
        t if !warden_policy::trust::is_catalog_name(t) => {
            return Err(Refused(TEMPLATE_NOT_A_NAME, format!(
                "template {t:?}: a template is the plain name of a warden profile of the daemon owner's catalogue (see `warden profile list` on the daemon's host), never a path"
            )))
        }
        // Named here: with the door's own options beside it, the native
        // create would tell a caller only that a profile does not compose.
        t if app.catalog.profile(t).is_err() => {
            return Err(Refused(UNKNOWN_TEMPLATE, format!(
                "template {t:?} is neither a profile of the daemon owner's catalogue (see `warden profile list` on the daemon's host) nor one of your snapshots"
            )))
        }
        t => Some(t.to_string()),
    };
    let none = super::network::Network::default();
    let net = body.network.as_ref().unwrap_or(&none);
    // Create's own `allowInternetAccess`, or the network's.
    let wanted = super::network::wanted_of(
        net,
        body.allow_internet_access.or(net.allow_internet_access),
    )?;
    let domains = wanted.allow.clone();
    let spec = spec_layer(body, &domains)?.document();
    let labels = labels_of(body, &domains)?;
    let ttl = ttl_for(&labels, body.timeout.unwrap_or(DEFAULT_TIMEOUT));
    // A sandbox some of whose template's reach is denied is started only
    // once that reach is taken away; one with volumes once they are in
    // its spec.
    let start = !wanted.denies() && mounts.is_empty();
    Ok((
        CreateSandbox {
            name: None,
            profile,
            spec: Some(spec),
            workspace: None,
            ttl_seconds: Some(ttl),
            labels,
            start: Some(start),
        },
        wanted,
        mounts,
    ))
}

/// Start sandbox `info` (made, not started) with what `wanted` denies of
/// its template's reach taken away; refused and removed when warden
/// cannot deny it.
async fn start_denied(
    e: &E2b,
    caller: &Caller,
    info: SandboxInfo,
    wanted: &Wanted,
) -> Result<SandboxInfo, Response> {
    let id = info.id.clone();
    let (app, sid, w) = (e.app.clone(), id.clone(), wanted.clone());
    // The template's names taken away, or why they cannot be.
    let held = sandboxes::blocking(move || {
        let reach = super::network::template_reach(&app, &sid).map_err(ApiError::internal)?;
        if let Some(why) = super::network::refusal(&w, &reach) {
            return Ok(Err(why));
        }
        if !w.deny_all {
            return Ok(Ok(Vec::new()));
        }
        super::network::deny_before_start(&app, &sid, &reach.names).map_err(ApiError::internal)?;
        Ok(Ok(reach.names))
    })
    .await;
    let taken = match held {
        Ok(Ok(names)) => Ok(names),
        Ok(Err(why)) => Err(error(StatusCode::BAD_REQUEST, why)),
        Err(err) => Err(from_api(err)),
    };
    let started = match taken {
        Ok(names) => {
            // Kept for an update that gives them back.
            let kept =
                set_labels(&e.app, &id, move |l| super::network::keep_denied(l, &names)).await;
            match kept {
                Ok(()) => sandboxes::start(
                    State(e.app.clone()),
                    Extension(caller.clone()),
                    axum::extract::Path(id.clone()),
                )
                .await
                .map(|Json(i)| i)
                .map_err(|err| from_api(in_e2b_words(err))),
                Err(r) => Err(r),
            }
        }
        Err(r) => Err(r),
    };
    if started.is_err() {
        let _ = sandboxes::remove(
            State(e.app.clone()),
            axum::extract::Path(id),
            Ok(axum::extract::Query(sandboxes::RemoveQuery {
                force: Some(true),
            })),
        )
        .await;
    }
    started
}

/// A create whose template is one of the caller's snapshots: the
/// snapshot's files and options, the create's metadata and timeout. What
/// the snapshot fixed (its environment, its allowlist) is not changed at
/// create; the network is changed after, with update_network.
async fn create_from_snapshot(
    e: &E2b,
    caller: &Caller,
    body: &NewSandbox,
) -> Result<SandboxInfo, Response> {
    if body.env_vars.as_ref().is_some_and(|v| !v.is_empty())
        || body.network.is_some()
        || body.allow_internet_access == Some(false)
    {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            SNAPSHOT_TEMPLATE,
            format!("template {:?} is a snapshot: it carries its sandbox's environment variables and network; create without envs and network, then change the network with update_network", body.template_id),
        ));
    }
    if body.volume_mounts.as_ref().is_some_and(|v| !v.is_null())
        || body.mcp.as_ref().is_some_and(|v| !v.is_null())
    {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            SNAPSHOT_TEMPLATE,
            format!("template {:?} is a snapshot: volumeMounts and mcp are not taken with it; create from a template to mount volumes", body.template_id),
        ));
    }
    if let Some(why) = identity_refused(body) {
        return Err(refusal(StatusCode::BAD_REQUEST, UNSUPPORTED_OPTION, why));
    }
    let labels =
        labels_of(body, &[]).map_err(|m| refusal(StatusCode::BAD_REQUEST, INVALID_BODY, m))?;
    let timeout = body.timeout.unwrap_or(DEFAULT_TIMEOUT);
    super::copies::create_from(e, caller, &body.template_id, labels, timeout).await
}

/// E2B's create body, read; what does not fit is said at its place in
/// that body (`timeout`, `metadata.job`, `network.allowOut[0]`), as the
/// client wrote it.
fn parse(bytes: &[u8]) -> Result<NewSandbox, String> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let place = err.path().to_string();
        let inner = err.into_inner();
        // serde_json's own position in the text says nothing more.
        let why = inner.to_string();
        let why = why.split(" at line ").next().unwrap_or(&why).to_string();
        if place.is_empty() || place == "." {
            format!("the request body does not fit: {why}")
        } else {
            format!("{place}: {why}")
        }
    })
}

pub async fn create(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "POST", "/v1/sandboxes", None) {
        return d.response();
    }
    let body: NewSandbox = match parse(&body) {
        Ok(b) => b,
        Err(m) => return refusal(StatusCode::BAD_REQUEST, INVALID_BODY, m),
    };
    // A template is a profile of the owner's; failing that, one of the
    // caller's snapshots (a snapshot is never named as a profile is).
    let t = body.template_id.as_str();
    if e.app.catalog.profile(t).is_err()
        && warden_policy::trust::is_catalog_name(t)
        && super::copies::is_snapshot(&e, &caller, t).await
    {
        return match create_from_snapshot(&e, &caller, &body).await {
            Ok(info) => match access_token(&e, &caller, &info) {
                Ok(key) => (StatusCode::CREATED, Json(created(&info, key))).into_response(),
                Err(r) => *r,
            },
            Err(r) => r,
        };
    }
    let (req, wanted, mounts) = match create_request(&e.app, &caller, &body) {
        Ok(r) => r,
        Err(Refused(code, m)) => return refusal(StatusCode::BAD_REQUEST, code, m),
    };
    let made =
        match sandboxes::create(State(e.app.clone()), Extension(caller.clone()), Body(req)).await {
            Ok((_, Json(info))) => info,
            Err(err) => return from_api(in_e2b_words(err)),
        };
    let with_volumes = !mounts.is_empty();
    if with_volumes {
        let (app, id) = (e.app.clone(), made.id.clone());
        let attached = sandboxes::blocking(move || {
            super::volumes::attach(&app, &id, mounts).map_err(|e| match e {
                super::volumes::AttachError::Refused(why) => ApiError::bad_request(why),
                super::volumes::AttachError::Failed(why) => ApiError::internal(why),
            })
        })
        .await;
        if let Err(err) = attached {
            let _ = sandboxes::remove(
                State(e.app.clone()),
                axum::extract::Path(made.id.clone()),
                Ok(axum::extract::Query(sandboxes::RemoveQuery {
                    force: Some(true),
                })),
            )
            .await;
            return from_api(err);
        }
    }
    let info = if wanted.denies() || with_volumes {
        match start_denied(&e, &caller, made, &wanted).await {
            Ok(i) => i,
            Err(r) => return r,
        }
    } else {
        made
    };
    match access_token(&e, &caller, &info) {
        Ok(key) => (StatusCode::CREATED, Json(created(&info, key))).into_response(),
        Err(r) => *r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e2b::record::GRACE;

    fn body(json: serde_json::Value) -> NewSandbox {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_place_in_the_e2b_body_is_said_as_the_client_wrote_it() {
        assert_eq!(e2b_place("/envVars/MY_VAR"), "envVars.MY_VAR");
        assert_eq!(e2b_place("/network/allowOut/1"), "network.allowOut[1]");
        assert_eq!(e2b_place("/envVars/a~1b"), "envVars.a/b");
    }

    #[test]
    fn a_body_that_does_not_fit_is_said_at_its_e2b_place() {
        let Err(m) = parse(br#"{"templateID": "base", "timeout": "soon"}"#) else {
            panic!("a text timeout was taken");
        };
        assert!(m.starts_with("timeout: "), "{m}");
        assert!(!m.contains("line"), "{m}");
        let Err(m) = parse(br#"{"templateID": "base", "metadata": {"job": 42}}"#) else {
            panic!("a number as metadata was taken");
        };
        assert!(m.starts_with("metadata.job: "), "{m}");
        let Err(m) = parse(br#"{"templateID": "base", "envVars": {"X": null}}"#) else {
            panic!("null as a variable was taken");
        };
        assert!(m.starts_with("envVars.X: "), "{m}");
    }

    #[test]
    fn metadata_too_long_is_said_at_its_key() {
        let b =
            body(serde_json::json!({"templateID": "base", "metadata": {"job": "x".repeat(2000)}}));
        assert!(labels_of(&b, &[])
            .unwrap_err()
            .starts_with("metadata.job: "));
    }

    #[test]
    fn metadata_may_not_set_the_doors_own_record() {
        let b = body(
            serde_json::json!({"templateID": "base", "metadata": {"e2b.paused": "filesystem"}}),
        );
        assert!(labels_of(&b, &[]).unwrap_err().contains("e2b."));
    }

    #[test]
    fn a_timeout_that_pauses_with_memory_holds_the_grace_and_shows_the_timeout() {
        let b = body(serde_json::json!({"templateID": "base", "autoPause": true}));
        let labels = labels_of(&b, &[]).unwrap();
        assert_eq!(ttl_for(&labels, 60), 60 + GRACE.as_secs());
        let b = body(
            serde_json::json!({"templateID": "base", "autoPause": true, "autoPauseMemory": false}),
        );
        let labels = labels_of(&b, &[]).unwrap();
        assert_eq!(ttl_for(&labels, 60), 60);
        assert_eq!(
            labels.get(ON_TIMEOUT).map(String::as_str),
            Some("pause-filesystem")
        );
    }
}

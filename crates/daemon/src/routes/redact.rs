//! What a token holder is shown of warden's host: nothing. Host paths
//! (the state directory, a sandbox's workspace on the host, its cgroup,
//! the profile file the owner named) are the owner's; a token, given to an
//! agent or a person who holds no account on the host, sees its sandboxes
//! and their data, never where warden keeps them. The owner (the
//! owner-only socket) is shown everything.
//!
//! One layer in front of every route does it for the answers that
//! describe sandboxes ([`SandboxInfo`](crate::api::SandboxInfo), alone or
//! listed, found by their shape in every answer but the sandbox's own
//! data) and for refusals, whatever handler wrote them; the event stream,
//! which is long-lived, asks [`event_line`] for each event. Command output
//! and file contents are the sandbox's own data and are never rewritten.
//!
//! Nor are the caller's own words: what its request said
//! ([`Said`](super::said::Said)), its labels, the commands it ran. A
//! rewrite of them would be an oracle: a token naming a guess of the
//! owner's home would see it replaced when right and said back when
//! wrong. So the answer to a guess never depends on what it guessed
//! (outside review 31, F11).

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

use super::said::Said;
use crate::app::App;
use crate::auth::Caller;

/// The routes whose answers are the sandbox's own data (a command's
/// output, a file, a review's patches, its events) or documents about no
/// sandbox (the API's description), never rewritten. Every other JSON
/// answer to a token holder is looked through for sandbox descriptions
/// by their shape (see [`describes_a_sandbox`]), whatever route wrote
/// it: a new route that answers with a sandbox is covered without being
/// listed.
const NOT_DESCRIBING: &[&str] = &[
    "/v1/openapi.json",
    "/v1/sandboxes/{id}/exec",
    "/v1/sandboxes/{id}/execs",
    "/v1/sandboxes/{id}/execs/{exec}",
    "/v1/sandboxes/{id}/execs/{exec}/output",
    "/v1/sandboxes/{id}/files",
    "/v1/sandboxes/{id}/files/list",
    "/v1/sandboxes/{id}/changes",
    "/v1/sandboxes/{id}/events",
    "/v1/sandboxes/{id}/desktop/screenshot",
    "/v1/sandboxes/{id}/desktop/cdp/json/version",
    "/v1/sandboxes/{id}/desktop/cdp/json/version/",
];

/// What stands in for warden's state directory in text shown to a token
/// holder (an error's message, a degraded layer's reason).
const STATE_DIR: &str = "(warden's state directory)";

/// Paths that are the host's on every host, and what stands in for them.
const HOST_ONLY: &[(&str, &str)] = &[
    ("/sys/fs/cgroup", "(the sandbox's cgroup)"),
    ("/proc/", "(a path on the daemon's host)"),
];

/// Largest answer rewritten; a larger one is refused rather than shown
/// whole (a list of this size is far beyond any daemon's sandboxes).
const LIMIT: usize = 64 << 20;

/// The layer: a token holder's answers, with host paths taken out.
pub async fn layer(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    // Only the owner is shown everything: a token holder, and nobody (a
    // public route's visitor, which has no caller), are not.
    let holder = !matches!(req.extensions().get::<Caller>(), Some(Caller::Owner));
    if !holder {
        return next.run(req).await;
    }
    let describing = req
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|m| !NOT_DESCRIBING.contains(&m.as_str()));
    let hidden = hidden_from_callers(&app);
    let (said, req) = match Said::of(req, app.limits.body_bytes).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let said = said.only(|s| hidden.touches(s));
    let response = next.run(req).await;
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    let refusal = response.status().is_client_error() || response.status().is_server_error();
    if !json || !(describing || refusal) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, LIMIT).await else {
        return crate::error::ApiError::internal("the answer was too large to show")
            .into_response();
    };
    let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
        parts.headers.remove(CONTENT_LENGTH);
        return Response::from_parts(parts, bytes.into());
    };
    if describing && !refusal {
        // A description alone, a list of them, or lists of them in an
        // object (`{"sandboxes": [...]}`, a fork's answer).
        let one_level = |v: &mut Value| match v {
            Value::Array(list) => list.iter_mut().for_each(sandbox_info),
            other => sandbox_info(other),
        };
        one_level(&mut value);
        if let Value::Object(map) = &mut value {
            map.values_mut().for_each(one_level);
        }
    }
    scrub_all(&mut value, &hidden, said.strings());
    let text = serde_json::to_vec(&value).unwrap_or_default();
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, text.into())
}

/// A sandbox's description as a token holder sees it: no workspace path
/// on the host, and no profile named by its file.
fn sandbox_info(info: &mut Value) {
    if !describes_a_sandbox(info) {
        return;
    }
    let Some(map) = info.as_object_mut() else {
        return;
    };
    if let Some(w) = map.get_mut("workspace") {
        *w = Value::String(String::new());
    }
    if map
        .get("profile")
        .and_then(Value::as_str)
        .is_some_and(|p| p.contains('/'))
    {
        map.insert("profile".into(), Value::Null);
    }
}

/// Whether `v` is a sandbox's description
/// ([`SandboxInfo`](crate::api::SandboxInfo)): its id, state and workspace.
fn describes_a_sandbox(v: &Value) -> bool {
    v.as_object().is_some_and(|m| {
        ["id", "state", "workspace"]
            .iter()
            .all(|k| m.contains_key(*k))
    })
}

/// The host paths of the daemon's own that no caller is shown: its state
/// directory, the owner's catalogue of profiles, the warden executable
/// (and, whatever the host, its cgroup tree and its processes'
/// descriptors: [`HOST_ONLY`]).
pub fn hidden_from_callers(app: &App) -> Hidden {
    let mut hidden = Hidden::new().path(&app.state_dir, STATE_DIR);
    if let Some(dir) = &app.catalog.config_dir {
        hidden = hidden.path(dir, "(the owner's configuration)");
    }
    // The directories a token's workspaces may be made under, and the
    // VM backend's own (its kernel, images and saved VMs), wherever the
    // owner put them.
    for root in &app.workspace_roots {
        hidden = hidden.path(root, "(a workspace root of the daemon's host)");
    }
    if let Some(dir) = warden_vm::kernel::vm_dir() {
        hidden = hidden.path(&dir, "(warden's VM directory)");
    }
    hidden.path(&app.exe, "(warden's executable)")
}

/// A lifecycle call's error after a create (a start, a resume, a fork, a
/// copy from a snapshot, a snapshot) as `caller` sees it. The owner sees
/// it whole. A token holder always gets its status, class, reason code
/// and field; its words only when they are not the host's: a failure of
/// the daemon's (5xx), a refusal the host's side made (a supervisor's, a
/// share's: a code of [`CODES`], or a supervisor's without one), and any
/// text that names one of the
/// owner's paths that [`layer`] does not hide by name (the sandbox's
/// workspace and shares, which may lie anywhere on the host) are said
/// as what failed, with its code, and that the daemon's owner sees why
/// in its log, where they are written whole.
///
/// [`CODES`]: warden_runtime::lifecycle::refusal::CODES
pub fn lifecycle_error(
    caller: &Caller,
    sb: Option<&warden_workspace::Sandbox>,
    id: &str,
    doing: &str,
    mut e: crate::error::ApiError,
) -> crate::error::ApiError {
    if matches!(caller, Caller::Owner) {
        return e;
    }
    let message = &e.problem.message;
    let coded = e
        .problem
        .reason
        .as_deref()
        .is_some_and(|r| warden_runtime::lifecycle::refusal::CODES.contains(&r))
        // Worded by its code already: names no path.
        && !message.starts_with(&format!("sandbox {id} is not started: "));
    // A supervisor's refusal without a code: its own words.
    let uncoded = e.problem.code == "refused" && e.problem.reason.is_none();
    let from_host = coded || uncoded;
    let names_a_path = sb.is_some_and(|sb| {
        owners_paths(sb)
            .iter()
            .any(|p| message.contains(p.to_string_lossy().trim_end_matches('/')))
    });
    if !(e.status.is_server_error() || from_host || names_a_path) {
        return e;
    }
    tracing::warn!(sandbox = id, error = %message, "a token holder's {doing} failed; it is told the code only");
    let code = e.problem.reason.as_deref().unwrap_or(&e.problem.code);
    let at = e
        .problem
        .field
        .as_deref()
        .map(|f| format!(" at {f}"))
        .unwrap_or_default();
    e.problem.message = format!(
        "sandbox {id}: {doing} failed ({code}{at}); the daemon's owner sees why in its log"
    );
    e.problem.details = None;
    e
}

/// The owner's host paths a sandbox is made of, which may lie anywhere on
/// the host: its workspace, its shares, its root tree.
fn owners_paths(sb: &warden_workspace::Sandbox) -> Vec<std::path::PathBuf> {
    let mut out = vec![sb.meta().workspace.clone()];
    if let Some(spec) = warden_runtime::state::stored_spec(sb.dir()) {
        out.extend(spec.filesystem.binds.into_iter().map(|b| b.path));
        out.extend(spec.filesystem.rootfs);
        out.extend(spec.filesystem.workspace);
    }
    // The root hides nothing, and names every path.
    out.retain(|p| p.as_os_str().len() > 1);
    out
}

/// A problem's text as a caller (not the owner) may see it, the words
/// it sent (`said`) as it sent them: the one function the messages of
/// long-lived sessions (a terminal's error) go through, as the layer's
/// JSON refusals do.
pub fn for_caller(app: &App, text: &str, said: &[String]) -> String {
    hidden_from_callers(app).text_said(text, said)
}

/// Host paths a token holder is told of by name only, longest first (a
/// workspace inside the state directory is said as the workspace).
#[derive(Debug, Default)]
pub struct Hidden(Vec<(String, &'static str)>);

impl Hidden {
    pub fn new() -> Hidden {
        Hidden::default()
    }

    /// Hide `path` behind `name` (the root and an empty path hide nothing).
    pub fn path(mut self, path: &Path, name: &'static str) -> Hidden {
        let p = path.to_string_lossy().trim_end_matches('/').to_string();
        if !p.is_empty() {
            self.0.push((p, name));
            self.0.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        }
        self
    }

    /// Whether `s` names one of the hidden paths (so that saying it back
    /// as it is differs from the scrub's words).
    pub fn touches(&self, s: &str) -> bool {
        self.0.iter().any(|(p, _)| s.contains(p.as_str()))
    }

    #[cfg(test)]
    fn text(&self, s: &str) -> String {
        self.text_said(s, &[])
    }

    /// `s` with each hidden path said by its name, except where it lies
    /// inside words the caller sent (`said`, as sent or quoted), which
    /// come back as they came: the caller knew them, and a rewrite of
    /// them would tell it whether they named the host.
    fn text_said(&self, s: &str, said: &[String]) -> String {
        let mut kept: Vec<(usize, usize)> = Vec::new();
        for c in said {
            for form in spellings(c) {
                kept.extend(
                    s.match_indices(form.as_str())
                        .map(|(at, m)| (at, at + m.len())),
                );
            }
        }
        // Longest path first: a workspace inside the state directory is
        // said as the workspace.
        let mut cuts: Vec<(usize, usize, &str)> = Vec::new();
        for (path, name) in &self.0 {
            for (at, m) in s.match_indices(path.as_str()) {
                let end = at + m.len();
                let theirs = kept.iter().any(|&(a, b)| a <= at && end <= b);
                let cut = cuts.iter().any(|&(a, b, _)| at < b && a < end);
                if !theirs && !cut {
                    cuts.push((at, end, name));
                }
            }
        }
        cuts.sort_unstable();
        let mut out = String::with_capacity(s.len());
        let mut from = 0;
        for (at, end, name) in cuts {
            out.push_str(&s[from..at]);
            out.push_str(name);
            from = end;
        }
        out.push_str(&s[from..]);
        // Paths that are the host's whatever the daemon's configuration:
        // its cgroup tree, and the daemon's own processes' descriptors
        // (`/proc/self/fd/9/upper/...` names a sandbox's layer through a
        // descriptor of the daemon's, and `/proc/PID/...` the daemon).
        for (prefix, name) in HOST_ONLY {
            let mut from = 0;
            while let Some(found) = out[from..].find(prefix) {
                let at = from + found;
                let rest = &out[at + prefix.len()..];
                let of_a_process = *prefix != "/proc/"
                    || rest.starts_with(|c: char| c.is_ascii_digit())
                    || rest.starts_with("self")
                    || rest.starts_with("thread-self");
                if !of_a_process {
                    from = at + prefix.len();
                    continue;
                }
                let mut end = out[at..]
                    .find(|c: char| c.is_whitespace() || c == '"' || c == ')' || c == ',')
                    .map_or(out.len(), |n| at + n);
                // A path said before its error (`PATH: why`).
                if out[..end].ends_with(':') {
                    end -= 1;
                }
                out.replace_range(at..end, name);
                from = at + name.len();
            }
        }
        out
    }
}

/// How an answer may say a string the caller sent: as sent, quoted by
/// Rust's `{:?}` (a message's `workspace "..."`), or escaped as in JSON.
fn spellings(c: &str) -> Vec<String> {
    let mut out = vec![c.to_string()];
    let debug = format!("{c:?}");
    out.push(debug[1..debug.len() - 1].to_string());
    if let Ok(json) = serde_json::to_string(c) {
        out.push(json[1..json.len() - 1].to_string());
    }
    out.dedup();
    out
}

/// Keys whose values are the caller's own words wherever they appear:
/// a sandbox's labels (the E2B door's `metadata`), set by the caller
/// and read back by it, never the host's.
const OWN_WORDS: &[&str] = &["labels", "metadata"];

fn scrub_all(value: &mut Value, hidden: &Hidden, said: &[String]) {
    match value {
        Value::String(s) => {
            let shown = hidden.text_said(s, said);
            if shown != *s {
                *s = shown;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| scrub_all(v, hidden, said)),
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if OWN_WORDS.contains(&k.as_str()) && v.is_object() {
                    continue;
                }
                scrub_all(v, hidden, said);
            }
        }
        _ => {}
    }
}

/// The fields of an event that are the sandbox's or its caller's words:
/// a command's argv (`exec_started`, `created`), a program refused inside
/// (`exec_refused`), the files of a workspace or volume event, by their
/// paths inside it.
const THEIRS_IN_EVENTS: &[&str] = &["argv", "command", "program", "paths"];

/// One event of a sandbox's log (a JSON line) as a token holder sees it:
/// its creation without the workspace's host path and its cgroup, its
/// start without the host PID of its init, and no
/// string naming a hidden host path (the state directory, the workspace
/// on the host) or the host's cgroup tree, in any
/// event (a workspace event's detail, a degraded layer's reason). A line
/// that is not JSON is not shown (the stream sends only lines it could
/// read as events).
pub fn event_line(line: &str, hidden: &Hidden) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(line) else {
        return String::new();
    };
    if let Some(map) = value.as_object_mut() {
        match map.get("event").and_then(Value::as_str) {
            Some("created") => {
                map.remove("workspace");
                map.remove("cgroup");
            }
            // The supervisor's init as the host numbers it: a host fact
            // (which process to signal, to look up in the host's /proc),
            // never the sandbox's. An exec's `pid` is the sandbox's own
            // (its init's PID namespace) and stays.
            Some("started") => {
                map.remove("pid");
            }
            _ => {}
        }
        // Where an allowed connection went (`to ADDR`, then what else the
        // proxy says) is the owner's: a pinned name's address is the
        // owner's pin, which refusals keep from the sandbox as well.
        let event = map.get("event").and_then(Value::as_str);
        if matches!(event, Some("connection" | "connection_closed")) {
            if let Some(Value::String(detail)) = map.get_mut("detail") {
                if let Some(rest) = detail.strip_prefix("to ") {
                    let tail = rest.find([',', ';']).map_or("", |i| &rest[i..]);
                    *detail = format!("to (the upstream's address){tail}");
                }
            }
        }
    }
    // What the sandbox or its caller said, the commands run and the
    // programs and files named inside it, is theirs, and comes back as
    // it was (a rewrite would tell a guess of the owner's paths from
    // another): the rest of an event is the host's words, and scrubbed.
    let theirs: Vec<(String, Value)> = value
        .as_object_mut()
        .map(|map| {
            THEIRS_IN_EVENTS
                .iter()
                .filter_map(|k| map.remove(*k).map(|v| (k.to_string(), v)))
                .collect()
        })
        .unwrap_or_default();
    scrub_all(&mut value, hidden, &[]);
    if let Some(map) = value.as_object_mut() {
        map.extend(theirs);
    }
    serde_json::to_string(&value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a_token() -> Caller {
        Caller::Token(crate::db::TokenRow {
            id: "t1".into(),
            name: "agent".into(),
            hash: String::new(),
            scopes: vec![],
            sandbox: None,
            created_ms: 0,
            revoked: false,
            max_sandboxes: None,
            max_memory: None,
            max_pids: None,
            sandbox_uid: None,
        })
    }

    #[test]
    fn a_lifecycle_error_in_the_hosts_words_is_told_a_token_by_its_code_only() {
        use crate::error::ApiError;
        let share = || {
            ApiError::conflict("`filesystem.read_write` /home/o/q goes through a symbolic link")
                .with_reason(Some("share_link"))
                .with_field(Some("/spec/filesystem/read_write/1"))
        };
        let told = lifecycle_error(&a_token(), None, "v", "its resume", share());
        assert_eq!(told.status, axum::http::StatusCode::CONFLICT);
        assert_eq!(told.problem.reason.as_deref(), Some("share_link"));
        assert_eq!(
            told.problem.field.as_deref(),
            Some("/spec/filesystem/read_write/1")
        );
        assert!(
            !told.problem.message.contains("/home/o"),
            "{}",
            told.problem.message
        );
        assert!(
            told.problem
                .message
                .contains("(share_link at /spec/filesystem/read_write/1)"),
            "{}",
            told.problem.message
        );
        let failed = ApiError::internal("cannot read /srv/elsewhere/x: denied");
        let told = lifecycle_error(&a_token(), None, "v", "its fork", failed);
        assert!(
            !told.problem.message.contains("/srv"),
            "{}",
            told.problem.message
        );
        // The owner is told everything; a refusal in warden's own words
        // is told a token as it is.
        let owner = lifecycle_error(&Caller::Owner, None, "v", "its resume", share());
        assert!(owner.problem.message.contains("/home/o/q"));
        let said = ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "refused",
            "cannot open /srv/owner/key",
        );
        let told = lifecycle_error(&a_token(), None, "v", "its start", said);
        assert!(
            !told.problem.message.contains("/srv"),
            "{}",
            told.problem.message
        );
        let plain = ApiError::conflict("sandbox v is not paused");
        let told = lifecycle_error(&a_token(), None, "v", "its resume", plain);
        assert_eq!(told.problem.message, "sandbox v is not paused");
    }

    #[test]
    fn a_callers_own_words_come_back_as_sent_and_the_hosts_are_still_scrubbed() {
        let hidden = Hidden::new().path(Path::new("/home/o/.local/state/warden"), STATE_DIR);
        let right = "/home/o/.local/state/warden/x".to_string();
        let wrong = "/home/p/.local/state/warden/x".to_string();
        // Said back, quoted or not: as sent, whether it names the host or not.
        for guess in [&right, &wrong] {
            let said = std::slice::from_ref(guess);
            let quoted = format!("workspace {guess:?} is not one");
            assert_eq!(hidden.text_said(&quoted, said), quoted);
            assert_eq!(hidden.text_said(guess, said), *guess);
        }
        // The host's words beside them are still scrubbed.
        let both = format!("{right} and cannot open /home/o/.local/state/warden/sandboxes/a");
        assert_eq!(
            hidden.text_said(&both, std::slice::from_ref(&right)),
            format!("{right} and cannot open {STATE_DIR}/sandboxes/a")
        );
        // Words that hold only part of a hidden path shield none of it.
        let said = [
            "o/.local".to_string(),
            "/home/o/.local/state/ward".to_string(),
        ];
        assert_eq!(
            hidden.text_said("cannot open /home/o/.local/state/warden/y", &said),
            format!("cannot open {STATE_DIR}/y")
        );
        // An event's command is the sandbox's; its host words are not.
        let line = format!(r#"{{"event":"exec_started","argv":["cat","{right}"],"pid":7}}"#);
        assert!(event_line(&line, &hidden).contains(&right));
        let line = r#"{"event":"degraded","layer":"x","lost":"cannot open /home/o/.local/state/warden/y"}"#;
        assert!(!event_line(line, &hidden).contains("/home/o"));
        // Labels read back as set.
        let mut v = serde_json::json!({"labels": {"a": right.clone()}, "message": right.clone()});
        scrub_all(&mut v, &hidden, &[]);
        assert_eq!(v["labels"]["a"], right.as_str());
        assert_eq!(v["message"], format!("{STATE_DIR}/x"));
    }

    #[test]
    fn a_token_holder_is_not_shown_where_an_allowed_connection_went() {
        let hidden = Hidden::new();
        let line = r#"{"event":"connection","name":"up.test","allowed":true,"detail":"to 127.0.0.1:18080, TLS terminated"}"#;
        let shown = event_line(line, &hidden);
        assert!(!shown.contains("127.0.0.1"), "{shown}");
        assert!(
            shown.contains(r#""detail":"to (the upstream's address), TLS terminated""#),
            "{shown}"
        );
        let line = r#"{"event":"connection_closed","detail":"to [::1]:80; cut: up.test was removed from the allowlist"}"#;
        let shown = event_line(line, &hidden);
        assert!(!shown.contains("::1"), "{shown}");
        assert!(shown.contains("; cut: up.test"), "{shown}");
    }

    #[test]
    fn a_path_through_the_daemons_descriptors_or_processes_is_never_shown() {
        let hidden = Hidden::new().path(Path::new("/var/lib/warden"), STATE_DIR);
        let said = hidden.text(
            "cannot read /proc/self/fd/9/upper/d/root/.bashrc: Permission denied (and /proc/4242/root/etc)",
        );
        assert!(!said.contains("/proc/"), "{said}");
        assert!(!said.contains(".bashrc"), "{said}");
        assert!(
            said.ends_with(": Permission denied (and (a path on the daemon's host))"),
            "{said}"
        );
        // A sandbox's own /proc, said without a process, is not the host's.
        assert_eq!(hidden.text("see /proc/meminfo"), "see /proc/meminfo");
    }

    #[test]
    fn a_token_holder_sees_no_workspace_path_and_no_profile_file() {
        let mut list = serde_json::json!({"sandboxes": [
            {"id": "a", "state": "running", "workspace": "/var/lib/warden/workspaces/a", "profile": "/home/o/p.yaml"},
            {"id": "b", "state": "stopped", "workspace": "/srv/projects/b", "profile": "python"},
            {"id": "c", "workspace": "/srv/not-a-sandbox"}
        ]});
        for info in list["sandboxes"].as_array_mut().unwrap() {
            sandbox_info(info);
        }
        assert_eq!(list["sandboxes"][0]["workspace"], "");
        assert_eq!(list["sandboxes"][0]["profile"], Value::Null);
        assert_eq!(list["sandboxes"][1]["workspace"], "");
        assert_eq!(list["sandboxes"][1]["profile"], "python");
        // Only a sandbox's description is rewritten, found by its shape.
        assert_eq!(list["sandboxes"][2]["workspace"], "/srv/not-a-sandbox");
    }

    #[test]
    fn an_event_shown_to_a_token_holder_names_no_host_path() {
        let hidden = Hidden::new()
            .path(Path::new("/var/lib/warden"), STATE_DIR)
            .path(Path::new("/home/o/secret-project"), "(the workspace)")
            .path(Path::new("/home/o/"), "(the daemon's home)");
        let created = r#"{"ts_ms":1,"sandbox":"a","event":"created","command":["sh"],"workspace":"/var/lib/warden/workspaces/a","rootless":false,"cgroup":"/sys/fs/cgroup/warden/a"}"#;
        let shown = event_line(created, &hidden);
        assert!(!shown.contains("/var/lib/warden"), "{shown}");
        assert!(!shown.contains("cgroup"), "{shown}");
        assert!(shown.contains("\"command\":[\"sh\"]"), "{shown}");
        let degraded = r#"{"ts_ms":2,"event":"degraded","layer":"x","lost":"cannot open /var/lib/warden/sandboxes/a/y nor /sys/fs/cgroup/memory/warden/a, so"}"#;
        let shown = event_line(degraded, &hidden);
        assert!(!shown.contains("/var/lib/warden"), "{shown}");
        assert!(!shown.contains("/sys/fs/cgroup"), "{shown}");
        assert!(shown.contains("sandboxes/a/y"), "{shown}");
        assert!(shown.contains("(the sandbox's cgroup), so"), "{shown}");
        let started = r#"{"ts_ms":2,"sandbox":"a","event":"started","pid":24990}"#;
        let shown = event_line(started, &hidden);
        assert!(!shown.contains("pid"), "{shown}");
        assert!(!shown.contains("24990"), "{shown}");
        assert!(shown.contains(r#""event":"started""#), "{shown}");
        let exec =
            r#"{"ts_ms":2,"event":"exec_started","exec":1,"argv":["sh"],"pid":7,"tty":false}"#;
        assert!(event_line(exec, &hidden).contains(r#""pid":7"#));
        let workspace = r#"{"ts_ms":3,"event":"workspace","action":"create","detail":"workspace /home/o/secret-project"}"#;
        let shown = event_line(workspace, &hidden);
        assert!(!shown.contains("/home/o"), "{shown}");
        assert!(shown.contains("workspace (the workspace)"), "{shown}");
    }
}

//! What the API answers when it cannot do what was asked: a JSON problem
//! object with a stable `code`, a message a person can act on, and, when
//! one option is at fault, its JSON path in the request body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use warden_runtime::lifecycle::LifecycleError;
use warden_runtime::resolve::ResolveError;

pub use warden_api::Problem;

/// An error answer: a status and its problem.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// Boxed: an `ApiError` is the `Err` of most of the daemon's results,
    /// which stay small.
    pub problem: Box<Problem>,
    /// Seconds the caller is told to wait before asking again
    /// (`Retry-After`), for a refusal that passes by itself.
    pub retry_after: Option<u64>,
}

/// The reason of [`ApiError::not_running`], which the E2B door's own
/// answer for a sandbox kept stopped carries too.
pub const NOT_RUNNING: &str = "not_running";

/// What a caller refused as [`ApiError::busy`], or past the daemon's
/// bound of sessions for all tokens together, is told to wait: a place
/// comes back the moment any command of the sandbox (any session) ends,
/// which no one can tell in advance, and asking again costs one refusal
/// answered at once.
pub const BUSY_RETRY_AFTER: u64 = 1;

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            problem: Box::new(Problem {
                code: code.to_string(),
                message: worded(&message.into()),
                field: None,
                reason: None,
                details: None,
            }),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 409 `conflict` with reason `not_running`: what needs the
    /// sandbox's processes, asked of a sandbox that is stopped. The
    /// reason tells it from the other conflicts (a name in use, a command
    /// that has ended, ...): a start passes it.
    pub fn not_running(message: impl Into<String>) -> ApiError {
        ApiError::conflict(message).with_reason(Some(NOT_RUNNING))
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// A supervisor call's failure that its route does not word itself:
    /// a supervisor that did not answer (stopped or stuck) is 503
    /// `not_answering`, one whose every connection is held is
    /// [`ApiError::busy`], anything else internal.
    pub fn supervisor(e: &warden_runtime::client::ClientError) -> ApiError {
        match e {
            warden_runtime::client::ClientError::NotAnswering { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_answering", chain(e))
            }
            e if e.is_busy() => ApiError::busy(&e.to_string()),
            _ => ApiError::internal(chain(e)),
        }
    }

    /// A sandbox's supervisor serves every connection it may at once
    /// (each running command holds one), so nothing was started: 429
    /// `too_many_sessions`, reason `busy`, the bound named as the
    /// ledger's are (`per_sandbox`), and `Retry-After`. 429 rather than
    /// 503: the daemon and the sandbox are up and serve everything else;
    /// what is full is one sandbox's share, filled by its own commands,
    /// and it frees itself when one of them ends (and 503 is already
    /// `not_answering`, a supervisor that is stuck, which waiting does
    /// not cure).
    /// `refusal` is the supervisor's own words.
    pub fn busy(refusal: &str) -> ApiError {
        let mut a = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_sessions",
            format!(
                "{refusal}: nothing was started; ask again once one of its commands ends (Retry-After), or end one (POST .../execs/{{exec}}/signal)"
            ),
        )
        .with_reason(Some("busy"))
        .with_details(serde_json::json!({ "bound": "per_sandbox" }));
        a.retry_after = Some(BUSY_RETRY_AFTER);
        a
    }

    pub fn with_details(mut self, details: serde_json::Value) -> ApiError {
        self.problem.details = Some(details);
        self
    }

    pub fn with_field(mut self, field: Option<&str>) -> ApiError {
        self.problem.field = field.map(str::to_string);
        self
    }

    /// The problem's reason code below its class.
    pub fn with_reason(mut self, reason: Option<&str>) -> ApiError {
        self.problem.reason = reason.map(str::to_string);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(*self.problem)).into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}

/// Where `field` is in a create request's body: its JSON pointer in the
/// `spec` document (`/spec/resources/memory`), from the field table.
pub fn spec_pointer(field: warden_policy::Field) -> Option<String> {
    field.json_path().map(|p| format!("/spec{p}"))
}

/// Library text as the API says it: the options it names by their
/// profile keys (`` `resources.disk` ``) become JSON pointers of a
/// request's spec (`` `/resources/disk` ``). Every problem's message, and
/// every error text the E2B door and MCP pass on, is worded here.
pub fn worded(text: &str) -> String {
    warden_policy::word(text, warden_policy::Door::Api)
}

/// An error's message with its causes, once each, as the API words it.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    worded(&out)
}

impl From<ResolveError> for ApiError {
    fn from(e: ResolveError) -> ApiError {
        use warden_policy::compose::ComposeError;
        // A request's options are its `spec` document: errors name their
        // place in it.
        let in_spec = spec_pointer;
        let (message, field) = match &e {
            ResolveError::Compose(ComposeError::Invalid(diags)) => {
                // A refusal of the trust rule is what the caller must see
                // first, wherever it stands among the findings.
                // A finding in the request's own document is at its JSON
                // pointer; one about a field elsewhere, at the field's.
                let at = |d: &warden_policy::compose::Diagnostic| {
                    d.pointer
                        .as_ref()
                        .map(|p| format!("/spec{p}"))
                        .or_else(|| d.field.and_then(in_spec))
                };
                let field = diags
                    .iter()
                    .filter(|d| d.refusal.is_some())
                    .chain(diags)
                    .find_map(at);
                let lines: Vec<String> = diags
                    .iter()
                    .map(|d| match at(d) {
                        Some(p) => format!("{p}: {}", d.message),
                        None => d.message.clone(),
                    })
                    .collect();
                (lines.join("; "), field)
            }
            ResolveError::Spec(spec) => {
                (spec.problem().to_string(), spec.field().and_then(in_spec))
            }
            ResolveError::InProfile {
                error,
                field,
                pointer,
                ..
            } => (
                error.problem().to_string(),
                pointer
                    .as_ref()
                    .map(|p| format!("/spec{p}"))
                    .or_else(|| in_spec(*field)),
            ),
            _ => (chain(&e), e.field().and_then(in_spec)),
        };
        let message = match &field {
            Some(p) if !message.starts_with(p.as_str()) => format!("{p}: {message}"),
            _ => message,
        };
        let message = worded(&message);
        // The reason below the class, the same code the other doors'
        // refusals of the same value carry.
        let reason = match &e {
            ResolveError::Compose(c) => Some(c.code()),
            ResolveError::InProfile { error, .. } => Some(error.code()),
            ResolveError::Spec(spec) => Some(spec.code()),
            ResolveError::OverlayWithoutWorkspace => {
                Some(warden_policy::Problem::OverlayWithoutWorkspace.code())
            }
            ResolveError::NoOtlp => Some("no_otlp"),
            _ => None,
        };
        // The trust rule's refusals are the caller's rights, not the
        // spec's shape: 403 with the rule's own code.
        let (status, code) = match &e {
            ResolveError::Compose(c) => match c.refusal() {
                Some(r) => (StatusCode::FORBIDDEN, r.code()),
                None => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_spec"),
            },
            _ => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_spec"),
        };
        ApiError {
            status,
            problem: Box::new(Problem {
                code: code.into(),
                message,
                field,
                reason: reason.map(str::to_string),
                details: None,
            }),
            retry_after: None,
        }
    }
}

impl From<LifecycleError> for ApiError {
    fn from(e: LifecycleError) -> ApiError {
        use warden_workspace::StoreError;
        let store_code = match &e {
            LifecycleError::Store(s) => s.code(),
            _ => None,
        };
        match e {
            LifecycleError::Resolve(r) => (*r).into(),
            // The store's own words are the command line's: its refusals
            // are worded here by their code, for the API.
            LifecycleError::Store(StoreError::NotFound(name)) => {
                ApiError::not_found(format!("no sandbox {name:?}: GET /v1/sandboxes lists them"))
                    .with_reason(store_code)
            }
            // The same words whoever holds the name (another caller's
            // sandbox, a pooled one, the caller's own): the 409 itself
            // says the name is in use, and nothing more is told.
            LifecycleError::Store(StoreError::Exists(name)) => ApiError::conflict(format!(
                "the name {name:?} is taken: choose another name"
            ))
            .with_field(Some("/name"))
            .with_reason(store_code),
            LifecycleError::Store(StoreError::InvalidName { .. }) => {
                ApiError::bad_request(chain(&e)).with_field(Some("/name"))
            }
            // No host PID: the caller is told what to do, not the process.
            LifecycleError::Store(StoreError::InUse { name, .. }) => ApiError::conflict(format!(
                "sandbox {name} is in use: wait for its command to end, or stop it (POST /v1/sandboxes/{name}/stop)"
            ))
            .with_reason(store_code),
            LifecycleError::Store(StoreError::Workspace { .. } | StoreError::NotADirectory(_)) => {
                ApiError::bad_request(chain(&e)).with_field(Some("/workspace"))
            }
            LifecycleError::Running { .. } => ApiError::conflict(chain(&e)),
            // Its reason code as every door has it; a start and a stop
            // save nothing more, so the answer says what they would do.
            LifecycleError::ChangesLost { .. } => {
                let mut a = ApiError::conflict(format!(
                    "{}; a start and a stop of it make what it saved its state, to copy that",
                    chain(&e)
                ));
                a.problem.reason = e.reason().map(str::to_string);
                a
            }
            LifecycleError::Refused(_) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "refused", chain(&e))
            }
            // The supervisor's reason code, at its field's pointer in the
            // spec (`/spec/secrets/NAME`).
            LifecycleError::SupervisorRefused { ref refusal, .. } => {
                let pointer = refusal.json_pointer().map(|p| format!("/spec{p}"));
                let code = refusal.code;
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "refused", chain(&e))
                    .with_reason(Some(code))
                    .with_field(pointer.as_deref())
            }
            // Worded by its reason code; the message names no host path.
            LifecycleError::Workspace { name, refused } => {
                use warden_workspace::WorkspaceRefused;
                let why = match &refused {
                    WorkspaceRefused::Moved { .. } => "its workspace on the daemon's host is not the directory the sandbox was made over (it was moved or replaced since), and warden does not run a sandbox over another directory; the daemon's owner puts the sandbox's directory back at its path",
                    WorkspaceRefused::ThroughLink { .. } => "the path of its workspace on the daemon's host goes through a symbolic link, which could lead the sandbox to another directory; the daemon's owner puts the directory itself back at that path",
                };
                ApiError::new(
                    StatusCode::CONFLICT,
                    refused.code(),
                    format!("sandbox {name} is not started: {why}"),
                )
                .with_reason(Some(refused.code()))
            }
            _ => ApiError::internal(chain(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_policy::{Field, Problem};

    #[test]
    fn a_problem_names_other_options_by_their_json_pointers() {
        let e = ApiError::conflict("made without `egress.domains` or `egress.ask`");
        assert_eq!(
            e.problem.message,
            "made without `/egress/domains` or `/egress/ask`"
        );
        let e: ApiError =
            ResolveError::Spec(Field::Overlay.invalid(Problem::OverlayWithoutWorkspace)).into();
        assert_eq!(e.problem.field.as_deref(), Some("/spec/filesystem/mode"));
        assert_eq!(
            e.problem.message,
            "/spec/filesystem/mode: needs a `/filesystem/workspace` to lay the overlay over"
        );
    }
}

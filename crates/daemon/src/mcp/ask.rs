//! Ask mode through MCP: a sandbox's question put to the person as an
//! elicitation request.

use axum::http::Method;
use rmcp::service::RoleServer;
use rmcp::Peer;
use std::collections::HashSet;
use std::time::Duration;
use warden_workspace::printable_name;

use super::inner::{enc, Identity, Refused, Send};
use super::Session;

impl Session {
    /// Put the ask-mode questions of sandbox `id` to the client as they
    /// come; a client that cannot take elicitation requests gets them
    /// denied at once, and the model is told why.
    ///
    /// A caller whose token may make sandboxes but not answer approvals
    /// (no `approvals` scope) is never asked: the answer would not be
    /// its to give. Its sandbox's questions wait where whoever may answer
    /// sees them (the owner's dashboard, `warden egress`, a token with
    /// that scope), and the model is told of each that it waits for an
    /// approval this caller cannot give ([`Session::tell_of_questions`]).
    pub(super) fn watch_questions(
        &self,
        id: String,
        who: Identity,
        peer: Peer<RoleServer>,
    ) -> tokio::task::JoinHandle<()> {
        // The watcher does not keep the session alive: when the session
        // ends (and with it the last strong reference), so does it.
        let weak = std::sync::Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            let mut seen: HashSet<String> = HashSet::new();
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                let session = Session { shared };
                let list = match session.questions(&who, &id).await {
                    Ok(l) => l,
                    Err(e) if e.status == 404 => return,
                    Err(e) if e.status == 403 => {
                        drop(session);
                        Session::tell_of_questions(weak, id, e.message).await;
                        return;
                    }
                    Err(e) => {
                        session.note(format!(
                            "ask-mode questions of sandbox {id} cannot be answered: {} (they are denied when they time out)",
                            e.message
                        ));
                        return;
                    }
                };
                for q in list.approvals {
                    if !seen.insert(q.id.clone()) {
                        continue;
                    }
                    let decision = ask_person(&peer, &q).await;
                    let (decision, note) = match decision {
                        Ok(d) => (d, None),
                        Err(why) => (crate::api::Decision::Deny, Some(why)),
                    };
                    let body = serde_json::json!({ "decision": decision });
                    let answered = session
                        .api()
                        .call(
                            &who,
                            Method::POST,
                            &format!("/v1/approvals/{}", enc(&q.id)),
                            Send::Json(body),
                            1 << 16,
                        )
                        .await;
                    let target = target_of(&q);
                    match (answered, note) {
                        (Ok(_), Some(why)) => session.note(format!(
                            "sandbox {id} asked to {target}; it was denied: {why}"
                        )),
                        (Ok(_), None) => session.note(format!(
                            "sandbox {id} asked to {target}; the person answered {}",
                            serde_json::to_value(decision)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_string))
                                .unwrap_or_default()
                        )),
                        (Err(e), _) => session.note(format!(
                            "sandbox {id} asked to {target}; the answer was not taken: {}",
                            e.message
                        )),
                    }
                }
            }
        })
    }

    /// The questions of sandbox `id` that wait now, as `who` may see them.
    async fn questions(
        &self,
        who: &Identity,
        id: &str,
    ) -> Result<crate::api::ApprovalList, Refused> {
        self.api()
            .json(
                who,
                Method::GET,
                &format!("/v1/approvals?sandbox={}", enc(id)),
                Send::None,
            )
            .await
    }

    /// For a caller that may not answer approvals: tell the model of each
    /// question sandbox `id` (one this session made) puts, and that it
    /// waits for someone who may answer. The questions are read as the
    /// owner, of this one sandbox only, and never answered here: the
    /// caller learns what its own sandbox asked, nothing of any other.
    async fn tell_of_questions(weak: std::sync::Weak<super::Shared>, id: String, why: String) {
        let mut seen: HashSet<String> = HashSet::new();
        if let Some(shared) = weak.upgrade() {
            Session { shared }.note(format!(
                "sandbox {id} asks before it connects where its policy does not let it, and this caller may not answer its questions ({why}): each waits for whoever may answer approvals (the owner's dashboard or `warden egress`, or a token with the approvals scope), and a connection it holds waits with it until then or until the question times out (denied)"
            ));
        }
        loop {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let session = Session { shared };
            if !session.state().sandboxes.contains_key(&id) {
                return;
            }
            let list = match session.questions(&Identity::owner(), &id).await {
                Ok(l) => l,
                // Gone, or no longer readable: nothing more to tell.
                Err(_) => return,
            };
            for q in list.approvals {
                if !seen.insert(q.id.clone()) {
                    continue;
                }
                let left = q
                    .deadline_ms
                    .saturating_sub(warden_runtime::state::now_ms())
                    / 1000;
                session.note(format!(
                    "sandbox {id} asked to {}; the question waits for an approval this caller cannot give, and unanswered it is denied in {left} s",
                    target_of(&q)
                ));
            }
            drop(session);
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
}

/// What a question asks, as the model is told: a request an ask rule
/// holds is named by its line (its name is allowed already, that request
/// is asked).
fn target_of(q: &crate::api::Approval) -> String {
    let name = printable_name(&q.name);
    match &q.request {
        Some(r) => format!("send {} to {name}:{}", printable_name(r), q.port),
        None if q.protocol == warden_runtime::approvals::PROGRAM => {
            format!("run the program {name} (refused by its exec allowlist)")
        }
        None => format!("connect to {name}:{}", q.port),
    }
}

/// The question a person is shown through the client. The name, and a
/// held request's line, are the sandbox's choice: shown escaped, as every
/// door shows them, so a bidi override or a zero-width character cannot
/// make the name read as another.
fn question_text(q: &crate::api::Approval) -> String {
    let name = printable_name(&q.name);
    match &q.request {
        None if q.protocol == warden_runtime::approvals::PROGRAM => format!(
            "Sandbox {} tried to run {name}, which its exec allowlist refuses; the refusal stands in this run (a running sandbox's allowlist cannot grow). Allow it from the sandbox's next start? (\"always\" adds it to the allowlist, and only the sandbox's owner may; a single \"allow\" is answered as deny)",
            q.sandbox
        ),
        Some(r) => format!(
            "Sandbox {} wants to send {} to {name}:{}, which a request rule holds for a person's answer. Allow this request? (\"always\" keeps a rule allowing this method and path with the JSON-RPC call and query values asked about, and nothing else)",
            q.sandbox, printable_name(r), q.port
        ),
        None => format!(
            "Sandbox {} wants to connect to {name}:{} ({}), which its policy does not allow. Allow it? (\"always\" adds the name to this sandbox's allowlist)",
            q.sandbox, q.port, q.protocol
        ),
    }
}

/// Put an ask-mode question to the person through the client.
pub(super) async fn ask_person(
    peer: &Peer<RoleServer>,
    q: &crate::api::Approval,
) -> Result<crate::api::Decision, String> {
    use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
    use rmcp::service::ElicitationMode;
    if !peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return Err("this MCP client takes no elicitation requests, so nobody can be asked; ask mode's questions are denied (a person can allow the name with `warden egress` on the host)".into());
    }
    let schema = ElicitationSchema::builder()
        .required_bool("allow")
        .optional_bool("always", false)
        .build()
        .map_err(|e| format!("cannot build the question: {e}"))?;
    let message = question_text(q);
    let left = q
        .deadline_ms
        .saturating_sub(warden_runtime::state::now_ms());
    let answer = peer
        .create_elicitation_with_timeout(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            },
            Some(Duration::from_millis(left.max(1000))),
        )
        .await
        .map_err(|e| format!("the question could not be put to the client: {e}"))?;
    match answer.action {
        ElicitationAction::Accept => {
            let c = answer.content.unwrap_or_default();
            let allow = c.get("allow").and_then(|v| v.as_bool()).unwrap_or(false);
            let always = c.get("always").and_then(|v| v.as_bool()).unwrap_or(false);
            Ok(match (allow, always) {
                (true, true) => crate::api::Decision::AllowAlways,
                (true, false) => crate::api::Decision::AllowOnce,
                _ => crate::api::Decision::Deny,
            })
        }
        _ => Err("the person declined the question".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(protocol: &str, name: &str, request: Option<&str>) -> crate::api::Approval {
        crate::api::Approval {
            id: "q1".into(),
            sandbox: "sb".into(),
            protocol: protocol.into(),
            name: name.into(),
            port: 443,
            note: None,
            request: request.map(Into::into),
            asked_ms: 0,
            deadline_ms: 0,
        }
    }

    #[test]
    fn a_question_put_through_mcp_shows_the_sandbox_chosen_name_and_request_escaped() {
        for q in [
            asked("tls", "evil\u{202e}moc.elgoog", None),
            asked(
                "request",
                "api.example.com",
                Some("GET /x\u{202e}\u{200b}\u{feff}y"),
            ),
            asked(
                warden_runtime::approvals::PROGRAM,
                "/tmp/x\u{202e}di\u{2066}",
                None,
            ),
        ] {
            for shown in [question_text(&q), target_of(&q)] {
                assert!(!shown.chars().any(warden_workspace::is_format), "{shown:?}");
                assert!(shown.contains("\\u{202e}"), "{shown:?}");
            }
        }
    }
}

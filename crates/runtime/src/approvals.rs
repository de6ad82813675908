//! Ask mode without a terminal: the questions of a detached supervisor's
//! proxy, kept until someone answers them over the control protocol (the
//! daemon's `/v1/approvals`), or until their deadline passes (denied, as at
//! the terminal).
//!
//! The proxy asks from a blocking thread ([`Approvals`] is its `Asker`);
//! the question waits here with an id that no other start of the sandbox
//! gives out, is announced as an `ask` event (so a follower reacts without
//! polling), and is answered once: `allow_once` lets that connection go,
//! `allow_always` also puts the name on the sandbox's allowlist (live, and
//! kept for later starts: see [`crate::allowlist`]), `deny` refuses it. A
//! second answer, or one after the deadline, is refused as a conflict.
//! Every answer and every timeout is an `ask_answered` event.

use crate::allowlist::Allowlist;
use crate::events::Bus;
use crate::protocol::{AskDecision, PendingQuestion, Refusal, Reply};
use crate::state;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use warden_audit::EventKind;
use warden_egress::ask::{Answer, Asker, Question};
use warden_policy::trust::Trust;

/// Questions waiting at once; more are denied at once (as at the terminal).
pub const MAX_WAITING: usize = crate::ask::MAX_WAITING;
/// Ids of answered questions remembered, to tell "answered already" from
/// "no such question".
const REMEMBERED: usize = 1024;

struct Waiting {
    question: PendingQuestion,
    /// The answer, and the trust of whoever gave it.
    answer: Option<(AskDecision, Trust)>,
}

#[derive(Default)]
struct Desk {
    waiting: BTreeMap<String, Waiting>,
    answered: VecDeque<String>,
}

impl Desk {
    fn remember(&mut self, id: String) {
        if self.answered.len() >= REMEMBERED {
            self.answered.pop_front();
        }
        self.answered.push_back(id);
    }
}

/// The questions of one sandbox's proxy, and their answers.
pub struct Approvals {
    desk: Mutex<Desk>,
    changed: Condvar,
    bus: Arc<Bus>,
    /// This start's own prefix of question ids.
    prefix: String,
    next: AtomicU64,
    timeout: Duration,
    allowlist: Arc<Allowlist>,
}

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: Refusal,
    pub message: String,
}

/// How long a question waits: two minutes, as at the terminal (a test of
/// the timeout sets its own through [`warden_policy::TestHooks`]).
fn ask_timeout() -> Duration {
    warden_policy::TestHooks::current()
        .ask_timeout
        .unwrap_or(crate::ask::ASK_TIMEOUT)
}

impl Approvals {
    pub fn new(bus: Arc<Bus>, start: &str, allowlist: Arc<Allowlist>) -> Approvals {
        Approvals {
            desk: Mutex::new(Desk::default()),
            changed: Condvar::new(),
            prefix: format!("{}.{start}", bus.sandbox()),
            bus,
            next: AtomicU64::new(1),
            timeout: ask_timeout(),
            allowlist,
        }
    }

    /// The questions waiting now, oldest first.
    pub fn pending(&self) -> Vec<PendingQuestion> {
        let Ok(desk) = self.desk.lock() else {
            return Vec::new();
        };
        let mut out: Vec<PendingQuestion> = desk
            .waiting
            .values()
            .filter(|w| w.answer.is_none())
            .map(|w| w.question.clone())
            .collect();
        out.sort_by_key(|q| q.asked_ms);
        out
    }

    /// Answer question `id`, once. A caller's allow reaches public
    /// addresses only (and its "always" goes on the list as a caller's).
    pub fn answer(
        &self,
        id: &str,
        decision: AskDecision,
        by: &str,
        trust: Trust,
    ) -> Result<(), Refused> {
        let question = {
            let mut desk = self.desk.lock().map_err(|_| Refused {
                code: Refusal::Conflict,
                message: "the supervisor's questions are unusable".into(),
            })?;
            let answered_already = desk.answered.iter().any(|a| a == id);
            match desk.waiting.get_mut(id) {
                Some(w) if w.answer.is_none() => {
                    w.answer = Some((decision, trust));
                    w.question.clone()
                }
                Some(_) => return Err(answered(id)),
                None if answered_already => return Err(answered(id)),
                None => {
                    return Err(Refused {
                        code: Refusal::NotFound,
                        message: format!(
                            "no question {id} waits in this sandbox (see GET /v1/approvals)"
                        ),
                    })
                }
            }
        };
        let answered = EventKind::AskAnswered {
            question: id.to_string(),
            name: question.name.clone(),
            port: question.port,
            decision: decision.as_str().to_string(),
            by: by.to_string(),
        };
        if decision == AskDecision::AllowAlways {
            // The grant is written by a sink: on disk before the answer
            // returns, so that the project's next sandbox, made right
            // after, is not asked again.
            self.bus.emit_written(answered);
        } else {
            self.bus.emit(answered);
        }
        // A request's name is on the list already: its answer goes to the
        // proxy alone.
        if decision == AskDecision::AllowAlways && question.request.is_none() {
            // On the list before the connection is let go: the next one
            // to the same name finds it there.
            let entry = if warden_policy::DEFAULT_PORTS.contains(&question.port) {
                question.name.clone()
            } else {
                format!("{}:{}", question.name, question.port)
            };
            let _ = self.allowlist.change(
                &[entry],
                &[],
                &format!("{by} (answering {id} allow_always)"),
                trust,
            );
        }
        self.changed.notify_all();
        Ok(())
    }
}

/// The control protocol's answer to `approvals`: none waits in a sandbox
/// that is not in ask mode.
pub fn pending_reply(approvals: Option<&Approvals>) -> Reply {
    Reply::Approvals {
        pending: approvals.map(Approvals::pending).unwrap_or_default(),
    }
}

/// The control protocol's answer to `answer`.
pub fn answer_reply(
    approvals: Option<&Approvals>,
    question: &str,
    decision: AskDecision,
    by: &str,
    trust: Trust,
) -> Reply {
    let Some(a) = approvals else {
        return Reply::Refused {
            code: Refusal::NotFound,
            message: format!("no question {question} waits: this sandbox is not in ask mode"),
            field: None,
        };
    };
    match a.answer(question, decision, by, trust) {
        Ok(()) => Reply::Ok,
        Err(r) => Reply::Refused {
            code: r.code,
            message: r.message,
            field: None,
        },
    }
}

fn answered(id: &str) -> Refused {
    Refused {
        code: Refusal::Conflict,
        message: format!("question {id} was answered already (or denied when its time ran out)"),
    }
}

impl Asker for Approvals {
    fn ask(&self, q: &Question) -> Answer {
        self.ask_trusted(q).0
    }

    fn ask_trusted(&self, q: &Question) -> (Answer, Trust) {
        let deny = (Answer::Deny, Trust::Caller);
        let Ok(mut desk) = self.desk.lock() else {
            return deny;
        };
        if desk.waiting.len() >= MAX_WAITING {
            return deny;
        }
        let id = format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let asked_ms = state::now_ms();
        let deadline = Instant::now() + self.timeout;
        let question = PendingQuestion {
            id: id.clone(),
            sandbox: self.bus.sandbox().to_string(),
            protocol: q.protocol.to_string(),
            name: q.name.clone(),
            port: q.port,
            request: q.request.as_ref().map(|r| r.line()),
            asked_ms,
            deadline_ms: asked_ms + self.timeout.as_millis() as u64,
        };
        self.bus.emit(EventKind::Ask {
            question: id.clone(),
            protocol: question.protocol.clone(),
            name: question.name.clone(),
            port: question.port,
            deadline_ms: question.deadline_ms,
        });
        desk.waiting.insert(
            id.clone(),
            Waiting {
                question,
                answer: None,
            },
        );
        loop {
            let answer = desk.waiting.get(&id).and_then(|w| w.answer);
            let now = Instant::now();
            if answer.is_some() || now >= deadline {
                desk.waiting.remove(&id);
                desk.remember(id.clone());
                drop(desk);
                return match answer {
                    Some((AskDecision::AllowOnce, trust)) => (Answer::Once, trust),
                    // Kept where the sandbox keeps "always" answers (its
                    // project's grants, or its profile): the proxy marks
                    // the decision so, and the grants sink writes it (the
                    // owner's only: a caller's is kept on the sandbox's
                    // list alone, as a caller's entry).
                    Some((AskDecision::AllowAlways, trust)) => (Answer::Always, trust),
                    Some((AskDecision::Deny, trust)) => (Answer::Deny, trust),
                    None => {
                        self.bus.emit(EventKind::AskAnswered {
                            question: id,
                            name: q.name.clone(),
                            port: q.port,
                            decision: "timeout".into(),
                            by: "nobody: its time ran out".into(),
                        });
                        deny
                    }
                };
            }
            desk = match self.changed.wait_timeout(desk, deadline - now) {
                Ok((d, _)) => d,
                Err(_) => return deny,
            };
        }
    }
}

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
//!
//! A program the exec allowlist refused is asked about here too
//! ([`Approvals::ask_program`], protocol `exec`), once per path and start.
//! Nothing waits on its answer: Landlock's rules of a running sandbox can
//! only narrow, so the refused exec stays refused (126), `allow_once` is
//! answered as `deny` (the question says so), and `allow_always`, the
//! owner's only, puts the program on the allowlist of later starts
//! ([`crate::programs`]).

use crate::allowlist::Allowlist;
use crate::events::Bus;
use crate::protocol::{AskDecision, PendingQuestion, Refusal, Reply};
use crate::state;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
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
    /// A program's question: when it is denied unanswered (nothing waits
    /// on it to time it out).
    expires: Option<Instant>,
    /// The answer, and the trust of whoever gave it.
    answer: Option<(AskDecision, Trust)>,
}

#[derive(Default)]
struct Desk {
    waiting: BTreeMap<String, Waiting>,
    answered: VecDeque<String>,
    /// Programs asked about in this start (each asked once).
    programs: BTreeSet<String>,
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
    /// Where a program's "always" is kept: the sandbox's state directory,
    /// and the project's programs' grants or the profile in use (none
    /// when a profile has no allowlist of its own).
    keep_programs: Option<(PathBuf, Option<crate::programs::Keep>)>,
}

/// What a program's question says of its answers.
pub const PROGRAM_NOTE: &str = "the program was refused and stays refused in this run (a running sandbox's allowlist cannot grow); allow_always puts it on the allowlist of the sandbox's next start and of later runs (the project's, or the profile's when answers are saved into it); allow_once is answered as deny";

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
            keep_programs: None,
        }
    }

    /// Ask about programs the exec allowlist refuses, keeping an "always"
    /// in the sandbox's state directory `dir` and where `grants` says
    /// (the project's programs' grants, or the profile in use).
    pub fn with_programs(
        mut self,
        dir: PathBuf,
        grants: Option<crate::programs::Keep>,
    ) -> Approvals {
        self.keep_programs = Some((dir, grants));
        self
    }

    /// Put a question about `program`, refused by the allowlist, on the
    /// desk, unless it was asked in this start or the desk is full.
    /// Returns at once.
    pub fn ask_program(&self, program: &str) {
        if self.keep_programs.is_none() || !crate::programs::is_program_entry(program) {
            return;
        }
        let expired = {
            let Ok(mut desk) = self.desk.lock() else {
                return;
            };
            let expired = sweep(&mut desk);
            if desk.programs.contains(program)
                || desk.programs.len() >= REMEMBERED
                || desk.waiting.len() >= MAX_WAITING
            {
                drop(desk);
                self.timed_out(expired);
                return;
            }
            desk.programs.insert(program.to_string());
            let id = format!(
                "{}-{}",
                self.prefix,
                self.next.fetch_add(1, Ordering::Relaxed)
            );
            let asked_ms = state::now_ms();
            let question = PendingQuestion {
                id: id.clone(),
                sandbox: self.bus.sandbox().to_string(),
                protocol: PROGRAM.to_string(),
                name: program.to_string(),
                port: 0,
                note: Some(PROGRAM_NOTE.to_string()),
                request: None,
                asked_ms,
                deadline_ms: asked_ms + self.timeout.as_millis() as u64,
            };
            self.bus.emit(EventKind::Ask {
                question: id.clone(),
                protocol: PROGRAM.to_string(),
                name: program.to_string(),
                port: 0,
                deadline_ms: question.deadline_ms,
            });
            desk.waiting.insert(
                id,
                Waiting {
                    question,
                    expires: Some(Instant::now() + self.timeout),
                    answer: None,
                },
            );
            expired
        };
        self.timed_out(expired);
    }

    /// Record programs' questions whose time ran out.
    fn timed_out(&self, expired: Vec<PendingQuestion>) {
        for q in expired {
            self.bus.emit(EventKind::AskAnswered {
                question: q.id,
                name: q.name,
                port: q.port,
                decision: "timeout".into(),
                by: "nobody: its time ran out".into(),
            });
        }
    }

    /// Answer a program's question (taken off the desk already).
    fn answer_program(
        &self,
        question: &PendingQuestion,
        decision: AskDecision,
        by: &str,
    ) -> Result<(), Refused> {
        let mut by = by.to_string();
        let mut decision = decision;
        if decision == AskDecision::AllowOnce {
            by.push_str(
                " (allow_once, answered as deny: a running sandbox's allowlist cannot grow)",
            );
            decision = AskDecision::Deny;
        }
        let mut kept = Ok(());
        if decision == AskDecision::AllowAlways {
            if let Some((dir, grants)) = &self.keep_programs {
                kept = crate::programs::save(dir, &question.name).and_then(|()| match grants {
                    Some(g) => g.add(&question.name).map(|_| ()),
                    None => Ok(()),
                });
            }
            if let Err(e) = &kept {
                by.push_str(&format!(
                    " (allow_always not kept, answered as deny: {})",
                    warden_jail::chain_str(e)
                ));
                decision = AskDecision::Deny;
            }
        }
        self.bus.emit_written(EventKind::AskAnswered {
            question: question.id.clone(),
            name: question.name.clone(),
            port: 0,
            decision: decision.as_str().to_string(),
            by,
        });
        kept.map_err(|e| Refused {
            code: Refusal::Conflict,
            message: format!(
                "the program {} could not be kept for later starts: {}",
                question.name,
                warden_jail::chain_str(&e)
            ),
        })
    }

    /// The questions waiting now, oldest first.
    pub fn pending(&self) -> Vec<PendingQuestion> {
        let Ok(mut desk) = self.desk.lock() else {
            return Vec::new();
        };
        let expired = sweep(&mut desk);
        let mut out: Vec<PendingQuestion> = desk
            .waiting
            .values()
            .filter(|w| w.answer.is_none())
            .map(|w| w.question.clone())
            .collect();
        out.sort_by_key(|q| q.asked_ms);
        drop(desk);
        self.timed_out(expired);
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
        let (question, expired) = {
            let mut desk = self.desk.lock().map_err(|_| Refused {
                code: Refusal::Conflict,
                message: "the supervisor's questions are unusable".into(),
            })?;
            let expired = sweep(&mut desk);
            let answered_already = desk.answered.iter().any(|a| a == id);
            let program = desk
                .waiting
                .get(id)
                .is_some_and(|w| w.expires.is_some() && w.answer.is_none());
            if program {
                // The owner's allowlist is a caller's ceiling: a caller
                // may not widen it for later starts.
                if decision == AskDecision::AllowAlways && trust == Trust::Caller {
                    return Err(Refused {
                        code: Refusal::Conflict,
                        message: format!(
                            "question {id} is about a program: only the sandbox's owner may put a program on its allowlist (answer deny, or let the owner answer)"
                        ),
                    });
                }
                let w = desk.waiting.remove(id);
                desk.remember(id.to_string());
                drop(desk);
                self.timed_out(expired);
                return match w {
                    Some(w) => self.answer_program(&w.question, decision, by),
                    None => Err(answered(id)),
                };
            }
            let question = match desk.waiting.get_mut(id) {
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
            };
            (question, expired)
        };
        self.timed_out(expired);
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
            reason: None,
        };
    };
    match a.answer(question, decision, by, trust) {
        Ok(()) => Reply::Ok,
        Err(r) => Reply::Refused {
            code: r.code,
            message: r.message,
            field: None,
            reason: None,
        },
    }
}

/// A program's question's protocol.
pub const PROGRAM: &str = "exec";

/// Take programs' questions whose time ran out off the desk.
fn sweep(desk: &mut Desk) -> Vec<PendingQuestion> {
    let now = Instant::now();
    let gone: Vec<String> = desk
        .waiting
        .iter()
        .filter(|(_, w)| w.answer.is_none() && w.expires.is_some_and(|e| now >= e))
        .map(|(id, _)| id.clone())
        .collect();
    let mut out = Vec::new();
    for id in gone {
        if let Some(w) = desk.waiting.remove(&id) {
            out.push(w.question);
        }
        desk.remember(id);
    }
    out
}

/// The jail's events, on to the bus, each refusal by the exec allowlist
/// also put to the desk as a program's question.
pub struct AskingSink<S> {
    pub inner: S,
    /// None outside ask mode: the events only pass.
    pub approvals: Option<Arc<Approvals>>,
}

impl<S: warden_audit::EventSink> warden_audit::EventSink for AskingSink<S> {
    fn emit(&mut self, event: &warden_audit::Event) {
        if let EventKind::ExecRefused {
            program: Some(p),
            by,
            ..
        } = &event.kind
        {
            if let (Some(a), "allowlist", Some(p)) = (&self.approvals, by.as_str(), p.to_str()) {
                a.ask_program(p);
            }
        }
        self.inner.emit(event);
    }

    fn failure(&self) -> Option<String> {
        self.inner.failure()
    }

    fn bytes_written(&self) -> u64 {
        self.inner.bytes_written()
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
            note: None,
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
                expires: None,
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

//! `--ask` on the terminal and the exec allowlist: a program the allowlist
//! refuses is asked about at the terminal of `warden run`, on the same
//! desk as the proxy's names ([`crate::ask`]).
//!
//! The refusal arrives as an event on the jail's event path, which must
//! never wait for a person: [`ProgramSink`] only queues the path (once per
//! path and run, at most [`MAX_PROGRAMS`]) for a thread of its own, which
//! puts the question to the desk and waits for the answer as the proxy's
//! threads do. Nothing waits on the answer: Landlock's rules of a running
//! sandbox can only narrow, so the refused exec stays refused (126) and
//! neither "once" nor "run" is offered. An "always" adds the program to
//! the project's programs' grants ([`crate::programs`], beside the names'
//! grants), read when a later ask-mode run of the project is resolved, or,
//! when the run keeps its answers in a profile (`--ask-save profile`), to
//! that profile's `process.allow_exec`. With nowhere to keep it, "always"
//! is not offered, and the question says so.

use crate::events::Bus;
use crate::programs::Keep;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use warden_audit::EventKind;
use warden_egress::ask::{Answer, Asker, Question};

/// A program's question, its "always" kept in the project's grants.
pub const PROGRAM: &str = "exec";
/// A program's question, its "always" kept in the profile in use.
pub const PROGRAM_INTO_PROFILE: &str = "exec-profile";
/// A program's question where "always" is not offered (no place keeps it).
pub const PROGRAM_NOT_KEPT: &str = "exec-not-kept";
/// Programs asked about in one run; later refusals are not asked.
pub const MAX_PROGRAMS: usize = 256;

#[derive(Default)]
struct State {
    /// The terminal's asker, once the desk is made.
    asker: Option<Arc<dyn Asker>>,
    asked: BTreeSet<String>,
    queue: Option<mpsc::Sender<String>>,
    thread: Option<JoinHandle<()>>,
}

/// The programs of one run to ask about at the terminal.
pub struct TerminalPrograms {
    /// Where an "always" is kept; `None` when it has nowhere to go.
    grants: Option<Keep>,
    bus: Arc<Bus>,
    state: Mutex<State>,
    next: Arc<AtomicU64>,
}

impl TerminalPrograms {
    pub fn new(bus: Arc<Bus>, grants: Option<Keep>) -> Arc<TerminalPrograms> {
        Arc::new(TerminalPrograms {
            grants,
            bus,
            state: Mutex::new(State::default()),
            next: Arc::new(AtomicU64::new(1)),
        })
    }

    /// The terminal's desk is there: questions go to `asker`.
    pub fn set_asker(&self, asker: Arc<dyn Asker>) {
        if let Ok(mut s) = self.state.lock() {
            s.asker = Some(asker);
        }
    }

    /// `program` was refused by the allowlist: queue its question (once a
    /// path). Returns at once.
    pub fn refused(&self, program: &str) {
        if !crate::programs::is_program_entry(program) {
            return;
        }
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let Some(asker) = s.asker.clone() else {
            return;
        };
        if s.asked.len() >= MAX_PROGRAMS || !s.asked.insert(program.to_string()) {
            return;
        }
        if s.queue.is_none() {
            let (tx, rx) = mpsc::channel::<String>();
            let grants = self.grants.clone();
            let bus = self.bus.clone();
            let next = self.next.clone();
            let spawned = std::thread::Builder::new()
                .name("warden-ask-exec".into())
                .spawn(move || {
                    for path in rx {
                        ask_one(asker.as_ref(), &bus, grants.as_ref(), &path, &next);
                    }
                });
            match spawned {
                Ok(t) => {
                    s.queue = Some(tx);
                    s.thread = Some(t);
                }
                // Nobody to ask from: the refusal stands unasked.
                Err(_) => return,
            }
        }
        if let Some(q) = &s.queue {
            let _ = q.send(program.to_string());
        }
    }

    /// The run is over (its desk gone, so nothing is still asked): wait
    /// for an answer being kept to be written.
    pub fn finish(&self) {
        let thread = match self.state.lock() {
            Ok(mut s) => {
                s.queue = None;
                s.asker = None;
                s.thread.take()
            }
            Err(_) => None,
        };
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// Ask about `path` and keep an "always".
fn ask_one(asker: &dyn Asker, bus: &Bus, grants: Option<&Keep>, path: &str, next: &AtomicU64) {
    let question = Question {
        protocol: match grants {
            Some(Keep::Project(_)) => PROGRAM,
            Some(Keep::Profile(_)) => PROGRAM_INTO_PROFILE,
            None => PROGRAM_NOT_KEPT,
        },
        name: path.to_string(),
        port: 0,
        request: None,
    };
    let answer = asker.ask(&question);
    let mut by = "the terminal".to_string();
    let decision = match (answer, grants) {
        (Answer::Always, Some(g)) => match g.add(path) {
            Ok(_) => "allow_always",
            Err(e) => {
                by.push_str(&format!(
                    " (allow_always not kept, answered as deny: {})",
                    warden_jail::chain_str(&e)
                ));
                "deny"
            }
        },
        // The desk offers nothing else; anything else is a refusal.
        _ => "deny",
    };
    bus.emit(EventKind::AskAnswered {
        question: format!("terminal-exec-{}", next.fetch_add(1, Ordering::Relaxed)),
        name: path.to_string(),
        port: 0,
        decision: decision.into(),
        by,
    });
}

/// The jail's events, on to `inner`, each refusal by the exec allowlist
/// also queued as a question for the terminal.
pub struct ProgramSink<S> {
    pub inner: S,
    pub programs: Arc<TerminalPrograms>,
}

impl<S: warden_audit::EventSink> warden_audit::EventSink for ProgramSink<S> {
    fn emit(&mut self, event: &warden_audit::Event) {
        if let EventKind::ExecRefused {
            program: Some(p),
            by,
            ..
        } = &event.kind
        {
            if let ("allowlist", Some(p)) = (by.as_str(), p.to_str()) {
                self.programs.refused(p);
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

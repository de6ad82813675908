//! The ask desk's vocabulary: a connection or a request no rule decides,
//! put as a [`Question`] to whoever answers ([`Asker`]: the terminal of
//! `warden run`, a daemon's API), and the [`Answer`]. The proxy asks; the
//! secret terminator asks for the requests it holds; neither owns the
//! words.

use warden_policy::trust::Trust;

/// A connection to a name that no rule allows, put to a person (`--ask`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// `tls`, `http`, `connect` or `tcp`.
    pub protocol: &'static str,
    pub name: String,
    pub port: u16,
    /// A single request an ask rule holds (the name is allowed, this
    /// request of it is asked about); `None` for a connection.
    pub request: Option<crate::requests::AskedRequest>,
}

/// What a person answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// This connection only.
    Once,
    /// This name and port, for the rest of the run.
    ForRun,
    Deny,
    /// Learning mode: allowed for the rest of the run, and recorded as
    /// learned.
    Learn,
    /// For the rest of the run, and kept for the project's next runs (the
    /// runtime writes the grant when it sees [`crate::proxy::ASK_ALWAYS`]).
    Always,
}

/// Answers [`Question`]s: the terminal of `warden run` today, an API of a
/// daemon later. `ask` runs on a thread of its own and may block, but must
/// return in bounded time (the connection waits for it).
pub trait Asker: Send + Sync {
    fn ask(&self, question: &Question) -> Answer;

    /// [`Asker::ask`], and the trust of whoever answered. A name the owner
    /// allowed (at their terminal, over their own socket) is served by
    /// the owner's pinned addresses and local ranges; one a caller allowed
    /// (a token holder over the API) reaches public addresses only. A
    /// terminal's answers are the owner's.
    fn ask_trusted(&self, question: &Question) -> (Answer, Trust) {
        (self.ask(question), Trust::Owner)
    }
}

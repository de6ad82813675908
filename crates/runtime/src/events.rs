//! Events carried live to every sink: the [`Bus`] a sandbox's supervisor
//! owns. Lifecycle events come from the supervisor's own thread; egress
//! decisions come from the proxy's threads, through [`Bus::observer`], and
//! are queued (bounded) for a writer thread.
//!
//! Volume cannot push a record out of the log: decisions that open no
//! connection (DNS answers, denials, requests, secret actions) are
//! aggregated first (`aggregate.rs`: the first of each name and verdict
//! per window in full, the repeats counted), so what a flood puts in the
//! queue is bounded per window; an allowed connection's opening and its
//! bytes at its end are queued one by one and never dropped. A queue full
//! because a sink is stuck makes the sender wait (the proxy's connection
//! waits before any byte of it moves) instead of losing the record. A
//! follower (`warden logs -f`) is not the log: its own bounded queue loses
//! what it cannot take, counted as `events_dropped`.
//!
//! Size cannot grow without bound either: every string the sandbox
//! chooses is cut to its kind's length before anything else sees the
//! event (`warden_audit::bound`), and past the sandbox's byte budget in
//! the log its decisions are only counted (`budget.rs`).

use crate::aggregate::{Window, AGGREGATION_WINDOW};
use crate::budget::{Budget, Verdict};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use warden_audit::{Event, EventKind, EventSink, Protocol, SecretAction};
use warden_egress::decision::{self, Decision, Observer};

/// Events waiting for the writer at most; a sender waits beyond.
const QUEUE: usize = 4096;
/// Events waiting for one follower (`warden logs -f`) at most.
const FOLLOWER_QUEUE: usize = 1024;
/// Denied destinations named in the end-of-run summary at most.
const SUMMARY_NAMES: usize = 20;

/// A sink that may live on another thread.
pub type Sink = Box<dyn EventSink + Send>;

/// The sandbox's event stream.
pub struct Bus {
    sandbox: String,
    sinks: Mutex<Vec<Sink>>,
    /// Set once the writer thread runs: events are queued for it.
    queue: Mutex<Option<SyncSender<Queued>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The writer thread has been started (its queue may since be closed).
    writing: std::sync::atomic::AtomicBool,
    /// Repeated decisions counted for the current window.
    window: Mutex<Window>,
    followers: Mutex<Vec<Follower>>,
    denied: Mutex<Denied>,
    /// The allowlist entries the run would have needed.
    needed: Mutex<crate::teach::Needed>,
    /// Bytes of finished egress connections, both ways.
    egress_bytes: AtomicU64,
    /// Why a sink lost a record (filled when the bus closes).
    lost: Mutex<Vec<String>>,
    /// Each layer the sandbox runs without, as its `degraded` event says.
    degraded: Mutex<Vec<String>>,
    /// The byte budget of its events in the log.
    budget: Mutex<Budget>,
}

/// What the writer thread is handed.
enum Queued {
    Event(Event),
    /// Answered once everything queued before it is written.
    Barrier(SyncSender<()>),
    /// Write what was counted past the budget so far, whatever its
    /// period: a command's end, so that whoever reads the log on its
    /// answer learns that its decisions were only counted.
    BudgetCounts,
}

/// How long [`Bus::emit_written`] waits for the writer at most: a sink
/// stuck longer than this does not hold a command's answer back for ever.
const BARRIER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long [`Bus::emit_confirmed`] waits for the writer at most: a
/// caller waits for that answer, and is told when it did not come.
const CONFIRM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a record a caller waits for is not in every sink.
#[derive(Debug, thiserror::Error)]
pub enum NotWritten {
    /// The bus is closed (the sandbox is ending): its sinks are gone, the
    /// audit log's lock with them.
    #[error("the sandbox is ending: its supervisor has closed its audit log")]
    Closed,
    #[error("the supervisor's writer did not write it within {} s", CONFIRM_WAIT.as_secs())]
    Late,
    /// A sink could not write it (or an earlier record, after which it
    /// writes nothing).
    #[error("{0}")]
    Sink(String),
}

struct Follower {
    tx: SyncSender<Event>,
    dropped: u64,
}

#[derive(Default)]
struct Denied {
    /// "PROTOCOL NAME:PORT" denied, the reason of its first denial in
    /// words, and its cause.
    names: Vec<(String, String, Option<decision::Cause>)>,
    more: usize,
    /// "secret NAME: why" for each blocked secret, bounded like `names`.
    secrets: Vec<String>,
}

impl Bus {
    pub fn new(sandbox: &str, sinks: Vec<Sink>) -> Arc<Bus> {
        Arc::new(Bus {
            sandbox: sandbox.to_string(),
            sinks: Mutex::new(sinks),
            queue: Mutex::new(None),
            writer: Mutex::new(None),
            writing: std::sync::atomic::AtomicBool::new(false),
            window: Mutex::new(Window::default()),
            followers: Mutex::new(Vec::new()),
            denied: Mutex::new(Denied::default()),
            needed: Mutex::new(crate::teach::Needed::default()),
            egress_bytes: AtomicU64::new(0),
            lost: Mutex::new(Vec::new()),
            degraded: Mutex::new(Vec::new()),
            budget: Mutex::new(Budget::new(crate::budget::DEFAULT_BUDGET, 0)),
        })
    }

    /// Give the sandbox's events `limit` bytes in its log, `before` of
    /// which earlier starts of the sandbox took.
    pub fn set_budget(&self, limit: u64, before: u64) {
        if let Ok(mut b) = self.budget.lock() {
            *b = Budget::new(limit, before);
        }
    }

    pub fn sandbox(&self) -> &str {
        &self.sandbox
    }

    /// Start the writer thread: from now on events are queued and written
    /// there. Call only where threads may exist (after the sandbox's clone).
    pub fn start_writer(self: &Arc<Bus>) {
        if self.writing.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut queue) = self.queue.lock() else {
            return;
        };
        if queue.is_some() {
            return;
        }
        let (tx, rx) = sync_channel(QUEUE);
        let bus = self.clone();
        let handle = std::thread::Builder::new()
            .name("warden-events".into())
            .spawn(move || bus.write_from(rx));
        if let Ok(h) = handle {
            *queue = Some(tx);
            self.writing.store(true, Ordering::Release);
            if let Ok(mut w) = self.writer.lock() {
                *w = Some(h);
            }
        }
    }

    fn write_from(&self, rx: Receiver<Queued>) {
        loop {
            match rx.recv_timeout(AGGREGATION_WINDOW) {
                Ok(Queued::Event(e)) => self.write(&e),
                Ok(Queued::Barrier(done)) => {
                    let _ = done.try_send(());
                }
                Ok(Queued::BudgetCounts) => self.write_budget_counts(),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            // A window's counts are written when it ends, also when no
            // later decision comes to close it; so are the counts past
            // the budget when their period ends.
            let due = self.budget.lock().map(|mut b| b.due()).unwrap_or_default();
            for kind in self.expired_counts().into_iter().chain(due) {
                self.write(&Event::now(&self.sandbox, kind));
            }
        }
    }

    /// Write what was counted past the budget so far, whatever its period.
    fn write_budget_counts(&self) {
        let counts = self
            .budget
            .lock()
            .map(|mut b| b.counts())
            .unwrap_or_default();
        for kind in counts {
            self.write(&Event::now(&self.sandbox, kind));
        }
    }

    /// The counts of the current window, when it has run its time.
    fn expired_counts(&self) -> Vec<EventKind> {
        match self.window.lock() {
            Ok(mut w) if w.expired() => w.close(),
            _ => Vec::new(),
        }
    }

    /// Record a decision that may repeat: written when it is the first of
    /// its name and verdict in this window, counted otherwise.
    fn emit_aggregated(&self, kind: EventKind) {
        // Bounded before it is a key: a window holds no 60 KB path.
        let kind = warden_audit::bound::bounded(kind);
        let (counts, first) = match self.window.lock() {
            Ok(mut w) => {
                let counts = if w.expired() { w.close() } else { Vec::new() };
                (counts, w.admit(kind))
            }
            // A poisoned window counts nothing: write the decision itself.
            Err(_) => (Vec::new(), Some(kind)),
        };
        for c in counts {
            self.emit(c);
        }
        if let Some(kind) = first {
            self.emit(kind);
        }
    }

    /// End the current aggregation window now and write its counts: a
    /// command's end is such a point, so that whoever reads what the
    /// command was denied finds its repeats too (a quick retry of a
    /// denied name is counted, and its count would otherwise be written
    /// only when the window runs out, after the command's answer).
    pub fn end_window(&self) {
        let counts = self
            .window
            .lock()
            .map(|mut w| w.close())
            .unwrap_or_default();
        for kind in counts {
            self.emit(kind);
        }
        // Behind every decision queued before it, so that a budget those
        // decisions reach is counted too.
        let tx = self.queue.lock().ok().and_then(|q| q.clone());
        if let Some(tx) = tx {
            let _ = tx.send(Queued::BudgetCounts);
        }
    }

    /// Record an event now (queued when the writer runs).
    pub fn emit(&self, kind: EventKind) {
        self.send(Event::now(&self.sandbox, kind));
    }

    /// Record an event and return once every sink has it (or after
    /// [`BARRIER_WAIT`]): for what a caller is answered about right after
    /// (a command's exit), so that whoever reads the log on that answer
    /// finds the record there.
    pub fn emit_written(&self, kind: EventKind) {
        self.emit(kind);
        self.written();
    }

    /// Return once every event recorded before is in every sink (or after
    /// [`BARRIER_WAIT`]).
    pub fn written(&self) {
        let tx = self.queue.lock().ok().and_then(|q| q.clone());
        if let Some(tx) = tx {
            let (done, written) = sync_channel(1);
            if tx.send(Queued::Barrier(done)).is_ok() {
                let _ = written.recv_timeout(BARRIER_WAIT);
            }
        }
    }

    /// Record an event that a caller is answered about, and say whether
    /// every sink has it: in the order of everything recorded before it,
    /// and seen by followers as any other. For records made outside the
    /// supervisor (a snapshot of the sandbox, a fork), whose caller must
    /// not report them made when the log lacks them.
    pub fn emit_confirmed(&self, kind: EventKind) -> Result<(), NotWritten> {
        let mut e = Event::now(&self.sandbox, kind);
        e.kind = warden_audit::bound::bounded(e.kind);
        let tx = self.queue.lock().ok().and_then(|q| q.clone());
        match tx {
            // The writer drains its queue until every sender is gone: this
            // one keeps it alive until the barrier behind the record is
            // answered, also while the bus is being closed.
            Some(tx) => {
                let (done, written) = sync_channel(1);
                if tx.send(Queued::Event(e)).is_err() || tx.send(Queued::Barrier(done)).is_err() {
                    return Err(NotWritten::Closed);
                }
                drop(tx);
                if written.recv_timeout(CONFIRM_WAIT).is_err() {
                    return Err(NotWritten::Late);
                }
            }
            None if self.writing.load(Ordering::Acquire) => return Err(NotWritten::Closed),
            None => self.write(&e),
        }
        // A sink that failed writes nothing after its failure; one closed
        // meanwhile left its failure in `lost`.
        let Ok(sinks) = self.sinks.lock() else {
            return Err(NotWritten::Sink(
                "the supervisor's sinks are unusable".into(),
            ));
        };
        let mut failed: Vec<String> = sinks.iter().filter_map(|s| s.failure()).collect();
        drop(sinks);
        if let Ok(l) = self.lost.lock() {
            failed.extend(l.iter().cloned());
        }
        match failed.is_empty() {
            true => Ok(()),
            false => Err(NotWritten::Sink(failed.join("; "))),
        }
    }

    fn send(&self, mut e: Event) {
        e.kind = warden_audit::bound::bounded(e.kind);
        if let EventKind::Degraded { layer, lost } = &e.kind {
            if let Ok(mut d) = self.degraded.lock() {
                d.push(format!("{layer}: {lost}"));
            }
        }
        let tx = self.queue.lock().ok().and_then(|q| q.clone());
        match tx {
            // Full: the sender waits for the writer rather than lose the
            // record (what floods is aggregated before it gets here).
            Some(tx) => {
                if let Err(std::sync::mpsc::SendError(Queued::Event(e))) = tx.send(Queued::Event(e))
                {
                    self.write(&e);
                }
            }
            None => self.write(&e),
        }
    }

    /// Write to every sink and follower, or only count it past the
    /// budget.
    fn write(&self, e: &Event) {
        let Ok(mut sinks) = self.sinks.lock() else {
            return;
        };
        let written = sinks.iter().map(|s| s.bytes_written()).max().unwrap_or(0);
        // A poisoned budget counts nothing: the event is written.
        if let Ok(mut b) = self.budget.lock() {
            if b.admit(&e.kind, written) == Verdict::Counted {
                return;
            }
        }
        for s in sinks.iter_mut() {
            s.emit(e);
        }
        drop(sinks);
        self.follow(e);
    }

    fn follow(&self, e: &Event) {
        let Ok(mut followers) = self.followers.lock() else {
            return;
        };
        followers.retain_mut(|f| {
            if f.dropped > 0 {
                let d = Event::now(&self.sandbox, EventKind::EventsDropped { count: f.dropped });
                match f.tx.try_send(d) {
                    Ok(()) => f.dropped = 0,
                    Err(TrySendError::Full(_)) => {
                        f.dropped += 1;
                        return true;
                    }
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            match f.tx.try_send(e.clone()) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    f.dropped += 1;
                    true
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    /// Events from now on, for a follower (`warden logs -f`); bounded: a
    /// follower that does not keep up loses events, counted.
    pub fn subscribe(&self) -> Receiver<Event> {
        let (tx, rx) = sync_channel(FOLLOWER_QUEUE);
        if let Ok(mut f) = self.followers.lock() {
            f.push(Follower { tx, dropped: 0 });
        }
        rx
    }

    /// Stop the writer after it has written what is queued, and close
    /// every sink (the audit log writes its head).
    pub fn close(&self) {
        // The last window's counts, however short it was.
        self.end_window();
        if let Ok(mut q) = self.queue.lock() {
            q.take();
        }
        if let Some(h) = self.writer.lock().ok().and_then(|mut w| w.take()) {
            let _ = h.join();
        }
        // What was counted past the budget, however short its period.
        self.write_budget_counts();
        if let Ok(mut f) = self.followers.lock() {
            f.clear();
        }
        if let Ok(mut sinks) = self.sinks.lock() {
            let lost: Vec<String> = sinks.iter().filter_map(|s| s.failure()).collect();
            if let Ok(mut l) = self.lost.lock() {
                l.extend(lost);
            }
            sinks.clear();
        }
    }

    /// After [`Bus::close`]: why a sink (the audit log, the event file)
    /// could not write a record; empty when every record was written.
    /// A run with a lost record has failed, whatever its command did.
    pub fn lost_records(&self) -> Vec<String> {
        self.lost.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Bytes through the egress proxy so far (finished connections).
    pub fn egress_bytes(&self) -> u64 {
        self.egress_bytes.load(Ordering::Relaxed)
    }

    /// The egress proxy's observer: each decision becomes an event now.
    pub fn observer(self: &Arc<Bus>) -> Arc<dyn Observer> {
        Arc::new(Decisions(self.clone()))
    }

    /// The layers the sandbox runs without so far (`LAYER: what is
    /// lost`), as its `degraded` events said.
    pub fn degraded(&self) -> Vec<String> {
        self.degraded.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// The allowlist entries learning mode allowed so far.
    pub fn learned(&self) -> Vec<String> {
        self.needed.lock().map(|n| n.learned()).unwrap_or_default()
    }

    /// What a front door tells the person at the end of a run: each
    /// blocked secret, then the destinations denied, then what the run
    /// would have needed.
    pub fn notices(&self) -> Vec<Notice> {
        let mut out: Vec<Notice> = self
            .denied
            .lock()
            .map(|d| d.secrets.iter().cloned().map(Notice::Said).collect())
            .unwrap_or_default();
        out.extend(self.denied_summary().into_iter().map(Notice::Denied));
        if let Ok(n) = self.needed.lock() {
            out.extend(n.notices().into_iter().map(Notice::Said));
        }
        out
    }

    /// One group per reason, naming what was denied for it: the hint is
    /// the proxy's own reason (no rule and the entry that would allow it,
    /// a person's answer, the quota, a secret's rule, a non-public address
    /// and the range that would allow one), never a guess.
    fn denied_summary(&self) -> Vec<Denials> {
        let Ok(d) = self.denied.lock() else {
            return Vec::new();
        };
        let mut groups: Vec<Denials> = Vec::new();
        for (what, why, cause) in &d.names {
            let field = cause.as_ref().and_then(|c| c.field);
            let group = match groups
                .iter_mut()
                .find(|g| g.why == *why && g.field == field)
            {
                Some(g) => g,
                None => {
                    groups.push(Denials {
                        what: Vec::new(),
                        why: why.clone(),
                        reason: cause.as_ref().map(|c| c.reason),
                        field,
                        entries: Vec::new(),
                        more: 0,
                    });
                    let at = groups.len() - 1;
                    &mut groups[at]
                }
            };
            group.what.push(what.clone());
            if let Some(entry) = cause.as_ref().and_then(|c| c.entry.clone()) {
                if !group.entries.contains(&entry) {
                    group.entries.push(entry);
                }
            }
        }
        if let Some(last) = groups.last_mut() {
            last.more = d.more;
        }
        groups
    }

    fn note_denied(&self, d: &Decision) {
        let what = format!(
            "{} {}",
            d.protocol.as_str(),
            match &d.name {
                Some(n) if d.protocol == decision::Protocol::Dns => n.clone(),
                Some(n) => format!("{n}:{}", d.port),
                None => d.original_destination.clone().unwrap_or_else(|| "?".into()),
            }
        );
        if let Ok(mut denied) = self.denied.lock() {
            if denied.names.iter().any(|(w, _, _)| *w == what) {
                return;
            }
            if denied.names.len() < SUMMARY_NAMES {
                // A DNS decision's detail is its record type: the reason a
                // name is not answered is that no rule names it.
                let unlisted = d
                    .reason
                    .as_ref()
                    .is_some_and(|c| c.reason == decision::Reason::NotAllowed);
                let why = if d.protocol == decision::Protocol::Dns && unlisted {
                    "no allowlist entry for this name (its query got NXDOMAIN)".to_string()
                } else {
                    d.detail.clone()
                };
                denied.names.push((what, why, d.reason.clone()));
            } else {
                denied.more += 1;
            }
        }
    }
}

/// A decision's cause as events carry it: its code, the option that
/// would change it by its profile key, the addresses, and the entry that
/// would allow it (each door words the field its own way).
fn reason(c: &decision::Cause) -> warden_audit::Reason {
    let field = c.field.and_then(|f| f.profile_key());
    warden_audit::Reason {
        code: c.reason.code().to_string(),
        field: field.map(str::to_string),
        addresses: c.addresses.iter().map(ToString::to_string).collect(),
        allow: field
            .zip(c.entry.as_ref())
            .map(|(field, value)| warden_audit::WouldAllow {
                field: field.to_string(),
                value: value.clone(),
            }),
    }
}

/// A line for the person at the end of a run, for a front door to word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Said as it is (a blocked secret, what the run would have needed).
    Said(String),
    /// Destinations denied for one reason.
    Denied(Denials),
}

/// Destinations denied for one reason: what (`tcp example.test:22`), why
/// in plain words, and the option whose entries would allow them, for the
/// door to spell (a flag, a profile key, a JSON path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denials {
    pub what: Vec<String>,
    pub why: String,
    pub reason: Option<decision::Reason>,
    pub field: Option<warden_policy::Field>,
    /// The entries of `field` that would allow them, in the order met.
    pub entries: Vec<String>,
    /// Destinations past the summary's bound, counted only.
    pub more: usize,
}

/// The bus as the jail's event sink (lifecycle events).
pub struct BusSink(pub Arc<Bus>);

impl EventSink for BusSink {
    fn emit(&mut self, event: &Event) {
        // A refused program is the sandbox's to repeat at will: counted
        // past the first of each in a window, like a denied name.
        if let EventKind::ExecRefused { .. } = &event.kind {
            self.0.start_writer();
            self.0.emit_aggregated(event.kind.clone());
            return;
        }
        // Under the bus's name: the jail knows a sandbox by the id of this
        // start (its cgroup's name), a person by its name.
        let mut e = event.clone();
        e.sandbox.clone_from(&self.0.sandbox);
        self.0.send(e);
    }

    /// A sink that could not write a record so far (the jail asks before
    /// the command starts; what a writer thread has queued is written
    /// first).
    fn failure(&self) -> Option<String> {
        self.0.written();
        match self.0.sinks.lock() {
            Ok(sinks) => sinks.iter().find_map(|s| s.failure()),
            // A sink panicked while writing: its records cannot be vouched for.
            Err(_) => Some("the event sinks are unusable (one failed while writing)".into()),
        }
    }
}

struct Decisions(Arc<Bus>);

impl Observer for Decisions {
    fn decision(&self, conn: Option<u64>, d: &Decision) {
        // The proxy's thread must not wait on a sink: from the first
        // decision on, the bus writes from a thread of its own.
        self.0.start_writer();
        let kind = match d.protocol {
            decision::Protocol::Secret(action) => {
                if action == decision::SecretAction::Blocked {
                    if let Ok(mut denied) = self.0.denied.lock() {
                        if denied.secrets.len() < SUMMARY_NAMES {
                            denied.secrets.push(format!(
                                "secret {}: {}",
                                d.rule.as_deref().unwrap_or("?"),
                                d.detail
                            ));
                        }
                    }
                }
                EventKind::Secret {
                    name: d.rule.clone().unwrap_or_default(),
                    host: d.name.clone().unwrap_or_default(),
                    action: match action {
                        decision::SecretAction::Substituted => SecretAction::Substituted,
                        decision::SecretAction::Scrubbed => SecretAction::Scrubbed,
                        decision::SecretAction::Blocked => SecretAction::Blocked,
                    },
                    detail: d.detail.clone(),
                    reason: d.reason.as_ref().map(|r| Box::new(reason(r))),
                }
            }
            p => {
                if !d.allowed {
                    self.0.note_denied(d);
                }
                if let Ok(mut n) = self.0.needed.lock() {
                    n.note(d);
                }
                EventKind::Connection {
                    protocol: protocol(p),
                    name: d.name.clone(),
                    port: d.port,
                    original_destination: d.original_destination.clone(),
                    allowed: d.allowed,
                    rule: d.rule.clone(),
                    detail: d.detail.clone(),
                    bytes_out: d.bytes_out,
                    bytes_in: d.bytes_in,
                    duration_ms: d.duration_ms,
                    conn,
                    reason: d.reason.as_ref().map(|r| Box::new(reason(r))),
                }
            }
        };
        // An allowed connection's opening is written on its own; every
        // other decision may repeat, and is aggregated.
        if conn.is_some() {
            self.0.emit(kind);
        } else {
            self.0.emit_aggregated(kind);
        }
    }

    fn closed(&self, conn: u64, d: &Decision) {
        self.0.start_writer();
        self.0
            .egress_bytes
            .fetch_add(d.bytes_out + d.bytes_in, Ordering::Relaxed);
        self.0.emit(EventKind::ConnectionClosed {
            conn,
            name: d.name.clone(),
            port: d.port,
            bytes_out: d.bytes_out,
            bytes_in: d.bytes_in,
            duration_ms: d.duration_ms,
        });
    }
}

fn protocol(p: decision::Protocol) -> Protocol {
    match p {
        decision::Protocol::Tls => Protocol::Tls,
        decision::Protocol::Http => Protocol::Http,
        decision::Protocol::Dns => Protocol::Dns,
        decision::Protocol::Request => Protocol::Request,
        decision::Protocol::Connect => Protocol::Connect,
        // Secret decisions become `secret` events, never connections.
        decision::Protocol::Tcp | decision::Protocol::Secret(_) => Protocol::Tcp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A sink that takes its time, and tells how many it has.
    struct Slow(Arc<AtomicU64>);

    impl EventSink for Slow {
        fn emit(&mut self, _: &Event) {
            std::thread::sleep(Duration::from_millis(100));
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn exited() -> EventKind {
        EventKind::ExecExited {
            exec: 1,
            status: 0,
            signal: None,
            duration_ms: 1,
        }
    }

    #[test]
    fn an_event_emitted_written_is_in_every_sink_when_the_call_returns() {
        let got = Arc::new(AtomicU64::new(0));
        let bus = Bus::new("t", vec![Box::new(Slow(got.clone()))]);
        bus.start_writer();
        // Queued only: the slow sink does not have it yet.
        bus.emit(exited());
        assert_eq!(got.load(Ordering::SeqCst), 0);
        // Written: it and everything before it are there.
        bus.emit_written(exited());
        assert_eq!(got.load(Ordering::SeqCst), 2);
        bus.close();
    }

    #[test]
    fn the_proxys_first_decision_starts_the_writer_so_no_sink_holds_the_proxy() {
        let got = Arc::new(AtomicU64::new(0));
        let bus = Bus::new("t", vec![Box::new(Slow(got.clone()))]);
        // No writer yet (a sandbox whose network was never used has none).
        let observer = bus.observer();
        let decision = Decision {
            protocol: decision::Protocol::Tls,
            name: Some("example.com".into()),
            port: 443,
            original_destination: None,
            allowed: true,
            rule: Some("example.com".into()),
            detail: "to 192.0.2.1:443".into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: None,
        };
        let started = std::time::Instant::now();
        observer.decision(Some(0), &decision);
        observer.closed(0, &decision);
        // Queued for the writer, not written on the caller's thread (the
        // slow sink takes 100 ms a record).
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "the decision was written on the proxy's thread ({:?})",
            started.elapsed()
        );
        bus.written();
        assert_eq!(got.load(Ordering::SeqCst), 2);
        bus.close();
    }

    /// Refuses every record, as a full disk does.
    struct Full;

    impl EventSink for Full {
        fn emit(&mut self, _: &Event) {}

        fn failure(&self) -> Option<String> {
            Some("no space left on device".into())
        }
    }

    fn snapshot_record() -> EventKind {
        EventKind::Workspace {
            action: warden_audit::WorkspaceAction::Snapshot,
            name: "t".into(),
            paths: Vec::new(),
            detail: "saved as s1".into(),
        }
    }

    #[test]
    fn a_confirmed_record_is_written_in_order_or_its_caller_is_told_why_not() {
        let got = Arc::new(AtomicU64::new(0));
        let bus = Bus::new("t", vec![Box::new(Slow(got.clone()))]);
        bus.start_writer();
        bus.emit(exited());
        assert!(bus.emit_confirmed(snapshot_record()).is_ok());
        assert_eq!(got.load(Ordering::SeqCst), 2);
        bus.close();
        // A closed bus has no sink left: the caller writes the record.
        assert!(matches!(
            bus.emit_confirmed(snapshot_record()),
            Err(NotWritten::Closed)
        ));

        let failing = Bus::new("t", vec![Box::new(Full)]);
        failing.start_writer();
        match failing.emit_confirmed(snapshot_record()) {
            Err(NotWritten::Sink(why)) => assert!(why.contains("no space"), "{why}"),
            other => panic!("{other:?}"),
        }
        failing.close();
    }

    /// Keeps every event it is given.
    struct Keep(Arc<Mutex<Vec<Event>>>);

    impl EventSink for Keep {
        fn emit(&mut self, e: &Event) {
            self.0.lock().unwrap().push(e.clone());
        }
    }

    #[test]
    fn a_denials_code_and_field_reach_its_event_and_the_summary_groups_by_reason() {
        use warden_egress::decision::{Cause, Reason};
        let got = Arc::new(Mutex::new(Vec::new()));
        let bus = Bus::new("t", vec![Box::new(Keep(got.clone()))]);
        let observer = bus.observer();
        let denied = |protocol, name: &str, port, detail: &str, cause| Decision {
            protocol,
            name: Some(name.into()),
            port,
            original_destination: None,
            allowed: false,
            rule: None,
            detail: detail.into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: Some(cause),
        };
        let port22 = "no allowlist entry allows port 22 for any name";
        for name in ["a.test", "b.test"] {
            observer.decision(
                None,
                &denied(
                    decision::Protocol::Tcp,
                    name,
                    22,
                    port22,
                    Cause::with_entry(Reason::PortNotAllowed, format!("{name}:22")),
                ),
            );
        }
        observer.decision(
            None,
            &denied(
                decision::Protocol::Dns,
                "c.test",
                53,
                "A",
                Cause::with_entry(Reason::NotAllowed, "c.test"),
            ),
        );
        bus.close();
        let events = got.lock().unwrap().clone();
        let EventKind::Connection {
            reason: Some(reason),
            detail,
            ..
        } = &events[0].kind
        else {
            panic!("{events:?}");
        };
        assert_eq!(detail, port22);
        assert_eq!(reason.code, "port_not_allowed");
        assert_eq!(reason.field.as_deref(), Some("egress.domains"));
        assert_eq!(reason.allow.as_ref().unwrap().value, "a.test:22");
        let notices = bus.notices();
        let groups: Vec<&Denials> = notices
            .iter()
            .filter_map(|n| match n {
                Notice::Denied(d) => Some(d),
                Notice::Said(_) => None,
            })
            .collect();
        assert_eq!(groups.len(), 2, "{groups:?}");
        assert_eq!(groups[0].what, vec!["tcp a.test:22", "tcp b.test:22"]);
        assert_eq!(groups[0].why, port22);
        assert_eq!(groups[0].field, Some(warden_policy::Field::AllowDomain));
        assert_eq!(groups[0].entries, vec!["a.test:22", "b.test:22"]);
        assert_eq!(
            groups[1].why,
            "no allowlist entry for this name (its query got NXDOMAIN)"
        );
        assert_eq!(groups[1].entries, vec!["c.test"]);
    }

    #[test]
    fn emitted_written_before_the_writer_runs_is_written_at_once() {
        let got = Arc::new(AtomicU64::new(0));
        let bus = Bus::new("t", vec![Box::new(Slow(got.clone()))]);
        bus.emit_written(exited());
        assert_eq!(got.load(Ordering::SeqCst), 1);
    }
}

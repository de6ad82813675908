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

use crate::aggregate::{Window, AGGREGATION_WINDOW};
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
}

/// What the writer thread is handed.
enum Queued {
    Event(Event),
    /// Answered once everything queued before it is written.
    Barrier(SyncSender<()>),
}

/// How long [`Bus::emit_written`] waits for the writer at most: a sink
/// stuck longer than this does not hold a command's answer back for ever.
const BARRIER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

struct Follower {
    tx: SyncSender<Event>,
    dropped: u64,
}

#[derive(Default)]
struct Denied {
    /// "PROTOCOL NAME:PORT" denied, and the reason of its first denial.
    names: Vec<(String, String)>,
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
        })
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
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            // A window's counts are written when it ends, also when no
            // later decision comes to close it.
            for kind in self.expired_counts() {
                self.write(&Event::now(&self.sandbox, kind));
            }
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

    fn send(&self, e: Event) {
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

    /// Write to every sink and follower.
    fn write(&self, e: &Event) {
        let Ok(mut sinks) = self.sinks.lock() else {
            return;
        };
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
        let counts = self
            .window
            .lock()
            .map(|mut w| w.close())
            .unwrap_or_default();
        for kind in counts {
            self.emit(kind);
        }
        if let Ok(mut q) = self.queue.lock() {
            q.take();
        }
        if let Some(h) = self.writer.lock().ok().and_then(|mut w| w.take()) {
            let _ = h.join();
        }
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
    /// blocked secret, then the destinations denied ("egress denied: ...").
    pub fn notices(&self) -> Vec<String> {
        let mut out = self
            .denied
            .lock()
            .map(|d| d.secrets.clone())
            .unwrap_or_default();
        out.extend(self.denied_summary());
        if let Ok(n) = self.needed.lock() {
            out.extend(n.notices());
        }
        out
    }

    /// One line per reason, naming what was denied for it: the hint is
    /// the proxy's own reason (no rule and the entry that would allow it,
    /// a person's answer, the quota, a secret's rule, a non-public address
    /// and the flag that allows one), never a guess.
    fn denied_summary(&self) -> Vec<String> {
        let Ok(d) = self.denied.lock() else {
            return Vec::new();
        };
        let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
        for (what, why) in &d.names {
            match reasons.iter_mut().find(|(w, _)| w == why) {
                Some((_, names)) => names.push(what),
                None => reasons.push((why, vec![what])),
            }
        }
        let last = reasons.len();
        reasons
            .into_iter()
            .enumerate()
            .map(|(i, (why, names))| {
                let more = if i + 1 == last && d.more > 0 {
                    format!(" (and {} more)", d.more)
                } else {
                    String::new()
                };
                format!("egress denied: {}: {why}{more}", names.join(", "))
            })
            .collect()
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
            if denied.names.iter().any(|(w, _)| *w == what) {
                return;
            }
            if denied.names.len() < SUMMARY_NAMES {
                // A DNS decision's detail is its record type: the reason a
                // name is not answered is that no rule names it.
                let why = if d.protocol == decision::Protocol::Dns && !d.detail.contains("refused")
                {
                    "no --allow-domain entry for this name (its query got NXDOMAIN)".to_string()
                } else {
                    d.detail.clone()
                };
                denied.names.push((what, why));
            } else {
                denied.more += 1;
            }
        }
    }
}

/// A refusal's reason as events carry it: its code, the addresses, and
/// the entry that would allow it under its field's profile key (each door
/// words the field its own way).
fn reason(r: &decision::Reason) -> warden_audit::Reason {
    warden_audit::Reason {
        code: r.code.as_str().to_string(),
        addresses: r.addresses.iter().map(ToString::to_string).collect(),
        allow: r.allow.as_ref().and_then(|(field, value)| {
            Some(warden_audit::WouldAllow {
                field: field.profile_key()?.to_string(),
                value: value.clone(),
            })
        }),
    }
}

/// The bus as the jail's event sink (lifecycle events).
pub struct BusSink(pub Arc<Bus>);

impl EventSink for BusSink {
    fn emit(&mut self, event: &Event) {
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

    #[test]
    fn emitted_written_before_the_writer_runs_is_written_at_once() {
        let got = Arc::new(AtomicU64::new(0));
        let bus = Bus::new("t", vec![Box::new(Slow(got.clone()))]);
        bus.emit_written(exited());
        assert_eq!(got.load(Ordering::SeqCst), 1);
    }
}

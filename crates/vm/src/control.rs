//! The supervisor's hold on a running VM sandbox: pause in place (the
//! VMM stops the guest's vCPUs; its memory stays in the host's RAM, and
//! shares may be mounted), pause to disk (the guest's memory and devices
//! saved to warden's state and the VMM ended, see [`crate::pause`]), and
//! resume, with the relay's channel moved to the restored VMM's.
//!
//! The relay ([`crate::backend`]) owns the VM; a [`Control`] asks it, and
//! the relay answers between two frames, so that nothing of the channel
//! is touched by two threads at once. While the guest does not run, what
//! the host sends it is held here ([`Link`]) and delivered on resume: the
//! VMM reads nothing from the channel meanwhile, and an ended VMM would
//! lose it. What a process reads from stdin in the moment of a pause to
//! disk may still be lost: bytes the ended VMM had taken from the socket
//! but not yet given the guest.

use crate::channel::{CutOff, Link, Writer};
use crate::machine::{Config, Machine};
use crate::wire::{Frame, CHUNK};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use warden_jail::spawn::ToInit;

/// Why a VM could not be paused or resumed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The VM is not served (it has not started, or it has ended).
    #[error("the VM is not running")]
    NotRunning,
    /// Refused: the VM runs on, untouched.
    #[error("this VM cannot be paused to disk: {0}; it goes on running (a pause in place, without saving to disk, still works)")]
    CannotSave(String),
    #[error("the VM is not paused")]
    NotPaused,
    #[error("the VM is paused already")]
    Paused,
    #[error("the VMM failed: {0}")]
    Failed(String),
    /// The paused VM could not be brought back; the sandbox ends.
    #[error("the paused VM could not be resumed ({0}); the sandbox ends")]
    Lost(String),
    #[error("the VM's relay did not answer")]
    NoAnswer,
    /// The paused VM was not resumed because a share is refused with a
    /// reason code (`share_link`, `share_changed`, `share_unreadable`),
    /// found before anything
    /// of its saved state was touched: nothing of it was served, and the
    /// VM stays paused to disk as it was, to resume once the share is
    /// back.
    #[error("the paused VM was not resumed ({0}); it stays paused to disk, and resumes once the share is what it was")]
    ShareRefused(crate::shares::ShareError),
}

/// How to pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// The guest's vCPUs stopped by its VMM, memory kept in the host's RAM.
    InPlace,
    /// The guest's memory and devices saved into this directory (made
    /// owner-only) and its VMM ended.
    ToDisk(PathBuf),
}

/// What the relay is asked.
#[derive(Debug)]
pub(crate) enum Op {
    Pause(How),
    Resume,
    /// The sandbox stops: a guest paused in place runs again (so that its
    /// processes can be ended); one paused to disk is not brought back,
    /// its state removed, and the relay ends.
    Discard,
}

pub(crate) type Answer = SyncSender<Result<&'static str, ControlError>>;

/// What feeds the relay's loop.
pub(crate) enum Input {
    Vm(Frame),
    /// The channel of the VMM whose reader had this number ended
    /// (`u64::MAX`: every reader is gone).
    VmGone(u64),
    Request(ToInit, Vec<OwnedFd>),
    RequestsGone,
    /// The supervisor's pause or resume ([`crate::control`]).
    Control(Op, Answer),
}

/// How long a pause or resume may take (a save writes the guest's whole
/// memory; a restore under emulation takes seconds).
const ANSWER_WITHIN: Duration = Duration::from_secs(180);

/// A handle on the running VM of one sandbox, for its supervisor. Empty
/// until the VM's relay serves, and again once it has ended.
#[derive(Clone, Default)]
pub struct Control(Arc<Inner>);

#[derive(Default)]
struct Inner {
    relay: Mutex<Option<SyncSender<Input>>>,
    /// The VMM's PID (its keeper's) while one runs; 0 while none does.
    vmm: AtomicU32,
    /// A VM paused to disk by a supervisor that is gone, or a copy of
    /// another's saved memory: the VM is restored from here instead of
    /// started ([`Control::restore_from`], [`Control::restore_copy_from`]).
    restore: Mutex<Option<Restore>>,
}

/// Where a VM is restored from instead of being started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Restore {
    /// Its own pause to disk: its processes go on as they were.
    Paused(PathBuf),
    /// Another VM's saved state (a fork's, a snapshot's): restored as a
    /// copy, reseeded and given this sandbox's hostname and the host's
    /// clock before its processes run again.
    Copy(PathBuf),
}

impl Control {
    fn ask(&self, op: Op) -> Result<&'static str, ControlError> {
        let (tx, rx) = sync_channel(1);
        // Sent without the lock held: the relay's queue is bounded, and
        // a relay that ends takes the lock to say so.
        let relay = {
            let relay = self.0.relay.lock().map_err(|_| ControlError::NoAnswer)?;
            relay.as_ref().ok_or(ControlError::NotRunning)?.clone()
        };
        relay
            .send(Input::Control(op, tx))
            .map_err(|_| ControlError::NotRunning)?;
        rx.recv_timeout(ANSWER_WITHIN)
            .map_err(|_| ControlError::NoAnswer)?
    }

    /// Pause the VM `how`; returns what holds it, in words.
    pub fn pause(&self, how: How) -> Result<&'static str, ControlError> {
        self.ask(Op::Pause(how))
    }

    /// Let a paused VM run again (restored, when it was paused to disk).
    pub fn resume(&self) -> Result<(), ControlError> {
        self.ask(Op::Resume).map(drop)
    }

    /// The sandbox stops (see [`Op::Discard`]).
    pub fn discard(&self) -> Result<(), ControlError> {
        self.ask(Op::Discard).map(drop)
    }

    /// The PID of the VMM's keeper, while a VMM runs (none while the VM
    /// is paused to disk, or before and after it runs).
    pub fn vmm_pid(&self) -> Option<u32> {
        Some(self.0.vmm.load(Ordering::SeqCst)).filter(|p| *p != 0)
    }

    /// The VM is not started but restored from `dir`, where a pause to
    /// disk left it (its supervisor then killed, or the host rebooted):
    /// asked before the backend runs.
    pub fn restore_from(&self, dir: PathBuf) {
        if let Ok(mut r) = self.0.restore.lock() {
            *r = Some(Restore::Paused(dir));
        }
    }

    /// The VM is not started but restored as a copy of the VM saved in
    /// `dir` (a fork's or a snapshot's memory), taking an identity of its
    /// own first: asked before the backend runs.
    pub fn restore_copy_from(&self, dir: PathBuf) {
        if let Ok(mut r) = self.0.restore.lock() {
            *r = Some(Restore::Copy(dir));
        }
    }

    pub(crate) fn take_restore(&self) -> Option<Restore> {
        self.0.restore.lock().ok().and_then(|mut r| r.take())
    }

    pub(crate) fn serve(&self, relay: SyncSender<Input>, vmm: u32) {
        if let Ok(mut r) = self.0.relay.lock() {
            *r = Some(relay);
        }
        self.0.vmm.store(vmm, Ordering::SeqCst);
    }

    pub(crate) fn set_vmm(&self, vmm: Option<u32>) {
        self.0.vmm.store(vmm.unwrap_or(0), Ordering::SeqCst);
    }

    pub(crate) fn end(&self) {
        if let Ok(mut r) = self.0.relay.lock() {
            *r = None;
        }
        self.0.vmm.store(0, Ordering::SeqCst);
    }
}

/// Where the guest is.
enum State {
    Running,
    InPlace,
    OnDisk(PathBuf),
}

/// What the relay does after an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum After {
    Serve,
    /// The sandbox ends as asked (its paused state discarded).
    End,
    /// The VM is gone and could not be brought back.
    Lost,
}

/// The VM as the relay holds it: its VMM (none while paused to disk), the
/// config it was started with (a restore starts its new VMM with it), the
/// writer every relay thread shares, and the reader of the current
/// VMM's channel.
pub(crate) struct Live {
    pub(crate) machine: Option<Machine>,
    pub(crate) config: Config,
    pub(crate) writer: Writer,
    tx: SyncSender<Input>,
    /// Which VMM's channel the reader reads: a reader of an ended one
    /// says so (its end is not the sandbox's).
    gen: u64,
    reader: Option<JoinHandle<Vec<u8>>>,
    /// Set when the reader's VMM is ended by a pause to disk: a reader
    /// waiting on the relay's full queue (the relay is the one saving)
    /// gives back the frames it holds instead of waiting.
    retired: Arc<AtomicBool>,
    /// The part of a frame the ended VMM's reader read last.
    rest: Vec<u8>,
    state: State,
    timeout: Duration,
    control: Option<Control>,
    /// The guest's answers to a release and a reattach of its shares,
    /// which its reader hands here, not to the relay (the relay is the
    /// one waiting for them).
    replies: Receiver<Frame>,
    replies_tx: SyncSender<Frame>,
    /// The guest gave its shares back before it was saved: it mounts
    /// them again once restored.
    released: bool,
    /// Why the guest was cut off, once it was (by the channel's reader or
    /// a write to the guest), for the relay to report.
    pub(crate) cut_off: CutOff,
}

impl Live {
    /// Hold `machine` (started with `config`); a restore waits at most
    /// `timeout`. Its channel's reader feeds `tx`, starting from `rest`
    /// (the part of a frame read last from the channel of the VMM the
    /// machine was restored from, if any).
    pub(crate) fn new(
        machine: Machine,
        config: Config,
        timeout: Duration,
        tx: SyncSender<Input>,
        rest: Vec<u8>,
    ) -> std::io::Result<Live> {
        let cut_off = CutOff::default();
        let writer = Arc::new(Mutex::new(Link::new(
            machine.stream.try_clone()?,
            cut_off.clone(),
        )));
        let reader = machine.stream.try_clone()?;
        let (replies_tx, replies) = sync_channel(REPLIES_MAX);
        let mut live = Live {
            machine: Some(machine),
            config,
            writer,
            tx,
            gen: 0,
            reader: None,
            retired: Arc::new(AtomicBool::new(false)),
            rest: Vec::new(),
            state: State::Running,
            timeout,
            control: None,
            replies,
            replies_tx,
            released: false,
            cut_off,
        };
        live.read(reader, rest);
        Ok(live)
    }

    fn read(&mut self, stream: UnixStream, rest: Vec<u8>) {
        let (tx, gen, replies) = (self.tx.clone(), self.gen, self.replies_tx.clone());
        self.retired = Arc::new(AtomicBool::new(false));
        let retired = self.retired.clone();
        let cut_off = self.cut_off.clone();
        self.reader = Some(std::thread::spawn(move || {
            read_vm(stream, rest, gen, Feed { tx, retired }, (replies, cut_off))
        }));
    }

    /// Whether the end of reader `gen` is the end of the current VMM.
    pub(crate) fn current(&self, gen: u64) -> bool {
        gen == self.gen || gen == u64::MAX
    }

    /// Served by `control` from now on, until [`Live::unserve`].
    pub(crate) fn serve(&mut self, control: &Control) {
        let pid = self.machine.as_ref().map(|m| m.pid()).unwrap_or(0);
        control.serve(self.tx.clone(), pid);
        self.control = Some(control.clone());
    }

    pub(crate) fn unserve(&mut self) {
        if let Some(c) = self.control.take() {
            c.end();
        }
    }

    /// Do `op`; the answer, and what the relay does next.
    pub(crate) fn control(&mut self, op: Op) -> (Result<&'static str, ControlError>, After) {
        match (op, &self.state) {
            (Op::Pause(_), State::InPlace | State::OnDisk(_)) => {
                (Err(ControlError::Paused), After::Serve)
            }
            (Op::Pause(How::InPlace), State::Running) => (self.stop(), After::Serve),
            (Op::Pause(How::ToDisk(dir)), State::Running) => (self.save(dir), After::Serve),
            (Op::Resume, State::Running) => (Err(ControlError::NotPaused), After::Serve),
            (Op::Resume | Op::Discard, State::InPlace) => (self.cont(), After::Serve),
            (Op::Resume, State::OnDisk(dir)) => {
                let dir = dir.clone();
                match self.restore(&dir) {
                    Ok(()) => (Ok("resumed"), After::Serve),
                    // Refused before the restore touched the saved state
                    // or started a VMM: the VM stays paused to disk, its
                    // channel held, for a resume once the share is back.
                    Err(e @ ControlError::ShareRefused(_)) => (Err(e), After::Serve),
                    Err(e) => (Err(e), After::Lost),
                }
            }
            (Op::Discard, State::OnDisk(dir)) => {
                let _ = warden_workspace::fsutil::remove_tree(dir);
                (Ok("discarded"), After::End)
            }
            (Op::Discard, State::Running) => (Ok("running"), After::Serve),
        }
    }

    fn hold(&self) {
        if let Ok(mut l) = self.writer.lock() {
            l.hold();
        }
    }

    fn release(&self, stream: Option<UnixStream>) {
        if let Ok(mut l) = self.writer.lock() {
            l.release(stream);
        }
    }

    fn qmp(&mut self, command: &str) -> Result<(), ControlError> {
        let m = self.machine.as_mut().ok_or(ControlError::NotRunning)?;
        let failed =
            |e: crate::machine::MachineError| ControlError::Failed(warden_jail::chain_str(&e));
        m.qmp()
            .map_err(failed)?
            .execute(command, None)
            .map_err(|e| failed(crate::machine::MachineError::Control(e)))
            .map(drop)
    }

    /// Pause in place: what the host sends is held first, so that no
    /// writer blocks on a guest that reads nothing.
    fn stop(&mut self) -> Result<&'static str, ControlError> {
        self.hold();
        if let Err(e) = self.qmp("stop") {
            self.release(None);
            return Err(e);
        }
        self.state = State::InPlace;
        Ok("the VMM (the guest's vCPUs stopped, its memory kept)")
    }

    fn cont(&mut self) -> Result<&'static str, ControlError> {
        self.qmp("cont")?;
        self.release(None);
        self.state = State::Running;
        Ok("resumed")
    }

    /// Pause to disk: refused (and running on, untouched) when the VMM
    /// cannot save the guest; otherwise the VMM ends, and the reader of
    /// its channel gives back the part of a frame it read last, which the
    /// restored VMM's channel completes.
    fn save(&mut self, dir: PathBuf) -> Result<&'static str, ControlError> {
        if self.machine.is_none() {
            return Err(ControlError::NotRunning);
        }
        if let Some(why) = crate::pause::unsaveable(&self.config) {
            return Err(ControlError::CannotSave(why));
        }
        let shares = crate::pause::has_shares(&self.config);
        if shares {
            self.release_shares()?;
        }
        self.hold();
        let Some(machine) = self.machine.as_mut() else {
            return Err(ControlError::NotRunning);
        };
        let saved = crate::pause::pause_to_disk(machine, &self.config, &dir);
        if let Err(e) = saved {
            let gone = self.machine.as_mut().is_none_or(|m| m.exited());
            self.release(None);
            // Still running: the guest takes its shares back.
            if shares && !gone {
                if let Some(why) = self.reattach(None) {
                    return Err(ControlError::Failed(why));
                }
            }
            let why = match e {
                crate::pause::PauseError::Refused(why) => {
                    return Err(ControlError::CannotSave(why))
                }
                e => warden_jail::chain_str(&e),
            };
            return Err(if gone {
                ControlError::Lost(why)
            } else {
                ControlError::Failed(why)
            });
        }
        self.released = shares;
        if let Some(m) = self.machine.take() {
            m.retire();
        }
        // The ended VMM's reader ends now, and what it says of its end is
        // not the sandbox's.
        self.gen += 1;
        self.retired.store(true, Ordering::SeqCst);
        self.rest = self
            .reader
            .take()
            .and_then(|r| r.join().ok())
            .unwrap_or_default();
        // Kept with the state: a new supervisor restoring it (this one
        // killed meanwhile) completes that frame too.
        crate::pause::keep_rest(&dir, &self.rest);
        if let Some(c) = &self.control {
            c.set_vmm(None);
        }
        self.state = State::OnDisk(dir);
        // The layer held to the disk budget goes back to the state with
        // the memory, so that the pause outlives this process whole.
        if let Some(held) = &self.config.workspace_held {
            if let Err(e) = held.sync() {
                // The VM is on disk all the same; its layer stays in this
                // supervisor's tmpfs and is written back at the stop.
                return Err(ControlError::Failed(format!(
                    "the VM is paused to disk, but its workspace layer stays in its supervisor's memory until the sandbox stops: {}",
                    warden_jail::chain_str(&e)
                )));
            }
        }
        Ok("disk (the guest's memory saved to the sandbox's state, its VMM ended)")
    }

    fn restore(&mut self, dir: &std::path::Path) -> Result<(), ControlError> {
        let lost = |e: &dyn std::error::Error| ControlError::Lost(warden_jail::chain_str(e));
        let m = crate::pause::restore(&self.config, dir, self.timeout).map_err(|e| match e {
            // Only a refusal before anything was touched leaves the VM
            // paused (any of them, each with its code: `share_link`,
            // `share_changed`, `share_unreadable`); a share refused later
            // would be a lost VM's.
            crate::pause::PauseError::Share(s) => ControlError::ShareRefused(s),
            e => lost(&e),
        })?;
        let (w, r) = match (m.stream.try_clone(), m.stream.try_clone()) {
            (Ok(w), Ok(r)) => (w, r),
            (Err(e), _) | (_, Err(e)) => return Err(lost(&e)),
        };
        let rest = std::mem::take(&mut self.rest);
        self.read(r, rest);
        if self.released {
            // Before anything the host held: the guest's processes go on
            // only once its shares are back.
            if let Some(why) = self.reattach(Some(&w)) {
                return Err(ControlError::Lost(why));
            }
            self.released = false;
        }
        self.release(Some(w));
        if let Some(c) = &self.control {
            c.set_vmm(Some(m.pid()));
        }
        self.machine = Some(m);
        self.state = State::Running;
        if let Some(held) = &self.config.workspace_held {
            held.mark();
        }
        let _ = warden_workspace::fsutil::remove_tree(dir);
        Ok(())
    }

    /// A VM restored by a supervisor other than the one that paused it:
    /// its guest mounts the shares it gave back before the save (new
    /// ones, behind the same devices), steps its clock and lets its
    /// processes go on. `Err` with why, when it cannot.
    /// Its saved state in `dir` goes either way; a guest that cannot is
    /// ended, never left half-restored.
    pub(crate) fn take_shares_back(
        &mut self,
        dir: &std::path::Path,
    ) -> Result<(), crate::pause::Unresumed> {
        let why = if crate::pause::has_shares(&self.config) {
            self.reattach(None)
        } else {
            None
        };
        let _ = warden_workspace::fsutil::remove_tree(dir);
        let Some(why) = why else {
            return Ok(());
        };
        if let Some(mut m) = self.machine.take() {
            m.stop(Duration::ZERO);
        }
        Err(crate::pause::Unresumed {
            why,
            kept: false,
            share: None,
        })
    }
}

/// How long the guest may take to give its shares back or take them again
/// (a freeze and a few unmounts or mounts, under emulation).
const SHARES_WITHIN: Duration = Duration::from_secs(90);

impl Live {
    /// Ask the guest for `frame` and wait for its answer of kind `answer`:
    /// `None` when it did as asked, else why not.
    fn ask_guest(
        &mut self,
        frame: Frame,
        answer: crate::wire::Kind,
        stream: Option<&UnixStream>,
    ) -> Option<String> {
        while self.replies.try_recv().is_ok() {}
        let written = match stream {
            Some(s) => {
                let mut s = s;
                frame.write_to(&mut s).map_err(|e| e.to_string())
            }
            None => match self.writer.lock() {
                Ok(mut l) => frame.write_to(&mut *l).map_err(|e| e.to_string()),
                Err(_) => Err("the channel's writer failed".into()),
            },
        };
        if let Err(e) = written {
            return Some(format!("cannot reach the guest ({e})"));
        }
        let deadline = std::time::Instant::now() + SHARES_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(f) if f.kind == answer => {
                    return f
                        .parse::<Option<String>>()
                        .unwrap_or_else(|e| Some(format!("the guest answered garbled ({e})")))
                }
                Ok(_) => {}
                Err(_) => {
                    return Some(format!(
                        "the guest did not answer within {} s",
                        SHARES_WITHIN.as_secs()
                    ))
                }
            }
        }
    }

    /// Have the guest freeze its processes and unmount its shares; refused
    /// (the guest as it was) with the guest's reason.
    fn release_shares(&mut self) -> Result<(), ControlError> {
        let frame = Frame::new(crate::wire::Kind::Release, 0, Vec::new());
        match self.ask_guest(frame, crate::wire::Kind::Released, None) {
            None => Ok(()),
            Some(why) if why.starts_with("the guest did not answer") => {
                // It may have released them meanwhile: it takes them back.
                let _ = self.reattach(None);
                Err(ControlError::Failed(why))
            }
            Some(why) => Err(ControlError::CannotSave(why)),
        }
    }

    /// Have the guest mount its shares again, step its clock to the
    /// host's and let its processes go on (through `stream`, a restored
    /// VMM's, when given).
    fn reattach(&mut self, stream: Option<&UnixStream>) -> Option<String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let r = crate::wire::Reattach {
            clock: (now.as_secs() as i64, now.subsec_nanos()),
            seed: None,
            hostname: None,
        };
        let frame = Frame::json(crate::wire::Kind::Reattach, 0, &r);
        self.ask_guest(frame, crate::wire::Kind::Reattached, stream)
            .map(|why| format!("the guest could not take its shares back: {why}"))
    }
}

impl Drop for Live {
    /// A sandbox that ends while paused to disk (its supervisor's spawn
    /// channel closed) is not brought back: its saved state goes.
    fn drop(&mut self) {
        if let State::OnDisk(dir) = &self.state {
            let _ = warden_workspace::fsutil::remove_tree(dir);
        }
    }
}

/// Most frames of the guest's held for the relay: its reader stops
/// reading the channel while they wait (the guest's writes then block in
/// the guest, the guest's own problem), so that what the host holds of
/// the guest's output is bounded (this many frames of at most
/// `MAX_PAYLOAD` bytes), whatever the guest sends and however slowly a
/// caller takes it.
pub(crate) const FRAMES_MAX: usize = 64;

/// The relay's queue as a channel's reader feeds it.
pub(crate) struct Feed {
    pub(crate) tx: SyncSender<Input>,
    /// See [`Live`]'s `retired`.
    pub(crate) retired: Arc<AtomicBool>,
}

/// What became of a frame fed to the relay.
enum Sent {
    Yes,
    /// The relay is gone.
    Gone,
    /// The queue was full and the reader's VMM retired: the frame back.
    Retired(Frame),
}

impl Feed {
    /// Wait while the queue is full (the relay busy with a caller), but
    /// not for a relay that retired this reader's VMM: it is saving, and
    /// waits for this reader's end.
    fn send(&self, input: Input) -> Sent {
        let mut input = input;
        loop {
            match self.tx.try_send(input) {
                Ok(()) => return Sent::Yes,
                Err(TrySendError::Disconnected(_)) => return Sent::Gone,
                Err(TrySendError::Full(back)) => {
                    if self.retired.load(Ordering::SeqCst) {
                        return match back {
                            Input::Vm(f) => Sent::Retired(f),
                            _ => Sent::Gone,
                        };
                    }
                    input = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

/// Most answers about its shares (`Released`, `Reattached`) the guest
/// may have waiting; the relay asks one question at a time.
const REPLIES_MAX: usize = 4;

/// Read the frames of a VMM's channel, starting from `rest` (the part of
/// a frame the reader of the VMM before it read last), into `tx` (the
/// guest's share answers into `replies`, a cut for too many of them told
/// to `cut_off`); at its end, say so as reader `gen` and give back the
/// part of a frame read last.
pub(crate) fn read_vm(
    mut stream: UnixStream,
    mut rest: Vec<u8>,
    gen: u64,
    tx: Feed,
    (replies, cut_off): (SyncSender<Frame>, CutOff),
) -> Vec<u8> {
    use crate::wire::Kind;
    let mut chunk = vec![0u8; CHUNK + 64];
    loop {
        match crate::channel::frames(&mut rest) {
            Ok(frames) => {
                let mut frames = frames.into_iter();
                while let Some(f) = frames.next() {
                    if matches!(f.kind, Kind::Released | Kind::Reattached) {
                        // One answer per question: a guest that sends
                        // more than the queue holds, unasked, is cut off
                        // (its channel ends, and the sandbox with it).
                        match replies.try_send(f) {
                            Ok(()) => continue,
                            Err(TrySendError::Full(_)) => {
                                tracing::debug!(
                                    "the guest sent more than {REPLIES_MAX} unasked share answers; the VM is cut off"
                                );
                                // Told before the end is: the relay
                                // reports it when it sees the end.
                                cut_off.set(warden_audit::VmCut::UnaskedAnswers {
                                    answers: REPLIES_MAX as u64 + 1,
                                    bound: REPLIES_MAX as u64,
                                });
                                let _ = stream.shutdown(std::net::Shutdown::Both);
                                let _ = tx.send(Input::VmGone(gen));
                                return Vec::new();
                            }
                            Err(TrySendError::Disconnected(_)) => continue,
                        }
                    }
                    match tx.send(Input::Vm(f)) {
                        Sent::Yes => {}
                        Sent::Gone => return Vec::new(),
                        // Given back whole, ahead of the part read last:
                        // the restored VMM's reader delivers them first.
                        Sent::Retired(f) => {
                            let mut back = Vec::new();
                            for f in std::iter::once(f).chain(frames) {
                                let _ = f.write_to(&mut back);
                            }
                            back.extend_from_slice(&rest);
                            return back;
                        }
                    }
                }
            }
            // Garbled: the channel ends.
            Err(_) => {
                rest.clear();
                break;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => rest.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = tx.send(Input::VmGone(gen));
    rest
}

#[cfg(test)]
mod tests;

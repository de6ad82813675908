//! The output of commands whose caller keeps it in files of the sandbox's
//! state (the daemon's execs): the process writes into pipes, and a relay
//! here (the supervisor outlives the daemon) appends what comes to the
//! files while the sandbox's output budget lasts. When it runs out, the
//! kept outputs of commands that have ended are given up first, oldest
//! first (their bytes counted as dropped in their own notes), so that a
//! long-lived sandbox keeps its latest commands' output; only when nothing
//! ended is left to give up does a relay read on and drop, counting it. A
//! command is never held up by the budget, and the host's disk never gets
//! more than the budget from it.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The directory of a sandbox's kept command outputs, in its state
/// directory (the daemon writes its records there, the relay the bytes).
pub const EXECS_DIR: &str = "execs";

/// The output budget when the sandbox has no `--disk` (an older record).
const DEFAULT_BUDGET: u64 = 256 << 20;
/// The smallest output budget, whatever `--disk` is.
const MIN_BUDGET: u64 = 16 << 20;

/// What the kept outputs of a sandbox's commands may take on the host's
/// disk, together: a quarter of its `--disk`, at least 16 MiB.
pub fn budget_of(disk: Option<u64>) -> u64 {
    disk.map_or(DEFAULT_BUDGET, |d| (d / 4).max(MIN_BUDGET))
}

/// The output budget of the sandbox whose state directory is `dir`, from
/// its stored record.
pub fn budget_of_sandbox(dir: &Path) -> u64 {
    let stored: Option<crate::state::Stored> =
        crate::state::read_json(&dir.join(crate::state::STORED)).ok();
    budget_of(stored.and_then(|s| s.spec.filesystem.disk.map(|d| d.bytes)))
}

/// Whether `id` may name a command's kept output: letters, digits, `-`
/// and `_`, at most 64 (a name, never a path).
pub fn names_kept_output(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The files of command `id`'s kept output in the sandbox whose state
/// directory is `sandbox_dir`: its standard output's and its standard
/// error's. Every detached command keeps its output here, whoever started
/// it (the daemon's API, `warden exec -d`, `warden run -d`), relayed by the
/// sandbox's supervisor within the sandbox's output budget, so that one
/// reader serves them all.
pub fn kept_paths(sandbox_dir: &Path, id: &str) -> [PathBuf; 2] {
    let dir = sandbox_dir.join(EXECS_DIR);
    STREAMS.map(|suffix| dir.join(format!("{id}.{suffix}")))
}

/// What is known of a command whose output is kept, written beside its
/// output (`ID.exec`) by the relay when it starts and again when the
/// relays have taken all it wrote: which of the supervisor's execs it is,
/// so that a reader who did not start it (the daemon's API reading what
/// `warden exec -d` or `run -d` started) learns its end, and its status,
/// from the sandbox's event log as it does for its own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptExec {
    /// The supervisor's number for it (numbers start again with each
    /// start of the sandbox, hence the supervisor's PID and the time).
    pub exec: u64,
    pub supervisor_pid: u32,
    /// When it started, in milliseconds since the epoch.
    pub started_ms: u64,
    pub argv: Vec<String>,
    /// When its output relays ended: everything it wrote is in its files.
    #[serde(default)]
    pub drained_ms: Option<u64>,
}

impl KeptExec {
    /// The record of command `id` in the sandbox whose state directory is
    /// `sandbox_dir` (`None` for a name that is not a kept output's, or a
    /// command whose record is not there).
    pub fn read(sandbox_dir: &Path, id: &str) -> Option<KeptExec> {
        if !names_kept_output(id) {
            return None;
        }
        let path = sandbox_dir.join(EXECS_DIR).join(format!("{id}.exec"));
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// How it ended, once the sandbox's event log at `log` says so: its
    /// status and signal from its `exec_exited`. The log is read from its
    /// end back to the command's start (an earlier start's exec of the
    /// same number is older).
    pub fn exit_in(&self, log: &Path) -> Option<(i32, Option<i32>)> {
        let text = std::fs::read_to_string(log).ok()?;
        text.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<warden_audit::Event>(l).ok())
            // A second of slack: the start is stamped by the relay, the
            // events by the bus.
            .take_while(|e| e.ts_ms + 1000 >= self.started_ms)
            .find_map(|e| match e.kind {
                warden_audit::EventKind::ExecExited {
                    exec,
                    status,
                    signal,
                    ..
                } if exec == self.exec => Some((status, signal)),
                _ => None,
            })
    }

    /// Write it whole, owner-only (best effort: a record not written
    /// leaves the reader with what it had, never half of one).
    fn write(&self, dir: &Path, id: &str) {
        if let Ok(text) = serde_json::to_vec(self) {
            let _ = warden_protocol::replace_file(&dir.join(format!("{id}.exec")), &text, 0o600);
        }
    }
}

/// Create the files of command `id`'s kept output (new, owner-only,
/// appended to): what its caller hands the supervisor as the command's
/// standard output and error, with `keep_output: Some(id)`. With
/// `one_file`, both streams go into the standard output's file, in the
/// order they were written (the relay reads them from one pipe), and the
/// standard error's stays empty.
pub fn create_kept(
    sandbox_dir: &Path,
    id: &str,
    one_file: bool,
) -> std::io::Result<[std::fs::File; 2]> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(sandbox_dir.join(EXECS_DIR))?;
    let [out, err] = kept_paths(sandbox_dir, id);
    let create = |p: &Path| {
        std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(p)
    };
    let stdout = create(&out)?;
    let stderr = match one_file {
        true => {
            create(&err)?;
            stdout.try_clone()?
        }
        false => create(&err)?,
    };
    Ok([stdout, stderr])
}

/// A fresh name for a command whose output is kept: `ex-` and 16 hex
/// digits, the form the daemon's commands have.
pub fn new_exec_id() -> String {
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        bytes = (now ^ u64::from(std::process::id())).to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("ex-{hex}")
}

/// The bytes the files of `execs` (a sandbox's [`EXECS_DIR`]) hold.
pub fn kept_bytes(execs: &Path) -> u64 {
    std::fs::read_dir(execs)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The bytes of one read from a relayed pipe.
const READ: usize = 64 * 1024;
/// How often a relay that is dropping output rewrites its count.
const NOTE_EVERY: Duration = Duration::from_millis(500);

/// The sandbox's output budget, shared by all its relays.
pub(crate) struct OutputBudget {
    dir: PathBuf,
    total: u64,
    left: AtomicU64,
    /// Commands whose outputs are kept and which have ended, oldest
    /// first: what is given up when the budget runs out. Those kept by
    /// earlier starts of the sandbox (by their files' times), then those
    /// whose relays end in this one. Nothing else in the directory (a
    /// terminal's output the daemon writes itself) is ever given up.
    ended: Mutex<VecDeque<String>>,
}

/// The streams' file suffixes of a command's kept output.
const STREAMS: [&str; 2] = ["stdout", "stderr"];

/// The commands whose outputs are in `dir`, oldest first.
fn kept_commands(dir: &Path) -> VecDeque<String> {
    let mut found: Vec<(std::time::SystemTime, String)> = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((id, stream)) = name.rsplit_once('.') else {
            continue;
        };
        if !STREAMS.contains(&stream) || found.iter().any(|(_, f)| f == id) {
            continue;
        }
        let when = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        found.push((when, id.to_string()));
    }
    found.sort();
    found.into_iter().map(|(_, id)| id).collect()
}

impl OutputBudget {
    /// The budget of outputs kept in `dir`, less what is there already
    /// (kept by earlier starts of the sandbox).
    pub(crate) fn new(dir: PathBuf, total: u64) -> OutputBudget {
        let used = kept_bytes(&dir);
        let ended = Mutex::new(kept_commands(&dir));
        OutputBudget {
            dir,
            total,
            left: AtomicU64::new(total.saturating_sub(used)),
            ended,
        }
    }

    /// Take up to `n` bytes of the budget, giving up ended commands'
    /// outputs when it is short; returns how many it gave.
    fn take(&self, n: u64) -> u64 {
        let given = self.take_left(n);
        if given == n {
            return given;
        }
        self.give_up_ended(n - given);
        given + self.take_left(n - given)
    }

    /// Empty the kept outputs of ended commands, oldest first, until
    /// `need` bytes are back in the budget or none is left; each one's
    /// bytes are counted as dropped in its note.
    fn give_up_ended(&self, need: u64) {
        let Ok(mut ended) = self.ended.lock() else {
            return;
        };
        let mut freed = 0;
        while freed < need {
            let Some(id) = ended.pop_front() else { break };
            let mut cut = OutputCut::read(&self.dir, &id);
            let mut emptied = 0;
            for (stream, suffix) in STREAMS.iter().enumerate() {
                let path = self.dir.join(format!("{id}.{suffix}"));
                let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
                    continue;
                };
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                if len == 0 || file.set_len(0).is_err() {
                    continue;
                }
                emptied += len;
                if stream == 0 {
                    cut.stdout_dropped += len;
                } else {
                    cut.stderr_dropped += len;
                }
            }
            if emptied > 0 {
                cut.budget = self.total;
                write_cut(&self.dir.join(format!("{id}.cut")), &cut);
                self.left.fetch_add(emptied, Ordering::SeqCst);
                freed += emptied;
            }
        }
    }

    /// Take up to `n` bytes of what is left; returns how many it gave.
    fn take_left(&self, n: u64) -> u64 {
        let mut given = 0;
        let _ = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                given = left.min(n);
                Some(left - given)
            });
        given
    }

    /// Relay the output of the command kept as `id` (the supervisor's
    /// exec `exec`, running `argv`) into `files` (its stdout and stderr):
    /// returns the pipes' write ends, for the process, and what tells when
    /// the relays have taken all of it. Its [`KeptExec`] record is written
    /// now, and again when the relays end.
    pub(crate) fn relay(
        self: &Arc<Self>,
        id: &str,
        exec: u64,
        argv: &[String],
        files: [OwnedFd; 2],
    ) -> Result<([OwnedFd; 2], Drain), String> {
        if !names_kept_output(id) {
            return Err(format!(
                "{id:?} cannot name a command's kept output (letters, digits, '-' and '_', at most 64)"
            ));
        }
        // The note goes beside the daemon's outputs, whoever keeps these.
        let _ = std::fs::create_dir_all(&self.dir);
        let note = Arc::new(Note {
            path: self.dir.join(format!("{id}.cut")),
            total: self.total,
            dropped: [AtomicU64::new(0), AtomicU64::new(0)],
            written: std::sync::Mutex::new(None),
        });
        let mut ends = Vec::with_capacity(2);
        let drain = Drain::default();
        // Dropped with the last of the command's relays: its outputs may
        // then be given up for newer ones.
        let record = KeptExec {
            exec,
            supervisor_pid: std::process::id(),
            started_ms: crate::state::now_ms(),
            argv: argv.to_vec(),
            drained_ms: None,
        };
        record.write(&self.dir, id);
        let ended = Arc::new(Ended {
            budget: self.clone(),
            id: id.to_string(),
            record,
        });
        // One file for both (`run -d`'s output.log): one pipe and one relay,
        // so that what the two streams write stays in the order written
        // (counted as standard output's).
        let same = match (
            nix::sys::stat::fstat(&files[0]),
            nix::sys::stat::fstat(&files[1]),
        ) {
            (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
            _ => false,
        };
        let files: Vec<OwnedFd> = if same {
            files.into_iter().take(1).collect()
        } else {
            files.into()
        };
        for (stream, file) in files.into_iter().enumerate() {
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| format!("cannot make a pipe for a command's output: {e}"))?;
            let (budget, note, running) = (self.clone(), note.clone(), drain.started());
            let ended = ended.clone();
            std::thread::Builder::new()
                .name("warden-output".into())
                .stack_size(128 * 1024)
                .spawn(move || {
                    pump(&budget, &note, stream, r, file);
                    drop(ended);
                    drop(running);
                })
                .map_err(|e| format!("cannot start a relay for a command's output: {e}"))?;
            ends.push(w);
        }
        if same {
            if let Some(w) = ends.first() {
                let again = w
                    .try_clone()
                    .map_err(|e| format!("cannot share a command's output pipe: {e}"))?;
                ends.push(again);
            }
        }
        match <[OwnedFd; 2]>::try_from(ends) {
            Ok(ends) => Ok((ends, drain)),
            Err(_) => Err("the output relays did not start".into()),
        }
    }
}

/// The relays of one command still running: its end is told once they
/// have taken all it wrote (or a moment after, when something it left
/// behind keeps its output open).
#[derive(Clone, Default)]
pub(crate) struct Drain(Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>);

/// One relay running; dropped when it ends.
pub(crate) struct Running(Drain);

impl Drain {
    fn started(&self) -> Running {
        if let Ok(mut n) = self.0 .0.lock() {
            *n += 1;
        }
        Running(self.clone())
    }

    /// Wait until every relay has ended, at most `limit`.
    pub(crate) fn wait(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let Ok(mut n) = self.0 .0.lock() else {
            return;
        };
        while *n > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            n = match self.0 .1.wait_timeout(n, left) {
                Ok((n, _)) => n,
                Err(_) => return,
            };
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut n) = self.0 .0 .0.lock() {
            *n = n.saturating_sub(1);
        }
        self.0 .0 .1.notify_all();
    }
}

/// A command whose relays still run; when the last one ends, the command
/// joins the budget's ended ones.
struct Ended {
    budget: Arc<OutputBudget>,
    id: String,
    record: KeptExec,
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.record.drained_ms = Some(crate::state::now_ms());
        self.record.write(&self.budget.dir, &self.id);
        if let Ok(mut ended) = self.budget.ended.lock() {
            ended.push_back(std::mem::take(&mut self.id));
        }
    }
}

/// Write a command's note whole (best effort: a note not written leaves
/// the previous one, never half of one). Owner-only, as the outputs it
/// describes.
fn write_cut(path: &Path, cut: &OutputCut) {
    let Ok(text) = serde_json::to_vec(cut) else {
        return;
    };
    let _ = warden_protocol::replace_file(path, &text, 0o600);
}

/// What the relays of one command dropped, per stream, written beside its
/// outputs as `ID.cut` while it drops and at the end of each stream.
struct Note {
    path: PathBuf,
    total: u64,
    dropped: [AtomicU64; 2],
    written: std::sync::Mutex<Option<Instant>>,
}

/// What `ID.cut` holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputCut {
    /// Bytes of standard output dropped, past the budget.
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    /// The sandbox's output budget, in bytes.
    pub budget: u64,
}

impl OutputCut {
    /// What the relays of the command whose outputs are `dir/ID.*` have
    /// dropped so far (nothing when no note is there).
    pub fn read(dir: &Path, id: &str) -> OutputCut {
        std::fs::read(dir.join(format!("{id}.cut")))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }
}

impl Note {
    /// Rewrite the note (whole, by a rename), at most every
    /// [`NOTE_EVERY`] unless `now`.
    fn write(&self, now: bool) {
        let Ok(mut last) = self.written.lock() else {
            return;
        };
        if !now && last.is_some_and(|l| l.elapsed() < NOTE_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let cut = OutputCut {
            stdout_dropped: self.dropped[0].load(Ordering::SeqCst),
            stderr_dropped: self.dropped[1].load(Ordering::SeqCst),
            budget: self.total,
        };
        write_cut(&self.path, &cut);
    }
}

/// Copy what comes on `pipe` into `file` while the budget lasts; drop and
/// count the rest; end when every writer of the pipe has closed it.
fn pump(budget: &OutputBudget, note: &Note, stream: usize, pipe: OwnedFd, file: OwnedFd) {
    let mut pipe = std::fs::File::from(pipe);
    let mut file = std::fs::File::from(file);
    let mut buf = vec![0u8; READ];
    let mut writable = true;
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let kept = if writable {
            budget.take(n as u64) as usize
        } else {
            0
        };
        if kept > 0 && file.write_all(&buf[..kept]).is_err() {
            // The file cannot take more (its disk is full): what was not
            // written is dropped too, and counted.
            writable = false;
            budget.left.fetch_add(kept as u64, Ordering::SeqCst);
            note.dropped[stream].fetch_add(kept as u64, Ordering::SeqCst);
        }
        if kept < n {
            note.dropped[stream].fetch_add((n - kept) as u64, Ordering::SeqCst);
            note.write(false);
        }
    }
    if note.dropped[stream].load(Ordering::SeqCst) > 0 {
        note.write(true);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_a_quarter_of_the_disk_and_never_tiny() {
        assert_eq!(budget_of(Some(4 << 30)), 1 << 30);
        assert_eq!(budget_of(Some(1 << 20)), MIN_BUDGET);
        assert_eq!(budget_of(None), DEFAULT_BUDGET);
    }

    #[test]
    fn output_past_the_budget_is_dropped_counted_and_never_blocks_the_writer() {
        let dir = std::env::temp_dir().join(format!("warden-output-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("old.stdout"), vec![b'x'; 1000]).unwrap();
        let budget = Arc::new(OutputBudget::new(dir.clone(), 5000));
        let open = |name: &str| -> OwnedFd {
            std::fs::OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(dir.join(name))
                .unwrap()
                .into()
        };
        let ([out, err], drain) = budget
            .relay("ex-1", 1, &[], [open("ex-1.stdout"), open("ex-1.stderr")])
            .unwrap();
        let (mut out, mut err) = (std::fs::File::from(out), std::fs::File::from(err));
        // Far more than a pipe holds: a relay that stopped reading would
        // hold this writer up for ever.
        out.write_all(&vec![b'o'; 1 << 20]).unwrap();
        err.write_all(&vec![b'e'; 3000]).unwrap();
        drop((out, err));
        drain.wait(Duration::from_secs(10));
        let cut = OutputCut::read(&dir, "ex-1");
        let kept = std::fs::metadata(dir.join("ex-1.stdout")).unwrap().len()
            + std::fs::metadata(dir.join("ex-1.stderr")).unwrap().len();
        // The earlier start's output was given up for it, and says so.
        assert_eq!(kept, 5000, "{cut:?}");
        assert_eq!(
            cut.stdout_dropped + cut.stderr_dropped,
            (1 << 20) + 3000 - 5000,
            "{cut:?}"
        );
        assert_eq!(cut.budget, 5000);
        assert_eq!(std::fs::metadata(dir.join("old.stdout")).unwrap().len(), 0);
        assert_eq!(OutputCut::read(&dir, "old").stdout_dropped, 1000);
        assert!(
            relay_refuses("../x", &budget),
            "an id naming another path was taken"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_command_gets_the_output_of_the_oldest_ended_one_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("warden-output-old-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let budget = Arc::new(OutputBudget::new(dir.clone(), 4000));
        let run = |id: &str, bytes: usize| {
            let open = |name: String| -> OwnedFd {
                std::fs::OpenOptions::new()
                    .create_new(true)
                    .append(true)
                    .open(dir.join(name))
                    .unwrap()
                    .into()
            };
            let ([out, err], drain) = budget
                .relay(
                    id,
                    2,
                    &[],
                    [open(format!("{id}.stdout")), open(format!("{id}.stderr"))],
                )
                .unwrap();
            std::fs::File::from(out)
                .write_all(&vec![b'o'; bytes])
                .unwrap();
            drop(err);
            drain.wait(Duration::from_secs(10));
        };
        run("ex-1", 3000);
        // A terminal's output the daemon writes itself, while it runs.
        std::fs::write(dir.join("term.stdout"), vec![b't'; 500]).unwrap();
        run("ex-2", 3000);
        let len = |name: &str| std::fs::metadata(dir.join(name)).unwrap().len();
        assert_eq!(len("ex-2.stdout"), 3000);
        assert_eq!(len("ex-1.stdout"), 0);
        assert_eq!(OutputCut::read(&dir, "ex-1").stdout_dropped, 3000);
        assert_eq!(OutputCut::read(&dir, "ex-2"), OutputCut::default());
        assert_eq!(
            len("term.stdout"),
            500,
            "a running terminal's output was given up"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn two_streams_into_one_file_keep_the_order_they_were_written_in() {
        let dir = std::env::temp_dir().join(format!("warden-output-one-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let budget = Arc::new(OutputBudget::new(dir.clone(), 1 << 20));
        let log = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(dir.join("output.log"))
            .unwrap();
        let again = log.try_clone().unwrap();
        let ([out, err], drain) = budget
            .relay("run", 1, &[], [log.into(), again.into()])
            .unwrap();
        let (mut out, mut err) = (std::fs::File::from(out), std::fs::File::from(err));
        let mut expected = Vec::new();
        for i in 0..200 {
            let line = format!("{i}\n");
            if i % 2 == 0 {
                out.write_all(line.as_bytes()).unwrap();
            } else {
                err.write_all(line.as_bytes()).unwrap();
            }
            expected.extend_from_slice(line.as_bytes());
        }
        drop((out, err));
        drain.wait(Duration::from_secs(10));
        assert_eq!(std::fs::read(dir.join("output.log")).unwrap(), expected);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_kept_commands_record_names_its_exec_and_says_when_its_output_is_all_there() {
        let dir = std::env::temp_dir().join(format!("warden-output-rec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(EXECS_DIR)).unwrap();
        let budget = Arc::new(OutputBudget::new(dir.join(EXECS_DIR), 1 << 20));
        let [out, err] = create_kept(&dir, "ex-7", false).unwrap();
        let argv = vec!["echo".to_string(), "hi".to_string()];
        let ([w_out, w_err], drain) = budget
            .relay("ex-7", 7, &argv, [out.into(), err.into()])
            .unwrap();
        let running = KeptExec::read(&dir, "ex-7").unwrap();
        assert_eq!((running.exec, running.argv.clone()), (7, argv));
        assert_eq!(running.supervisor_pid, std::process::id());
        assert_eq!(running.drained_ms, None);
        std::fs::File::from(w_out).write_all(b"hi\n").unwrap();
        drop(w_err);
        drain.wait(Duration::from_secs(10));
        let done = KeptExec::read(&dir, "ex-7").unwrap();
        assert!(done.drained_ms.is_some(), "{done:?}");
        assert_eq!(
            std::fs::read(dir.join("execs/ex-7.stdout")).unwrap(),
            b"hi\n"
        );

        // Its end is the latest `exec_exited` of its number, never an
        // earlier start's.
        let log = dir.join("audit.jsonl");
        let exited = |ts_ms: u64, status: i32| {
            let e = warden_audit::Event {
                ts_ms,
                sandbox: "box".into(),
                kind: warden_audit::EventKind::ExecExited {
                    exec: 7,
                    status,
                    signal: None,
                    duration_ms: 1,
                },
            };
            serde_json::to_string(&e).unwrap() + "\n"
        };
        std::fs::write(&log, exited(done.started_ms - 60_000, 3)).unwrap();
        assert_eq!(done.exit_in(&log), None);
        let both = exited(done.started_ms - 60_000, 3) + &exited(done.started_ms + 5, 0);
        std::fs::write(&log, both).unwrap();
        assert_eq!(done.exit_in(&log), Some((0, None)));
        // A name that is not a kept output's reads nothing.
        assert_eq!(KeptExec::read(&dir, "../ex-7"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn relay_refuses(id: &str, budget: &Arc<OutputBudget>) -> bool {
        let null = || -> OwnedFd { std::fs::File::open("/dev/null").unwrap().into() };
        budget.relay(id, 1, &[], [null(), null()]).is_err()
    }
}

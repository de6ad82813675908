//! The audit log: one JSON object per line, each carrying its place in the
//! log (`seq`), the hash of the record before it (`prev`) and its own hash
//! (`hash`), so that an edited, removed or reordered record breaks the chain
//! where it happened.
//!
//! A record's hash is SHA-256 over the exact bytes of the line without its
//! hash: the line is written as `{"seq":N,"prev":"…",<event fields>}` and
//! then `,"hash":"<hex>"}` is put before the closing brace, so verification
//! needs no canonical form of JSON, only the bytes on disk.
//!
//! Records are written one at a time as events happen, each with a single
//! `write` to a file opened for appending, and nothing is buffered: a writer
//! killed at any moment (SIGKILL, the host's OOM killer) leaves every record
//! it emitted whole on the file. Nothing is forced to disk per record.
//!
//! A chain alone cannot show that records were cut from the end (a prefix of
//! a valid chain is valid). So a *head* file next to the log (`FILE.head`)
//! remembers how far the log went and whether
//! a writer is still at it: a writer that opens the log records
//! `{"records":N,"hash":"<hash of record N-1>","open":true,"pid":P}`, and
//! the same with `"open":false` (no pid) when it closes. A log holding fewer
//! records than its head remembers, or another record where the head's is,
//! was cut or rewritten; a log whose head is still open (or is behind its
//! end) was being written when its writer stopped, which is *unfinished*,
//! not tampered. A writer refuses to append to a cut or rewritten log, and
//! continues one whose writer died.
//!
//! The head is rewritten in place: always [`HEAD_WIDTH`] bytes (the JSON,
//! spaces, a newline) with one positioned write at offset 0, so a new
//! version covers the old one entirely and lies inside the file's first
//! disk sector. Replacing it by a temporary file and a rename (as before)
//! cost a new inode, a freed one and, on ext4, the writeback the rename over
//! an existing file starts (`auto_da_alloc`) on every run; in place, a run
//! creates one head file and writes it twice. A crash can lose the last
//! write (the head then says the writer was still at it: *unfinished*, not
//! tampered) and can leave a new log's head empty (it then vouches for
//! nothing, as a log without a head). A reader racing the write is told
//! apart by reading the head until two reads agree.
//!
//! Somebody who can rewrite both files on
//! the host can forge history; keeping a copy of the head elsewhere (or
//! shipping events to a collector) is the answer to that, and out of this
//! module's reach.

use crate::{Event, EventSink};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Why the audit log cannot be opened or appended to.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error("cannot open audit log {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read audit log {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the head file {path} of an audit log")]
    WriteHead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the head file {path} of an audit log is not a plain file of its own (a link, or a file with another name too); remove it, check the log with `warden audit verify`, and start a new log")]
    HeadNotPlain { path: PathBuf },
    #[error("audit log {path} does not end with a valid record ({why}); check it with `warden audit verify {path}` and start a new log")]
    BadTail { path: PathBuf, why: String },
    #[error("audit log {path} is being written by another warden; give this run another log")]
    Busy { path: PathBuf },
    #[error("audit log {path} no longer holds the {records} records its head file remembers: it was truncated or rewritten; check it with `warden audit verify {path}` and start a new log")]
    Truncated { path: PathBuf, records: u64 },
}

/// The size of every head this writer writes: its JSON (at most about 130
/// bytes), padded with spaces, and a newline.
pub const HEAD_WIDTH: usize = 192;

/// Where a log's head is kept.
pub fn head_path(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(".head");
    PathBuf::from(p)
}

/// How far a log went, as its head file remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// Records in the log (the next record's `seq`).
    pub records: u64,
    /// The hash of record `records - 1` ([`GENESIS`] for none).
    pub hash: String,
    /// A writer had the log open and had not closed it.
    pub open: bool,
    /// That writer's process ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// A record as stored: its place in the chain and the event. Reading one
/// checks nothing; [`verify`] does that.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    pub prev: String,
    #[serde(flatten)]
    pub event: Event,
    pub hash: String,
}

impl Record {
    /// Read one line of a log.
    pub fn parse(line: &str) -> Result<Record, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// The hash-chained log, as a sink.
pub struct ChainedLog {
    file: File,
    /// The head file, open for rewriting in place.
    head: File,
    path: PathBuf,
    /// The next record's `seq`.
    seq: u64,
    prev: String,
    /// The head file describes the log as closed at its end.
    head_final: bool,
    /// The first record that could not be written (nothing is appended
    /// after it).
    failed: Option<String>,
    /// Bytes appended since it was opened.
    written: u64,
}

impl ChainedLog {
    /// Open (or create) the log at `path` for appending, and record in its
    /// head that a writer has it open; new records chain onto its last one
    /// (also when the last writer died before closing). Refuses a log whose
    /// last line is not a valid record or that lost records its head file
    /// remembers.
    ///
    /// Cost on a run's start-up: the last line is read from the end, and
    /// the head is checked against it; only after a writer that died is the
    /// log read up to the head's record. One small file is written and
    /// renamed; nothing is synced.
    pub fn open(path: &Path) -> Result<ChainedLog, ChainError> {
        /// How long a writer waits for another that is appending a record.
        const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
        const LOCK_STEP: std::time::Duration = std::time::Duration::from_millis(10);
        let open_err = |source| ChainError::Open {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(open_err)?;
        // One writer per log: two would chain onto the same record. The
        // kernel drops the lock when a writer dies, however it dies. A
        // writer that appends one record and closes (a named sandbox's
        // `create`, a commit) holds it for moments: waited for, briefly; a
        // writer that keeps the log (another run) is refused.
        let mut waited = std::time::Duration::ZERO;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if waited < LOCK_GRACE => {
                    std::thread::sleep(LOCK_STEP);
                    waited += LOCK_STEP;
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(ChainError::Busy {
                        path: path.to_path_buf(),
                    })
                }
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(ChainError::Open {
                        path: path.to_path_buf(),
                        source,
                    })
                }
            }
        }
        let last = last_line(&mut file).map_err(|source| ChainError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let (seq, prev) = match last {
            None => (0, GENESIS.to_string()),
            Some(line) => {
                let r = check_record(&line).map_err(|why| ChainError::BadTail {
                    path: path.to_path_buf(),
                    why,
                })?;
                (r.seq + 1, r.hash)
            }
        };
        let mut head_file = open_head(path)?;
        // Read from the file just opened: no other writer rewrites it while
        // this one holds the log's lock.
        let mut head_text = String::new();
        let head = match head_file.read_to_string(&mut head_text) {
            Ok(_) => parse_head(&head_text),
            Err(_) => None,
        };
        if let Some(head) = head {
            // The head's record must still be there: at the end (the last
            // writer closed, or died before writing anything), or before it
            // (the last writer died after writing).
            let holds = if head.records == seq {
                head.hash == prev
            } else if head.records == 0 {
                head.hash == GENESIS
            } else {
                head.records < seq
                    && record_hash_at(path, head.records - 1).as_deref() == Some(&head.hash)
            };
            if !holds {
                return Err(ChainError::Truncated {
                    path: path.to_path_buf(),
                    records: head.records,
                });
            }
        }
        let mut log = ChainedLog {
            file,
            head: head_file,
            path: path.to_path_buf(),
            seq,
            prev,
            head_final: false,
            failed: None,
            written: 0,
        };
        log.write_head(true)
            .map_err(|source| ChainError::WriteHead {
                path: head_path(path),
                source,
            })?;
        Ok(log)
    }

    /// Append one record, or say why it could not be (the log is left as
    /// it was).
    pub fn append(&mut self, event: &Event) -> std::io::Result<()> {
        // The event's own JSON, its opening brace replaced by the chain's
        // fields: `{"seq":N,"prev":"…",<event fields>}`.
        // What the sandbox chose is bounded on every record (`bound.rs`).
        // Control and format characters are written as escapes
        // (`crate::json`): a person reading the log with a pager sees them
        // as such. The hash covers the line's bytes, whatever they are, so
        // records an older warden wrote with them raw verify as they are.
        let event = crate::json::to_string(&*crate::bound::bounded_event(event))
            .map_err(std::io::Error::from)?;
        let fields = event
            .strip_prefix('{')
            .ok_or_else(|| std::io::Error::other("an event is not a JSON object"))?;
        let mut line = format!("{{\"seq\":{},\"prev\":\"{}\",{fields}", self.seq, self.prev);
        let hash = hex(&Sha256::digest(line.as_bytes()));
        line.pop();
        line.push_str(&format!(",\"hash\":\"{hash}\"}}\n"));
        // One write per record, to a file opened for appending and not
        // buffered: the record is on the file (in the page cache) when this
        // returns, whatever happens to the writer next.
        self.file.write_all(line.as_bytes())?;
        self.written += line.len() as u64;
        self.seq += 1;
        self.prev = hash;
        self.head_final = false;
        Ok(())
    }

    /// Rewrite the head file with the log's state now, in place (see the
    /// module's documentation). Nothing is forced to disk: a run does not
    /// wait for the disk; on ext4's default ordered mode the log's records
    /// reach the disk no later than the head's new bytes.
    fn write_head(&mut self, open: bool) -> std::io::Result<()> {
        let head = Head {
            records: self.seq,
            hash: self.prev.clone(),
            open,
            pid: open.then(std::process::id),
        };
        let mut text = serde_json::to_string(&head).map_err(std::io::Error::from)?;
        let pad = HEAD_WIDTH.saturating_sub(text.len() + 1);
        text.extend(std::iter::repeat_n(' ', pad));
        text.push('\n');
        self.head.write_all_at(text.as_bytes(), 0)?;
        if open {
            // A longer head of another writer's would leave its end behind.
            self.head.set_len(text.len() as u64)?;
        }
        self.head_final = !open;
        Ok(())
    }

    /// Record in the head that the writer is done and where the log ends.
    /// Dropping the log does this too; call it to see the error.
    pub fn close(&mut self) -> std::io::Result<()> {
        if self.head_final {
            return Ok(());
        }
        self.write_head(false)
    }
}

impl EventSink for ChainedLog {
    fn emit(&mut self, event: &Event) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self.append(event) {
            self.failed = Some(format!(
                "cannot write the {} record to the audit log {}: {e}",
                event.kind.name(),
                self.path.display()
            ));
        }
    }

    fn failure(&self) -> Option<String> {
        self.failed.clone()
    }

    fn bytes_written(&self) -> u64 {
        self.written
    }
}

impl Drop for ChainedLog {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!("cannot finish the audit log {}: {e}", self.path.display());
        }
    }
}

/// The audit log, opened by its first record instead of up front: a run
/// opens it while the sandbox's root is being built (its first record,
/// `created`, is written then), off the path to the command's start. A log
/// that cannot be opened is this sink's [`EventSink::failure`], which the
/// supervisor checks before it lets the command start, so nothing runs
/// unrecorded; records after such a failure go nowhere.
pub struct DeferredLog {
    path: PathBuf,
    state: Deferred,
}

enum Deferred {
    Waiting,
    Open(Box<ChainedLog>),
    Failed(String),
}

impl DeferredLog {
    /// The log at `path`, opened when the first record comes.
    pub fn new(path: &Path) -> DeferredLog {
        DeferredLog {
            path: path.to_path_buf(),
            state: Deferred::Waiting,
        }
    }
}

impl EventSink for DeferredLog {
    fn emit(&mut self, event: &Event) {
        if let Deferred::Waiting = self.state {
            self.state = match ChainedLog::open(&self.path) {
                Ok(log) => Deferred::Open(Box::new(log)),
                Err(e) => Deferred::Failed(error_chain(&e)),
            };
        }
        if let Deferred::Open(log) = &mut self.state {
            log.emit(event);
        }
    }

    fn failure(&self) -> Option<String> {
        match &self.state {
            Deferred::Waiting => None,
            Deferred::Open(log) => log.failure(),
            Deferred::Failed(why) => Some(why.clone()),
        }
    }

    fn bytes_written(&self) -> u64 {
        match &self.state {
            Deferred::Open(log) => log.bytes_written(),
            _ => 0,
        }
    }
}

/// An error and its causes, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Lower-case hex, without a formatting call per byte (it runs for every
/// record the proxy's connections write).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// The last non-empty line of a file (read from its end).
fn last_line(file: &mut File) -> std::io::Result<Option<String>> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(None);
    }
    let mut back = 4096u64.min(len);
    loop {
        file.seek(SeekFrom::Start(len - back))?;
        let mut buf = Vec::with_capacity(back as usize);
        Read::by_ref(file).take(back).read_to_end(&mut buf)?;
        let trimmed = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if let Some(at) = trimmed.iter().rposition(|b| *b == b'\n') {
            return Ok(Some(
                String::from_utf8_lossy(&trimmed[at + 1..]).into_owned(),
            ));
        }
        if back == len {
            return Ok(Some(String::from_utf8_lossy(trimmed).into_owned()));
        }
        back = (back * 2).min(len);
    }
}

/// Open (or create) a log's head file for rewriting in place. It must be a
/// plain file of its own: a symbolic link is not followed (`O_NOFOLLOW`) and
/// a file with another name (a hard link) is refused, so that rewriting the
/// head never writes into another file.
fn open_head(log: &Path) -> Result<File, ChainError> {
    let path = head_path(log);
    let write_err = |source| ChainError::WriteHead {
        path: path.clone(),
        source,
    };
    let file = OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(write_err)?;
    let meta = file.metadata().map_err(write_err)?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(ChainError::HeadNotPlain { path });
    }
    Ok(file)
}

/// The head file, in its current form or the form before writers recorded
/// themselves (`SEQ HASH`, written only at close). A missing or unreadable
/// head is none: it vouches for nothing.
fn read_head(path: &Path) -> Option<Head> {
    // A writer rewrites the head in place: a read that raced its write can
    // hold parts of two versions. Two reads that agree did not.
    let mut text = std::fs::read_to_string(path).ok()?;
    for _ in 0..8 {
        let again = std::fs::read_to_string(path).ok()?;
        if again == text {
            break;
        }
        text = again;
    }
    parse_head(&text)
}

/// A head's text, in either form.
fn parse_head(text: &str) -> Option<Head> {
    let text = text.trim();
    if text.starts_with('{') {
        return serde_json::from_str(text).ok();
    }
    let (seq, hash) = text.split_once(' ')?;
    Some(Head {
        records: seq.parse::<u64>().ok()?.checked_add(1)?,
        hash: hash.to_string(),
        open: false,
        pid: None,
    })
}

/// The hash of record `seq` of the log, if it has one.
fn record_hash_at(path: &Path, seq: u64) -> Option<String> {
    let f = File::open(path).ok()?;
    BufReader::new(f)
        .lines()
        .nth(usize::try_from(seq).ok()?)?
        .ok()
        .and_then(|l| check_record(&l).ok())
        .filter(|r| r.seq == seq)
        .map(|r| r.hash)
}

/// One record, checked on its own: its stored hash is the hash of its
/// bytes.
struct Checked {
    seq: u64,
    prev: String,
    hash: String,
}

fn check_record(line: &str) -> Result<Checked, String> {
    const TAIL: usize = ",\"hash\":\"\"}".len() + 64;
    if line.len() < TAIL || !line.ends_with("\"}") || !line.is_char_boundary(line.len() - TAIL) {
        return Err("it does not end with its hash".into());
    }
    let split = line.len() - TAIL;
    let (body, tail) = line.split_at(split);
    let stored = tail
        .strip_prefix(",\"hash\":\"")
        .and_then(|t| t.strip_suffix("\"}"))
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or("it does not end with its hash")?;
    let computed = hex(&Sha256::digest(format!("{body}}}").as_bytes()));
    if computed != stored {
        return Err("its content does not match its hash (it was edited)".into());
    }
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("it is not JSON: {e}"))?;
    let seq = v["seq"].as_u64().ok_or("it has no seq")?;
    let prev = v["prev"].as_str().ok_or("it has no prev")?.to_string();
    Ok(Checked {
        seq,
        prev,
        hash: stored.to_string(),
    })
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every record is intact and in place, and the last writer closed the
    /// log; `head` says whether a head file vouched for the end.
    Intact { records: u64, head: bool },
    /// Every record is intact and in place, and the log holds everything
    /// its head remembers, but its writer never closed it: it is still
    /// writing, or it stopped (was killed) after record `last_seq` (none:
    /// before its first record).
    Unfinished { records: u64, last_seq: Option<u64> },
    /// The first record that is not what it should be: its line number
    /// (from 1) and what is wrong.
    Broken { line: u64, why: String },
}

/// Check a whole log: every record's hash, the chain from the first record
/// on, and the head file when there is one.
pub fn verify(path: &Path) -> Result<Verdict, ChainError> {
    let f = File::open(path).map_err(|source| ChainError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let head = read_head(&head_path(path));
    let mut reader = BufReader::new(f);
    let mut buf = Vec::new();
    let mut prev = GENESIS.to_string();
    let mut count = 0u64;
    // The hash after the head's number of records, once the log got there.
    let mut at_head: Option<String> = head
        .as_ref()
        .filter(|h| h.records == 0)
        .map(|_| GENESIS.to_string());
    let mut partial: Option<u64> = None;
    loop {
        buf.clear();
        let read = reader
            .read_until(b'\n', &mut buf)
            .map_err(|source| ChainError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        if read == 0 {
            break;
        }
        let n = count + 1;
        // A writer writes each record with its newline in one write: a last
        // line without one is a record being written as this reads (or cut
        // by a crash in that write), not a record; what it means is decided
        // below by the head.
        if !buf.ends_with(b"\n") {
            partial = Some(n);
            break;
        }
        let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let Ok(line) = std::str::from_utf8(bytes) else {
            return Ok(Verdict::Broken {
                line: n,
                why: "it is not UTF-8 text".into(),
            });
        };
        let r = match check_record(line) {
            Ok(r) => r,
            Err(why) => return Ok(Verdict::Broken { line: n, why }),
        };
        if r.seq != count {
            return Ok(Verdict::Broken {
                line: n,
                why: format!(
                    "it is record {} where record {count} belongs (records were removed or reordered)",
                    r.seq
                ),
            });
        }
        if r.prev != prev {
            return Ok(Verdict::Broken {
                line: n,
                why: "it does not follow the record before it (records were removed, reordered or replaced)".into(),
            });
        }
        prev = r.hash;
        count += 1;
        if head.as_ref().is_some_and(|h| h.records == count) {
            at_head = Some(prev.clone());
        }
    }
    if let Some(line) = partial {
        // Read the head again: a writer that opened the log after the first
        // read has said so by now.
        let closed_now = read_head(&head_path(path)).is_some_and(|h| !h.open && h.records <= count);
        if closed_now {
            return Ok(Verdict::Broken {
                line,
                why: "it is not a whole record, after the end its writer closed".into(),
            });
        }
    }
    let unfinished = Verdict::Unfinished {
        records: count,
        last_seq: count.checked_sub(1),
    };
    let Some(h) = head else {
        if partial.is_some() {
            return Ok(unfinished);
        }
        return Ok(Verdict::Intact {
            records: count,
            head: false,
        });
    };
    if count < h.records {
        return Ok(Verdict::Broken {
            line: count + 1,
            why: format!(
                "the log ends after {count} records but its head file remembers {}: records were cut from the end",
                h.records
            ),
        });
    }
    if at_head.as_deref() != Some(h.hash.as_str()) {
        return Ok(Verdict::Broken {
            line: h.records.max(1),
            why: "it is not the record the head file remembers (the log was rewritten)".into(),
        });
    }
    // A head behind the end that says closed was left by a writer from
    // before writers recorded themselves, which died: unfinished as well.
    if h.open || count > h.records || partial.is_some() {
        return Ok(unfinished);
    }
    Ok(Verdict::Intact {
        records: count,
        head: true,
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;
    use crate::EventKind;

    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "warden-chain-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn started(pid: i32) -> Event {
        Event::now("sb", EventKind::Started { pid })
    }

    fn write_log(path: &Path, n: i32) {
        let mut log = ChainedLog::open(path).unwrap();
        for pid in 0..n {
            log.emit(&started(pid));
        }
    }

    /// A writer that dies without closing: what SIGKILL leaves (the kernel
    /// drops the lock; nothing of the writer runs).
    fn write_and_die(path: &Path, n: i32) {
        let mut log = ChainedLog::open(path).unwrap();
        for pid in 0..n {
            log.emit(&started(pid));
        }
        log.file.unlock().unwrap();
        std::mem::forget(log);
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }

    fn rewrite(path: &Path, lines: &[String]) {
        std::fs::write(path, lines.join("\n") + "\n").unwrap();
    }

    fn head(path: &Path) -> Head {
        read_head(&head_path(path)).unwrap()
    }

    #[test]
    fn a_log_written_over_two_runs_verifies() {
        let d = Dir::new("ok");
        let p = d.0.join("a.jsonl");
        write_log(&p, 3);
        write_log(&p, 2);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 5,
                head: true
            }
        );
        let first = Record::parse(&lines(&p)[0]).unwrap();
        assert_eq!(first.seq, 0);
        assert_eq!(first.prev, GENESIS);
        assert_eq!(first.event.kind, EventKind::Started { pid: 0 });
    }

    #[test]
    fn a_log_with_decisions_of_both_shapes_verifies() {
        // A connection recorded before decisions carried their code, then
        // one that carries it: each record's hash is over its own bytes.
        let d = Dir::new("reasons");
        let p = d.0.join("a.jsonl");
        let connection = |reason: Option<crate::Reason>| {
            Event::now(
                "sb",
                EventKind::Connection {
                    protocol: crate::Protocol::Http,
                    conn: None,
                    name: Some("example.test".into()),
                    port: 80,
                    original_destination: None,
                    allowed: false,
                    rule: None,
                    detail: "plain HTTP is denied (only TLS goes to allowed names)".into(),
                    bytes_out: 0,
                    bytes_in: 0,
                    duration_ms: 0,
                    reason: reason.map(Box::new),
                },
            )
        };
        let mut log = ChainedLog::open(&p).unwrap();
        log.emit(&connection(None));
        log.emit(&connection(Some(crate::Reason {
            code: "plain_http".into(),
            field: Some("egress.allow_http".into()),
            addresses: Vec::new(),
            allow: None,
        })));
        log.close().unwrap();
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 2,
                head: true
            }
        );
        assert!(
            lines(&p)[1].contains(r#""reason":{"code":"plain_http","field":"egress.allow_http"}"#)
        );
    }

    #[test]
    fn each_record_is_on_the_file_when_it_is_emitted() {
        let d = Dir::new("live");
        let p = d.0.join("a.jsonl");
        let mut log = ChainedLog::open(&p).unwrap();
        log.emit(&started(1));
        assert_eq!(lines(&p).len(), 1);
        log.emit(&started(2));
        assert_eq!(lines(&p).len(), 2);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Unfinished {
                records: 2,
                last_seq: Some(1)
            }
        );
        log.close().unwrap();
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 2,
                head: true
            }
        );
    }

    #[test]
    fn an_open_writer_is_named_in_the_head_and_a_closed_one_is_not() {
        let d = Dir::new("head");
        let p = d.0.join("a.jsonl");
        write_log(&p, 2);
        let mut log = ChainedLog::open(&p).unwrap();
        let h = head(&p);
        assert!(h.open);
        assert_eq!(h.pid, Some(std::process::id()));
        assert_eq!(h.records, 2);
        log.emit(&started(9));
        log.close().unwrap();
        let h = head(&p);
        assert!(!h.open);
        assert_eq!(h.pid, None);
        assert_eq!(h.records, 3);
        assert_eq!(
            h.hash,
            Record::parse(&lines(&p)[2]).unwrap().hash,
            "the head remembers the last record"
        );
    }

    #[test]
    fn log_of_a_killed_writer_verifies_as_unfinished() {
        let d = Dir::new("killed");
        let p = d.0.join("a.jsonl");
        write_and_die(&p, 3);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Unfinished {
                records: 3,
                last_seq: Some(2)
            }
        );
        // Killed before its first record.
        let q = d.0.join("b.jsonl");
        write_and_die(&q, 0);
        assert_eq!(
            verify(&q).unwrap(),
            Verdict::Unfinished {
                records: 0,
                last_seq: None
            }
        );
    }

    #[test]
    fn a_second_writer_continues_a_killed_writers_log_and_closes_it_intact() {
        let d = Dir::new("continue");
        let p = d.0.join("a.jsonl");
        write_log(&p, 2);
        write_and_die(&p, 3);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Unfinished {
                records: 5,
                last_seq: Some(4)
            }
        );
        write_log(&p, 2);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 7,
                head: true
            }
        );
        let seqs: Vec<u64> = lines(&p)
            .iter()
            .map(|l| Record::parse(l).unwrap().seq)
            .collect();
        assert_eq!(seqs, (0..7).collect::<Vec<_>>());
    }

    /// Run as its own process by the test below, which kills it.
    #[test]
    fn helper_writer_that_waits_to_be_killed() {
        let Some(path) = std::env::var_os("WARDEN_CHAIN_KILL_ME") else {
            return;
        };
        let mut log = ChainedLog::open(Path::new(&path)).unwrap();
        for pid in 0..4 {
            log.emit(&started(pid));
        }
        println!("written");
        std::io::stdout().flush().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(60));
    }

    #[test]
    fn a_writer_process_killed_with_sigkill_leaves_an_unfinished_log_that_continues() {
        let d = Dir::new("sigkill");
        let p = d.0.join("a.jsonl");
        write_log(&p, 1);
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "chain::tests::helper_writer_that_waits_to_be_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("WARDEN_CHAIN_KILL_ME", &p)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("written") {
            line.clear();
            assert_ne!(out.read_line(&mut line).unwrap(), 0, "the writer ended");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Unfinished {
                records: 5,
                last_seq: Some(4)
            }
        );
        write_log(&p, 1);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 6,
                head: true
            }
        );
    }

    #[test]
    fn an_edited_record_is_named() {
        let d = Dir::new("edit");
        let p = d.0.join("a.jsonl");
        write_log(&p, 4);
        let mut l = lines(&p);
        l[2] = l[2].replace("\"pid\":2", "\"pid\":9");
        rewrite(&p, &l);
        assert!(
            matches!(verify(&p).unwrap(), Verdict::Broken { line: 3, ref why } if why.contains("edited"))
        );
        // Also in a log whose writer is still at it.
        let q = d.0.join("b.jsonl");
        write_and_die(&q, 4);
        let mut l = lines(&q);
        l[1] = l[1].replace("\"pid\":1", "\"pid\":7");
        rewrite(&q, &l);
        assert!(
            matches!(verify(&q).unwrap(), Verdict::Broken { line: 2, ref why } if why.contains("edited"))
        );
    }

    #[test]
    fn a_removed_or_reordered_record_is_named() {
        let d = Dir::new("del");
        let p = d.0.join("a.jsonl");
        write_log(&p, 4);
        let mut l = lines(&p);
        l.remove(1);
        rewrite(&p, &l);
        assert!(matches!(
            verify(&p).unwrap(),
            Verdict::Broken { line: 2, .. }
        ));

        let p = d.0.join("b.jsonl");
        write_log(&p, 4);
        let mut l = lines(&p);
        l.swap(1, 2);
        rewrite(&p, &l);
        assert!(matches!(
            verify(&p).unwrap(),
            Verdict::Broken { line: 2, .. }
        ));
    }

    #[test]
    fn a_cut_end_is_found_and_never_appended_to() {
        let d = Dir::new("trunc");
        let p = d.0.join("a.jsonl");
        write_log(&p, 4);
        let l = lines(&p);
        rewrite(&p, &l[..2]);
        assert!(
            matches!(verify(&p).unwrap(), Verdict::Broken { line: 3, ref why } if why.contains("cut from the end"))
        );
        // A writer does not chain new records onto the cut.
        assert!(matches!(
            ChainedLog::open(&p),
            Err(ChainError::Truncated { records: 4, .. })
        ));
        // Cut, then new records chained correctly onto the cut (as a forger
        // who recomputes hashes would): the head's record is not there.
        let q = d.0.join("b.jsonl");
        write_log(&q, 4);
        let head = std::fs::read_to_string(head_path(&q)).unwrap();
        let l = lines(&q);
        rewrite(&q, &l[..1]);
        std::fs::remove_file(head_path(&q)).unwrap();
        write_log(&q, 3);
        std::fs::write(head_path(&q), head).unwrap();
        assert_eq!(lines(&q).len(), 4);
        assert!(
            matches!(verify(&q).unwrap(), Verdict::Broken { line: 4, ref why } if why.contains("rewritten"))
        );
    }

    #[test]
    fn an_unfinished_log_cut_below_its_head_is_tampered_and_never_appended_to() {
        let d = Dir::new("trunc-open");
        let p = d.0.join("a.jsonl");
        write_log(&p, 3);
        write_and_die(&p, 2);
        // Cut into the records the dead writer added: indistinguishable
        // from a writer that wrote fewer, and still unfinished.
        let l = lines(&p);
        rewrite(&p, &l[..4]);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Unfinished {
                records: 4,
                last_seq: Some(3)
            }
        );
        // Cut below what the head remembers from when the writer opened.
        rewrite(&p, &l[..2]);
        assert!(
            matches!(verify(&p).unwrap(), Verdict::Broken { line: 3, ref why } if why.contains("cut from the end"))
        );
        assert!(matches!(
            ChainedLog::open(&p),
            Err(ChainError::Truncated { records: 3, .. })
        ));
    }

    #[test]
    fn a_head_that_does_not_match_its_record_is_tampered() {
        let d = Dir::new("badhead");
        let p = d.0.join("a.jsonl");
        write_log(&p, 3);
        let mut h = head(&p);
        h.hash = "ab".repeat(32);
        std::fs::write(head_path(&p), serde_json::to_string(&h).unwrap()).unwrap();
        assert!(
            matches!(verify(&p).unwrap(), Verdict::Broken { line: 3, ref why } if why.contains("rewritten"))
        );
        assert!(matches!(
            ChainedLog::open(&p),
            Err(ChainError::Truncated { .. })
        ));
        // The same while a writer has it open, with records past the head.
        let q = d.0.join("b.jsonl");
        write_log(&q, 2);
        write_and_die(&q, 2);
        let mut h = head(&q);
        assert!(h.open);
        h.hash = "cd".repeat(32);
        std::fs::write(head_path(&q), serde_json::to_string(&h).unwrap()).unwrap();
        assert!(matches!(
            verify(&q).unwrap(),
            Verdict::Broken { line: 2, .. }
        ));
        assert!(matches!(
            ChainedLog::open(&q),
            Err(ChainError::Truncated { .. })
        ));
    }

    #[test]
    fn a_log_closed_without_records_is_intact_and_empty() {
        let d = Dir::new("empty");
        let p = d.0.join("a.jsonl");
        drop(ChainedLog::open(&p).unwrap());
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 0,
                head: true
            }
        );
    }

    /// A log and head as the writer before this one left them (its
    /// records' fields in another order, its head `SEQ HASH`).
    const OLD_LOG: &str = r#"{"seq":0,"prev":"0000000000000000000000000000000000000000000000000000000000000000","cgroup":null,"command":["make","test"],"event":"created","rootless":true,"sandbox":"sb","ts_ms":1700000000000,"workspace":"/home/u/p","hash":"7fef6092b2142e59d6b334d8d60b8c7b42e23345c73c546c6e04b3fef073bccc"}
{"seq":1,"prev":"7fef6092b2142e59d6b334d8d60b8c7b42e23345c73c546c6e04b3fef073bccc","event":"degraded","layer":"landlock","lost":"file access rules","sandbox":"sb","ts_ms":1700000000000,"hash":"61c158a4e721570bbed061d998073895cd58149995bb7d6ebb3f0a26d4691b0e"}
{"seq":2,"prev":"61c158a4e721570bbed061d998073895cd58149995bb7d6ebb3f0a26d4691b0e","event":"started","pid":4242,"sandbox":"sb","ts_ms":1700000000000,"hash":"66584b69656be0dd69de3cf93d34eaec177348472c13b4c0f7cd9cfbbdcbcea5"}
"#;
    const OLD_HEAD: &str = "2 66584b69656be0dd69de3cf93d34eaec177348472c13b4c0f7cd9cfbbdcbcea5\n";

    #[test]
    fn a_log_and_head_of_the_previous_format_verify_read_and_continue() {
        let d = Dir::new("old");
        let p = d.0.join("a.jsonl");
        std::fs::write(&p, OLD_LOG).unwrap();
        std::fs::write(head_path(&p), OLD_HEAD).unwrap();
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 3,
                head: true
            }
        );
        let kinds: Vec<&str> = lines(&p)
            .iter()
            .map(|l| Record::parse(l).unwrap().event.kind.name())
            .collect();
        assert_eq!(kinds, ["created", "degraded", "started"]);
        // Cut: the old head still tells.
        rewrite(&p, &lines(&p)[..2]);
        assert!(matches!(
            verify(&p).unwrap(),
            Verdict::Broken { line: 3, .. }
        ));
        std::fs::write(&p, OLD_LOG).unwrap();
        write_log(&p, 2);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 5,
                head: true
            }
        );
    }

    #[test]
    fn records_of_every_kind_read_back_from_the_log() {
        let d = Dir::new("kinds");
        let p = d.0.join("a.jsonl");
        let events = crate::event::tests::one_of_each();
        {
            let mut log = ChainedLog::open(&p).unwrap();
            for e in &events {
                log.emit(e);
            }
        }
        let back: Vec<Event> = lines(&p)
            .iter()
            .map(|l| Record::parse(l).unwrap().event)
            .collect();
        assert_eq!(back, events);
        assert!(matches!(verify(&p).unwrap(), Verdict::Intact { .. }));
    }

    #[test]
    fn a_second_writer_of_the_same_log_is_refused() {
        let d = Dir::new("busy");
        let p = d.0.join("a.jsonl");
        let first = ChainedLog::open(&p).unwrap();
        assert!(matches!(ChainedLog::open(&p), Err(ChainError::Busy { .. })));
        drop(first);
        assert!(ChainedLog::open(&p).is_ok());
    }

    #[test]
    fn a_broken_last_line_is_refused_for_appending() {
        let d = Dir::new("tail");
        let p = d.0.join("a.jsonl");
        write_log(&p, 2);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"seq\":2,\"garbage\n").unwrap();
        assert!(matches!(
            ChainedLog::open(&p),
            Err(ChainError::BadTail { .. })
        ));
    }

    #[test]
    fn a_line_edited_into_other_bytes_is_tampered_not_a_crash() {
        let d = Dir::new("bytes");
        let p = d.0.join("a.jsonl");
        write_log(&p, 2);
        let mut l = lines(&p);
        // A multi-byte character where the hash's tail starts.
        let at = l[0].len() - 75;
        l[0].replace_range(at..at + 1, "é");
        rewrite(&p, &l);
        assert!(matches!(
            verify(&p).unwrap(),
            Verdict::Broken { line: 1, .. }
        ));
        let mut raw = std::fs::read(&p).unwrap();
        raw[3] = 0xff;
        std::fs::write(&p, raw).unwrap();
        assert!(matches!(
            verify(&p).unwrap(),
            Verdict::Broken { line: 1, .. }
        ));
    }
    #[test]
    fn a_head_planted_as_a_link_is_never_written_through() {
        use std::os::unix::fs::symlink;
        let d = Dir::new("headlink");
        let victim = d.0.join("victim");
        std::fs::write(&victim, "keep me\n").unwrap();
        // A symbolic link where the head goes: not followed.
        let p = d.0.join("a.jsonl");
        symlink(&victim, head_path(&p)).unwrap();
        assert!(ChainedLog::open(&p).is_err());
        // A hard link to another file: refused.
        let q = d.0.join("b.jsonl");
        std::fs::hard_link(&victim, head_path(&q)).unwrap();
        assert!(matches!(
            ChainedLog::open(&q),
            Err(ChainError::HeadNotPlain { .. })
        ));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    }

    #[test]
    fn a_head_is_rewritten_in_place_at_its_fixed_width() {
        let d = Dir::new("inplace");
        let p = d.0.join("a.jsonl");
        let mut log = ChainedLog::open(&p).unwrap();
        let hp = head_path(&p);
        let ino = std::fs::metadata(&hp).unwrap().ino();
        assert!(head(&p).open);
        log.emit(&started(1));
        log.close().unwrap();
        drop(log);
        let meta = std::fs::metadata(&hp).unwrap();
        // The same file, no temporary left beside it.
        assert_eq!(meta.ino(), ino);
        assert_eq!(meta.len(), HEAD_WIDTH as u64);
        let names: Vec<_> = std::fs::read_dir(&d.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let h = head(&p);
        assert!(!h.open);
        assert_eq!(h.records, 1);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 1,
                head: true
            }
        );
    }

    #[test]
    fn a_longer_head_left_by_another_writer_is_cut_to_the_new_one() {
        let d = Dir::new("longhead");
        let p = d.0.join("a.jsonl");
        write_log(&p, 2);
        let h = head(&p);
        let long = format!(
            "{}{}\n",
            serde_json::to_string(&h).unwrap(),
            " ".repeat(600)
        );
        std::fs::write(head_path(&p), long).unwrap();
        write_log(&p, 1);
        assert_eq!(
            std::fs::metadata(head_path(&p)).unwrap().len(),
            HEAD_WIDTH as u64
        );
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 3,
                head: true
            }
        );
    }

    #[test]
    fn verify_racing_a_writer_never_calls_the_log_tampered() {
        let d = Dir::new("race");
        let p = d.0.join("a.jsonl");
        write_log(&p, 1);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    write_log(&p, 1);
                    n += 1;
                }
                n
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
        let mut checks = 0;
        while std::time::Instant::now() < deadline {
            let v = verify(&p).unwrap();
            assert!(!matches!(v, Verdict::Broken { .. }), "{v:?}");
            checks += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let writes = writer.join().unwrap();
        assert!(
            checks > 10 && writes > 10,
            "{checks} checks, {writes} writes"
        );
    }
    #[test]
    fn a_deferred_log_opens_with_its_first_record_and_says_when_it_cannot() {
        let d = Dir::new("deferred");
        let p = d.0.join("a.jsonl");
        let mut log = DeferredLog::new(&p);
        assert!(!p.exists());
        assert_eq!(log.failure(), None);
        log.emit(&started(1));
        log.emit(&started(2));
        drop(log);
        assert_eq!(
            verify(&p).unwrap(),
            Verdict::Intact {
                records: 2,
                head: true
            }
        );
        let bad = d.0.join("missing").join("a.jsonl");
        let mut log = DeferredLog::new(&bad);
        log.emit(&started(1));
        let why = log.failure().unwrap();
        assert!(
            why.starts_with(&format!("cannot open audit log {}: ", bad.display())),
            "{why}"
        );
        assert!(why.contains("No such file"), "{why}");
    }
}

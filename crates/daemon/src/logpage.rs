//! A sandbox's audit log read a page at a time, never whole. The log only
//! grows (one JSON event per line, appended), and a long-lived sandbox's
//! can be large: a request that read all of it into memory to answer a
//! page (the native events, the E2B door's logs) would let any caller
//! make the daemon read gigabytes per request. Instead every log read
//! has a mark every [`STEP`] lines (the byte where that line starts),
//! kept between requests and extended by what was appended since (a log
//! that shrank or was replaced, a new sandbox of the same name, is
//! marked again from its start), so a request seeks to its line or time
//! and reads at most its page, and what one request looks through is
//! bounded ([`SCAN_BYTES`]). Only whole lines are read: a line being
//! written is read by a later request.

use serde::Deserialize;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Lines between two marks.
pub const STEP: u64 = 256;
/// Most bytes of the log one request reads past where it starts.
pub const SCAN_BYTES: u64 = 16 << 20;
/// Logs whose marks are kept; past this the oldest are dropped (marking
/// again costs one read of the log).
const LOGS_KEPT: usize = 1024;
/// How far out of order two events' times may be (each event carries the
/// time it happened, and they are appended as they arrive).
const SLACK_MS: u64 = 2_000;

/// One line of the log: its number (from 0) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub n: u64,
    pub text: String,
}

/// A page of lines, and the number of the line after it.
#[derive(Debug, Default)]
pub struct Page {
    pub lines: Vec<Line>,
    /// The line after the last one read (the number of whole lines when
    /// the page reached the end, or started past it).
    pub next: u64,
    /// Whether the page reached the end of the log's whole lines.
    pub end: bool,
}

/// The marks of one log.
#[derive(Debug, Default, Clone)]
struct Marks {
    /// The file's device and inode: another file is marked anew.
    id: (u64, u64),
    /// Bytes marked (whole lines only).
    scanned: u64,
    /// Whole lines marked.
    lines: u64,
    /// Where line `k * STEP` starts, for each k.
    at: Vec<u64>,
}

fn cache() -> &'static Mutex<HashMap<PathBuf, Marks>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Marks>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// The marks of `file` (at `path`): those kept, extended by what was
/// appended since as far as line `upto` (a request marks only as far as
/// it reads).
fn marks(path: &Path, file: &mut File, upto: u64) -> io::Result<Marks> {
    let meta = file.metadata()?;
    let id = (meta.dev(), meta.ino());
    let kept = cache()
        .lock()
        .ok()
        .and_then(|c| c.get(path).cloned())
        .filter(|m| m.id == id && m.scanned <= meta.len());
    let mut m = kept.unwrap_or(Marks {
        id,
        ..Marks::default()
    });
    if m.scanned < meta.len() && m.lines <= upto {
        file.seek(SeekFrom::Start(m.scanned))?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut at = m.scanned;
        // The start of the line being read (a mark waits for its line to
        // be whole, as the lines count does).
        let mut line_start = m.scanned;
        'read: loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            for (i, b) in buf.iter().take(n).enumerate() {
                if *b == b'\n' {
                    if m.lines.is_multiple_of(STEP) {
                        m.at.push(line_start);
                    }
                    m.lines += 1;
                    line_start = at + i as u64 + 1;
                    if m.lines > upto {
                        break 'read;
                    }
                }
            }
            at += n as u64;
        }
        m.scanned = line_start;
    }
    if let Ok(mut c) = cache().lock() {
        if c.len() >= LOGS_KEPT && !c.contains_key(path) {
            c.clear();
        }
        c.insert(path.to_path_buf(), m.clone());
    }
    Ok(m)
}

/// Whole lines of `reader` from where it stands (line `n`), each handed
/// to `each` until it says stop, the end, or `budget` bytes.
fn lines_of(
    reader: &mut impl BufRead,
    mut n: u64,
    budget: u64,
    mut each: impl FnMut(Line) -> bool,
) -> io::Result<(u64, bool)> {
    let mut read = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let got = reader.read_until(b'\n', &mut buf)?;
        if got == 0 || buf.last() != Some(&b'\n') {
            return Ok((n, true));
        }
        read += got as u64;
        buf.pop();
        let text = String::from_utf8_lossy(&buf).into_owned();
        let go_on = each(Line { n, text });
        n += 1;
        if !go_on || read >= budget {
            return Ok((n, false));
        }
    }
}

/// Lines of the log at `path` from line `from`, at most `most` of them
/// (and [`SCAN_BYTES`]). A log that is not there reads as empty.
pub fn from_line(path: &Path, from: u64, most: usize) -> io::Result<Page> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Page {
                end: true,
                ..Page::default()
            })
        }
        Err(e) => return Err(e),
    };
    let m = marks(path, &mut file, from)?;
    let k = (from / STEP).min((m.at.len() as u64).saturating_sub(1));
    let (start, mut n) = match m.at.get(k as usize) {
        Some(off) => (*off, k * STEP),
        None => (0, 0),
    };
    file.seek(SeekFrom::Start(start))?;
    let mut reader = BufReader::new(file);
    let mut page = Page::default();
    // Up to `from`: lines skipped, at most a step of them.
    if n < from {
        let (at, end) = lines_of(&mut reader, n, u64::MAX, |l| l.n + 1 < from)?;
        n = at;
        if end {
            page.next = n;
            page.end = true;
            return Ok(page);
        }
    }
    if most == 0 {
        page.next = n;
        return Ok(page);
    }
    let (next, end) = lines_of(&mut reader, n, SCAN_BYTES, |l| {
        page.lines.push(l);
        page.lines.len() < most
    })?;
    page.next = next;
    page.end = end;
    Ok(page)
}

/// Only an event's time.
#[derive(Deserialize)]
struct Stamp {
    ts_ms: u64,
}

/// The time of the line starting at byte `off`, if it reads as an event.
fn stamp_at(file: &mut File, off: u64) -> Option<u64> {
    file.seek(SeekFrom::Start(off)).ok()?;
    let mut line = Vec::new();
    BufReader::new(file.take(64 * 1024))
        .read_until(b'\n', &mut line)
        .ok()?;
    serde_json::from_slice::<Stamp>(&line).ok().map(|s| s.ts_ms)
}

/// The start of the first line that begins after byte `off` (within 64
/// KiB of it).
fn next_line(file: &mut File, off: u64) -> Option<u64> {
    file.seek(SeekFrom::Start(off)).ok()?;
    let mut skipped = Vec::new();
    let n = BufReader::new(file.take(64 * 1024))
        .read_until(b'\n', &mut skipped)
        .ok()?;
    (skipped.last() == Some(&b'\n')).then(|| off + n as u64)
}

/// Where to look for events from `ts_ms` on, by bisection over the
/// file's bytes (the log is in time order but for [`SLACK_MS`]): a line
/// start before which every event is older than `ts_ms`, and a byte
/// from which every line is newer. A handful of reads, whatever the
/// log's size.
fn bounds_of(file: &mut File, len: u64, ts_ms: u64) -> (u64, u64) {
    let (mut lo, mut hi) = (0u64, len);
    while hi - lo > 64 * 1024 {
        let mid = lo + (hi - lo) / 2;
        let Some(start) = next_line(file, mid).filter(|s| *s < hi) else {
            hi = mid;
            continue;
        };
        let older = stamp_at(file, start).is_none_or(|t| t.saturating_add(SLACK_MS) < ts_ms);
        if older {
            lo = start;
        } else {
            hi = mid;
        }
    }
    (lo, hi)
}

/// The file at `path`, and its length up to its last whole line; `None`
/// when it is not there.
fn open_whole(path: &Path) -> io::Result<Option<(File, u64)>> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    // A line being written is left for a later request.
    let back = len.min(64 * 1024);
    file.seek(SeekFrom::Start(len - back))?;
    let mut tail = Vec::new();
    file.by_ref().take(back).read_to_end(&mut tail)?;
    let whole = match tail.iter().rposition(|b| *b == b'\n') {
        Some(i) => len - back + i as u64 + 1,
        None if back < len => len,
        None => 0,
    };
    Ok(Some((file, whole)))
}

/// The events at or after `ts_ms` that `keep` keeps, oldest first, at
/// most `most`, looking through at most [`SCAN_BYTES`] of the log.
pub fn since(
    path: &Path,
    ts_ms: u64,
    most: usize,
    mut keep: impl FnMut(u64, &str) -> bool,
) -> io::Result<Vec<Line>> {
    let Some((mut file, len)) = open_whole(path)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    if most == 0 {
        return Ok(out);
    }
    let (start, _) = bounds_of(&mut file, len, ts_ms);
    file.seek(SeekFrom::Start(start))?;
    let mut reader = BufReader::new(file.take(len - start));
    // Line numbers are not known here (nor needed): counted from 0.
    lines_of(&mut reader, 0, SCAN_BYTES, |l| {
        let ts = serde_json::from_str::<Stamp>(&l.text).map(|s| s.ts_ms);
        if ts.is_ok_and(|t| t >= ts_ms && keep(t, &l.text)) {
            out.push(l);
        }
        out.len() < most
    })?;
    Ok(out)
}

/// The events at or before `ts_ms` that `keep` keeps, newest first, at
/// most `most`, looking through at most [`SCAN_BYTES`] of the log.
pub fn until(
    path: &Path,
    ts_ms: u64,
    most: usize,
    mut keep: impl FnMut(u64, &str) -> bool,
) -> io::Result<Vec<Line>> {
    let Some((mut file, len)) = open_whole(path)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    // Nothing after `end` is old enough.
    let (_, hi) = bounds_of(&mut file, len, ts_ms.saturating_add(2 * SLACK_MS));
    let mut end = if hi >= len {
        len
    } else {
        next_line(&mut file, hi).unwrap_or(len).min(len)
    };
    let mut looked = 0u64;
    const WINDOW: u64 = 256 * 1024;
    // Windows read backward, each split into whole lines.
    while end > 0 && out.len() < most && looked < SCAN_BYTES {
        let start = end.saturating_sub(WINDOW);
        file.seek(SeekFrom::Start(start))?;
        let mut chunk = Vec::new();
        file.by_ref().take(end - start).read_to_end(&mut chunk)?;
        // A window that starts inside a line leaves that line to the
        // next window.
        let first = match start {
            0 => 0,
            _ => match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => i + 1,
                // One line longer than a window: skipped.
                None => chunk.len(),
            },
        };
        looked += (chunk.len() - first) as u64;
        let body = chunk.get(first..).unwrap_or_default();
        for raw in body.split(|b| *b == b'\n').rev() {
            if raw.is_empty() {
                continue;
            }
            let text = String::from_utf8_lossy(raw);
            let ts = serde_json::from_str::<Stamp>(&text).map(|s| s.ts_ms);
            if ts.is_ok_and(|t| t <= ts_ms && keep(t, &text)) {
                out.push(Line {
                    n: 0,
                    text: text.into_owned(),
                });
                if out.len() >= most {
                    break;
                }
            }
        }
        end = start + first as u64;
        if first == 0 && start == 0 {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn log(lines: u64) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut f = File::create(&path).unwrap();
        for i in 0..lines {
            writeln!(f, "{{\"ts_ms\":{},\"n\":{i}}}", 1000 + i * 10).unwrap();
        }
        (dir, path)
    }

    #[test]
    fn a_page_starts_at_its_line_and_holds_at_most_what_was_asked() {
        let (_d, path) = log(1000);
        let p = from_line(&path, 0, 10).unwrap();
        assert_eq!(p.lines.len(), 10);
        assert_eq!(p.lines[0].n, 0);
        assert_eq!(p.next, 10);
        assert!(!p.end);
        let p = from_line(&path, 700, 5000).unwrap();
        assert_eq!(p.lines.len(), 300);
        assert_eq!(p.lines[0].n, 700);
        assert!(p.lines[0].text.contains("\"n\":700"), "{}", p.lines[0].text);
        assert_eq!(p.next, 1000);
        assert!(p.end);
        let p = from_line(&path, 5000, 10).unwrap();
        assert!(p.lines.is_empty());
        assert_eq!(p.next, 1000);
        assert!(p.end);
    }

    #[test]
    fn lines_appended_later_are_read_and_a_line_being_written_waits() {
        let (_d, path) = log(300);
        assert_eq!(from_line(&path, 0, 10_000).unwrap().next, 300);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        write!(f, "{{\"ts_ms\":99999,\"n\":300}}\n{{\"ts_ms\":1").unwrap();
        let p = from_line(&path, 299, 10).unwrap();
        assert_eq!(p.lines.len(), 2);
        assert_eq!(p.next, 301);
        writeln!(f, "}}").unwrap();
        assert_eq!(from_line(&path, 301, 10).unwrap().lines.len(), 1);
        // Replaced by a shorter log: marked again.
        std::fs::remove_file(&path).unwrap();
        let mut f = File::create(&path).unwrap();
        writeln!(f, "{{\"ts_ms\":5}}").unwrap();
        let p = from_line(&path, 0, 10).unwrap();
        assert_eq!(p.lines.len(), 1);
        assert_eq!(p.next, 1);
    }

    #[test]
    fn events_are_found_by_time_forward_and_backward() {
        let (_d, path) = log(2000);
        // Line i has time 1000 + 10 i.
        let ns = |got: Vec<Line>| -> Vec<u64> {
            got.iter()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(&l.text).unwrap()["n"]
                        .as_u64()
                        .unwrap()
                })
                .collect()
        };
        let got = since(&path, 1000 + 10 * 1500, 3, |_, _| true).unwrap();
        assert_eq!(ns(got), vec![1500, 1501, 1502]);
        let got = until(&path, 1000 + 10 * 1500, 3, |_, _| true).unwrap();
        assert_eq!(ns(got), vec![1500, 1499, 1498]);
        let got = until(&path, u64::MAX, 2, |_, _| true).unwrap();
        assert_eq!(ns(got), vec![1999, 1998]);
        let got = since(&path, 0, 1, |_, t| t.contains("\"n\":77}")).unwrap();
        assert_eq!(ns(got), vec![77]);
        assert!(since(&path, u64::MAX, 5, |_, _| true).unwrap().is_empty());
    }
}

//! What the sandbox was refused while one `warden exec` ran, said at its
//! end as `warden run` says it: the command inside often shows only a
//! status (npm's `403`), and the flag that would allow it is in the
//! sandbox's audit log. What a stop's merge of the writable volumes held
//! back is said at the end of `warden stop` the same way. Read from the
//! log the supervisor writes; never changes it.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// At most this many distinct refusals are listed; the rest are counted.
const MAX_LINES: usize = 5;

/// Where the sandbox's audit log ends before a command starts.
pub struct Mark {
    log: PathBuf,
    offset: u64,
}

impl Mark {
    pub fn now(sandbox_dir: &Path) -> Mark {
        let log = sandbox_dir.join("audit.jsonl");
        let offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        Mark { log, offset }
    }

    /// The lines to print for the refusals logged since the mark, in the
    /// CLI's words (each with the flag that would allow it), duplicates
    /// said once. Other commands running in the same sandbox at the same
    /// time may have caused some of them: the log does not say which exec
    /// a connection belonged to.
    pub fn denials(&self) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        let mut more = 0usize;
        for event in self.since() {
            if !event.is_denial() {
                continue;
            }
            let said =
                warden_workspace::printable(&super::super::audit::describe_kind(&event.kind));
            if seen.contains(&said) {
                continue;
            }
            if seen.len() < MAX_LINES {
                seen.push(said);
            } else {
                more += 1;
            }
        }
        let mut out = seen;
        if more > 0 {
            out.push(format!(
                "and {more} more refusals: `warden logs` shows them"
            ));
        }
        out
    }

    /// The lines to print for what the writable volumes' merges held back
    /// since the mark (at a stop: the owner's files the sandbox wrote
    /// over, and where they are kept), every one of them.
    pub fn held_back(&self) -> Vec<String> {
        self.since()
            .into_iter()
            .filter(|e| matches!(e.kind, warden_audit::EventKind::VolumeHeldBack { .. }))
            .map(|e| super::super::worded(&warden_workspace::printable(&e.kind.describe())))
            .collect()
    }

    /// The events logged since the mark.
    fn since(&self) -> Vec<warden_audit::Event> {
        let mut text = String::new();
        let read = std::fs::File::open(&self.log).and_then(|mut f| {
            f.seek(SeekFrom::Start(self.offset))?;
            f.read_to_string(&mut text)
        });
        if read.is_err() {
            return Vec::new();
        }
        text.lines()
            .filter_map(|line| serde_json::from_str::<warden_audit::Event>(line).ok())
            .collect()
    }
}

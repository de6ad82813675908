//! What a diff reports: one change of the sandbox relative to the real
//! workspace, the entries on either side, how content differs, and the
//! flags a reviewer should see.
//!
//! This module owns the types `diff` produces and `flags`, `commit` and the
//! front doors read, and their JSON form. It never reads the file system:
//! building changes is `diff`'s work, judging them is `flags`'.

use serde::Serialize;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One reason to look twice at a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flag {
    /// A short stable name (`git-hook`, `ci`, `executable`, ...).
    pub rule: &'static str,
    /// Why it matters, for a person.
    pub reason: String,
    /// For a `credential` flag: each credential-shaped string the change
    /// added, by rule, place and hash (never the value).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<warden_detect::Finding>,
}

/// What kind of file system entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// FIFOs, sockets, devices.
    Other,
}

/// One side of a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub kind: EntryKind,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    /// Bytes, for regular files; 0 otherwise.
    pub size: u64,
    /// The target, for symbolic links.
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_path")]
    pub target: Option<PathBuf>,
}

impl Entry {
    pub fn is_executable(&self) -> bool {
        self.kind == EntryKind::File && self.mode & 0o111 != 0
    }
}

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// New in the sandbox (`old` is `None`).
    Added,
    /// Content (or symlink target) changed; the mode may have changed too.
    Modified,
    /// Gone in the sandbox (`new` is `None`).
    Deleted,
    /// Only the permission bits changed.
    Mode,
    /// File, directory and symbolic link swapped for one another.
    TypeChanged,
    /// A file deleted at `from` and one with identical content added at
    /// `path`. Overlayfs (with `redirect_dir` off) has no renames of its own:
    /// this is a reading of a delete plus an add.
    Renamed,
}

/// How two versions of a file's content differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Both sides are UTF-8 text: lines inserted and removed, and the
    /// unified diff when it was asked for.
    Text {
        added: usize,
        removed: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        patch: Option<String>,
        /// The diff stopped at its deadline (see `crate::textdiff`): whole
        /// runs of lines are shown removed and added where a longer search
        /// might have matched some; every line is there all the same.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        coarse: bool,
    },
    /// At least one side is not text (or larger than 8 MiB).
    Binary { old_size: u64, new_size: u64 },
    /// Both sides are text, but not diffed line by line, for `reason`:
    /// their line counts and sizes say how large the change is.
    NotDiffed {
        old_lines: usize,
        new_lines: usize,
        old_size: u64,
        new_size: u64,
        reason: Cut,
    },
}

/// The most lines (on either side) a change may have to be diffed line by
/// line, counted between the lines both sides share at their start and at
/// their end. Past it a person reads no patch anyway.
pub const MAX_LINES: usize = 50_000;
/// Files larger than this are compared but not read as text, so not
/// diffed line by line (see `crate::textdiff` for the bounds on the files
/// that are).
pub const TEXT_DIFF_LIMIT: u64 = 8 << 20;
/// The flag on a change whose content the review did not show in full
/// (`crate::flags::not_shown`).
pub const NOT_SHOWN: &str = "not-shown";
/// How long one file's line diff may search for the shortest diff.
pub const FILE_DEADLINE: Duration = Duration::from_millis(500);
/// How long all line diffs of one review may take together.
pub const REVIEW_BUDGET: Duration = Duration::from_secs(4);

/// Why a text file's change was not diffed line by line (a stable code in
/// JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    /// More differing lines on one side (past the lines both sides share
    /// at their start and end) than a review diffs ([`MAX_LINES`]).
    TooManyLines,
    /// The review's time for line diffs ([`REVIEW_BUDGET`])
    /// was spent on the files before it.
    TimeBudget,
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::TooManyLines => write!(
                f,
                "more than {} lines differ (past the lines both sides share at their start and end), too large to diff",
                MAX_LINES
            ),
            Cut::TimeBudget => write!(
                f,
                "the review's {} s for line diffs was spent on other files; review this one alone to see its diff",
                REVIEW_BUDGET.as_secs()
            ),
        }
    }
}

/// The line a patch cut short at its deadline is preceded by.
pub const COARSE_NOTE: &str = "coarse diff: the line diff stopped at its deadline; runs of lines are shown removed and added whole";

impl std::fmt::Display for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Content::Text { patch: Some(p), .. } => f.write_str(p),
            Content::Text { added, removed, .. } => write!(f, "+{added} -{removed} lines"),
            Content::Binary { old_size, new_size } => {
                write!(f, "binary files differ ({old_size} → {new_size} bytes)")
            }
            Content::NotDiffed {
                old_lines,
                new_lines,
                reason,
                ..
            } => write!(
                f,
                "changed, {old_lines} → {new_lines} lines, not diffed: {reason}"
            ),
        }
    }
}

/// One change of the sandbox relative to the real workspace.
///
/// In JSON, `path` (and `from`) are always strings, lossy when the name is
/// not UTF-8; then `path_bytes` (`from_bytes`) carries the exact bytes as
/// an array of numbers. Consumers that act on paths must prefer the bytes
/// when present.
#[derive(Debug, Clone)]
pub struct Change {
    /// Relative to the workspace.
    pub path: PathBuf,
    pub kind: ChangeKind,
    /// For [`ChangeKind::Renamed`]: where the content came from.
    pub from: Option<PathBuf>,
    /// The real workspace's entry (at `from` for a rename).
    pub old: Option<Entry>,
    /// The sandbox's entry.
    pub new: Option<Entry>,
    /// For regular files whose content changed, when content was asked for.
    pub content: Option<Content>,
    /// Reasons a reviewer should look twice.
    pub flags: Vec<Flag>,
    /// A SHA-256 of everything the commit would apply for this change
    /// (kind, paths, both entries, the new content), in hex: what a review
    /// saw is what a commit applies when the digests match.
    pub digest: String,
    /// The workspace's own `.gitignore` (or `.git/info/exclude`) ignores
    /// it, and nothing flags it: front doors leave it out of a review and
    /// a commit unless asked, and say how many they left out.
    pub ignored: bool,
    /// The upper entry was copied up from a lower one (overlay's origin
    /// mark): if the real file is gone, it was deleted on the host.
    pub(crate) copied_up: bool,
}

impl Change {
    /// The paths this change touches in the workspace.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.path.as_path()).chain(self.from.as_deref())
    }
}

impl Serialize for Change {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            path: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            path_bytes: Option<&'a [u8]>,
            kind: ChangeKind,
            #[serde(skip_serializing_if = "Option::is_none")]
            from: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            from_bytes: Option<&'a [u8]>,
            old: &'a Option<Entry>,
            new: &'a Option<Entry>,
            #[serde(skip_serializing_if = "Option::is_none")]
            content: &'a Option<Content>,
            flags: &'a [Flag],
            digest: &'a str,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            ignored: bool,
        }
        fn bytes(p: &Path) -> Option<&[u8]> {
            p.to_str().is_none().then(|| p.as_os_str().as_bytes())
        }
        Wire {
            path: self.path.to_string_lossy().into_owned(),
            path_bytes: bytes(&self.path),
            kind: self.kind,
            from: self.from.as_ref().map(|p| p.to_string_lossy().into_owned()),
            from_bytes: self.from.as_deref().and_then(bytes),
            old: &self.old,
            new: &self.new,
            content: &self.content,
            flags: &self.flags,
            digest: &self.digest,
            ignored: self.ignored,
        }
        .serialize(s)
    }
}

/// Text from the sandbox made safe to put in a line: control characters
/// (a newline that would start a forged line, escapes that move the cursor,
/// erase lines or recolour a terminal) and format characters (direction
/// overrides, embeddings and isolates that reorder what is shown,
/// zero-width characters, the byte-order mark, soft hyphens, tags and
/// variation selectors: what makes a line read otherwise than it is)
/// become visible escapes. Tabs and backslashes stay, so a file's lines
/// read as written. Every line is passed through this before it is shown.
pub fn printable(text: &str) -> String {
    escape(text, false)
}

/// A patch's lines as they are shown, one by one: broken at `\n` alone,
/// so a carriage return at a line's end stays in the line and
/// [`printable`] shows it (`\x0d`). (`str::lines` would drop it: a file
/// rewritten from `hello\n` to `hello\r\n` would show `-hello` and
/// `+hello`, a change that reads as none.)
pub fn patch_lines(patch: &str) -> impl Iterator<Item = &str> {
    patch.split_terminator('\n')
}

/// A name the sandbox chose (a host it asks for, a program it runs, a
/// request's path) as [`printable`] shows it, and further: a tab is escaped
/// too, and `\` is written `\\`, so a name cannot spell an escape it does
/// not hold (`a\u{202e}b` typed out is shown `a\\u{202e}b`). What every
/// door shows of a question's name.
pub fn printable_name(text: &str) -> String {
    escape(text, true)
}

fn escape(text: &str, name: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if name && c == '\\' {
            out.push_str("\\\\");
        } else if (c.is_control() && (name || c != '\t')) || is_format(c) {
            match c as u32 {
                n if n < 0x100 => out.push_str(&format!("\\x{n:02x}")),
                n => out.push_str(&format!("\\u{{{n:04x}}}")),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Unicode's format characters and the others drawn as nothing: one
/// set with the JSON writer's ([`warden_audit::json::is_format`]).
pub use warden_audit::json::is_format;

/// A path as [`printable`] text (lossy where it is not UTF-8).
pub fn printable_path(p: &Path) -> String {
    printable(&p.to_string_lossy())
}

mod opt_path {
    use serde::Serializer;
    use std::path::PathBuf;
    pub fn serialize<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => crate::wire::path::serialize(p, s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_shows_its_control_and_format_characters_escaped_and_nothing_else() {
        for (name, shown) in [
            ("/usr/bin/id", "/usr/bin/id"),
            ("/tmp/caf\u{e9}/\u{4e2d}", "/tmp/caf\u{e9}/\u{4e2d}"),
            ("/a\x1b[2Jb", "/a\\x1b[2Jb"),
            ("/a\rb\n\t", "/a\\x0db\\x0a\\x09"),
            ("/a\u{9b}b", "/a\\x9bb"),
            // A right-to-left override makes `/tmp/x/\u{202e}lmth.exe` read
            // as `/tmp/x/exe.html`.
            ("/tmp/x/\u{202e}lmth.exe", "/tmp/x/\\u{202e}lmth.exe"),
            (
                "/a\u{202a}\u{202b}\u{202c}\u{202d}b",
                "/a\\u{202a}\\u{202b}\\u{202c}\\u{202d}b",
            ),
            (
                "/a\u{2066}\u{2067}\u{2068}\u{2069}b",
                "/a\\u{2066}\\u{2067}\\u{2068}\\u{2069}b",
            ),
            (
                "/a\u{200b}\u{200c}\u{200d}\u{200e}\u{200f}b",
                "/a\\u{200b}\\u{200c}\\u{200d}\\u{200e}\\u{200f}b",
            ),
            (
                "/\u{feff}a\u{ad}\u{2028}\u{fe0f}\u{e0041}",
                "/\\u{feff}a\\xad\\u{2028}\\u{fe0f}\\u{e0041}",
            ),
            // A name cannot spell an escape it does not hold.
            ("/a\\u{202e}b", "/a\\\\u{202e}b"),
        ] {
            assert_eq!(printable_name(name), shown, "{name:?}");
        }
    }

    #[test]
    fn a_line_keeps_its_tabs_and_backslashes_and_escapes_the_same_set_otherwise() {
        assert_eq!(printable("a\tb\\n"), "a\tb\\n");
        assert_eq!(
            printable("x\u{200b}\u{feff}\u{202e}\x1b"),
            "x\\u{200b}\\u{feff}\\u{202e}\\x1b"
        );
    }

    #[test]
    fn whatever_the_name_what_is_shown_holds_only_characters_drawn_as_themselves() {
        let all: String = (0..0x3000u32)
            .chain(0xfe00..0x10000)
            .chain(0xe0000..0xe0100)
            .filter_map(char::from_u32)
            .collect();
        for shown in [printable_name(&all), printable(&all)] {
            assert!(shown
                .chars()
                .all(|c| c == '\t' || (!c.is_control() && !is_format(c))));
        }
        assert!(!printable_name(&all).contains('\t'));
    }
}

//! Line diffs with a bound on their cost.
//!
//! Myers' diff costs O((N+M)·D), and D, the number of lines removed and
//! added, is N+M when nothing matches: a sandbox that rewrites a file as
//! 80,000 short distinct lines made one review cost close to a minute of
//! CPU (debug build), and a file may hold millions. The sandbox chooses
//! what it writes; the review must not cost the host what it chooses.
//! So every line diff has a bound:
//!
//! - the lines both sides share at their start and at their end are
//!   matched first (linear); a change whose differing middle has more
//!   than [`MAX_LINES`] lines on either side is not diffed line by line:
//!   [`Content::NotDiffed`] with both files' line counts and the reason
//!   ([`Cut::TooManyLines`]), as a binary file is shown. A one-line edit
//!   in a 200,000-line file is a middle of one line, diffed exactly; a
//!   60,000-line rewrite is still cut. (Bounding the whole file instead
//!   left that one-line edit unshown, a backdoor line in a vendored file
//!   among them.);
//! - each diff has a deadline ([`FILE_DEADLINE`]) after which the
//!   algorithm gives up on the shortest diff and takes what it has found:
//!   whole runs of lines shown removed and added (a correct diff, only a
//!   coarser one), marked `coarse`;
//! - one review (a [`Budget`]: one `warden diff`, one `GET /changes`) has
//!   [`REVIEW_BUDGET`] for all its line diffs together: once it is spent,
//!   the files left are [`Content::NotDiffed`] ([`Cut::TimeBudget`]).
//!
//! Whatever the sandbox writes, a review then costs at most the budget
//! plus work linear in what it reads (at most 8 MiB a file, and no more
//! than the layer holds).

use crate::change::{Content, Cut};
pub use crate::change::{FILE_DEADLINE, MAX_LINES, REVIEW_BUDGET};
use std::time::Instant;

/// The time one review has left for line diffs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    until: Instant,
}

impl Budget {
    pub(crate) fn new() -> Budget {
        Budget {
            until: Instant::now() + REVIEW_BUDGET,
        }
    }
}

/// Lines as the diff counts them: a last line without its newline is one.
fn line_count(s: &str) -> usize {
    let newlines = s.bytes().filter(|&b| b == b'\n').count();
    newlines + usize::from(!s.is_empty() && !s.ends_with('\n'))
}

/// The lines of context a patch shows around each run of changes.
const CONTEXT: usize = 3;

/// Where two texts differ: the lines both share at their start and those
/// both share at their end matched first, in time linear in the text (as
/// Myers' algorithm does itself, but without splitting the shared lines
/// into tokens: 200,000 lines cost close to half a second so in a debug
/// build). Lines as the diff splits them, each with its newline.
struct Middle {
    /// Lines both share at their start.
    prefix: usize,
    /// Their bytes.
    prefix_bytes: usize,
    /// Lines both share at their end (after the prefix).
    suffix: usize,
    /// Their bytes.
    suffix_bytes: usize,
}

impl Middle {
    /// Found on the bytes (slices compared whole, not line by line): the
    /// longest run of whole lines both texts start with, then the longest
    /// run of whole lines both end with among what is left.
    fn of(old: &str, new: &str) -> Middle {
        let (a, b) = (old.as_bytes(), new.as_bytes());
        if a == b {
            let lines = line_count(old);
            return Middle {
                prefix: lines,
                prefix_bytes: a.len(),
                suffix: 0,
                suffix_bytes: 0,
            };
        }
        let shorter = a.len().min(b.len());
        let same = common_len(shorter, |at, n| a[at..at + n] == b[at..at + n]);
        // Whole lines only: up to the last newline both share.
        let prefix_bytes = a[..same]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |i| i + 1);
        let room = shorter - prefix_bytes;
        let same = common_len(room, |back, n| {
            a[a.len() - back - n..a.len() - back] == b[b.len() - back - n..b.len() - back]
        });
        // From a line's start on both sides: where the bytes before differ,
        // from the first line that starts within the shared bytes.
        let starts_line = |s: &[u8], at: usize| at == prefix_bytes || s[at - 1] == b'\n';
        let suffix_bytes = if starts_line(a, a.len() - same) && starts_line(b, b.len() - same) {
            same
        } else {
            let tail = &a[a.len() - same..];
            tail.iter()
                .position(|&c| c == b'\n')
                .map_or(0, |i| same - i - 1)
        };
        Middle {
            prefix: line_count(&old[..prefix_bytes]),
            prefix_bytes,
            suffix: line_count(&old[old.len() - suffix_bytes..]),
            suffix_bytes,
        }
    }
}

/// The length of the longest run of `0..len` for which `equal(at, n)`
/// holds of the `n` bytes from `at`, found a block at a time: the slices'
/// comparison is the C library's, fast in any build.
fn common_len(len: usize, equal: impl Fn(usize, usize) -> bool) -> usize {
    const BLOCK: usize = 4096;
    let mut at = 0;
    while at + BLOCK <= len && equal(at, BLOCK) {
        at += BLOCK;
    }
    while at < len && equal(at, 1) {
        at += 1;
    }
    at
}

/// The byte at which the line `n` lines before the line starting at `at`
/// starts (the text's start when there are fewer), and how many lines back
/// that is.
fn lines_back(s: &str, at: usize, n: usize) -> (usize, usize) {
    let before = &s.as_bytes()[..at];
    // The newline ending the line just before `at` starts the count.
    let mut seen = 0;
    for (i, &b) in before.iter().enumerate().rev() {
        if b == b'\n' {
            if seen == n {
                return (i + 1, n);
            }
            seen += 1;
        }
    }
    (0, seen)
}

/// The byte after `n` more lines from `at` (the text's end when there are
/// fewer).
fn lines_on(s: &str, at: usize, n: usize) -> usize {
    if n == 0 {
        return at;
    }
    s.as_bytes()[at..]
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(n - 1)
        .map_or(s.len(), |(i, _)| at + i + 1)
}

/// `op` moved `by` lines down both sides.
fn shifted(op: &similar::DiffOp, by: usize) -> similar::DiffOp {
    use similar::DiffOp::*;
    match *op {
        Equal {
            old_index,
            new_index,
            len,
        } => Equal {
            old_index: old_index + by,
            new_index: new_index + by,
            len,
        },
        Delete {
            old_index,
            old_len,
            new_index,
        } => Delete {
            old_index: old_index + by,
            old_len,
            new_index: new_index + by,
        },
        Insert {
            old_index,
            new_index,
            new_len,
        } => Insert {
            old_index: old_index + by,
            new_index: new_index + by,
            new_len,
        },
        Replace {
            old_index,
            old_len,
            new_index,
            new_len,
        } => Replace {
            old_index: old_index + by,
            old_len,
            new_index: new_index + by,
            new_len,
        },
    }
}

/// The content difference of two texts, within `budget`; `headers`: the
/// unified diff's `---` and `+++` names, when a patch is wanted.
///
/// Only the differing middle and its context are handed to the line diff;
/// the patch's line numbers are the whole files'.
pub(crate) fn diff(
    old: &str,
    new: &str,
    sizes: (u64, u64),
    headers: Option<(&str, &str)>,
    budget: &Budget,
) -> Content {
    let (old_lines, new_lines) = (line_count(old), line_count(new));
    let not_diffed = |reason| Content::NotDiffed {
        old_lines,
        new_lines,
        old_size: sizes.0,
        new_size: sizes.1,
        reason,
    };
    let middle = Middle::of(old, new);
    let shared = middle.prefix + middle.suffix;
    if (old_lines - shared).max(new_lines - shared) > MAX_LINES {
        return not_diffed(Cut::TooManyLines);
    }
    let now = Instant::now();
    if now >= budget.until {
        return not_diffed(Cut::TimeBudget);
    }
    // The middle with the context a patch shows on either side of it
    // (the prefix is the same bytes on both sides, and so is the suffix).
    let (start, back) = lines_back(old, middle.prefix_bytes, CONTEXT);
    fn window<'a>(s: &'a str, start: usize, middle: &Middle) -> &'a str {
        let end = s.len() - middle.suffix_bytes;
        &s[start..lines_on(s, end, CONTEXT.min(middle.suffix))]
    }
    let (old_window, new_window) = (window(old, start, &middle), window(new, start, &middle));
    let offset = middle.prefix - back;
    let deadline = (now + FILE_DEADLINE).min(budget.until);
    let diff = similar::TextDiff::configure()
        .deadline(deadline)
        .diff_lines(old_window, new_window);
    // Past its deadline the search stopped where it was: what it found may
    // be coarser than the shortest diff. (A diff that merely finished late
    // is said to be coarse too: never the other way round.)
    let coarse = Instant::now() >= deadline;
    let (mut added, mut removed) = (0, 0);
    for op in diff.ops() {
        match op.tag() {
            similar::DiffTag::Insert => added += op.new_range().len(),
            similar::DiffTag::Delete => removed += op.old_range().len(),
            similar::DiffTag::Replace => {
                added += op.new_range().len();
                removed += op.old_range().len();
            }
            similar::DiffTag::Equal => {}
        }
    }
    let patch = headers.map(|(a, b)| {
        let mut patch = String::new();
        for hunk in diff.unified_diff().context_radius(CONTEXT).iter_hunks() {
            if patch.is_empty() {
                patch = format!("--- {a}\n+++ {b}\n");
            }
            // The hunk as similar writes it, under a header numbered in
            // the whole files.
            let ops: Vec<similar::DiffOp> =
                hunk.ops().iter().map(|op| shifted(op, offset)).collect();
            let text = hunk.to_string();
            let body = text.split_once('\n').map_or("", |(_, rest)| rest);
            patch.push_str(&format!(
                "{}\n{body}",
                similar::udiff::UnifiedHunkHeader::new(&ops)
            ));
        }
        patch
    });
    Content::Text {
        added,
        removed,
        patch,
        coarse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(n: usize, tag: &str) -> String {
        (0..n).map(|i| format!("{tag}{i}\n")).collect()
    }

    #[test]
    fn lines_are_counted_as_the_diff_counts_them() {
        assert_eq!(line_count(""), 0);
        assert_eq!(line_count("a"), 1);
        assert_eq!(line_count("a\n"), 1);
        assert_eq!(line_count("a\nb"), 2);
        assert_eq!(line_count("\n\n"), 2);
    }

    #[test]
    fn a_small_change_is_diffed_exactly() {
        let c = diff(
            "one\ntwo\nthree\n",
            "one\n2\nthree\nfour\n",
            (14, 17),
            Some(("a/f", "b/f")),
            &Budget::new(),
        );
        match c {
            Content::Text {
                added: 2,
                removed: 1,
                patch: Some(p),
                coarse: false,
            } => assert!(p.contains("+four") && p.contains("-two"), "{p}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_past_the_line_bound_is_not_diffed_and_says_why() {
        let big = lines(MAX_LINES + 1, "x");
        let c = diff("a\n", &big, (2, big.len() as u64), None, &Budget::new());
        assert_eq!(
            c,
            Content::NotDiffed {
                old_lines: 1,
                new_lines: MAX_LINES + 1,
                old_size: 2,
                new_size: big.len() as u64,
                reason: Cut::TooManyLines,
            }
        );
        assert!(c.to_string().contains("more than 50000 lines"), "{c}");
    }

    fn differing_lines(old: &str, new: &str) -> (usize, usize) {
        let (o, n) = (line_count(old), line_count(new));
        let m = Middle::of(old, new);
        (o - m.prefix - m.suffix, n - m.prefix - m.suffix)
    }

    #[test]
    fn the_differing_middle_is_what_lies_between_the_shared_start_and_end() {
        assert_eq!(differing_lines("", ""), (0, 0));
        assert_eq!(differing_lines("a\nb\nc\n", "a\nb\nc\n"), (0, 0));
        assert_eq!(differing_lines("a\nb\nc\n", "a\nx\ny\nc\n"), (1, 2));
        // A line shared at both ends is counted once.
        assert_eq!(differing_lines("a\na\n", "a\na\na\n"), (0, 1));
        // A last line without its newline is another line.
        assert_eq!(differing_lines("a\nb", "a\nb\n"), (1, 1));
        assert_eq!(differing_lines("x\n", ""), (1, 0));
    }

    #[test]
    fn a_patch_of_the_middle_reads_as_the_whole_files_patch() {
        // Every place and size of change, near the ends and far from them,
        // with and without a last newline: the same patch as the line diff
        // of the whole files gives.
        let base: Vec<String> = (0..40).map(|i| format!("l{i}\n")).collect();
        let join = |v: &[String]| v.concat();
        let mut cases: Vec<(String, String)> = Vec::new();
        for at in [0, 1, 2, 3, 5, 20, 36, 37, 38, 39] {
            let mut v = base.clone();
            v[at] = "changed\n".into();
            cases.push((join(&base), join(&v)));
            let mut v = base.clone();
            v.insert(at, "inserted\n".into());
            cases.push((join(&base), join(&v)));
            let mut v = base.clone();
            v.remove(at);
            cases.push((join(&base), join(&v)));
        }
        let mut two = base.clone();
        two[4] = "x\n".into();
        two[30] = "y\n".into();
        cases.push((join(&base), join(&two)));
        cases.push((join(&base), join(&base).trim_end().to_string()));
        cases.push(("a\nb".into(), "a\nc".into()));
        cases.push(("".into(), "a\n".into()));
        cases.push(("a\n".into(), "".into()));
        for (old, new) in cases {
            let whole = similar::TextDiff::configure()
                .diff_lines(&old, &new)
                .unified_diff()
                .context_radius(3)
                .header("a/f", "b/f")
                .to_string();
            let c = diff(&old, &new, (0, 0), Some(("a/f", "b/f")), &Budget::new());
            match c {
                Content::Text { patch: Some(p), .. } => assert_eq!(p, whole, "{old:?} -> {new:?}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_one_line_change_in_a_file_past_the_line_bound_is_diffed_exactly_and_fast() {
        let old = lines(200_000, "line ");
        let new = old.replacen("line 100000\n", "line 100000\nbackdoor()\n", 1);
        let start = Instant::now();
        let c = diff(&old, &new, (0, 0), Some(("a/f", "b/f")), &Budget::new());
        let took = start.elapsed();
        eprintln!("a one-line change in 200,000 lines diffed in {took:?}");
        assert!(took < FILE_DEADLINE, "took {took:?}");
        match c {
            Content::Text {
                added: 1,
                removed: 0,
                patch: Some(p),
                coarse: false,
            } => assert!(
                p.contains("@@ -99999,6 +99999,7 @@") && p.contains("\n+backdoor()\n"),
                "{p}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_rewrite_past_the_line_bound_is_still_not_diffed() {
        // The whole file rewritten, and a file whose first and last lines
        // change with scattered edits between them: the middle is the file.
        let old = lines(60_000, "a");
        let whole = lines(60_000, "b");
        let scattered: String = (0..80_000)
            .map(|i| {
                if i % 97 == 0 {
                    format!("z{i}\n")
                } else {
                    format!("a{i}\n")
                }
            })
            .collect();
        let old80 = lines(80_000, "a");
        for (old, new) in [(&old, &whole), (&old80, &scattered)] {
            let start = Instant::now();
            let c = diff(old, new, (0, 0), None, &Budget::new());
            eprintln!("cut in {:?}", start.elapsed());
            assert!(start.elapsed() < FILE_DEADLINE, "{:?}", start.elapsed());
            assert!(
                matches!(
                    c,
                    Content::NotDiffed {
                        reason: Cut::TooManyLines,
                        ..
                    }
                ),
                "{c:?}"
            );
        }
    }

    #[test]
    fn a_quadratic_middle_inside_a_file_past_the_line_bound_stops_at_its_deadline() {
        // 80,000 lines, of which the middle 49,000 are rewritten as lines
        // that match nothing: a middle within the bound, so diffed, and
        // held to the file's deadline as any such diff.
        let old = lines(80_000, "a");
        let new: String = (0..80_000)
            .map(|i| {
                if (15_000..64_000).contains(&i) {
                    format!("b{i}\n")
                } else {
                    format!("a{i}\n")
                }
            })
            .collect();
        let start = Instant::now();
        let c = diff(&old, &new, (0, 0), Some(("a/f", "b/f")), &Budget::new());
        let took = start.elapsed();
        eprintln!("a quadratic middle of 49,000 lines in 80,000 diffed in {took:?}");
        assert!(took < FILE_DEADLINE * 8, "took {took:?}");
        match c {
            Content::Text {
                added: 49_000,
                removed: 49_000,
                coarse: true,
                ..
            } => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_spent_budget_leaves_the_file_not_diffed() {
        let spent = Budget {
            until: Instant::now(),
        };
        let c = diff("a\n", "b\n", (2, 2), None, &spent);
        assert!(
            matches!(
                c,
                Content::NotDiffed {
                    reason: Cut::TimeBudget,
                    ..
                }
            ),
            "{c:?}"
        );
    }

    #[test]
    fn a_diff_with_nothing_in_common_stops_at_its_deadline_whole_and_coarse() {
        // 40,000 lines against 40,000 others: 13 s without a deadline in
        // a debug build.
        let (a, b) = (lines(40_000, "a"), lines(40_000, "b"));
        let start = Instant::now();
        let c = diff(&a, &b, (0, 0), Some(("a/f", "b/f")), &Budget::new());
        let took = start.elapsed();
        assert!(took < FILE_DEADLINE * 8, "took {took:?}");
        match c {
            Content::Text {
                added: 40_000,
                removed: 40_000,
                patch: Some(p),
                coarse: true,
            } => assert!(
                p.contains("+b39999") && p.contains("-a0\n"),
                "{}",
                &p[..200]
            ),
            other => panic!("{other:?}"),
        }
    }
}

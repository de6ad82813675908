//! Line diffs with a bound on their cost.
//!
//! Myers' diff costs O((N+M)·D), and D, the number of lines removed and
//! added, is N+M when nothing matches: a sandbox that rewrites a file as
//! 80,000 short distinct lines made one review cost close to a minute of
//! CPU (debug build), and a file may hold millions. The sandbox chooses
//! what it writes; the review must not cost the host what it chooses.
//! So every line diff has a bound:
//!
//! - a file with more than [`MAX_LINES`] lines on either side is not
//!   diffed line by line: [`Content::NotDiffed`] with both line counts and
//!   the reason ([`Cut::TooManyLines`]), as a binary file is shown;
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

/// The content difference of two texts, within `budget`; `headers`: the
/// unified diff's `---` and `+++` names, when a patch is wanted.
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
    if old_lines.max(new_lines) > MAX_LINES {
        return not_diffed(Cut::TooManyLines);
    }
    let now = Instant::now();
    if now >= budget.until {
        return not_diffed(Cut::TimeBudget);
    }
    let deadline = (now + FILE_DEADLINE).min(budget.until);
    let diff = similar::TextDiff::configure()
        .deadline(deadline)
        .diff_lines(old, new);
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
        diff.unified_diff()
            .context_radius(3)
            .header(a, b)
            .to_string()
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

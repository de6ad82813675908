//! What one review may cost, whatever a sandbox leaves in its layer: a
//! layer of many files, each rewritten as tens of thousands of distinct
//! short lines (each a quadratic line diff: 17 s of CPU for 45,000 lines
//! in a debug build, so minutes for the layer), is reviewed within the
//! review's budget for line diffs; the files diffed past their deadline
//! say they are coarse, and those left when the budget is spent say so.

use crate::common::TempDir;
use std::fs;
use std::time::{Duration, Instant};
use warden_workspace::textdiff::{FILE_DEADLINE, REVIEW_BUDGET};
use warden_workspace::{Content, CreateOptions, Cut, DiffOptions, Store};

#[test]
fn a_layer_of_many_quadratic_files_is_reviewed_within_the_budget_and_says_what_was_cut() {
    let state = TempDir::new("cost-state");
    let real = TempDir::new("cost-real");
    let files = 14;
    for i in 0..files {
        fs::write(real.join(format!("f{i:02}.txt")), "# old\nhello\n").unwrap();
    }
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    for i in 0..files {
        let text: String = (0..45_000).map(|n| format!("x{i}-{n}\n")).collect();
        fs::write(sb.upper().join(format!("f{i:02}.txt")), text).unwrap();
    }

    let start = Instant::now();
    let changes = sb.diff(&DiffOptions::default()).expect("diff");
    let took = start.elapsed();
    // The budget, and each file's reading, counting and patch (linear),
    // with room for a loaded host.
    let bound = REVIEW_BUDGET + FILE_DEADLINE + Duration::from_secs(8);
    assert!(took < bound, "the review took {took:?} (bound {bound:?})");
    assert_eq!(changes.len(), files);

    let (mut coarse, mut cut) = (0, 0);
    for c in &changes {
        match &c.content {
            Some(Content::Text {
                coarse: true,
                added: 45_000,
                removed: 2,
                patch: Some(_),
            }) => coarse += 1,
            Some(Content::NotDiffed {
                reason: Cut::TimeBudget,
                old_lines: 2,
                new_lines: 45_000,
                ..
            }) => cut += 1,
            other => panic!("{}: {other:?}", c.path.display()),
        }
    }
    assert!(coarse >= 1, "some files are diffed, coarsely");
    assert!(cut >= 1, "the files past the budget are left undiffed");
    // In the order of the walk: once cut, every later file too.
    let first_cut = changes
        .iter()
        .position(|c| matches!(c.content, Some(Content::NotDiffed { .. })))
        .unwrap();
    assert!(changes[first_cut..]
        .iter()
        .all(|c| matches!(c.content, Some(Content::NotDiffed { .. }))));

    // One file on its own has the whole budget again: its diff is there.
    let one = sb
        .diff(&DiffOptions {
            paths: vec![changes[first_cut].path.clone()],
            ..DiffOptions::default()
        })
        .expect("diff of one file");
    assert!(
        matches!(one[0].content, Some(Content::Text { patch: Some(_), .. })),
        "{:?}",
        one[0].content
    );
}

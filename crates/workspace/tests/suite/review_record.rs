//! What a review recorded is what a commit holds a change to: how much of
//! each change it showed, and the digest of what it showed.
//!
//! Before, `reviewed.json` kept only each change's digest: a file the
//! review cut for time (a flood of other files spent its budget) and then
//! committed by itself was compared again by the commit, in full, and
//! landed unflagged: the person accepted a review in which the change was
//! hidden. Now the record says how much was shown (full, coarse, not
//! diffed, listed without content), and a change recorded as not shown is
//! flagged `not-shown` at commit however fully the commit could diff it.

use crate::common::TempDir;
use std::fs;
use warden_workspace::{
    Change, CommitError, CommitOptions, Content, CreateOptions, Cut, Decision, DiffOptions,
    Sandbox, Store, NOT_SHOWN,
};

fn not_shown(c: &Change) -> bool {
    c.flags.iter().any(|f| f.rule == NOT_SHOWN)
}

fn by<'a>(changes: &'a [Change], name: &str) -> &'a Change {
    changes
        .iter()
        .find(|c| c.path.to_str() == Some(name))
        .unwrap_or_else(|| panic!("no change to {name}"))
}

/// What a commit's preview computes for `paths`: content compared, no
/// patches.
fn preview(sb: &Sandbox, paths: &[&str]) -> Vec<Change> {
    sb.diff(&DiffOptions {
        paths: paths.iter().map(Into::into).collect(),
        patches: false,
        ..DiffOptions::default()
    })
    .expect("preview")
}

#[test]
fn a_file_the_review_cut_for_time_is_flagged_at_commit_even_when_committed_by_itself() {
    let state = TempDir::new("record-state");
    let real = TempDir::new("record-real");
    let files = 10;
    for i in 0..files {
        fs::write(real.join(format!("a{i}.txt")), "# old\nhello\n").unwrap();
    }
    // Larger than each file of the flood, so diffed after them.
    let line = |i: usize| format!("export const k{i:05} = check(token, {i}); // ok\n");
    let old: String = (0..30_000).map(line).collect();
    fs::write(real.join("auth.js"), &old).unwrap();
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    for i in 0..files {
        let text: String = (0..45_000).map(|n| format!("x{i}-{n}\n")).collect();
        fs::write(sb.upper().join(format!("a{i}.txt")), text).unwrap();
    }
    fs::write(
        sb.upper().join("auth.js"),
        old.replace(&line(15_000), "export const k15000 = true; // ok\n"),
    )
    .unwrap();

    // The review: the flood spends its budget, auth.js is cut.
    let review = sb.diff(&DiffOptions::default()).expect("review");
    let auth = by(&review, "auth.js");
    assert!(
        matches!(
            auth.content,
            Some(Content::NotDiffed {
                reason: Cut::TimeBudget,
                ..
            })
        ),
        "{:?}",
        auth.content
    );
    assert!(not_shown(auth), "{:?}", auth.flags);
    sb.record_review(&review, warden_workspace::review::OWNER)
        .expect("record the review");

    // The commit of auth.js alone compares it in full: nothing of its own
    // to flag. This is how it landed unseen before.
    let mut alone = preview(&sb, &["auth.js"]);
    assert!(
        matches!(alone[0].content, Some(Content::Text { added: 1, .. })),
        "{:?}",
        alone[0].content
    );
    assert!(!not_shown(&alone[0]), "{:?}", alone[0].flags);
    // Held to the review, it is flagged.
    sb.hold_to_review(&mut alone, &[warden_workspace::review::OWNER.to_string()]);
    assert!(not_shown(&alone[0]), "{:?}", alone[0].flags);
    assert!(
        alone[0]
            .flags
            .iter()
            .any(|f| f.reason.contains("review recorded")),
        "{:?}",
        alone[0].flags
    );

    // A review of the file by itself shows it in full: the commit of it,
    // and of everything (where the commit's own comparison cuts it again
    // for time), no longer flags it; the flood's files stay flagged.
    let one = sb
        .diff(&DiffOptions {
            paths: vec!["auth.js".into()],
            ..DiffOptions::default()
        })
        .expect("review of one file");
    assert!(matches!(one[0].content, Some(Content::Text { .. })));
    sb.record_review(&one, warden_workspace::review::OWNER)
        .expect("record");
    let mut alone = preview(&sb, &["auth.js"]);
    sb.hold_to_review(&mut alone, &[warden_workspace::review::OWNER.to_string()]);
    assert!(!not_shown(&alone[0]), "{:?}", alone[0].flags);
    let mut all = preview(&sb, &[]);
    assert!(
        not_shown(by(&all, "auth.js")),
        "cut by the commit's own comparison"
    );
    sb.hold_to_review(&mut all, &[warden_workspace::review::OWNER.to_string()]);
    assert!(!not_shown(by(&all, "auth.js")), "shown in full by a review");
    assert!(all
        .iter()
        .filter(|c| matches!(c.content, Some(Content::NotDiffed { .. })))
        .filter(|c| c.path.to_str() != Some("auth.js"))
        .all(not_shown));
}

/// What `reviewed.json` says was shown, change by change.
fn shown_in_record(sb: &Sandbox) -> Vec<String> {
    let record: serde_json::Value =
        serde_json::from_slice(&fs::read(sb.dir().join("reviewed.json")).unwrap()).unwrap();
    record["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["shown"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_listing_without_content_keeps_the_commits_own_judgement() {
    let state = TempDir::new("listed-state");
    let real = TempDir::new("listed-real");
    fs::write(real.join("a.txt"), "one\n").unwrap();
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    fs::write(sb.upper().join("a.txt"), "two\n").unwrap();
    let listed = sb
        .diff(&DiffOptions {
            content: false,
            patches: false,
            ..DiffOptions::default()
        })
        .expect("listing");
    sb.record_review(&listed, warden_workspace::review::OWNER)
        .expect("record");
    let mut p = preview(&sb, &[]);
    sb.hold_to_review(&mut p, &[warden_workspace::review::OWNER.to_string()]);
    assert!(!not_shown(&p[0]), "{:?}", p[0].flags);
    assert_eq!(shown_in_record(&sb), ["listed"]);
    // A review with content afterwards, of the same change: shown in full.
    sb.record_review(
        &sb.diff(&DiffOptions::default()).unwrap(),
        warden_workspace::review::OWNER,
    )
    .expect("record");
    assert_eq!(shown_in_record(&sb), ["full"]);
}

#[test]
fn a_missing_damaged_or_older_record_counts_as_no_review() {
    let state = TempDir::new("norecord-state");
    let real = TempDir::new("norecord-real");
    fs::write(real.join("a.txt"), "one\n").unwrap();
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    fs::write(sb.upper().join("a.txt"), "two\n").unwrap();
    let shown = sb.diff(&DiffOptions::default()).expect("diff");
    let digest = shown[0].digest.clone();
    let record = sb.dir().join("reviewed.json");
    let commit = |sb: &Sandbox| {
        sb.lock().expect("lock").commit(
            &CommitOptions {
                reviewed: true,
                reviewers: vec![warden_workspace::review::OWNER.to_string()],
                ..CommitOptions::default()
            },
            &mut |_| Decision::Apply,
        )
    };
    for text in [
        None,
        Some("{not json".to_string()),
        // As written before the record said how much was shown: the right
        // digest, and no word of what was shown.
        Some(format!(
            r#"{{"changes":[{{"path":"a.txt","digest":"{digest}"}}]}}"#
        )),
    ] {
        match &text {
            Some(t) => fs::write(&record, t).unwrap(),
            None => {
                let _ = fs::remove_file(&record);
            }
        }
        let err = commit(&sb).expect_err("no review, no commit");
        assert!(matches!(err, CommitError::Unreviewed(_)), "{text:?}: {err}");
        assert_eq!(fs::read_to_string(real.join("a.txt")).unwrap(), "one\n");
    }
    sb.record_review(&shown, warden_workspace::review::OWNER)
        .expect("record");
    commit(&sb).expect("the reviewed change");
    assert_eq!(fs::read_to_string(real.join("a.txt")).unwrap(), "two\n");
}

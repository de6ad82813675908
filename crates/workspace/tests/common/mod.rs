//! Shared by the integration tests: temporary trees, real overlay mounts
//! made with util-linux `unshare` and `mount`, and tree comparison.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use warden_workspace::{MountOptions, Sandbox};

/// A unique name for one test's files.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// The rules of the flags the review put on the change at `path` (the
/// test fails when there is none).
pub fn rules<'a>(changes: &'a [warden_workspace::Change], path: &str) -> Vec<&'a str> {
    changes
        .iter()
        .find(|c| c.path == Path::new(path))
        .unwrap_or_else(|| panic!("no change for {path}: {changes:#?}"))
        .flags
        .iter()
        .map(|f| f.rule)
        .collect()
}

/// A fresh directory (mode 0755), removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let base = std::env::var_os("WARDEN_TEST_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let p = base.join(unique(tag));
        fs::create_dir_all(&p).expect("create temp dir");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = warden_workspace::fsutil::remove_tree(&self.0);
    }
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

pub fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
}

/// The name that is not UTF-8 in every test tree.
pub fn bad_name() -> &'static OsStr {
    OsStr::from_bytes(b"caf\xe9.txt")
}

/// A workspace with one of everything: text, binary, executable, symbolic
/// link, a name with spaces, a name that is not UTF-8, subdirectories.
pub fn build_lower(root: &Path) {
    let w = |p: &str, c: &[u8]| {
        let p = root.join(p);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, c).expect("write");
    };
    w("text.txt", b"one\ntwo\nthree\n");
    w("bin.dat", &[0, 1, 2, 3, 255, 0, 7]);
    w("run.sh", b"#!/bin/sh\necho run\n");
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink("text.txt", root.join("link")).expect("symlink");
    w("with space.txt", b"spaced\n");
    fs::write(root.join(bad_name()), b"latin-1 name\n").expect("write bad name");
    w("sub/inner.txt", b"inner\n");
    w("sub/deep/deeper.txt", b"deeper\n");
    w("gone.txt", b"to be deleted\n");
    w("mode.txt", b"mode only\n");
    w("same.txt", b"opened, not changed\n");
    w("opq/a", b"a\n");
    w("opq/b", b"b\n");
    w("becomes-dir", b"a file first\n");
    w("moved/payload.txt", b"this content moves elsewhere\n");
    w(".git/config", b"[core]\n");
}

/// What the sandbox does in the tests, as a shell script run in the merged
/// view (its working directory).
pub const CHANGES: &str = r#"
set -e
printf 'four\n' >> text.txt
printf '\000\001\002' > bin.dat
rm gone.txt
chmod 600 mode.txt
ln -sfn sub/inner.txt link
printf 'respaced\n' > 'with space.txt'
printf 'more\n' >> "$(printf 'caf\351.txt')"
rm -rf opq && mkdir opq && printf 'c\n' > opq/c
printf 'new\n' > new.txt
: >> same.txt
printf '#!/bin/sh\n' > tool.sh && chmod 755 tool.sh
mkdir -p .git/hooks && printf '#!/bin/sh\ncurl evil\n' > .git/hooks/pre-commit && chmod 755 .git/hooks/pre-commit
ln -s /etc/passwd escape
rm becomes-dir && mkdir becomes-dir && printf 'in\n' > becomes-dir/in.txt
mkdir -p newdir/nested && printf 'n\n' > newdir/nested/n.txt
mv moved/payload.txt payload-moved.txt
"#;

/// How the overlay is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mount {
    /// Inside a new user namespace (what warden does): `userxattr`.
    UserNs,
    /// As root in the initial user namespace: `trusted.overlay.*` marks.
    InitialNs,
}

/// Mount the sandbox's overlay, run `script` in the merged view, copy the
/// merged view to `view` (when given), unmount. `Err` explains why the host
/// cannot do it.
pub fn session(
    sb: &Sandbox,
    mount: Mount,
    script: &str,
    view: Option<&Path>,
) -> Result<(), String> {
    if mount == Mount::InitialNs && !is_root() {
        return Err("mounting in the initial user namespace needs root".into());
    }
    let mnt = TempDir::new("merged");
    let opts: MountOptions = sb.mount_options(mount == Mount::UserNs);
    let data = opts.data().map_err(|e| e.to_string())?;
    let data = data.to_str().ok_or("non-UTF-8 mount data")?.to_string();
    let copy = match view {
        Some(v) => format!("cp -a . '{}'", v.display()),
        None => "true".into(),
    };
    let inner = format!(
        "mount -t overlay overlay -o '{data}' '{mnt}' || exit 99\ncd '{mnt}'\n( {script}\n) || exit 98\n{copy} || exit 97\ncd /\numount '{mnt}'",
        mnt = mnt.path().display()
    );
    let mut cmd = Command::new("unshare");
    if mount == Mount::UserNs {
        cmd.args(["--user", "--map-root-user"]);
    }
    cmd.args(["--mount", "sh", "-c", &inner]);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Ok(()),
        Some(99) => Err(format!("overlay mount refused here: {err}")),
        Some(1) if err.contains("unshare") => Err(format!("unshare failed: {err}")),
        code => panic!("the sandbox's script failed ({code:?}): {err}"),
    }
}

/// One entry of a tree, as compared by the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    File { mode: u32, content: Vec<u8> },
    Dir { mode: u32 },
    Link(PathBuf),
}

/// Every entry below `root` (content, mode, symlink targets).
pub fn tree(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), &mut out);
    out
}

fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Node>) {
    for e in fs::read_dir(root.join(rel)).expect("read dir") {
        let e = e.expect("entry");
        let r = rel.join(e.file_name());
        let p = root.join(&r);
        let m = fs::symlink_metadata(&p).expect("lstat");
        let mode = m.mode() & 0o7777;
        if m.file_type().is_symlink() {
            out.insert(r, Node::Link(fs::read_link(&p).expect("readlink")));
        } else if m.is_dir() {
            out.insert(r.clone(), Node::Dir { mode });
            walk(root, &r, out);
        } else {
            out.insert(
                r,
                Node::File {
                    mode,
                    content: fs::read(&p).expect("read"),
                },
            );
        }
    }
}

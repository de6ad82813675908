//! File operations in a long-lived sandbox, done by its init (inside the
//! sandbox: its mount namespace, credentials and Landlock domain) on
//! request of the supervisor (see [`crate::spawn`]).
//!
//! A path is resolved one component at a time from a descriptor opened
//! when the sandbox started, before any of its processes ran: the
//! workspace for a relative path, the sandbox's own root (the init's `/`
//! after `pivot_root`, where nothing of the host is mounted but what the
//! sandbox sees) for an absolute one ([`Roots`]). Each step is an `openat`
//! with `O_NOFOLLOW` of one name (no `/`) in the directory reached so far,
//! and what it opened is checked with `fstat`. A symbolic link anywhere on
//! the way (a magic link of /proc included) is refused (ELOOP), `..` and
//! absolute paths are refused (EXDEV) before anything is opened, so no
//! resolution can leave the workspace, and a link swapped in during the
//! call is either not there when its name is opened or refused. `openat2`
//! with `RESOLVE_BENEATH` would do the same in one call, but the sandbox's
//! seccomp filter (which the init carries) answers it with ENOSYS.
//!
//! A path under a volume's mount point (`filesystem.volumes`) starts from
//! the volume's own mount, opened by the init when the sandbox started,
//! and stays within it: the files API reads and writes a volume as the
//! sandbox's commands do (through its overlay, within `--disk`).
//!
//! Files are opened with `O_NONBLOCK` (a FIFO cannot hang the init) and
//! anything but a regular file or a directory is refused (ENXIO); the
//! descriptor goes back to the supervisor, whose caller reads or writes it.
//! Errors are errno values in the reply; nothing here panics or blocks on
//! a file's contents.

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The operations and the path rule are the protocol's: served here.
pub use warden_protocol::files::{components, place, Base, FileOp, REMOVE_BUDGET};

/// Deepest directory a recursive removal descends into.
const MAX_DEPTH: usize = 256;

/// Where paths start: `O_PATH` descriptors of the workspace (relative
/// paths; ENOMEDIUM without one) and of the sandbox's root (absolute
/// paths; EXDEV without one, as where the operations are served on the
/// host, beneath the workspace only).
#[derive(Debug, Clone, Copy)]
pub struct Roots<'a> {
    pub workspace: Option<BorrowedFd<'a>>,
    pub root: Option<BorrowedFd<'a>>,
    /// The volumes' mounts: an absolute path under one starts there.
    pub volumes: &'a [VolumeRoot],
}

/// A volume's mount inside the sandbox: the names of its mount point
/// (`/mnt/data`: `mnt`, `data`) and an `O_PATH` descriptor of it.
#[derive(Debug)]
pub struct VolumeRoot {
    pub names: Vec<String>,
    pub fd: OwnedFd,
}

/// Where a walk starts: the descriptor, and for a path of the root how
/// deep the place's own file system begins (`/tmp`, `/home/NAME`): below
/// it no step may go onto another file system, so a directory the owner
/// bound there (`filesystem.read_write` under `/tmp`) or one a cache
/// brings is never reached through the root.
struct Start<'a> {
    fd: BorrowedFd<'a>,
    fence: Option<usize>,
}

impl<'a> Roots<'a> {
    /// Where `path` starts and its names.
    fn start<'p>(&self, path: &'p str) -> Result<(Start<'a>, Vec<&'p str>), Errno> {
        if let Some(found) = self.in_volume(path)? {
            return Ok(found);
        }
        let (base, names) = place(path)?;
        let start = match base {
            Base::Workspace => Start {
                fd: self.workspace.ok_or(Errno::ENOMEDIUM)?,
                fence: None,
            },
            Base::Root => Start {
                fd: self.root.ok_or(Errno::EXDEV)?,
                fence: Some(if names.first() == Some(&"home") { 2 } else { 1 }),
            },
        };
        Ok((start, names))
    }
}

impl<'a> Roots<'a> {
    /// Where an absolute `path` under a volume's mount point starts: the
    /// volume's mount, and the names below it. Nothing is mounted below a
    /// volume (volumes are bound after every other bind, and never nest),
    /// so a walk from there needs no fence; its own layers (an overlay
    /// over two file systems) may show files of another device.
    #[allow(clippy::type_complexity)]
    fn in_volume<'p>(&self, path: &'p str) -> Result<Option<(Start<'a>, Vec<&'p str>)>, Errno> {
        let Some(rest) = path.strip_prefix('/') else {
            return Ok(None);
        };
        if self.volumes.is_empty() {
            return Ok(None);
        }
        let names = components(rest)?;
        let found = self.volumes.iter().find(|v| {
            names.len() >= v.names.len() && v.names.iter().zip(&names).all(|(a, b)| a == b)
        });
        Ok(found.map(|v| {
            (
                Start {
                    fd: v.fd.as_fd(),
                    fence: None,
                },
                names[v.names.len()..].to_vec(),
            )
        }))
    }
}

/// The descriptors of [`Roots`], held by the init for the sandbox's life.
#[derive(Debug, Default)]
pub struct OwnedRoots {
    pub workspace: Option<OwnedFd>,
    pub root: Option<OwnedFd>,
    pub volumes: Vec<VolumeRoot>,
}

impl OwnedRoots {
    pub fn roots(&self) -> Roots<'_> {
        Roots {
            workspace: self.workspace.as_ref().map(|f| f.as_fd()),
            root: self.root.as_ref().map(|f| f.as_fd()),
            volumes: &self.volumes,
        }
    }
}

/// Do `op` beneath the workspace `root` only (an `O_PATH` descriptor):
/// errno 0 and, for the opening operations, the descriptor.
pub fn serve(root: BorrowedFd<'_>, op: &FileOp) -> (i32, Option<OwnedFd>) {
    serve_in(
        Roots {
            workspace: Some(root),
            root: None,
            volumes: &[],
        },
        op,
    )
}

/// Do `op` beneath `roots`: errno 0 and, for the opening operations, the
/// descriptor.
pub fn serve_in(root: Roots<'_>, op: &FileOp) -> (i32, Option<OwnedFd>) {
    let result = match op {
        FileOp::Read { path } => open_read(root, path).map(Some),
        FileOp::Create { path, mode } => create(root, path, *mode).map(Some),
        FileOp::List { path } => open_dir(root, path).map(Some),
        FileOp::Mkdir { path, parents } => mkdir(root, path, *parents).map(|_| None),
        FileOp::Rename { from, to } => rename(root, from, to).map(|_| None),
        FileOp::Remove { path, recursive } => remove(root, path, *recursive).map(|_| None),
    };
    match result {
        Ok(fd) => (0, fd),
        Err(e) => (e as i32, None),
    }
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// The directory reached by `dirs` from `start`, each step one name
/// opened without following a link, and none below the fence onto
/// another file system (EXDEV).
fn walk(start: &Start<'_>, dirs: &[&str]) -> Result<OwnedFd, Errno> {
    let mut cur = nix::fcntl::openat(
        start.fd,
        ".",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    for (i, name) in dirs.iter().enumerate() {
        let next = step(cur.as_fd(), name)?;
        if start.fence.is_some_and(|f| i + 1 > f) {
            same_device(cur.as_fd(), next.as_fd())?;
        }
        cur = next;
    }
    Ok(cur)
}

/// EXDEV unless `b` is on `a`'s file system.
fn same_device(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<(), Errno> {
    if nix::sys::stat::fstat(a)?.st_dev == nix::sys::stat::fstat(b)?.st_dev {
        Ok(())
    } else {
        Err(Errno::EXDEV)
    }
}

/// Whether what is opened at depth `depth` (its parent `dir`) must be on
/// the parent's file system.
fn fenced(start: &Start<'_>, depth: usize) -> bool {
    start.fence.is_some_and(|f| depth > f)
}

/// Open directory `name` in `dir` as `O_PATH`: ELOOP when it is a link,
/// ENOTDIR when it is something else.
fn step(dir: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    let fd = nix::fcntl::openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let st = nix::sys::stat::fstat(&fd)?;
    match kind(&st) {
        SFlag::S_IFDIR => Ok(fd),
        SFlag::S_IFLNK => Err(Errno::ELOOP),
        _ => Err(Errno::ENOTDIR),
    }
}

/// The parent directory of a path and its last name; EINVAL for the
/// workspace or the root itself.
fn parent<'p>(roots: Roots<'_>, path: &'p str) -> Result<(OwnedFd, &'p str), Errno> {
    let (start, names) = roots.start(path)?;
    let Some((last, dirs)) = names.split_last() else {
        return Err(Errno::EINVAL);
    };
    let dir = walk(&start, dirs)?;
    // What is there must be on the parent's file system too (a mount
    // point's name is the mount's root).
    if fenced(&start, names.len()) {
        if let Ok(st) = nix::sys::stat::fstatat(&dir, *last, AtFlags::AT_SYMLINK_NOFOLLOW) {
            if st.st_dev != nix::sys::stat::fstat(&dir)?.st_dev {
                return Err(Errno::EXDEV);
            }
        }
    }
    Ok((dir, last))
}

/// Why `name` in `dir` could not be opened as asked: ELOOP when it is a
/// link (O_NOFOLLOW with O_DIRECTORY may say ENOTDIR for one).
fn explain(dir: BorrowedFd<'_>, name: &str, e: Errno) -> Errno {
    match nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if kind(&st) == SFlag::S_IFLNK => Errno::ELOOP,
        _ => e,
    }
}

fn open_read(root: Roots<'_>, path: &str) -> Result<OwnedFd, Errno> {
    let (dir, name) = parent(root, path).map_err(|e| match e {
        Errno::EINVAL if place(path).is_ok_and(|(_, c)| c.is_empty()) => Errno::EISDIR,
        e => e,
    })?;
    let fd = nix::fcntl::openat(
        &dir,
        name,
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| explain(dir.as_fd(), name, e))?;
    let st = nix::sys::stat::fstat(&fd)?;
    match kind(&st) {
        SFlag::S_IFREG => {}
        SFlag::S_IFDIR => return Err(Errno::EISDIR),
        _ => return Err(Errno::ENXIO),
    }
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))?;
    Ok(fd)
}

fn create(root: Roots<'_>, path: &str, mode: u32) -> Result<OwnedFd, Errno> {
    let (dir, name) = parent(root, path)?;
    let mode = Mode::from_bits_truncate(mode & 0o777);
    let fd = nix::fcntl::openat(
        &dir,
        name,
        OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_EXCL
            | OFlag::O_NOFOLLOW
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        mode,
    )?;
    // Exactly the mode asked for, whatever the init's umask.
    nix::sys::stat::fchmod(&fd, mode)?;
    Ok(fd)
}

fn open_dir(roots: Roots<'_>, path: &str) -> Result<OwnedFd, Errno> {
    let (start, names) = roots.start(path)?;
    let (dir, name) = match names.split_last() {
        Some((last, dirs)) => (walk(&start, dirs)?, *last),
        None => (walk(&start, &[])?, "."),
    };
    let fd = nix::fcntl::openat(
        &dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| explain(dir.as_fd(), name, e))?;
    if fenced(&start, names.len()) {
        same_device(dir.as_fd(), fd.as_fd())?;
    }
    Ok(fd)
}

fn mkdir(roots: Roots<'_>, path: &str, parents: bool) -> Result<(), Errno> {
    let (start, names) = roots.start(path)?;
    if names.is_empty() {
        // The workspace or a volume's mount itself: there already (as
        // `mkdir -p`, when parents are made too).
        return if parents { Ok(()) } else { Err(Errno::EEXIST) };
    }
    let mut cur = walk(&start, &[])?;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let next = step(cur.as_fd(), name).and_then(|next| {
            if fenced(&start, i + 1) {
                same_device(cur.as_fd(), next.as_fd())?;
            }
            Ok(next)
        });
        match next {
            // There already, as a directory: done when parents are
            // made too (as `mkdir -p`).
            Ok(_) if last && parents => return Ok(()),
            Ok(_) if last => return Err(Errno::EEXIST),
            Ok(next) => cur = next,
            Err(Errno::ENOENT) if parents || last => {
                match nix::sys::stat::mkdirat(&cur, *name, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                if !last {
                    cur = step(cur.as_fd(), name)?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn rename(root: Roots<'_>, from: &str, to: &str) -> Result<(), Errno> {
    let (from_dir, from_name) = parent(root, from)?;
    let (to_dir, to_name) = parent(root, to)?;
    // Replacing a link would not write through it (rename never follows
    // one), but a link there is refused as everywhere else.
    if let Ok(st) = nix::sys::stat::fstatat(&to_dir, to_name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        if kind(&st) == SFlag::S_IFLNK {
            return Err(Errno::ELOOP);
        }
    }
    nix::fcntl::renameat(&from_dir, from_name, &to_dir, to_name)
}

fn remove(root: Roots<'_>, path: &str, recursive: bool) -> Result<(), Errno> {
    let (dir, name) = parent(root, path)?;
    match nix::unistd::unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) => return Ok(()),
        Err(Errno::EISDIR) => {}
        Err(e) => return Err(e),
    }
    match nix::unistd::unlinkat(&dir, name, UnlinkatFlags::RemoveDir) {
        Err(Errno::ENOTEMPTY | Errno::EEXIST) if recursive => remove_tree(dir.as_fd(), name),
        r => r,
    }
}

/// Remove the directory `name` in `parent` and everything in it, without
/// recursion (the init's stack is not spent) and without following links
/// (each directory is opened with `O_NOFOLLOW`); EAGAIN after
/// [`REMOVE_BUDGET`] removals.
fn remove_tree(parent: BorrowedFd<'_>, name: &str) -> Result<(), Errno> {
    let open = |dir: BorrowedFd<'_>, name: &std::ffi::CStr| -> Result<nix::dir::Dir, Errno> {
        let fd = nix::fcntl::openat(
            dir,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        nix::dir::Dir::from_fd(fd)
    };
    let first = std::ffi::CString::new(name).map_err(|_| Errno::EINVAL)?;
    let mut stack: Vec<(nix::dir::Dir, std::ffi::CString)> = vec![(open(parent, &first)?, first)];
    let mut budget = REMOVE_BUDGET;
    loop {
        let depth = stack.len();
        let Some((top, _)) = stack.last_mut() else {
            break;
        };
        let mut names = Vec::new();
        for entry in top.iter().take(256) {
            let entry = entry?;
            let n = entry.file_name();
            if n.to_bytes() != b"." && n.to_bytes() != b".." {
                names.push(n.to_owned());
            }
        }
        let mut descend = None;
        for n in names {
            if budget == 0 {
                return Err(Errno::EAGAIN);
            }
            match nix::unistd::unlinkat(top.as_fd(), n.as_c_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => budget -= 1,
                Err(Errno::EISDIR) => {
                    descend = Some(n);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(n) = descend {
            if depth >= MAX_DEPTH {
                return Err(Errno::ENAMETOOLONG);
            }
            let dir = open(top.as_fd(), &n)?;
            // Never into another file system (a directory bound there):
            // what a removal deletes is the place's own.
            same_device(top.as_fd(), dir.as_fd())?;
            stack.push((dir, n));
            continue;
        }
        // Empty: remove it from its parent.
        let Some((_, n)) = stack.pop() else { break };
        let up = match stack.last() {
            Some((d, _)) => d.as_fd(),
            None => parent,
        };
        match nix::unistd::unlinkat(up, n.as_c_str(), UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            // Emptied by someone else's hand meanwhile? Look again.
            Err(Errno::ENOTEMPTY) => {
                let dir = open(up, &n)?;
                stack.push((dir, n));
            }
            Err(e) => return Err(e),
        }
        if budget == 0 {
            return Err(Errno::EAGAIN);
        }
        budget -= 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_on_the_way_or_at_the_end_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "marker").unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/ok"), "fine").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), ws.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), ws.join("dirlink")).unwrap();
        let root = nix::fcntl::open(
            &ws,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let op = |path: &str| FileOp::Read { path: path.into() };
        assert_eq!(serve(root.as_fd(), &op("sub/ok")).0, 0);
        assert_eq!(serve(root.as_fd(), &op("link")).0, libc::ELOOP);
        assert_eq!(serve(root.as_fd(), &op("dirlink/secret")).0, libc::ELOOP);
        assert_eq!(serve(root.as_fd(), &op("../secret")).0, libc::EXDEV);
        assert_eq!(serve(root.as_fd(), &op("sub")).0, libc::EISDIR);
        let (e, _) = serve(
            root.as_fd(),
            &FileOp::Create {
                path: "link".into(),
                mode: 0o644,
            },
        );
        assert_eq!(e, libc::EEXIST);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("secret")).unwrap(),
            "marker"
        );
    }

    #[test]
    fn an_absolute_path_stays_beneath_the_sandboxs_root_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("host-secret"), "marker").unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::create_dir_all(root.join("home/user")).unwrap();
        std::fs::create_dir_all(root.join("proc/1")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), "host's").unwrap();
        std::fs::write(root.join("proc/1/environ"), "init's").unwrap();
        std::os::unix::fs::symlink(dir.path().join("host-secret"), root.join("tmp/l")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("home/user/d")).unwrap();
        let open = |p: &std::path::Path| {
            nix::fcntl::open(
                p,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .unwrap()
        };
        let (r, ws) = (open(&root), open(&root.join("home")));
        // A volume at /mnt/data (on the root's file system here: the
        // fence would refuse a real mount below /mnt).
        std::fs::create_dir_all(root.join("mnt/data")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("mnt/data/out")).unwrap();
        let volumes = [VolumeRoot {
            names: vec!["mnt".into(), "data".into()],
            fd: open(&root.join("mnt/data")),
        }];
        let roots = Roots {
            workspace: Some(ws.as_fd()),
            root: Some(r.as_fd()),
            volumes: &volumes,
        };
        let read = |path: &str| serve_in(roots, &FileOp::Read { path: path.into() }).0;
        let create = |path: &str| {
            serve_in(
                roots,
                &FileOp::Create {
                    path: path.into(),
                    mode: 0o644,
                },
            )
            .0
        };
        assert_eq!(create("/tmp/new"), 0);
        assert_eq!(read("/tmp/new"), 0);
        assert!(root.join("tmp/new").exists());
        assert_eq!(read("/tmp/l"), libc::ELOOP);
        assert_eq!(read("/home/user/d/host-secret"), libc::ELOOP);
        assert_eq!(create("/home/user/d/planted"), libc::ELOOP);
        assert_eq!(
            serve_in(
                roots,
                &FileOp::List {
                    path: "/home/user/d".into()
                }
            )
            .0,
            libc::ELOOP
        );
        assert_eq!(read("/tmp/../../host-secret"), libc::EXDEV);
        // A volume is served beneath its mount, and left by no link or `..`.
        assert_eq!(create("/mnt/data/v"), 0);
        assert!(root.join("mnt/data/v").exists());
        assert_eq!(read("/mnt/data/out/host-secret"), libc::ELOOP);
        assert_eq!(create("/mnt/data/out/planted"), libc::ELOOP);
        assert_eq!(read("/mnt/data/../../etc/passwd"), libc::EXDEV);
        assert_eq!(read("/mnt/other"), libc::EACCES);
        assert_eq!(read("/proc/1/environ"), libc::EACCES);
        assert_eq!(read("/etc/passwd"), libc::EACCES);
        // Relative paths stay the workspace's.
        assert_eq!(read("user/d/host-secret"), libc::ELOOP);
        // Served on the host (gVisor): the workspace only.
        assert_eq!(
            serve(
                ws.as_fd(),
                &FileOp::Read {
                    path: "/tmp/new".into()
                }
            )
            .0,
            libc::EXDEV
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("host-secret")).unwrap(),
            "marker"
        );
        assert!(!dir.path().join("planted").exists());
    }

    #[test]
    fn a_tree_is_removed_in_rounds_without_following_its_links() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let ws = dir.path().join("ws");
        for i in 0..30 {
            let d = ws.join(format!("t/{i}/a/b"));
            std::fs::create_dir_all(&d).unwrap();
            for j in 0..100 {
                std::fs::write(d.join(j.to_string()), "x").unwrap();
            }
        }
        std::os::unix::fs::symlink(&outside, ws.join("t/0/out")).unwrap();
        let root = nix::fcntl::open(
            &ws,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let op = FileOp::Remove {
            path: "t".into(),
            recursive: true,
        };
        let mut rounds = 0;
        loop {
            rounds += 1;
            match serve(root.as_fd(), &op).0 {
                0 => break,
                libc::EAGAIN => continue,
                e => panic!("errno {e}"),
            }
        }
        assert!(rounds > 1, "3000 files in one round");
        assert!(!ws.join("t").exists());
        assert!(outside.join("keep").exists());
    }
}

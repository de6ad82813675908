//! The workspace over virtio-fs: a `virtiofsd` found on the host, one per
//! VM, started jailed (`warden_jail::fsd`) before the VMM and talking
//! vhost-user to it over a Unix socket whose connected end the VMM is
//! handed. Without a virtiofsd, or when it does not start, the workspace
//! is shared over 9p by the VMM itself, and the run says so.
//!
//! Two virtiofsd exist: QEMU's C one (`/usr/lib/qemu/virtiofsd`, QEMU 7.2
//! and earlier) and the Rust one that replaced it (`/usr/libexec/virtiofsd`
//! or `/usr/lib/virtiofsd`). Both take a listening socket by descriptor
//! (`--fd`), a `chroot` sandbox and a cache mode; each gets its own
//! spelling of them.
//!
//! `WARDEN_VM_FS=9p|virtiofs` forces one (tests; `virtiofs` without a
//! usable virtiofsd is an error, never 9p), `WARDEN_VIRTIOFSD` names the
//! binary.
//!
//! virtiofsd runs as the VMM's user (never root or a system account, see
//! `warden_jail::identity`); a workspace of root's or a system account's
//! is served through an idmapped view that swaps its owner with that user,
//! handed to it as a descriptor and named `/proc/self/fd/N/` (the trailing
//! slash: the C virtiofsd checks its source with `lstat`), as QEMU's 9p
//! server is handed it: its `chroot` sandbox enters the view, and no path
//! to the workspace is looked up as that user, who may not cross a root
//! daemon's owner-only state. The Rust virtiofsd resolves its shared
//! directory to a path first, which for a detached mount reads `/`: it is
//! never given a view (the workspace then goes over 9p, saying so, or,
//! forced, the start fails). Its name (`argv[0]`) says which workspace it
//! serves, for `ps`.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where distributions install a virtiofsd, the Rust ones first.
const CANDIDATES: &[&str] = &[
    "/usr/libexec/virtiofsd",
    "/usr/lib/virtiofsd",
    "/usr/lib/qemu/virtiofsd",
];

/// How long a virtiofsd that fails its own set-up (its sandbox, its
/// capabilities) takes at most to exit: one still running then serves.
const START_CHECK: Duration = Duration::from_millis(300);

/// Why the workspace could not be served over virtio-fs.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("WARDEN_VM_FS={value} is not a way to share the workspace: use `9p` or `virtiofs` (or leave it unset: virtiofs where a virtiofsd is installed, else 9p)")]
    BadMode { value: String },
    #[error("WARDEN_VM_FS=virtiofs, but no virtiofsd was found (looked at $WARDEN_VIRTIOFSD and {}): install one (`apt-get install virtiofsd`, or QEMU's) or unset WARDEN_VM_FS", CANDIDATES.join(", "))]
    NotFound,
    #[error("cannot make virtiofsd's socket {path}")]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare virtiofsd's jail")]
    Jail(#[from] warden_jail::vmm::VmmJailError),
    #[error("cannot start virtiofsd {path}")]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("virtiofsd {path} exited at once ({status}): {log}")]
    Exited {
        path: PathBuf,
        status: String,
        log: String,
    },
    #[error("cannot move virtiofsd into the sandbox's cgroup: {0}")]
    Cgroup(String),
    #[error("virtiofsd {path} (the Rust one) cannot serve the workspace through the view that maps its owner (root or a system account) to virtiofsd's user: it resolves its shared directory to a path, which a view has not")]
    NoView { path: PathBuf },
}

/// Which virtiofsd it is (their command lines differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// QEMU's own, in C (`-o source=`, `-o sandbox=`).
    C,
    /// The Rust one (`--shared-dir`, `--sandbox`).
    Rust,
}

/// A virtiofsd binary found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Virtiofsd {
    pub path: PathBuf,
    pub flavour: Flavour,
}

/// How the workspace reaches the guest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WorkspaceFs {
    /// 9p, served by the VMM itself.
    #[default]
    NineP,
    /// virtio-fs, served by this virtiofsd; `forced`: no 9p if it fails.
    VirtioFs { fsd: Virtiofsd, forced: bool },
}

/// The way chosen from `WARDEN_VM_FS` and what the host has, with the line
/// to say when virtio-fs was wanted but cannot be had.
pub fn choose() -> Result<(WorkspaceFs, Option<String>), FsError> {
    match crate::Settings::current().fs.as_str() {
        "9p" => Ok((WorkspaceFs::NineP, None)),
        "virtiofs" => find()
            .map(|fsd| (WorkspaceFs::VirtioFs { fsd, forced: true }, None))
            .ok_or(FsError::NotFound),
        "" => Ok(match find() {
            Some(fsd) => (WorkspaceFs::VirtioFs { fsd, forced: false }, None),
            None => (
                WorkspaceFs::NineP,
                Some(format!(
                    "no virtiofsd on this host (looked at {}): the workspace is shared over 9p, served by the VMM itself (slower); install virtiofsd for virtio-fs",
                    CANDIDATES.join(", ")
                )),
            ),
        }),
        other => Err(FsError::BadMode {
            value: other.to_string(),
        }),
    }
}

/// `$WARDEN_VIRTIOFSD`, else the first of [`CANDIDATES`] installed.
pub fn find() -> Option<Virtiofsd> {
    let path = match &crate::Settings::current().virtiofsd {
        Some(p) => Some(p.clone()).filter(|p| p.is_file()),
        None => CANDIDATES.iter().map(PathBuf::from).find(|p| p.is_file()),
    }?;
    let flavour = flavour_of(&path);
    Some(Virtiofsd { path, flavour })
}

/// The Rust virtiofsd names its shared directory `--shared-dir`, which the
/// C one never spells.
fn flavour_of(path: &Path) -> Flavour {
    let bytes = std::fs::read(path).unwrap_or_default();
    if bytes.windows(10).any(|w| w == b"shared-dir") {
        Flavour::Rust
    } else {
        Flavour::C
    }
}

/// virtiofsd's arguments: the listening socket `fd`, the `share`, its own
/// `chroot` sandbox (its namespace one mounts, which Landlock forbids),
/// the open-files limit left as warden set it, the guest's caches kept
/// for a second (the guest's writes reach the host at once), and none of
/// the capabilities its jail does not keep asked for
/// (`warden_jail::fsd::modcaps`: it would stop, unable to raise them).
fn argv(flavour: Flavour, fd: i32, share: &Path) -> Vec<String> {
    let share = share.display().to_string();
    match flavour {
        Flavour::C => vec![
            format!("--fd={fd}"),
            "-o".into(),
            format!("source={share}"),
            "-o".into(),
            "sandbox=chroot".into(),
            "-o".into(),
            "cache=auto".into(),
            "-o".into(),
            format!("modcaps={}", warden_jail::fsd::modcaps()),
            "--rlimit-nofile=0".into(),
        ],
        Flavour::Rust => vec![
            format!("--fd={fd}"),
            "--shared-dir".into(),
            share,
            "--sandbox".into(),
            "chroot".into(),
            "--cache".into(),
            "auto".into(),
            "--rlimit-nofile".into(),
            "0".into(),
            format!("--modcaps={}", warden_jail::fsd::modcaps()),
        ],
    }
}

/// A virtiofsd serving one share, and the end of its socket the VMM is
/// handed.
pub struct Served {
    pub child: Child,
    pub vmm_end: OwnedFd,
}

/// What virtiofsd may open: its binary and the system's libraries to
/// read, the share to write (the directory opened, by its descriptor:
/// never whatever its path holds by now).
fn access(fsd: &Path, share: &Arc<OwnedFd>) -> warden_jail::vmm::VmmAccess {
    // /proc/sys/fs/file-max: the C virtiofsd reads it whatever its
    // --rlimit-nofile says.
    let mut readable: Vec<PathBuf> = [
        "/usr",
        "/lib",
        "/lib64",
        "/etc/ld.so.cache",
        "/proc/sys/fs/file-max",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect();
    readable.push(fsd.to_path_buf());
    warden_jail::vmm::VmmAccess {
        readable_dirs: Vec::new(),
        readable,
        writable_dirs: vec![share.clone()],
        // Only the Landlock ruleset is taken from this: virtiofsd builds
        // no root of warden's (its own chroot is the share).
        ..Default::default()
    }
}

/// Start `fsd` serving `share` (read-write; `dir`, the directory opened
/// at that path and checked, handed as a descriptor) as `ids`, in
/// `cgroup`, its socket made (and unlinked again) in `run_dir`, its log
/// there; with `view` (an idmapped view of `dir`), it serves that view
/// instead. The calls it makes for the guest that the supervisor judges
/// are held to `budget`, the sandbox's CPU account.
pub fn serve(
    fsd: &Virtiofsd,
    (share, dir): (&Path, &Arc<OwnedFd>),
    view: Option<OwnedFd>,
    run_dir: &Path,
    ids: (u32, u32),
    (cgroup, budget): (
        Option<&warden_jail::cgroup::Cgroup>,
        Option<&warden_jail::modes::pace::Budget>,
    ),
) -> Result<Served, FsError> {
    let sock = run_dir.join("virtiofsd.sock");
    let sock_err = |source| FsError::Socket {
        path: sock.clone(),
        source,
    };
    let _ = std::fs::remove_file(&sock);
    // Connected before virtiofsd runs: its accept finds this connection
    // waiting, and no name stays behind for anyone else to connect to.
    // Through the run directory's descriptor when its path is longer than
    // a socket's address holds (`warden_jail::sockname`).
    use nix::sys::socket::{SockFlag, SockType};
    let named = |e: nix::errno::Errno| sock_err(std::io::Error::from(e));
    let listener = warden_jail::sockname::bind(&sock, SockType::Stream, SockFlag::SOCK_CLOEXEC)
        .and_then(|fd| {
            nix::sys::socket::listen(&fd, nix::sys::socket::Backlog::MAXCONN).map(|()| fd)
        })
        .map_err(named)?;
    let vmm_end = warden_jail::sockname::connect(&sock, SockType::Stream, SockFlag::SOCK_CLOEXEC)
        .map(UnixStream::from)
        .map_err(named)?;
    std::fs::remove_file(&sock).map_err(sock_err)?;
    let log_path = run_dir.join("virtiofsd.log");
    // What virtiofsd prints (a guest's requests can make it print) goes
    // through a pipe into a log within a bound, as the VMM's does.
    let failed = |source| FsError::Socket {
        path: log_path.clone(),
        source,
    };
    let (log, copy) = warden_jail::vmm::bounded_log(&log_path, None).map_err(failed)?;
    let log2 = log.try_clone().map_err(failed)?;
    let mut command = Command::new(&fsd.path);
    command.env_clear();
    let fd = warden_jail::vmnet::inherit(&mut command, &listener);
    // The directory opened, never its path: a directory swapped in at the
    // path since it was checked is not what virtiofsd serves.
    let served_as = match &view {
        None => PathBuf::from(format!(
            "/proc/self/fd/{}/",
            warden_jail::vmnet::inherit(&mut command, dir)
        )),
        Some(_) if fsd.flavour == Flavour::Rust => {
            return Err(FsError::NoView {
                path: fsd.path.clone(),
            })
        }
        Some(v) => PathBuf::from(format!(
            "/proc/self/fd/{}/",
            warden_jail::vmnet::inherit(&mut command, v)
        )),
    };
    let mut jail = warden_jail::fsd::FsdJail::prepare(&access(&fsd.path, dir), ids)?;
    // It changes the share's modes, ACLs and links for the guest: judged
    // on the host, whatever the guest's kernel says, at most at the
    // sandbox's CPU limit (the judge runs outside its cgroup).
    jail.judge_modes(budget)?;
    jail.apply(&mut command);
    let mut child = command
        .arg0(format!("virtiofsd:warden:{}", share.display()))
        .args(argv(fsd.flavour, fd, &served_as))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|source| FsError::Spawn {
            path: fsd.path.clone(),
            source,
        })?;
    if let Err(source) = jail.watch_modes() {
        // Nobody would answer its mode changes: it does not serve.
        let _ = child.kill();
        let _ = child.wait();
        return Err(FsError::Spawn {
            path: fsd.path.clone(),
            source,
        });
    }
    // The command held copies of the log pipe's writing end: the copy ends
    // when virtiofsd's do.
    drop((listener, jail, view, command));
    let killed = |mut c: Child| {
        let _ = c.kill();
        let _ = c.wait();
    };
    if let Some(cg) = cgroup {
        if let Err(e) = cg.add_process(child.id() as i32) {
            killed(child);
            return Err(FsError::Cgroup(warden_jail::chain_str(&e)));
        }
    }
    let start = Instant::now();
    while start.elapsed() < START_CHECK {
        if let Ok(Some(status)) = child.try_wait() {
            copy.wait(Duration::from_millis(500));
            return Err(FsError::Exited {
                path: fsd.path.clone(),
                status: status.to_string(),
                log: crate::tail::tail(&log_path),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Served {
        child,
        vmm_end: vmm_end.into(),
    })
}

/// virtiofsd ends by itself once the VMM has (its socket closes): wait up
/// to `grace` for that, then kill it.
pub(crate) fn end(fsd: &mut Option<Child>, grace: Duration) {
    if let Some(mut c) = fsd.take() {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A virtiofsd not yet handed on: killed if booting stops first.
pub(crate) struct KillOnDrop(pub Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        end(&mut self.0, Duration::ZERO);
    }
}

/// The workspace's virtiofsd, started; when it cannot start and was not
/// `forced`, none, and the line that says why the workspace goes over 9p.
pub(crate) fn start(
    fsd: &Virtiofsd,
    forced: bool,
    (ws, dir, view): (&Path, &Arc<OwnedFd>, Option<OwnedFd>),
    run_dir: &Path,
    ids: (u32, u32),
    limits: (
        Option<&warden_jail::cgroup::Cgroup>,
        Option<&warden_jail::modes::pace::Budget>,
    ),
) -> Result<(Option<Served>, Option<String>), FsError> {
    match serve(fsd, (ws, dir), view, run_dir, ids, limits) {
        Ok(s) => Ok((Some(s), None)),
        Err(e) if forced => Err(e),
        Err(e) => Ok((
            None,
            Some(format!(
                "{}: the workspace is shared over 9p, served by the VMM itself",
                warden_jail::chain_str(&e)
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_virtiofsd_gets_its_own_spelling_of_the_same_command() {
        let c = argv(Flavour::C, 7, Path::new("/w s"));
        assert!(c.contains(&"--fd=7".to_string()));
        assert!(c.contains(&"source=/w s".to_string()));
        assert!(c.contains(&"sandbox=chroot".to_string()));
        let r = argv(Flavour::Rust, 7, Path::new("/w s"));
        assert!(r
            .windows(2)
            .any(|w| w[0] == "--shared-dir" && w[1] == "/w s"));
        assert!(r
            .windows(2)
            .any(|w| w[0] == "--sandbox" && w[1] == "chroot"));
    }

    #[test]
    fn the_rust_virtiofsd_is_never_given_a_view_it_would_resolve_to_the_hosts_root() {
        // It canonicalizes its shared directory: a detached view's
        // `/proc/self/fd/N` reads `/`. Refused before anything runs.
        let dir = tempfile::tempdir().unwrap();
        let fsd = Virtiofsd {
            path: PathBuf::from("/bin/true"),
            flavour: Flavour::Rust,
        };
        let view = OwnedFd::from(std::fs::File::open(dir.path()).unwrap());
        let opened = Arc::new(OwnedFd::from(std::fs::File::open(dir.path()).unwrap()));
        let got = serve(
            &fsd,
            (dir.path(), &opened),
            Some(view),
            dir.path(),
            (65534, 65534),
            (None, None),
        );
        assert!(
            matches!(got, Err(FsError::NoView { .. })),
            "{:?}",
            got.err()
        );
    }

    #[test]
    fn a_virtiofsd_is_told_apart_by_its_options() {
        let dir = tempfile::tempdir().unwrap();
        let rust = dir.path().join("rust");
        std::fs::write(&rust, b"\0..--shared-dir <SHARED_DIR>..").unwrap();
        let c = dir.path().join("c");
        std::fs::write(&c, b"\0..-o source=PATH..").unwrap();
        assert_eq!(flavour_of(&rust), Flavour::Rust);
        assert_eq!(flavour_of(&c), Flavour::C);
    }
}

//! The workbench every attack shares: warden's executable and a private
//! directory for planted files (`Lab`), the sandbox runs of probes and
//! their findings (`Run`), the host's listeners, and the verdicts attacks
//! reach from them. What each attack plants and judges is in `attacks/`.

use crate::{Category, SelftestError, RESULT_PREFIX};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the host's own listeners answer, so a probe knows it reached one.
pub(crate) const LISTENER_REPLY: &[u8] = b"warden-selftest-listener\n";

/// A finished sandbox run of one probe.
pub(crate) struct Run {
    pub(crate) finding: Option<(bool, String)>,
    pub(crate) status: Option<i32>,
    pub(crate) stderr: String,
    pub(crate) elapsed: Duration,
}

impl Run {
    /// The probe's own verdict; a run that printed none (warden refused,
    /// the probe was killed) is described by its status.
    pub(crate) fn verdict(&self) -> (bool, String) {
        match &self.finding {
            Some(f) => f.clone(),
            None => (
                false,
                format!(
                    "the probe reported nothing (status {:?}): {}",
                    self.status,
                    self.stderr.trim()
                ),
            ),
        }
    }
}

/// A TCP listener on the host that counts connections and answers each.
pub(crate) struct Listener {
    pub(crate) addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Listener {
    pub(crate) fn start(addr: SocketAddr, reply: &'static [u8]) -> std::io::Result<Listener> {
        let l = TcpListener::bind(addr)?;
        let addr = l.local_addr()?;
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                h.fetch_add(1, Ordering::SeqCst);
                let _ = c.write_all(reply);
            }
        });
        Ok(Listener { addr, hits })
    }

    pub(crate) fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A UDP socket on the host that counts datagrams.
pub(crate) struct UdpListener {
    pub(crate) addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl UdpListener {
    pub(crate) fn start(addr: SocketAddr) -> std::io::Result<UdpListener> {
        let s = UdpSocket::bind(addr)?;
        let addr = s.local_addr()?;
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while s.recv_from(&mut buf).is_ok() {
                h.fetch_add(1, Ordering::SeqCst);
            }
        });
        Ok(UdpListener { addr, hits })
    }

    pub(crate) fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// The workbench: warden's executable, a private directory for planted
/// files, and the host facts attacks need.
pub struct Lab {
    pub(crate) exe: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) token: String,
    /// A non-loopback IPv4 address of this host, when it has one.
    pub(crate) host_ip: Option<Ipv4Addr>,
    /// Extra `warden run` flags for every sandbox (e.g. `--allow-degraded`).
    pub(crate) base_flags: Vec<String>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = warden_workspace::fsutil::remove_tree(&self.dir);
    }
}

fn random_token() -> String {
    let mut b = [0u8; 8];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if !ok {
        b = (std::process::id() as u64 ^ Instant::now().elapsed().as_nanos() as u64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

fn host_ipv4() -> Option<Ipv4Addr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        let ip = a.address?.as_sockaddr_in()?.ip();
        (!ip.is_loopback() && !ip.is_link_local()).then_some(ip)
    })
}

/// Processes on the host whose command line contains `marker`.
pub(crate) fn host_pids_with(marker: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| *pid != me)
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .map(|c| String::from_utf8_lossy(&c).contains(marker))
                        .unwrap_or(false)
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Lab {
    /// Prepare the workbench. `base_flags` go to every `warden run`.
    pub fn new(exe: PathBuf, base_flags: Vec<String>) -> Result<Lab, SelftestError> {
        let token = random_token();
        let dir = std::env::temp_dir().join(format!("warden-selftest-{token}"));
        std::fs::create_dir_all(&dir).map_err(|source| SelftestError::Prepare {
            path: dir.clone(),
            source,
        })?;
        Ok(Lab {
            exe,
            dir,
            token,
            host_ip: host_ipv4(),
            base_flags,
        })
    }

    /// A host directory `name` that the attack binds into a sandbox with
    /// `--rw`, for what the sandbox and the host tell each other while it
    /// runs (a `--rw` bind is the host directory itself, live through a
    /// run and an exec alike): writable by whatever identity the sandbox
    /// runs as (gVisor's writes arrive as nobody), inside a directory
    /// only warden's user enters.
    pub(crate) fn shared_dir(&self, name: &str) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let private = self.dir.join("shared");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&private)?;
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700))?;
        let dir = private.join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
        Ok(dir)
    }

    pub(crate) fn plant(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.join(name);
        if let Some(parent) = p.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(&p, content);
        p
    }

    pub(crate) fn command(&self, flags: &[String], probe: &str, args: &[String]) -> Command {
        let exe = self.exe.to_string_lossy().to_string();
        let mut c = Command::new(&self.exe);
        c.args(["run", "--no-tty", "--no-audit-log", "--ro", &exe])
            .args(&self.base_flags)
            .args(flags)
            .args(["--", &exe, "__probe", probe])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    pub(crate) fn finish(child: Child, start: Instant) -> Run {
        let out = child.wait_with_output();
        let elapsed = start.elapsed();
        match out {
            Err(e) => Run {
                finding: None,
                status: None,
                stderr: e.to_string(),
                elapsed,
            },
            Ok(out) => {
                let stdout = String::from_utf8_lossy(&out.stdout);
                let finding = stdout.lines().rev().find_map(|l| {
                    let v: serde_json::Value =
                        serde_json::from_str(l.strip_prefix(RESULT_PREFIX)?).ok()?;
                    let detail = v["detail"].as_str()?.to_string();
                    if v["refused"].as_bool() == Some(true) {
                        note_refusal(&detail);
                    }
                    Some((v["contained"].as_bool()?, detail))
                });
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                // 125 without a finding: warden refused to start the
                // sandbox (a limit this host cannot enforce for this user,
                // say), so the probe never ran. The attack was not tried:
                // neither contained nor escaped.
                if finding.is_none() && out.status.code() == Some(125) {
                    let why = stderr
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("no reason given");
                    note_refusal(&format!(
                        "warden did not start the sandbox ({})",
                        why.trim().trim_start_matches("warden: ")
                    ));
                }
                Run {
                    finding,
                    status: out.status.code(),
                    stderr,
                    elapsed,
                }
            }
        }
    }

    pub(crate) fn sandbox(&self, flags: &[&str], probe: &str, args: &[&str]) -> Run {
        let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let start = Instant::now();
        match self.command(&flags, probe, &args).spawn() {
            Ok(child) => Lab::finish(child, start),
            Err(e) => Run {
                finding: None,
                status: None,
                stderr: format!("cannot start warden: {e}"),
                elapsed: start.elapsed(),
            },
        }
    }

    pub(crate) fn spawn(
        &self,
        flags: &[&str],
        probe: &str,
        args: &[&str],
    ) -> Option<(Child, Instant)> {
        let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let start = Instant::now();
        self.command(&flags, probe, &args)
            .spawn()
            .ok()
            .map(|c| (c, start))
    }
}

pub(crate) type Attack = (&'static str, Category, &'static str, fn(&Lab) -> Verdict);

/// What an attack concluded.
pub(crate) enum Verdict {
    Contained(String),
    Escaped(String),
    Skipped(String),
}

pub(crate) fn from_run(r: &Run) -> Verdict {
    match r.verdict() {
        (true, d) => Verdict::Contained(d),
        (false, d) => Verdict::Escaped(d),
    }
}

/// A probe that needs nothing from the host, in a default sandbox.
macro_rules! simple {
    ($probe:expr $(, $arg:expr)*) => {
        |lab: &Lab| from_run(&lab.sandbox(&[], $probe, &[$($arg),*]))
    };
}

/// The probe's verdict, and the listener's: anything that reached it is an
/// escape whatever the probe thought.
pub(crate) fn with_hits(r: &Run, hits: usize, what: &str) -> Verdict {
    if hits > 0 {
        return Verdict::Escaped(format!(
            "{hits} connection(s) or datagram(s) reached {what}"
        ));
    }
    match from_run(r) {
        Verdict::Contained(d) => Verdict::Contained(format!("{d}; nothing reached {what}")),
        other => other,
    }
}

pub(crate) fn need_host_ip(lab: &Lab) -> Result<Ipv4Addr, Verdict> {
    lab.host_ip.ok_or_else(|| {
        Verdict::Skipped("this host has no non-loopback IPv4 address to aim at".into())
    })
}

#[derive(Clone, Copy)]
pub(crate) enum Proto {
    Tcp,
    Udp,
}

/// Aim `probe` (in a sandbox with `flags`) at a listener on this host's
/// own address: its arguments are that address, the port and `extra`.
/// Anything that reaches the listener is an escape.
pub(crate) fn at_host(
    lab: &Lab,
    proto: Proto,
    flags: &[&str],
    probe: &str,
    extra: &[&str],
    what: &str,
) -> Verdict {
    let ip = match need_host_ip(lab) {
        Ok(ip) => ip,
        Err(v) => return v,
    };
    let at = SocketAddr::from((ip, 0));
    let (port, hits): (u16, Box<dyn Fn() -> usize>) = match proto {
        Proto::Tcp => match Listener::start(at, LISTENER_REPLY) {
            Ok(l) => (l.addr.port(), Box::new(move || l.hits())),
            Err(_) => return Verdict::Skipped("cannot listen on the host's address".into()),
        },
        Proto::Udp => match UdpListener::start(at) {
            Ok(u) => (u.addr.port(), Box::new(move || u.hits())),
            Err(_) => {
                return Verdict::Skipped("cannot open a UDP socket on the host's address".into())
            }
        },
    };
    let (ip, port) = (ip.to_string(), port.to_string());
    let mut args = vec![ip.as_str(), port.as_str()];
    args.extend_from_slice(extra);
    let r = lab.sandbox(flags, probe, &args);
    with_hits(&r, hits(), what)
}

pub(crate) const EGRESS: &[&str] = &["--allow-domain", "allowed.selftest.invalid"];

/// A probe that refused to run during the attack being judged: that
/// attack was not tried, whatever its judge concludes from the run.
static REFUSED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn note_refusal(detail: &str) {
    if let Ok(mut r) = REFUSED.lock() {
        r.get_or_insert_with(|| detail.to_string());
    }
}

/// The refusal noted since the last call, if any (and forget it).
pub(crate) fn take_refusal() -> Option<String> {
    REFUSED.lock().ok().and_then(|mut r| r.take())
}

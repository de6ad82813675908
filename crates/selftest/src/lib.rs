//! `warden selftest`: a catalogue of real attacks, each made from inside a
//! real sandbox on this host, and judged by what the attempt returned *and*
//! by instruments on the host: listeners that record every connection and
//! datagram that reaches them, planted files, host processes, the host's
//! hostname, the process table after the run.
//!
//! Every attack runs `warden run ... -- warden __probe NAME ARGS` (the
//! binary is bound read-only into the sandbox), so it meets every layer a
//! real program meets. An attack is *contained* only when the probe says
//! so and no instrument saw anything; it is *skipped*, with the reason,
//! when this host lacks what it needs (never counted as contained).

use serde::Serialize;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The line a probe prints its finding on.
pub const RESULT_PREFIX: &str = "warden-probe-result ";
/// What the host's own listeners answer, so a probe knows it reached one.
const LISTENER_REPLY: &[u8] = b"warden-selftest-listener\n";

/// Groups of attacks, as the report shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Filesystem,
    Process,
    Kernel,
    Network,
    Resources,
    Persistence,
    Secrets,
    CrossSandbox,
}

impl Category {
    pub fn label(self) -> &'static str {
        match self {
            Category::Filesystem => "filesystem escape",
            Category::Process => "process and IPC escape",
            Category::Kernel => "privilege escalation via kernel interfaces",
            Category::Network => "network exfiltration",
            Category::Resources => "resource exhaustion",
            Category::Persistence => "persistence after exit",
            Category::Secrets => "secret theft",
            Category::CrossSandbox => "cross-sandbox access",
        }
    }
}

/// What became of one attack.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub id: &'static str,
    pub category: Category,
    pub attack: &'static str,
    /// `contained`, `escaped` or `skipped`.
    pub result: &'static str,
    pub detail: String,
}

impl Outcome {
    pub fn escaped(&self) -> bool {
        self.result == "escaped"
    }
}

/// Why the suite could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    #[error("cannot find warden's own executable to run inside the sandboxes")]
    Exe(#[source] std::io::Error),
    #[error("cannot prepare the selftest's files in {path}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A finished sandbox run of one probe.
struct Run {
    finding: Option<(bool, String)>,
    status: Option<i32>,
    stderr: String,
    elapsed: Duration,
}

impl Run {
    /// The probe's own verdict; a run that printed none (warden refused,
    /// the probe was killed) is described by its status.
    fn verdict(&self) -> (bool, String) {
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
struct Listener {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Listener {
    fn start(addr: SocketAddr, reply: &'static [u8]) -> std::io::Result<Listener> {
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

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A UDP socket on the host that counts datagrams.
struct UdpListener {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl UdpListener {
    fn start(addr: SocketAddr) -> std::io::Result<UdpListener> {
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

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// The workbench: warden's executable, a private directory for planted
/// files, and the host facts attacks need.
pub struct Lab {
    exe: PathBuf,
    dir: PathBuf,
    token: String,
    /// A non-loopback IPv4 address of this host, when it has one.
    host_ip: Option<Ipv4Addr>,
    /// Extra `warden run` flags for every sandbox (e.g. `--allow-degraded`).
    base_flags: Vec<String>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
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

fn free_port() -> u16 {
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
fn host_pids_with(marker: &str) -> Vec<i32> {
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

    fn plant(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.join(name);
        if let Some(parent) = p.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(&p, content);
        p
    }

    fn command(&self, flags: &[String], probe: &str, args: &[String]) -> Command {
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

    fn finish(child: Child, start: Instant) -> Run {
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
                    Some((v["contained"].as_bool()?, v["detail"].as_str()?.to_string()))
                });
                Run {
                    finding,
                    status: out.status.code(),
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                    elapsed,
                }
            }
        }
    }

    fn sandbox(&self, flags: &[&str], probe: &str, args: &[&str]) -> Run {
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

    fn spawn(&self, flags: &[&str], probe: &str, args: &[&str]) -> Option<(Child, Instant)> {
        let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let start = Instant::now();
        self.command(&flags, probe, &args)
            .spawn()
            .ok()
            .map(|c| (c, start))
    }
}

type Attack = (&'static str, Category, &'static str, fn(&Lab) -> Verdict);

/// What an attack concluded.
enum Verdict {
    Contained(String),
    Escaped(String),
    Skipped(String),
}

fn from_run(r: &Run) -> Verdict {
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
fn with_hits(r: &Run, hits: usize, what: &str) -> Verdict {
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

fn need_host_ip(lab: &Lab) -> Result<Ipv4Addr, Verdict> {
    lab.host_ip.ok_or_else(|| {
        Verdict::Skipped("this host has no non-loopback IPv4 address to aim at".into())
    })
}

#[derive(Clone, Copy)]
enum Proto {
    Tcp,
    Udp,
}

/// Aim `probe` (in a sandbox with `flags`) at a listener on this host's
/// own address: its arguments are that address, the port and `extra`.
/// Anything that reaches the listener is an escape.
fn at_host(
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

const EGRESS: &[&str] = &["--allow-domain", "allowed.selftest.invalid"];

/// Every attack's id, category and description, in report order.
pub fn list() -> Vec<(&'static str, Category, &'static str)> {
    catalogue()
        .into_iter()
        .map(|(id, c, a, _)| (id, c, a))
        .collect()
}

/// The catalogue, in report order.
fn catalogue() -> Vec<Attack> {
    vec![
        // ---- filesystem escape ----
        (
            "fs.read-planted-file",
            Category::Filesystem,
            "read a host file outside every bind",
            |lab| {
                let p = lab.plant("planted/secret", &lab.token);
                from_run(&lab.sandbox(&[], "read-file", &[&p.to_string_lossy()]))
            },
        ),
        (
            "fs.list-host-home",
            Category::Filesystem,
            "list the invoking user's home directory",
            |lab| match std::env::var("HOME")
                .ok()
                .filter(|h| Path::new(h).is_dir() && h != "/")
            {
                Some(h) => from_run(&lab.sandbox(&[], "list-dir", &[&h])),
                None => Verdict::Skipped("HOME is not a directory on this host".into()),
            },
        ),
        (
            "fs.write-system-dir",
            Category::Filesystem,
            "create a file in /usr",
            simple!("write-file", "/usr/warden-selftest-planted"),
        ),
        (
            "fs.write-etc-passwd",
            Category::Filesystem,
            "append to /etc/passwd",
            simple!("write-file", "/etc/passwd"),
        ),
        (
            "fs.symlink-out",
            Category::Filesystem,
            "follow a symlink planted to point at a host file",
            |lab| {
                let p = lab.plant("planted/linked", &lab.token);
                from_run(&lab.sandbox(&[], "symlink-out", &[&p.to_string_lossy()]))
            },
        ),
        (
            "fs.proc-root",
            Category::Filesystem,
            "reach the host's tree through /proc/1/root",
            |lab| {
                let p = lab.plant("planted/via-proc", &lab.token);
                from_run(&lab.sandbox(&[], "read-file", &[&format!("/proc/1/root{}", p.display())]))
            },
        ),
        (
            "fs.mount",
            Category::Filesystem,
            "mount a file system over /tmp",
            simple!("mount-tmpfs"),
        ),
        (
            "fs.open-by-handle",
            Category::Filesystem,
            "open a file by handle (the shocker escape)",
            simple!("open-by-handle"),
        ),
        (
            "fs.chroot",
            Category::Filesystem,
            "chroot to break out of the root",
            simple!("chroot"),
        ),
        (
            "fs.mknod",
            Category::Filesystem,
            "create a block device node for the host's disk",
            simple!("mknod-device"),
        ),
        (
            "fs.setuid-bit",
            Category::Filesystem,
            "leave a setuid file for the host to run",
            simple!("setuid-bit"),
        ),
        (
            "fs.sysfs",
            Category::Filesystem,
            "read the host's /sys",
            simple!("list-dir", "/sys/class/net"),
        ),
        (
            "fs.dev-mem",
            Category::Filesystem,
            "read physical memory through /dev/mem",
            simple!("read-file", "/dev/mem"),
        ),
        (
            "fs.outside-workspace",
            Category::Filesystem,
            "write next to the workspace, outside it",
            |lab| {
                let ws = lab.dir.join("workspace");
                let _ = std::fs::create_dir_all(&ws);
                let beside = lab.dir.join("beside-workspace");
                let r = lab.sandbox(
                    &["-w", &ws.to_string_lossy()],
                    "write-file",
                    &[&beside.to_string_lossy()],
                );
                if beside.exists() {
                    return Verdict::Escaped(format!("{} was created", beside.display()));
                }
                from_run(&r)
            },
        ),
        (
            "fs.host-unix-socket",
            Category::Filesystem,
            "connect to a host service's named socket (docker.sock style)",
            |lab| {
                let path = lab.dir.join("service.sock");
                let listener = match std::os::unix::net::UnixListener::bind(&path) {
                    Ok(l) => l,
                    Err(e) => return Verdict::Skipped(format!("cannot create a unix socket: {e}")),
                };
                let _ = listener.set_nonblocking(true);
                let r = lab.sandbox(&[], "unix-socket", &[&path.to_string_lossy()]);
                if listener.accept().is_ok() {
                    return Verdict::Escaped("the host's socket took a connection".into());
                }
                from_run(&r)
            },
        ),
        // ---- process and IPC escape ----
        (
            "proc.kill-host-process",
            Category::Process,
            "kill a process of the host",
            |lab| {
                let marker = format!("selftest-victim-{}", lab.token);
                let Ok(mut victim) = Command::new(&lab.exe)
                    .args(["__probe", "sleep-marker", &marker])
                    .stdout(Stdio::null())
                    .spawn()
                else {
                    return Verdict::Skipped("cannot start a host process to attack".into());
                };
                let pid = victim.id().to_string();
                let r = lab.sandbox(&[], "kill-pid", &[&pid, &marker]);
                let alive = matches!(victim.try_wait(), Ok(None));
                let _ = victim.kill();
                let _ = victim.wait();
                if !alive {
                    return Verdict::Escaped(format!("host process {pid} died"));
                }
                from_run(&r)
            },
        ),
        (
            "proc.see-host-process",
            Category::Process,
            "find a host process in /proc",
            |lab| {
                let marker = format!("selftest-visible-{}", lab.token);
                let Ok(mut victim) = Command::new(&lab.exe)
                    .args(["__probe", "sleep-marker", &marker])
                    .stdout(Stdio::null())
                    .spawn()
                else {
                    return Verdict::Skipped("cannot start a host process to look for".into());
                };
                let reversed: String = marker.chars().rev().collect();
                let r = lab.sandbox(&[], "see-process", &[&reversed]);
                let _ = victim.kill();
                let _ = victim.wait();
                from_run(&r)
            },
        ),
        (
            "proc.ptrace",
            Category::Process,
            "attach to another process with ptrace",
            simple!("ptrace-parent"),
        ),
        (
            "proc.process-vm-readv",
            Category::Process,
            "read another process's memory",
            simple!("vm-read-parent"),
        ),
        (
            "proc.abstract-socket",
            Category::Process,
            "connect to a host abstract unix socket",
            |lab| {
                use std::os::linux::net::SocketAddrExt;
                let name = format!("warden-selftest-{}", lab.token);
                let listener = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                    .and_then(|a| std::os::unix::net::UnixListener::bind_addr(&a));
                let listener = match listener {
                    Ok(l) => l,
                    Err(e) => {
                        return Verdict::Skipped(format!("cannot create an abstract socket: {e}"))
                    }
                };
                let _ = listener.set_nonblocking(true);
                let r = lab.sandbox(&[], "abstract-socket", &[&name]);
                if listener.accept().is_ok() {
                    return Verdict::Escaped("the host's abstract socket took a connection".into());
                }
                from_run(&r)
            },
        ),
        (
            "proc.tiocsti",
            Category::Process,
            "inject keystrokes into the terminal (TIOCSTI)",
            simple!("tiocsti"),
        ),
        (
            "proc.hostname",
            Category::Process,
            "rename the host",
            |lab| {
                let before = nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let r = lab.sandbox(&[], "sethostname", &[&format!("pwned-{}", &lab.token[..6])]);
                let after = nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if before != after {
                    return Verdict::Escaped(format!("the host's name changed to {after}"));
                }
                match r.finding {
                    Some(_) => Verdict::Contained("the host's name is unchanged".into()),
                    None => from_run(&r),
                }
            },
        ),
        // ---- kernel interfaces ----
        (
            "kernel.user-namespace",
            Category::Kernel,
            "create a user namespace (unlocks root-only kernel code)",
            simple!("unshare-user"),
        ),
        (
            "kernel.mount-namespace",
            Category::Kernel,
            "create a mount namespace",
            simple!("unshare-mount"),
        ),
        (
            "kernel.setns",
            Category::Kernel,
            "join a namespace by descriptor",
            simple!("setns"),
        ),
        (
            "kernel.bpf",
            Category::Kernel,
            "load an eBPF program",
            simple!("bpf"),
        ),
        (
            "kernel.keyring",
            Category::Kernel,
            "use the kernel keyrings",
            simple!("keyring"),
        ),
        (
            "kernel.io-uring",
            Category::Kernel,
            "set up io_uring",
            simple!("io-uring"),
        ),
        (
            "kernel.perf-event",
            Category::Kernel,
            "open a performance counter",
            simple!("perf-event"),
        ),
        (
            "kernel.userfaultfd",
            Category::Kernel,
            "create a userfaultfd (kernel race tool)",
            simple!("userfaultfd"),
        ),
        (
            "kernel.load-module",
            Category::Kernel,
            "load a kernel module",
            simple!("load-module"),
        ),
        (
            "kernel.kexec",
            Category::Kernel,
            "load a new kernel",
            simple!("kexec"),
        ),
        (
            "kernel.setuid-root",
            Category::Kernel,
            "become root with setuid(0)",
            simple!("become-root"),
        ),
        (
            "kernel.capabilities",
            Category::Kernel,
            "hold any capability",
            simple!("capabilities"),
        ),
        (
            "kernel.no-new-privs",
            Category::Kernel,
            "gain privileges through exec",
            simple!("no-new-privs"),
        ),
        (
            "kernel.raw-socket",
            Category::Kernel,
            "open a raw IP socket",
            simple!("raw-socket"),
        ),
        (
            "kernel.packet-socket",
            Category::Kernel,
            "open a packet socket",
            simple!("packet-socket"),
        ),
        // ---- network exfiltration ----
        (
            "net.host-loopback",
            Category::Network,
            "connect to a service on the host's 127.0.0.1",
            |lab| {
                let Ok(l) = Listener::start(
                    "127.0.0.1:0"
                        .parse()
                        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0))),
                    LISTENER_REPLY,
                ) else {
                    return Verdict::Skipped("cannot listen on the host's loopback".into());
                };
                let r = lab.sandbox(
                    EGRESS,
                    "tcp-connect",
                    &["127.0.0.1", &l.addr.port().to_string()],
                );
                with_hits(&r, l.hits(), "the host's loopback listener")
            },
        ),
        (
            "net.direct-ip",
            Category::Network,
            "connect straight to an IP address (no name)",
            |lab| at_host(lab, Proto::Tcp, EGRESS, "tcp-connect", &[], "the listener"),
        ),
        (
            "net.no-network",
            Category::Network,
            "connect out of a sandbox given no network",
            |lab| at_host(lab, Proto::Tcp, &[], "tcp-connect", &[], "the listener"),
        ),
        (
            "net.domain-fronting",
            Category::Network,
            "send an allowed name's TLS hello to an attacker's address",
            |lab| {
                let ip = match need_host_ip(lab) {
                    Ok(ip) => ip,
                    Err(v) => return v,
                };
                let port = free_port();
                let (Ok(_legit), Ok(attacker)) = (
                    Listener::start(SocketAddr::from(([127, 0, 0, 1], port)), b"legit\n"),
                    Listener::start(SocketAddr::from((ip, port)), LISTENER_REPLY),
                ) else {
                    return Verdict::Skipped(
                        "cannot listen on the same port on two addresses".into(),
                    );
                };
                let allow = format!("allowed.selftest.invalid:{port}");
                let r = lab.sandbox(
                    &[
                        "--allow-domain",
                        &allow,
                        "--add-host",
                        "allowed.selftest.invalid=127.0.0.1",
                    ],
                    "tls-fronting",
                    &[
                        &ip.to_string(),
                        &port.to_string(),
                        "allowed.selftest.invalid",
                    ],
                );
                with_hits(&r, attacker.hits(), "the attacker's listener")
            },
        ),
        (
            "net.proxy-bypass",
            Category::Network,
            "ignore the proxy settings and speak HTTP straight to an address",
            |lab| {
                at_host(
                    lab,
                    Proto::Tcp,
                    EGRESS,
                    "http-direct",
                    &["allowed.selftest.invalid"],
                    "the listener",
                )
            },
        ),
        (
            "net.tls-without-name",
            Category::Network,
            "open TLS without a server name",
            |lab| {
                at_host(
                    lab,
                    Proto::Tcp,
                    EGRESS,
                    "tls-fronting",
                    &[""],
                    "the listener",
                )
            },
        ),
        (
            "net.dns-tunnel",
            Category::Network,
            "carry data out in DNS queries",
            |lab| {
                at_host(
                    lab,
                    Proto::Udp,
                    EGRESS,
                    "dns-tunnel",
                    &[&lab.token],
                    "the attacker's name server",
                )
            },
        ),
        (
            "net.udp",
            Category::Network,
            "send UDP to the host",
            |lab| {
                at_host(
                    lab,
                    Proto::Udp,
                    EGRESS,
                    "udp-send",
                    &[],
                    "the host's UDP listener",
                )
            },
        ),
        (
            "net.ipv6-loopback",
            Category::Network,
            "connect to a service on the host's ::1",
            |lab| {
                let Ok(l) = Listener::start(
                    "[::1]:0"
                        .parse()
                        .unwrap_or(SocketAddr::from(([0u16; 8], 0))),
                    LISTENER_REPLY,
                ) else {
                    return Verdict::Skipped("this host has no IPv6 loopback".into());
                };
                let r = lab.sandbox(EGRESS, "tcp-connect", &["::1", &l.addr.port().to_string()]);
                with_hits(&r, l.hits(), "the host's IPv6 listener")
            },
        ),
        ("net.icmp", Category::Network, "ping the host", |lab| {
            let ip = match need_host_ip(lab) {
                Ok(ip) => ip,
                Err(v) => return v,
            };
            from_run(&lab.sandbox(EGRESS, "icmp-echo", &[&ip.to_string()]))
        }),
        (
            "net.metadata",
            Category::Network,
            "reach a cloud metadata service (169.254.169.254)",
            |lab| from_run(&lab.sandbox(EGRESS, "tcp-connect", &["169.254.169.254", "80"])),
        ),
        // ---- resource exhaustion ----
        (
            "res.fork-bomb",
            Category::Resources,
            "fork without end (under --pids 64)",
            |lab| {
                let r = lab.sandbox(
                    &["--pids", "64", "--timeout", "30s"],
                    "fork-bomb",
                    &["5000"],
                );
                from_run(&r)
            },
        ),
        (
            "res.memory",
            Category::Resources,
            "allocate without end (under --memory 64M)",
            |lab| {
                let r = lab.sandbox(
                    &["--memory", "64M", "--timeout", "30s"],
                    "memory-hog",
                    &["512"],
                );
                if r.status == Some(137) {
                    return Verdict::Contained("killed at the memory limit (exit 137)".into());
                }
                from_run(&r)
            },
        ),
        (
            "res.fill-tmp",
            Category::Resources,
            "fill /tmp (under --tmp-size 8M)",
            |lab| {
                from_run(&lab.sandbox(
                    &["--tmp-size", "8M", "--timeout", "30s"],
                    "fill-disk",
                    &["/tmp/fill", "64"],
                ))
            },
        ),
        (
            "res.file-size",
            Category::Resources,
            "write a huge file (under --file-size 2M)",
            |lab| {
                let ws = lab.dir.join("fsize");
                let _ = std::fs::create_dir_all(&ws);
                from_run(&lab.sandbox(
                    &[
                        "--file-size",
                        "2M",
                        "-w",
                        &ws.to_string_lossy(),
                        "--timeout",
                        "30s",
                    ],
                    "fill-disk",
                    &["/workspace/big", "16"],
                ))
            },
        ),
        (
            "res.run-forever",
            Category::Resources,
            "spin past the deadline (under --timeout 1s)",
            |lab| {
                let r = lab.sandbox(&["--timeout", "1s"], "spin", &[]);
                if r.status == Some(124) && r.elapsed < Duration::from_secs(10) {
                    Verdict::Contained(format!(
                        "killed at the deadline after {:.1}s (exit 124)",
                        r.elapsed.as_secs_f64()
                    ))
                } else {
                    Verdict::Escaped(format!(
                        "status {:?} after {:.1}s",
                        r.status,
                        r.elapsed.as_secs_f64()
                    ))
                }
            },
        ),
        // ---- persistence ----
        (
            "persist.daemon",
            Category::Persistence,
            "leave a daemon running after the sandbox ends",
            |lab| {
                let marker = format!("selftest-daemon-{}", lab.token);
                let r = lab.sandbox(&[], "daemonize", &[&marker]);
                std::thread::sleep(Duration::from_millis(100));
                let left = host_pids_with(&marker);
                for pid in &left {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(*pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                if !left.is_empty() {
                    return Verdict::Escaped(format!("processes {left:?} outlived the sandbox"));
                }
                match r.finding {
                    Some(_) => Verdict::Contained("nothing of the sandbox outlived it".into()),
                    None => from_run(&r),
                }
            },
        ),
        // ---- secret theft ----
        (
            "secret.host-environment",
            Category::Secrets,
            "read a credential from warden's own environment",
            |lab| {
                let needle = lab.plant(
                    "needle/value",
                    &format!("selftest-credential-{}", lab.token),
                );
                let value = format!("selftest-credential-{}", lab.token);
                let mut c = lab.command(
                    &[
                        "--ro".to_string(),
                        needle
                            .parent()
                            .map(|p| p.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    ],
                    "find-value-file",
                    &[needle.to_string_lossy().into_owned()],
                );
                c.env("WARDEN_SELFTEST_CREDENTIAL", &value);
                let start = Instant::now();
                match c.spawn() {
                    Ok(child) => from_run(&Lab::finish(child, start)),
                    Err(e) => Verdict::Skipped(format!("cannot start warden: {e}")),
                }
            },
        ),
        (
            "secret.ssh-key",
            Category::Secrets,
            "read a private key from the user's ~/.ssh",
            |lab| {
                let key = lab.plant(
                    "home/.ssh/id_ed25519",
                    &format!("-----BEGIN OPENSSH PRIVATE KEY----- {}", lab.token),
                );
                let mut c = lab.command(&[], "read-file", &[key.to_string_lossy().into_owned()]);
                c.env("HOME", lab.dir.join("home"));
                let start = Instant::now();
                match c.spawn() {
                    Ok(child) => from_run(&Lab::finish(child, start)),
                    Err(e) => Verdict::Skipped(format!("cannot start warden: {e}")),
                }
            },
        ),
        // ---- cross-sandbox access ----
        (
            "cross.loopback",
            Category::CrossSandbox,
            "connect to a server in another sandbox",
            |lab| {
                let port = free_port().to_string();
                let Some((a, start)) = lab.spawn(&[], "listen-once", &[&port]) else {
                    return Verdict::Skipped("cannot start the first sandbox".into());
                };
                std::thread::sleep(Duration::from_millis(300));
                let _ = lab.sandbox(&[], "tcp-connect", &["127.0.0.1", &port]);
                from_run(&Lab::finish(a, start))
            },
        ),
        (
            "cross.tmp",
            Category::CrossSandbox,
            "read another sandbox's /tmp",
            |lab| {
                let Some((a, start)) =
                    lab.spawn(&[], "write-then-wait", &["/tmp/cross-sandbox-marker"])
                else {
                    return Verdict::Skipped("cannot start the first sandbox".into());
                };
                std::thread::sleep(Duration::from_millis(300));
                let r = lab.sandbox(&[], "read-file", &["/tmp/cross-sandbox-marker"]);
                let _ = Lab::finish(a, start);
                from_run(&r)
            },
        ),
        (
            "cross.kill",
            Category::CrossSandbox,
            "kill every process it can see, hoping to reach another sandbox",
            |lab| {
                let Some((a, start)) = lab.spawn(&[], "write-then-wait", &["/tmp/alive"]) else {
                    return Verdict::Skipped("cannot start the first sandbox".into());
                };
                std::thread::sleep(Duration::from_millis(300));
                let _ = lab.sandbox(&[], "kill-all", &[]);
                let first = Lab::finish(a, start);
                match first.finding {
                    Some((true, _)) => Verdict::Contained("the other sandbox lived on".into()),
                    _ => Verdict::Escaped(format!(
                        "the other sandbox died (status {:?})",
                        first.status
                    )),
                }
            },
        ),
    ]
}

/// Run the catalogue (or the attacks whose id starts with `only`), calling
/// `progress` after each.
pub fn run(lab: &Lab, only: Option<&str>, progress: &mut dyn FnMut(&Outcome)) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for (id, category, attack, f) in catalogue() {
        if only.is_some_and(|o| !id.starts_with(o) && category.label() != o) {
            continue;
        }
        let (result, detail) = match f(lab) {
            Verdict::Contained(d) => ("contained", d),
            Verdict::Escaped(d) => ("escaped", d),
            Verdict::Skipped(d) => ("skipped", d),
        };
        let o = Outcome {
            id,
            category,
            attack,
            result,
            detail,
        };
        progress(&o);
        outcomes.push(o);
    }
    outcomes
}

/// `IpAddr` of the lab's host address, for reports.
pub fn host_address(lab: &Lab) -> Option<IpAddr> {
    lab.host_ip.map(IpAddr::V4)
}

//! Process and IPC escape: killing, seeing, tracing and reading the
//! memory of processes outside the sandbox, and reaching host sockets,
//! the terminal and the hostname.
use crate::lab::{from_run, Attack, Lab, Verdict};
use crate::probes::{arg, contained, errno_name, escaped, must_fail, Finding, Probe, EPERM};
use crate::Category;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
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
    ]
}

pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "kill-pid",
        harmful: true,
        run: kill_pid,
    },
    Probe {
        name: "see-process",
        harmful: false,
        run: see_process,
    },
    Probe {
        name: "ptrace-parent",
        harmful: false,
        run: ptrace_parent,
    },
    Probe {
        name: "vm-read-parent",
        harmful: false,
        run: vm_read_parent,
    },
    Probe {
        name: "abstract-socket",
        harmful: false,
        run: abstract_socket,
    },
    Probe {
        name: "tiocsti",
        harmful: false,
        run: tiocsti,
    },
    Probe {
        name: "sethostname",
        harmful: true,
        run: sethostname,
    },
    Probe {
        name: "kill-all",
        harmful: true,
        run: kill_all,
    },
    // The host process the attacks aim at (and the daemon that
    // `persist.daemon` leaves): it only waits.
    Probe {
        name: "sleep-marker",
        harmful: false,
        run: sleep_marker,
    },
];

fn kill_pid(args: &[String]) -> Finding {
    let pid: i32 = arg(args, 0).parse().unwrap_or(0);
    if pid <= 1 {
        return escaped("no pid to attack was given");
    }
    // Only a process whose command line carries the marker counts: the
    // same number may be a process of the sandbox itself.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains(arg(args, 1)) {
        return contained(format!("pid {pid} is not the host's process in here"));
    }
    match kill(Pid::from_raw(pid), Signal::SIGKILL) {
        Ok(()) => escaped(format!("killed host pid {pid}")),
        Err(e) => contained(format!("kill {pid}: {}", errno_name(e))),
    }
}

fn see_process(args: &[String]) -> Finding {
    // The marker comes reversed, so that this probe's own command line
    // (and its init's) does not carry it.
    let marker: String = arg(args, 0).chars().rev().collect();
    let marker = marker.as_str();
    let seen = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .any(|e| {
                    let c = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                    String::from_utf8_lossy(&c).contains(marker)
                })
        })
        .unwrap_or(false);
    if seen {
        escaped("the host's process is visible in /proc")
    } else {
        contained("no host process in /proc")
    }
}

fn ptrace_parent(_: &[String]) -> Finding {
    must_fail(
        "ptrace(PTRACE_ATTACH, parent)",
        warden_jail::probes::ptrace_attach(nix::unistd::getppid().as_raw()),
        EPERM,
    )
}

fn vm_read_parent(_: &[String]) -> Finding {
    let mut buf = [0u8; 8];
    let remote = nix::sys::uio::RemoteIoVec {
        base: 0x400000,
        len: 8,
    };
    must_fail(
        "process_vm_readv(parent)",
        nix::sys::uio::process_vm_readv(
            nix::unistd::getppid(),
            &mut [std::io::IoSliceMut::new(&mut buf)],
            &[remote],
        ),
        EPERM,
    )
}

fn abstract_socket(args: &[String]) -> Finding {
    use std::os::linux::net::SocketAddrExt;
    let name = arg(args, 0);
    match std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a))
    {
        Err(e) => contained(format!("connect @{name}: {e}")),
        Ok(mut s) => {
            let _ = s.write_all(b"probe");
            escaped(format!("connected to the host's @{name}"))
        }
    }
}

fn tiocsti(_: &[String]) -> Finding {
    must_fail("ioctl(TIOCSTI)", warden_jail::probes::tiocsti(), EPERM)
}

fn sethostname(args: &[String]) -> Finding {
    let name = arg(args, 0);
    // The host checks its own hostname afterwards; here, only try.
    let r = nix::unistd::sethostname(name);
    contained(format!("sethostname: {r:?} (the host judges)"))
}

fn kill_all(_: &[String]) -> Finding {
    // kill(2)'s own return value, as the report has always shown it.
    let r = match kill(Pid::from_raw(-1), Signal::SIGKILL) {
        Ok(()) => 0,
        Err(_) => -1,
    };
    contained(format!("kill(-1, SIGKILL) returned {r} (the host judges)"))
}

fn sleep_marker(_: &[String]) -> Finding {
    std::thread::sleep(Duration::from_secs(60));
    contained("slept")
}

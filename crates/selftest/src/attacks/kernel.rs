//! Privilege escalation through kernel interfaces: namespaces, eBPF,
//! keyrings, io_uring, perf, userfaultfd, modules, kexec, identity and
//! capabilities, raw and packet sockets. Most probes here are one system
//! call that must be refused; the ones without a safe wrapper are made by
//! `warden_jail::probes`.
use crate::lab::{from_run, Attack, Lab};
use crate::probes::{contained, escaped, must_fail, Finding, Probe, EPERM};
use crate::Category;
use nix::sched::{unshare, CloneFlags};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
use std::os::fd::AsRawFd;
use warden_jail::probes as sys;

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
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
    ]
}

pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "unshare-user",
        harmful: false,
        run: unshare_user,
    },
    Probe {
        name: "unshare-mount",
        harmful: false,
        run: unshare_mount,
    },
    Probe {
        name: "setns",
        harmful: false,
        run: setns,
    },
    Probe {
        name: "bpf",
        harmful: false,
        run: |_| must_fail("bpf(BPF_PROG_LOAD)", sys::bpf_prog_load(), EPERM),
    },
    Probe {
        name: "keyring",
        harmful: false,
        run: |_| must_fail("add_key", sys::add_key(), EPERM),
    },
    Probe {
        name: "io-uring",
        harmful: false,
        run: |_| must_fail("io_uring_setup", sys::io_uring_setup(), EPERM),
    },
    Probe {
        name: "perf-event",
        harmful: false,
        run: |_| must_fail("perf_event_open", sys::perf_event_open(), EPERM),
    },
    Probe {
        name: "userfaultfd",
        harmful: false,
        run: |_| must_fail("userfaultfd", sys::userfaultfd(), EPERM),
    },
    Probe {
        name: "load-module",
        harmful: false,
        run: |_| must_fail("finit_module", sys::finit_module(), EPERM),
    },
    Probe {
        name: "kexec",
        harmful: false,
        run: |_| must_fail("kexec_load", sys::kexec_load(), EPERM),
    },
    Probe {
        name: "become-root",
        harmful: false,
        run: become_root,
    },
    Probe {
        name: "capabilities",
        harmful: false,
        run: capabilities,
    },
    Probe {
        name: "no-new-privs",
        harmful: false,
        run: no_new_privs,
    },
    Probe {
        name: "raw-socket",
        harmful: false,
        run: raw_socket,
    },
    Probe {
        name: "packet-socket",
        harmful: false,
        run: packet_socket,
    },
];

fn unshare_user(_: &[String]) -> Finding {
    must_fail(
        "unshare(CLONE_NEWUSER)",
        unshare(CloneFlags::CLONE_NEWUSER).map(|()| 0),
        EPERM,
    )
}

fn unshare_mount(_: &[String]) -> Finding {
    must_fail(
        "unshare(CLONE_NEWNS)",
        unshare(CloneFlags::CLONE_NEWNS).map(|()| 0),
        EPERM,
    )
}

fn setns(_: &[String]) -> Finding {
    // A descriptor that could not be opened is still offered (as -1), so
    // that the filter is what answers.
    let fd = std::fs::File::open("/proc/self/ns/net");
    let raw_fd = fd.as_ref().map(AsRawFd::as_raw_fd).unwrap_or(-1);
    must_fail("setns", sys::setns(raw_fd), EPERM)
}

fn become_root(_: &[String]) -> Finding {
    // Only a change of identity counts: a sandbox whose own user is 0 of
    // its namespace (mapped to nobody outside) stays that user.
    let before = nix::unistd::geteuid();
    match nix::unistd::setuid(nix::unistd::Uid::from_raw(0)) {
        Err(e) => contained(format!("setuid(0): {e}")),
        Ok(()) if nix::unistd::geteuid() == before => contained(format!(
            "setuid(0) left the process as it was (UID {before} of its namespace, {})",
            std::fs::read_to_string("/proc/self/uid_map")
                .map(|m| format!(
                    "mapped {}",
                    m.split_whitespace().collect::<Vec<_>>().join(" ")
                ))
                .unwrap_or_default()
        )),
        Ok(()) => escaped(format!(
            "setuid(0) changed UID {before} to {}",
            nix::unistd::geteuid()
        )),
    }
}

fn capabilities(_: &[String]) -> Finding {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let sets: Vec<String> = status
        .lines()
        .filter(|l| {
            ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    if sets.len() == 5 && sets.iter().all(|l| l.ends_with("0000000000000000")) {
        contained("every capability set is empty")
    } else {
        escaped(format!("capabilities held: {}", sets.join(", ")))
    }
}

fn no_new_privs(_: &[String]) -> Finding {
    match nix::sys::prctl::get_no_new_privs() {
        Ok(true) => contained("no_new_privs is set: no exec gains privileges"),
        // prctl's own answer, as the report has always shown it.
        Ok(false) => escaped("no_new_privs is 0"),
        Err(_) => escaped("no_new_privs is -1"),
    }
}

fn raw_socket(_: &[String]) -> Finding {
    must_fail(
        "socket(AF_INET, SOCK_RAW)",
        socket(
            AddressFamily::Inet,
            SockType::Raw,
            SockFlag::empty(),
            SockProtocol::Tcp,
        )
        .map(|fd| fd.as_raw_fd()),
        EPERM,
    )
}

fn packet_socket(_: &[String]) -> Finding {
    must_fail(
        "socket(AF_PACKET)",
        socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::empty(),
            SockProtocol::EthAll,
        )
        .map(|fd| fd.as_raw_fd()),
        EPERM,
    )
}

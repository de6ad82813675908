//! Persistence after exit: a process left behind when the sandbox ends.
use crate::lab::{from_run, host_pids_with, Attack, Verdict};
use crate::probes::{arg, contained, escaped, Finding, Probe};
use crate::Category;
use std::ffi::CString;
use std::time::Duration;

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
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
    ]
}

pub(crate) const PROBES: &[Probe] = &[Probe {
    name: "daemonize",
    harmful: true,
    run: daemonize,
}];

fn cstr(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

fn daemonize(args: &[String]) -> Finding {
    // Leave a grandchild in a session of its own, then end; the grandchild
    // is `process.rs`'s sleep-marker, which the host looks for.
    let exe = std::env::current_exe().unwrap_or_default();
    let exe = cstr(&exe.to_string_lossy());
    let argv = [
        cstr("warden"),
        cstr("__probe"),
        cstr("sleep-marker"),
        cstr(arg(args, 0)),
    ];
    let argv: Vec<&std::ffi::CStr> = argv.iter().map(CString::as_c_str).collect();
    match warden_jail::probes::daemonize(&exe, &argv) {
        Err(_) => escaped("fork failed before the attempt"),
        Ok(()) => contained("left a daemon behind (the host judges whether it survives)"),
    }
}

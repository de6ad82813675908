//! Programs outside an exec allowlist (`--allow-exec`): each attack runs a
//! sandbox whose only allowed program is warden itself (the probe) and
//! tries to execute something else, directly, through the dynamic loader,
//! or from a memfd. Skipped where the kernel has no Landlock, which warden
//! then refuses such a run for.
use crate::lab::{from_run, Attack, Lab, Verdict};
use crate::probes::{contained, escaped, must_fail, Finding, Probe};
use crate::Category;
use nix::errno::Errno;
use std::process::{Command, Stdio};

/// The loader of x86_64 and aarch64 programs, where it has its usual name.
const LOADERS: &[&str] = &["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"];

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        (
            "exec.not-allowed",
            Category::Process,
            "execute a program the exec allowlist does not name (a shell)",
            |lab| allowlisted(lab, "exec-other"),
        ),
        (
            "exec.loader",
            Category::Process,
            "run a program through the dynamic loader, around the exec allowlist",
            |lab| allowlisted(lab, "exec-loader"),
        ),
        (
            "exec.memfd",
            Category::Process,
            "write a program into a memfd and execute it, around the exec allowlist",
            |lab| allowlisted(lab, "exec-memfd"),
        ),
    ]
}

/// Run `probe` in a sandbox that may execute only the probe's binary.
fn allowlisted(lab: &Lab, probe: &str) -> Verdict {
    if warden_jail::host::probe().landlock_abi.unwrap_or(0) < 1 {
        return Verdict::Skipped(
            "the kernel has no Landlock: warden refuses an exec allowlist here".into(),
        );
    }
    let exe = lab.exe.to_string_lossy().to_string();
    from_run(&lab.sandbox(&["--allow-exec", &exe], probe, &[]))
}

pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "exec-other",
        harmful: false,
        run: exec_other,
    },
    Probe {
        name: "exec-loader",
        harmful: false,
        run: exec_loader,
    },
    Probe {
        name: "exec-memfd",
        harmful: false,
        run: exec_memfd,
    },
];

fn quiet(program: &str) -> Command {
    let mut c = Command::new(program);
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn exec_other(_: &[String]) -> Finding {
    match quiet("/bin/sh").args(["-c", "exit 0"]).status() {
        Ok(s) => escaped(format!("/bin/sh ran ({s})")),
        Err(e) if e.raw_os_error() == Some(Errno::EACCES as i32) => {
            contained("execve(/bin/sh): EACCES (not in the allowlist)")
        }
        Err(e) => escaped(format!(
            "execve(/bin/sh) failed with {e} rather than being refused"
        )),
    }
}

fn exec_loader(_: &[String]) -> Finding {
    let Some(loader) = LOADERS.iter().find(|l| std::path::Path::new(l).exists()) else {
        return contained("no dynamic loader in the sandbox");
    };
    // `true` exits 0 only if it ran: the loader must fail to open it
    // (Landlock: a program directory's other programs are unreadable) or
    // to map it.
    match quiet(loader).arg("/bin/true").status() {
        Ok(s) if s.success() => escaped(format!("{loader} ran /bin/true")),
        Ok(s) => contained(format!("{loader} could not open or map /bin/true ({s})")),
        Err(e) => contained(format!("execve({loader}): {e}")),
    }
}

fn exec_memfd(_: &[String]) -> Finding {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    must_fail(
        "memfd_create without MFD_NOEXEC_SEAL",
        memfd_create(c"probe", MFdFlags::empty()).map(|_| "a descriptor"),
        &[Errno::EACCES],
    )
}

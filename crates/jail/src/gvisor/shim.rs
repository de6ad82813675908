//! The start of every process a gVisor sandbox runs after its first.
//!
//! runsc applies the bundle's seccomp filter (`linux.seccomp`) to the
//! container's first process only: a `runsc exec` process starts with no
//! filter at all, so a later command could make a set-user-ID file that
//! gVisor's file server then carries to the host. Each later process is
//! therefore started as this shim (`warden-gvisor-exec`, shown read-only at
//! [`INSIDE`] with the host libraries it links), which sets
//! `no_new_privs`, makes the command a PID namespace of its own (see
//! [`super::hold`]), loads [`PROGRAM`] (the first process's rules,
//! [`crate::seccomp::GVISOR_RULES`]) inside gVisor's kernel and only then
//! executes the command, so that the command and everything it starts
//! carry the filter as the first process's tree does, and stay where its
//! kill reaches them. The host side holds
//! the same line whatever gVisor's kernel does (see `gvisor::modes`).
//!
//! The shim never runs a command without its filter: any step that fails
//! ends it with [`FAILED`] before the command runs.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The filter, compiled by the build script from [`crate::seccomp::GVISOR_RULES`].
pub const PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/seccomp-gvisor.bpf"));

/// Where the shim and its libraries are shown inside the sandbox.
pub const INSIDE: &str = "/.warden-exec";

/// The shim's binary name, installed beside `warden`.
pub const BINARY: &str = "warden-gvisor-exec";

/// The status the shim ends with when it cannot run the command with its
/// filter (as `env` and `timeout` say of themselves: 125).
pub const FAILED: i32 = super::hold::FAILED;

/// Why the shim could not run the command.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("no command after `--`")]
    NoCommand,
    #[error("warden has no gVisor filter for this architecture")]
    NoFilter,
    #[error("cannot set no_new_privs")]
    NoNewPrivs(#[source] std::io::Error),
    #[error("cannot execute {0}")]
    Exec(String, #[source] std::io::Error),
    #[error("cannot hold the command's processes")]
    Hold(#[source] super::hold::HoldError),
}

impl ShimError {
    /// The status a shell gives the same failure: 127 for a command not
    /// found, 126 for one that cannot run, [`FAILED`] for the shim's own.
    pub fn status(&self) -> i32 {
        match self {
            ShimError::Exec(_, e) if e.kind() == std::io::ErrorKind::NotFound => 127,
            ShimError::Exec(..) => 126,
            _ => FAILED,
        }
    }
}

/// The shim's option carrying one of the command's loader variables.
const SET: &str = "--set";
/// The shim's option making it a long-lived sandbox's first process.
const REAP: &str = "--reap";

/// A long-lived sandbox's first process (its PID 1, which a process whose
/// parent ended is handed to): waits for every such process as it ends,
/// so none is left a zombie counting against `--pids`, and never returns
/// (the sandbox's stop kills it). It runs under the filter runsc gives the
/// first process.
fn reap() -> ! {
    loop {
        match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(-1), None) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            // No process to wait for yet: look again shortly.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(250)),
        }
    }
}

/// Whether a variable is read by the dynamic loader (or glibc as it
/// starts) before any code of the program runs: given to a dynamically
/// linked shim, `LD_PRELOAD` or `LD_AUDIT` would run the sandbox's code in
/// it before its filter is loaded. Such variables are carried past the
/// shim as arguments and set for the command only.
pub fn loader_variable(key: &str) -> bool {
    key.starts_with("LD_") || key == "GLIBC_TUNABLES"
}

/// The key of `KEY=VALUE`.
fn key_of(kv: &OsString) -> &[u8] {
    let b = kv.as_bytes();
    &b[..b.iter().position(|c| *c == b'=').unwrap_or(b.len())]
}

/// In the shim: `args` is its own command line (`SHIM [--set KEY=VALUE]...
/// -- COMMAND...`), `env` its environment (read by its `main`), which the
/// command gets with the carried variables set. Returns only on failure.
pub fn run(args: &[OsString], env: Vec<(OsString, OsString)>) -> ShimError {
    if args.get(1).is_some_and(|a| a == REAP) {
        reap();
    }
    let Some(at) = args.iter().position(|a| a == "--") else {
        return ShimError::NoCommand;
    };
    let command = &args[at + 1..];
    if command.is_empty() {
        return ShimError::NoCommand;
    }
    // The command's own loader variables, carried past the loader that
    // ran this shim (see [`loader_variable`]): set only for the command.
    let carried: Vec<&OsString> = args[..at]
        .windows(2)
        .filter(|w| w[0] == SET)
        .map(|w| &w[1])
        .collect();
    if crate::sys::sock_filters(PROGRAM).is_none() {
        return ShimError::NoFilter;
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return ShimError::NoNewPrivs(std::io::Error::last_os_error());
    }
    // The command and all it starts in a namespace of their own, held by
    // an init of the shim's, with the filter and no capability (see
    // `hold`); the shim itself waits and ends as the command did.
    match super::hold::enter(PROGRAM) {
        Err(e) => return ShimError::Hold(e),
        Ok(super::hold::Role::Outside { init, status }) => super::hold::finish(init, status),
        Ok(super::hold::Role::Command) => {}
    }
    let name = command[0].to_string_lossy().into_owned();
    let Ok(argv) = command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
    else {
        return ShimError::Exec(name, std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let mut env: Vec<(OsString, OsString)> = env
        .into_iter()
        .filter(|(k, _)| !carried.iter().any(|c| key_of(c) == k.as_bytes()))
        .collect();
    for c in carried {
        let (k, v) = c.as_bytes().split_at(key_of(c).len());
        env.push((
            std::ffi::OsStr::from_bytes(k).to_owned(),
            std::ffi::OsStr::from_bytes(v.get(1..).unwrap_or_default()).to_owned(),
        ));
    }
    let Ok(envp) = env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv)
        })
        .collect::<Result<Vec<_>, _>>()
    else {
        return ShimError::Exec(name, std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    match nix::unistd::execvpe(&argv[0], &argv, &envp) {
        Ok(never) => match never {},
        Err(e) => ShimError::Exec(name, std::io::Error::from_raw_os_error(e as i32)),
    }
}

/// The shim as the supervisor shows it to the sandbox: its binary and,
/// when it is linked dynamically, the loader and libraries it runs with,
/// so that it runs whatever tree the sandbox's root is.
#[derive(Debug, Clone)]
pub struct Shim {
    binary: PathBuf,
    loader: Option<PathBuf>,
    libraries: Vec<PathBuf>,
}

impl Shim {
    /// The shim beside the running executable (`warden`, `warden-oci`),
    /// with the libraries the running executable is linked with (the
    /// shim's are among them: one toolchain built both). `None` where it
    /// is missing.
    pub fn find() -> Option<Shim> {
        let exe = std::env::current_exe().ok()?;
        let binary = exe.parent()?.join(BINARY);
        if !binary.is_file() {
            return None;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let mut libraries: Vec<PathBuf> = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter(|p| p.starts_with('/') && p.contains(".so"))
            .map(PathBuf::from)
            .collect();
        libraries.sort();
        libraries.dedup();
        let loader = libraries
            .iter()
            .find(|p| file_name(p).starts_with("ld-"))
            .cloned();
        libraries.retain(|p| Some(p) != loader.as_ref());
        Some(Shim {
            binary,
            loader,
            libraries,
        })
    }

    /// What the bundle binds: (host file, path inside), each read-only.
    pub fn binds(&self) -> Vec<(PathBuf, String)> {
        let mut out = vec![(self.binary.clone(), format!("{INSIDE}/{BINARY}"))];
        if let Some(l) = &self.loader {
            out.push((l.clone(), format!("{INSIDE}/ld.so")));
        }
        for lib in &self.libraries {
            out.push((lib.clone(), format!("{INSIDE}/lib/{}", file_name(lib))));
        }
        out
    }

    /// The command line of a long-lived sandbox's first process: the shim
    /// waiting for the processes handed to it (see [`reap`]).
    pub fn reaper_args(&self) -> Vec<String> {
        let mut out = self.args(&[], &[]);
        // `SHIM --`: the shim's place, then its option in the place of `--`.
        out.pop();
        out.push(REAP.into());
        out
    }

    /// Whether the shim runs through a loader (it is linked dynamically):
    /// then the command's loader variables must not reach that loader.
    pub fn loaded(&self) -> bool {
        self.loader.is_some()
    }

    /// The command line of a process that runs `argv` under the filter,
    /// with `carried` (`KEY=VALUE` loader variables the command was given,
    /// kept out of the shim's own environment) set for the command only.
    pub fn args(&self, argv: &[String], carried: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(argv.len() + 5 + 2 * carried.len());
        if self.loader.is_some() {
            out.extend([
                format!("{INSIDE}/ld.so"),
                "--library-path".into(),
                format!("{INSIDE}/lib"),
            ]);
        }
        out.push(format!("{INSIDE}/{BINARY}"));
        for kv in carried {
            out.push(SET.into());
            out.push(kv.clone());
        }
        out.push("--".into());
        out.extend(argv.iter().cloned());
        out
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::fd::AsRawFd;

    #[test]
    fn the_embedded_gvisor_filter_is_the_one_the_table_builds() {
        let Some(arch) = crate::seccomp::Arch::native() else {
            return;
        };
        let file = tempfile::tempfile().unwrap();
        crate::seccomp::build_gvisor_filter_for(arch)
            .unwrap()
            .export_bpf(&file)
            .unwrap();
        let built = std::fs::read(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
        assert!(!built.is_empty());
        assert_eq!(built, super::PROGRAM);
    }

    /// Given to a dynamically linked shim, `LD_PRELOAD` ran a library of the
    /// sandbox's own in the shim before its filter was loaded (outside
    /// review 27, F1): such variables reach the command only, past the shim.
    #[test]
    fn the_commands_loader_variables_never_reach_the_loader_that_runs_the_shim() {
        let shim = super::Shim {
            binary: "/opt/w/warden-gvisor-exec".into(),
            loader: Some("/lib64/ld-linux-x86-64.so.2".into()),
            libraries: vec![],
        };
        let base = serde_json::json!({"env": ["PATH=/bin", "LD_PRELOAD=/workspace/base.so"]});
        let env = [
            ("LD_AUDIT".to_string(), "/workspace/a.so".to_string()),
            ("GLIBC_TUNABLES".to_string(), "x".to_string()),
            ("KEEP".to_string(), "1".to_string()),
        ];
        let p = crate::gvisor::bundle::process(&base, &shim, &["true".into()], &env, None, false);
        let vars: Vec<&str> = p["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(vars, ["PATH=/bin", "KEEP=1"]);
        let args: Vec<&str> = p["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(
            args[3..],
            [
                "/.warden-exec/warden-gvisor-exec",
                "--set",
                "LD_PRELOAD=/workspace/base.so",
                "--set",
                "LD_AUDIT=/workspace/a.so",
                "--set",
                "GLIBC_TUNABLES=x",
                "--",
                "true"
            ]
        );
    }

    #[test]
    fn a_later_process_runs_the_shim_then_its_command() {
        let shim = super::Shim {
            binary: "/opt/w/warden-gvisor-exec".into(),
            loader: Some("/lib64/ld-linux-x86-64.so.2".into()),
            libraries: vec!["/lib/x86_64-linux-gnu/libc.so.6".into()],
        };
        let args = shim.args(&["sh".into(), "-c".into(), "id".into()], &[]);
        assert_eq!(
            args,
            [
                "/.warden-exec/ld.so",
                "--library-path",
                "/.warden-exec/lib",
                "/.warden-exec/warden-gvisor-exec",
                "--",
                "sh",
                "-c",
                "id"
            ]
        );
        let inside: Vec<String> = shim.binds().into_iter().map(|(_, i)| i).collect();
        assert_eq!(
            inside,
            [
                "/.warden-exec/warden-gvisor-exec",
                "/.warden-exec/ld.so",
                "/.warden-exec/lib/libc.so.6"
            ]
        );
    }
}

//! The Landlock step of each process of a guest that can be paused to
//! disk: the init starts the guest init's own program again as a launcher
//! (`LAUNCH`), which restricts itself with Landlock (read beneath `/`,
//! write beneath the workspace, `/tmp`, `/dev/shm`, home and the writable
//! binds, as they are mounted now) and then executes the program asked
//! for, in the same process.
//!
//! Why not the init's own domain, as in other guests: Landlock's rules
//! hold inodes, and after a pause to disk the workspace is mounted again
//! (see [`super::keeper`]), a new inode. A domain of the init's would name
//! the first mount forever, and every process it started afterwards would
//! be denied writes into the workspace. The init itself runs only warden's
//! code, with no capability, `no_new_privs` and the seccomp filter, all of
//! which the launcher and its program inherit; a launcher that cannot
//! restrict itself executes nothing.
//!
//! What this costs: one more `execve` a process (a few milliseconds under
//! emulation), and a process that was running through a pause to disk
//! keeps the domain it was started with, whose workspace rule names the
//! mount that is gone: it still reads the workspace, but writes into it
//! are denied until it is started again.

use std::ffi::OsString;
use std::path::PathBuf;

/// The launcher's first argument.
pub const LAUNCH: &str = "--warden-launch";

/// What each process is restricted by, and the launcher's program.
#[derive(Debug, Clone)]
pub(in crate::guest) struct Launch {
    kit: Kit,
    writable: Vec<PathBuf>,
}

/// The guest init's program and what it needs to run, kept where the
/// guest's root tree does not replace them: the init is linked against
/// the host's C library, which a `--rootfs` guest's own `/usr` hides, so
/// the launcher runs through the dynamic loader, told where the libraries
/// are.
#[derive(Debug, Clone)]
pub(in crate::guest) struct Kit {
    loader: PathBuf,
    libs: PathBuf,
    init: PathBuf,
}

/// Where the kit is kept (read-only to the sandbox: no launcher's domain
/// grants writes there).
const KIT: &str = "/run/warden-guest";

fn io_err(
    what: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> super::GuestError {
    let path = path.display().to_string();
    move |e| super::GuestError::Fs {
        what,
        path,
        source: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)),
    }
}

/// Keep the init's program, its loader and libraries (hard links: the
/// initramfs is one file system, so nothing is copied) before the guest's
/// root tree covers them.
pub(in crate::guest) fn stage() -> Result<Kit, super::GuestError> {
    let kit = PathBuf::from(KIT);
    let libs = kit.join("lib");
    std::fs::create_dir_all(&libs).map_err(io_err("create", &libs))?;
    let maps_path = std::path::Path::new("/proc/self/maps");
    let maps = std::fs::read_to_string(maps_path).map_err(io_err("read", maps_path))?;
    let mut loader = None;
    let mut seen = std::collections::BTreeSet::new();
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let path = std::path::Path::new(path);
        let Some(name) = path.file_name() else {
            continue;
        };
        let lib = name.to_string_lossy().to_string();
        if !lib.contains(".so") || !seen.insert(name.to_os_string()) {
            continue;
        }
        let to = libs.join(name);
        if !to.exists() {
            std::fs::hard_link(path, &to).map_err(io_err("keep", path))?;
        }
        if lib.starts_with("ld-linux") || lib.starts_with("ld64") {
            loader = Some(to);
        }
    }
    let init = kit.join("init");
    if !init.exists() {
        let from = std::path::Path::new("/init");
        std::fs::hard_link(from, &init).map_err(io_err("keep", from))?;
    }
    let loader = loader.ok_or(super::GuestError::Fs {
        what: "find the dynamic loader of",
        path: "/init".into(),
        source: nix::errno::Errno::ENOENT,
    })?;
    Ok(Kit { loader, libs, init })
}

impl Launch {
    pub(in crate::guest) fn new(kit: Kit, writable: Vec<PathBuf>) -> Launch {
        Launch { kit, writable }
    }

    /// The program a process is started through.
    pub(in crate::guest) fn program(&self) -> &std::path::Path {
        &self.kit.loader
    }

    /// Its arguments before the program's: the loader's, the init's
    /// program, `LAUNCH`, the writable paths (hex, comma-separated), `--`.
    pub(in crate::guest) fn args(&self) -> Vec<std::ffi::OsString> {
        let w: Vec<String> = self
            .writable
            .iter()
            .map(|p| crate::shares::hex(p))
            .collect();
        vec![
            "--library-path".into(),
            self.kit.libs.clone().into_os_string(),
            self.kit.init.clone().into_os_string(),
            LAUNCH.into(),
            w.join(",").into(),
            "--".into(),
        ]
    }
}

/// Why a launcher did not execute its program.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the launcher was started with malformed arguments")]
    Arguments,
    #[error("cannot restrict the process with Landlock")]
    Landlock(#[from] warden_jail::landlock::LandlockError),
    #[error("cannot execute {program}")]
    Exec {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

impl LaunchError {
    /// The exit status a shell gives the same failure.
    pub fn status(&self) -> i32 {
        match self {
            LaunchError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                127
            }
            _ => 126,
        }
    }
}

/// The launcher: `args` are what follows [`LAUNCH`]. Returns only when it
/// could not execute the program.
pub fn launch(args: &[OsString]) -> LaunchError {
    use std::os::unix::process::CommandExt;
    let (Some(writable), Some(sep)) = (args.first(), args.get(1)) else {
        return LaunchError::Arguments;
    };
    if sep != "--" {
        return LaunchError::Arguments;
    }
    let Some((program, rest)) = args[2..].split_first() else {
        return LaunchError::Arguments;
    };
    let writable: Option<Vec<PathBuf>> = writable
        .to_str()
        .unwrap_or_default()
        .split(',')
        .filter(|w| !w.is_empty())
        .map(crate::shares::unhex)
        .collect();
    let Some(writable) = writable else {
        return LaunchError::Arguments;
    };
    if let Err(e) = warden_jail::landlock::restrict(&[PathBuf::from("/")], &writable, true) {
        return e.into();
    }
    let source = std::process::Command::new(program).args(rest).exec();
    LaunchError::Exec {
        program: program.to_string_lossy().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_launcher_without_its_separator_or_program_executes_nothing() {
        for args in [
            vec![],
            vec!["2f746d70"],
            vec!["2f746d70", "x", "true"],
            vec!["2f746d70", "--"],
        ] {
            let args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
            assert!(matches!(launch(&args), LaunchError::Arguments), "{args:?}");
        }
        let bad: Vec<OsString> = ["zz", "--", "true"]
            .into_iter()
            .map(OsString::from)
            .collect();
        assert!(matches!(launch(&bad), LaunchError::Arguments));
    }
}

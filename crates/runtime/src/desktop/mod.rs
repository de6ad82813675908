//! A desktop sandbox's programs: which the host must have (and the one
//! apt line that installs them), the long-lived ones the supervisor keeps
//! running inside the sandbox ([`services`]), and the agent's screenshots
//! and input ([`actions`]), each run as the sandbox's own process through
//! the exec path, with every restriction of any other.
//!
//! Nothing here listens on the host: the X server has no TCP listener, and
//! the VNC server and the browser's DevTools endpoint listen on the
//! sandbox's own loopback, in its own network namespace.

pub mod actions;
pub mod services;

use std::path::{Path, PathBuf};
use warden_policy::SandboxSpec;

/// The programs a desktop runs, the distribution package of each, and
/// what it is for.
pub const PROGRAMS: &[(&str, &str, &str)] = &[
    ("Xvfb", "xvfb", "the virtual screen"),
    ("dbus-daemon", "dbus", "the desktop's session bus"),
    ("xfwm4", "xfwm4", "the window manager"),
    ("xfce4-panel", "xfce4-panel", "the panel"),
    (
        "x11vnc",
        "x11vnc",
        "the VNC server the dashboard's viewer uses",
    ),
    ("chromium", "chromium", "the browser"),
    ("xdotool", "xdotool", "mouse and keyboard input"),
    ("maim", "maim", "screenshots"),
    (
        "certutil",
        "libnss3-tools",
        "the browser's trust of the sandbox's own authority (secrets)",
    ),
];

/// The packages a host needs for desktops, in the order of [`PROGRAMS`].
pub fn packages() -> Vec<&'static str> {
    PROGRAMS.iter().map(|(_, p, _)| *p).collect()
}

/// The one line that installs `packages` on Debian and Ubuntu.
pub fn apt_line(packages: &[&str]) -> String {
    format!(
        "sudo apt-get install -y --no-install-recommends {}",
        packages.join(" ")
    )
}

/// Why a desktop cannot run.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    #[error("a desktop needs programs this host lacks: {}; install them with `{}` (docs/desktops.md has the whole list)", missing_list(.missing), .install)]
    Missing {
        /// (program, package) pairs.
        missing: Vec<(String, String)>,
        /// The apt line that installs the packages of exactly those.
        install: String,
    },
}

fn missing_list(m: &[(String, String)]) -> String {
    m.iter()
        .map(|(prog, pkg)| format!("{prog} (package {pkg})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The directories a sandbox finds its programs in: the host's (bound
/// read-only), or the prepared root tree's.
fn program_dirs(spec: &SandboxSpec) -> Vec<PathBuf> {
    let root = spec
        .filesystem
        .rootfs
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    ["usr/local/bin", "usr/bin", "bin", "usr/sbin", "sbin"]
        .iter()
        .map(|d| root.join(d))
        .collect()
}

fn is_program(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether the sandbox of `spec` finds every program of a desktop; none
/// of its processes is started until it does.
pub fn check_programs(spec: &SandboxSpec) -> Result<(), DesktopError> {
    if spec.desktop.is_none() {
        return Ok(());
    }
    let dirs = program_dirs(spec);
    let missing: Vec<(String, String)> = PROGRAMS
        .iter()
        .filter(|(prog, _, _)| !dirs.iter().any(|d| is_program(&d.join(prog))))
        .map(|(prog, pkg, _)| (prog.to_string(), pkg.to_string()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut needed: Vec<&str> = Vec::new();
    for (_, pkg) in &missing {
        if !needed.contains(&pkg.as_str()) {
            needed.push(pkg);
        }
    }
    let install = apt_line(&needed);
    Err(DesktopError::Missing { missing, install })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_and_ci_install_every_package_of_a_desktop() {
        let line = apt_line(&packages());
        for file in ["../../README.md", "../../docs/desktops.md", "../../.ci/run"] {
            let text = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file),
            )
            .unwrap();
            let text = text.replace("-qq ", "");
            assert!(
                text.lines()
                    .any(|l| l.contains(line.trim_start_matches("sudo "))),
                "{file} does not install a desktop's packages with `{line}`"
            );
        }
    }
}

//! What the host's owner chose for the VM backend outside any sandbox's
//! spec (which VMM, which guest kernel, where the backend keeps its files,
//! how the workspace is shared), as one typed value: [`Settings`].
//!
//! The library reads no environment: a binary's `main` (the door) reads
//! its environment once ([`Settings::from_vars`], the variables in
//! [`VARS`]) and installs the value ([`Settings::install`]) before any
//! sandbox exists; the code that honours a setting asks
//! [`Settings::current`]. A process that installed none (a library's own
//! tests) has the defaults, whatever its environment says.

use std::ffi::OsString;
use std::path::PathBuf;
use warden_jail::settings::Installed;

/// The environment variables a binary reads into [`Settings`], and what
/// each does (`docs/cli.md` has the same table for people).
pub const VARS: &[(&str, &str)] = &[
    (
        "WARDEN_VMM",
        "the qemu-system-x86_64 to run, instead of the one on PATH",
    ),
    (
        "WARDEN_VM_DIR",
        "the VM backend's directory, an absolute path; else `vm` in the state directory",
    ),
    ("WARDEN_VM_KERNEL", "the guest kernel"),
    ("WARDEN_VM_MODULES", "the guest kernel's modules directory"),
    (
        "WARDEN_GUEST_INIT",
        "the guest's init binary, instead of the warden-guest-init beside the executable",
    ),
    (
        "WARDEN_VM_ACCEL",
        "`kvm` or `tcg`, instead of what a probe decided",
    ),
    (
        "WARDEN_VM_TEMPLATE",
        "`off` (or `0`): no saved VM templates",
    ),
    (
        "WARDEN_VM_FS",
        "`9p` or `virtiofs`: how the workspace is shared",
    ),
    ("WARDEN_VIRTIOFSD", "the virtiofsd to run"),
    (
        "WARDEN_VM_ROOT",
        "`share` or `image`: how a root tree reaches the guest",
    ),
    (
        "WARDEN_VM_CACHE_MAX",
        "the bytes the cached root images may take together",
    ),
    ("PATH", "where the VMM and the image tools are looked for"),
    (
        "WARDEN_STATE_DIR",
        "warden's state directory (with XDG_STATE_HOME, the runtime's rule)",
    ),
];

/// The VM backend's host settings. The default is what a host without
/// any of [`VARS`] set gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The VMM binary to run (it must be a file).
    pub vmm: Option<PathBuf>,
    /// The backend's directory, when given as an absolute path.
    pub dir: Option<PathBuf>,
    /// warden's state directory, where the backend's directory is by
    /// default.
    pub state_dir: Option<PathBuf>,
    /// The guest kernel, instead of the newest one unpacked in `dir`.
    pub kernel: Option<PathBuf>,
    /// The guest kernel's modules, instead of the ones beside it.
    pub modules: Option<PathBuf>,
    /// The guest init binary, instead of the one beside the executable.
    pub guest_init: Option<PathBuf>,
    /// `kvm` or `tcg` as written; anything else lets a probe decide.
    pub accel: Option<String>,
    /// Whether VMs may start from saved templates.
    pub templates: bool,
    /// How the workspace is shared, as written (`9p`, `virtiofs`; empty:
    /// virtio-fs where a virtiofsd is installed). The backend refuses
    /// another word.
    pub fs: String,
    /// The virtiofsd to run, instead of the first one installed.
    pub virtiofsd: Option<PathBuf>,
    /// How a root tree reaches the guest, as written (`share`, `image`);
    /// the backend refuses another word.
    pub root: Option<String>,
    /// The bytes the cached root images may take together.
    pub cache_max: u64,
    /// The directories programs are looked for in (`PATH`).
    pub path: Option<OsString>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            vmm: None,
            dir: None,
            state_dir: None,
            kernel: None,
            modules: None,
            guest_init: None,
            accel: None,
            templates: true,
            fs: String::new(),
            virtiofsd: None,
            root: None,
            cache_max: CACHE_MAX,
            path: None,
        }
    }
}

/// The cached root images' default bound: 4 GiB.
const CACHE_MAX: u64 = 4 << 30;

static SLOT: Installed<Settings> = Installed::new();

impl Settings {
    /// The settings `get` (a binary's environment) asks for. An empty
    /// value is no value, as a shell's `VAR=` means.
    pub fn from_vars(get: impl Fn(&str) -> Option<OsString>) -> Settings {
        let get = |name: &str| get(name).filter(|v| !v.is_empty());
        let path = |name: &str| get(name).map(PathBuf::from);
        let text = |name: &str| get(name).map(|v| v.to_string_lossy().into_owned());
        Settings {
            vmm: path("WARDEN_VMM"),
            dir: path("WARDEN_VM_DIR").filter(|d| d.is_absolute()),
            state_dir: warden_jail::settings::state_dir_from(get),
            kernel: path("WARDEN_VM_KERNEL"),
            modules: path("WARDEN_VM_MODULES"),
            guest_init: path("WARDEN_GUEST_INIT"),
            accel: text("WARDEN_VM_ACCEL"),
            templates: text("WARDEN_VM_TEMPLATE").is_none_or(|v| v != "off" && v != "0"),
            fs: text("WARDEN_VM_FS").unwrap_or_default(),
            virtiofsd: path("WARDEN_VIRTIOFSD"),
            root: text("WARDEN_VM_ROOT"),
            cache_max: text("WARDEN_VM_CACHE_MAX")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(CACHE_MAX),
            path: get("PATH"),
        }
    }

    /// Make these the settings of this process, once, before any sandbox
    /// exists. A second call changes nothing and says so (`false`).
    pub fn install(self) -> bool {
        SLOT.install(self)
    }

    /// The settings installed in this process; the defaults when its
    /// binary installed none.
    pub fn current() -> &'static Settings {
        SLOT.current(Settings::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn each_variable_is_read_into_its_setting_and_empty_ones_are_unset() {
        let s = Settings::from_vars(vars(&[
            ("WARDEN_VMM", "/opt/qemu"),
            ("WARDEN_VM_DIR", "relative/is/ignored"),
            ("WARDEN_VM_KERNEL", ""),
            ("WARDEN_VM_TEMPLATE", "off"),
            ("WARDEN_VM_FS", "9p"),
            ("WARDEN_VM_CACHE_MAX", "1048576"),
            ("WARDEN_STATE_DIR", "/srv/warden"),
        ]));
        assert_eq!(s.vmm, Some(PathBuf::from("/opt/qemu")));
        assert_eq!(s.dir, None);
        assert_eq!(s.kernel, None);
        assert!(!s.templates);
        assert_eq!(s.fs, "9p");
        assert_eq!(s.cache_max, 1 << 20);
        assert_eq!(s.state_dir, Some(PathBuf::from("/srv/warden")));
        let none = Settings::from_vars(vars(&[("WARDEN_VM_CACHE_MAX", "lots")]));
        assert_eq!(none.cache_max, CACHE_MAX);
        assert!(none.templates);
    }

    #[test]
    fn a_process_that_installed_nothing_has_the_defaults() {
        // This test binary's main installs nothing.
        assert_eq!(Settings::current().vmm, None);
        assert!(Settings::current().templates);
    }
}

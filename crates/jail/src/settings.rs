//! What the host's environment says outside any sandbox's spec, for the
//! process backends and the runtime above them (where warden keeps its
//! state, where a user's cgroup plan is remembered, which runsc runs,
//! where the host's git configuration is), as one typed value:
//! [`Settings`].
//!
//! The library reads no environment: a binary's `main` (the door) reads
//! its environment once ([`Settings::from_vars`], the variables in
//! [`VARS`]) and installs the value ([`Settings::install`]) before any
//! sandbox exists; the code that honours a setting asks
//! [`Settings::current`]. A process that installed none (a library's own
//! tests) has what an empty environment gives, whatever its environment
//! says: a supervisor or helper that inherits another's environment
//! changes nothing unless its binary read it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The environment variables a binary reads into [`Settings`], and what
/// each does.
pub const VARS: &[(&str, &str)] = &[
    (
        "WARDEN_STATE_DIR",
        "warden's state directory, an absolute path; else /var/lib/warden for root, else the XDG state directory",
    ),
    (
        "XDG_STATE_HOME",
        "where the XDG state directory is (with HOME)",
    ),
    (
        "XDG_RUNTIME_DIR",
        "where a user's cgroup plan is remembered between runs (`warden` below it)",
    ),
    (
        "WARDEN_RUNSC",
        "the runsc the gVisor backend runs, instead of the first one installed",
    ),
    ("HOME", "the host user's home: its git configuration"),
    (
        "GIT_CONFIG_GLOBAL",
        "the host's global git configuration, instead of ~/.gitconfig",
    ),
    (
        "XDG_CONFIG_HOME",
        "where the host's git configuration is looked for (`git/config` below it)",
    ),
    (
        "USER, LOGNAME, LANG, LC_ALL, TZ, DBUS_SESSION_BUS_ADDRESS, GNUPGHOME, SSH_AUTH_SOCK",
        "passed on, with HOME and XDG_RUNTIME_DIR, to a secret's program, which gets no other variable of warden's environment unless WARDEN_SECRET_ENV names it",
    ),
    (
        "WARDEN_SECRET_ENV",
        "more variables a secret's program keeps from warden's environment, by name, comma-separated (VAULT_ADDR,AWS_PROFILE); a name that is not a variable's is ignored",
    ),
];

/// The variables a secret's program keeps from the environment warden
/// was started with (read into [`Settings::program_env`]): who it runs
/// as and where its agents listen (a password store's `gpg-agent`, an
/// SSH agent). Everything else (`PYTHONPATH`,
/// `NODE_PATH`, `LD_PRELOAD`, `PERL5LIB`, `BASH_ENV`, ...) is dropped: it
/// would make the program load code from wherever the daemon's caller
/// pointed it.
pub const PROGRAM_KEEPS: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
    "GNUPGHOME",
    "SSH_AUTH_SOCK",
];

/// The names of the variables a secret's program keeps: [`PROGRAM_KEEPS`]
/// and those the owner adds in `WARDEN_SECRET_ENV` (comma-separated; a
/// word that is not a variable's name, `PATH` included, is left out:
/// the program's search path is warden's own).
fn program_keeps(more: Option<&std::ffi::OsStr>) -> Vec<String> {
    let mut names: Vec<String> = PROGRAM_KEEPS.iter().map(|k| k.to_string()).collect();
    let more = more.and_then(|m| m.to_str()).unwrap_or("");
    for name in more.split(',').map(str::trim) {
        let mut chars = name.chars();
        let is_name = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if is_name && name != "PATH" && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

/// The host's settings. What each is when its variable is unset is said
/// at the field.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// warden's state directory by the runtime's rule
    /// (`warden_workspace::default_state_dir`); `None` when none can be
    /// told.
    pub state_dir: Option<PathBuf>,
    /// This user's runtime directory (`XDG_RUNTIME_DIR`), when absolute.
    pub runtime_dir: Option<PathBuf>,
    /// The runsc to run; `None`: the first of the usual places.
    pub runsc: Option<PathBuf>,
    /// The host user's home (`HOME`).
    pub home: Option<PathBuf>,
    /// The host's global git configuration file (`GIT_CONFIG_GLOBAL`).
    pub git_config_global: Option<PathBuf>,
    /// The host's XDG configuration directory (`XDG_CONFIG_HOME`).
    pub config_home: Option<PathBuf>,
    /// The variables a secret's program is given
    /// ([`PROGRAM_KEEPS`], those set), and nothing else.
    pub program_env: Vec<(String, OsString)>,
}

static SLOT: Installed<Settings> = Installed::new();

/// A process-wide value a binary's `main` installs once, before any
/// sandbox exists, and the code that honours it reads; a process that
/// installed none reads a fallback made once. This crate's [`Settings`]
/// and the VM backend's are both held in one.
pub struct Installed<T> {
    installed: OnceLock<T>,
    fallback: OnceLock<T>,
}

impl<T> Installed<T> {
    pub const fn new() -> Installed<T> {
        Installed {
            installed: OnceLock::new(),
            fallback: OnceLock::new(),
        }
    }

    /// Make `value` this process's, once. A second call changes nothing
    /// and says so (`false`).
    pub fn install(&self, value: T) -> bool {
        self.installed.set(value).is_ok()
    }

    /// The installed value; else what `fallback` makes (once).
    pub fn current(&self, fallback: impl FnOnce() -> T) -> &T {
        self.installed
            .get()
            .unwrap_or_else(|| self.fallback.get_or_init(fallback))
    }
}

impl<T> Default for Installed<T> {
    fn default() -> Installed<T> {
        Installed::new()
    }
}

/// warden's state directory by the runtime's rule
/// (`warden_workspace::default_state_dir`) from the variables `get` gives
/// (empty values already dropped), with this user's home from the user
/// database when `HOME` says none.
pub fn state_dir_from(get: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    warden_workspace::default_state_dir(crate::host::is_root(), get, || {
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.dir)
    })
}

impl Settings {
    /// The settings `get` (a binary's environment) asks for. An empty
    /// value is no value, as a shell's `VAR=` means.
    pub fn from_vars(get: impl Fn(&str) -> Option<OsString>) -> Settings {
        let get = |name: &str| get(name).filter(|v| !v.is_empty());
        let path = |name: &str| get(name).map(PathBuf::from);
        Settings {
            state_dir: state_dir_from(get),
            runtime_dir: path("XDG_RUNTIME_DIR").filter(|d| d.is_absolute()),
            runsc: path("WARDEN_RUNSC"),
            home: path("HOME"),
            git_config_global: path("GIT_CONFIG_GLOBAL"),
            config_home: path("XDG_CONFIG_HOME"),
            program_env: program_keeps(get("WARDEN_SECRET_ENV").as_deref())
                .into_iter()
                .filter_map(|k| get(&k).map(|v| (k, v)))
                .collect(),
        }
    }

    /// Make these the settings of this process, once, before any sandbox
    /// exists. A second call changes nothing and says so (`false`).
    pub fn install(self) -> bool {
        SLOT.install(self)
    }

    /// The settings installed in this process; what an empty environment
    /// gives when its binary installed none.
    pub fn current() -> &'static Settings {
        SLOT.current(|| Settings::from_vars(|_| None))
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
            ("WARDEN_STATE_DIR", "/srv/warden"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("WARDEN_RUNSC", ""),
            ("HOME", "/home/u"),
            ("GIT_CONFIG_GLOBAL", "/etc/other-gitconfig"),
        ]));
        assert_eq!(s.state_dir, Some(PathBuf::from("/srv/warden")));
        assert_eq!(s.runtime_dir, Some(PathBuf::from("/run/user/1000")));
        assert_eq!(s.runsc, None);
        assert_eq!(s.home, Some(PathBuf::from("/home/u")));
        assert_eq!(
            s.git_config_global,
            Some(PathBuf::from("/etc/other-gitconfig"))
        );
        assert_eq!(s.config_home, None);
    }

    #[test]
    fn a_secret_program_keeps_only_the_listed_variables_and_those_the_owner_names() {
        let s = Settings::from_vars(vars(&[
            ("HOME", "/home/u"),
            ("PYTHONPATH", "/proj/lib"),
            ("VAULT_ADDR", "https://vault.test"),
            ("AWS_PROFILE", "dev"),
            ("PATH", "/proj/bin"),
            (
                "WARDEN_SECRET_ENV",
                " VAULT_ADDR, PATH ,bad name,=x,AWS_PROFILE,UNSET_ONE",
            ),
        ]));
        let names: Vec<&str> = s.program_env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["HOME", "VAULT_ADDR", "AWS_PROFILE"]);
    }

    #[test]
    fn a_relative_runtime_directory_is_none() {
        let s = Settings::from_vars(vars(&[("XDG_RUNTIME_DIR", "run/user")]));
        assert_eq!(s.runtime_dir, None);
    }
}

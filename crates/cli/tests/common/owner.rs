//! The owner's host in the tests of what a token may never write through
//! the daemon (the owner's files, a secret's program, what the review
//! shows): a catalogue of profiles, a home, a `--workspace-root` holding
//! projects, a daemon over TCP serving them, the owner at the terminal,
//! and where a token's program would leave its mark had it run on the
//! host.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::daemon::{curl_available, token, Daemon, WORKER_SCOPES};
use super::{skip, warden_bin, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The owner's host: the daemon's state is `dir`'s `warden`, the owner's
/// configuration `config` (`XDG_CONFIG_HOME`), home `dir`'s `home`.
pub struct OwnerHost {
    pub dir: TempDir,
    /// The owner's configuration directory; the catalogue is its
    /// `warden/profiles`.
    pub config: PathBuf,
    /// The workspace root holding the projects, canonical (a path the
    /// daemon names in an answer is compared with it).
    pub root: PathBuf,
    /// Where a token's program leaves its mark if it runs on the host.
    pub marker: PathBuf,
}

impl OwnerHost {
    /// A new host in a directory of its own (`tag`); `None`, the reason
    /// printed, without curl (every call to its daemon goes through it).
    pub fn new(tag: &str) -> Option<OwnerHost> {
        if !curl_available() {
            skip("curl is not installed");
            return None;
        }
        let dir = TempDir::new(tag);
        let config = dir.path().join("config");
        std::fs::create_dir_all(config.join("warden/profiles")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let root = dir.path().join("wsroot");
        std::fs::create_dir_all(&root).unwrap();
        let root = root.canonicalize().unwrap();
        let marker = dir.path().join("ran-on-host");
        Some(OwnerHost {
            dir,
            config,
            root,
            marker,
        })
    }

    /// A project `name` under the root holding `file` (a path in it, its
    /// directories made) with `text`.
    pub fn project(&self, name: &str, file: &str, text: &str) -> PathBuf {
        let p = self.root.join(name);
        let f = p.join(file);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
        p
    }

    /// The catalogue's entry for profile `name` (not written).
    pub fn profile(&self, name: &str) -> PathBuf {
        self.config.join(format!("warden/profiles/{name}.yaml"))
    }

    /// The arguments that give the daemon the root.
    pub fn over_root(&self) -> [&str; 2] {
        ["--workspace-root", self.root.to_str().unwrap()]
    }

    /// The owner's daemon, over TCP, with `args` after `serve`.
    pub fn daemon(&self, args: &[&str]) -> Daemon {
        self.daemon_from(None, args, &[])
    }

    /// The owner's daemon serving the root.
    pub fn daemon_over_root(&self) -> Daemon {
        self.daemon(&self.over_root())
    }

    /// [`OwnerHost::daemon`], started in `cwd` and with `env` added to
    /// the owner's environment.
    pub fn daemon_from(&self, cwd: Option<&Path>, args: &[&str], env: &[(&str, &Path)]) -> Daemon {
        let p = self.dir.path();
        let home = p.join("home");
        let mut all = vec![("XDG_CONFIG_HOME", self.config.as_path()), ("HOME", &home)];
        all.extend_from_slice(env);
        Daemon::start_in(cwd, p, true, args, &all)
    }

    /// A token `agent` that makes sandboxes and runs commands in them.
    pub fn agent(&self) -> String {
        token(self.dir.path(), "agent", WORKER_SCOPES)
    }

    /// `warden ARGS` as the owner at the terminal, with the daemon's
    /// state and the owner's catalogue.
    pub fn owner(&self, args: &[&str]) -> Output {
        Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", self.dir.path().join("warden"))
            .env("XDG_CONFIG_HOME", &self.config)
            .env("HOME", self.dir.path().join("home"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Whether the mark is there 300 ms after the call that would have
    /// run a token's program (time for one that runs late to leave it).
    pub fn marker_appeared(&self) -> bool {
        std::thread::sleep(Duration::from_millis(300));
        self.marker.exists()
    }
}

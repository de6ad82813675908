//! The owner's host in the tests of what a token may never write through
//! the daemon (the owner's files, a secret's program, what the review
//! shows): a catalogue of profiles, a home, a `--workspace-root` holding
//! projects, a daemon over TCP serving them, the owner at the terminal,
//! and where a token's program would leave its mark had it run on the
//! host.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::daemon::{curl_available, json_as, token, Daemon, WORKER_SCOPES};
use super::{skip, warden_bin, TempDir};
use std::os::unix::fs::PermissionsExt;
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
        Some(OwnerHost::at(tag))
    }

    /// [`OwnerHost::new`] for a test that never calls its daemon over
    /// curl.
    pub fn at(tag: &str) -> OwnerHost {
        let dir = TempDir::new(tag);
        let config = dir.path().join("config");
        std::fs::create_dir_all(config.join("warden/profiles")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let root = dir.path().join("wsroot");
        std::fs::create_dir_all(&root).unwrap();
        let root = root.canonicalize().unwrap();
        let marker = dir.path().join("ran-on-host");
        OwnerHost {
            dir,
            config,
            root,
            marker,
        }
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

    /// Profile `name` in the catalogue: secret `API_TOKEN`, for
    /// example.com, read from the program `argv`. The secret's name stands
    /// on the file's line 2, column 3.
    pub fn secret_profile(&self, name: &str, argv: &[impl AsRef<str>]) {
        let list = argv
            .iter()
            .map(|a| format!("{:?}", a.as_ref()))
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            self.profile(name),
            format!("secrets:\n  API_TOKEN:\n    from_command: [{list}]\n    hosts: [example.com]\negress:\n  domains: [example.com]\n"),
        )
        .unwrap();
    }

    /// An executable script at `path` (its directories made) that leaves
    /// the mark and prints a token: what a token's committed program does.
    pub fn plant(&self, path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            path,
            format!("#!/bin/sh\ntouch {}\necho tok-abc\n", self.marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(path, PermissionsExt::from_mode(0o755)).unwrap();
    }

    /// `argv` run on the host as a secret's program is (from `/`, the
    /// fixed search path, the owner's home): whether it left the mark.
    /// The mark is taken away again. A spelling that does not run the
    /// token's code here proves nothing when warden refuses it.
    pub fn runs_the_tokens_code(&self, argv: &[String]) -> bool {
        let _ = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir("/")
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", self.dir.path().join("home"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let ran = self.marker.exists();
        let _ = std::fs::remove_file(&self.marker);
        ran
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
        self.owner_in(&self.dir.path().join("warden"), args)
    }

    /// [`OwnerHost::owner`] with the state directory `state` (a terminal
    /// whose state is not the daemon's) and the daemon's catalogue.
    pub fn owner_in(&self, state: &Path, args: &[&str]) -> Output {
        Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", state)
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

/// A sandbox `named` made by token `t` from profile `profile`, and
/// deleted again: the status and body of the make.
pub fn name_profile(d: &Daemon, t: &str, profile: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"name": "named", "profile": profile}).to_string();
    let r = json_as(d, t, "POST", "/v1/sandboxes", &body);
    json_as(d, t, "DELETE", "/v1/sandboxes/named", "");
    r
}

/// `path`'s components, each single-quoted, none of which names a
/// directory: a program that joins them at run time reaches `path`
/// without any argument naming it.
pub fn path_in_pieces(path: &Path) -> Vec<String> {
    path.components()
        .skip(1)
        .map(|c| format!("'{}'", c.as_os_str().to_str().unwrap()))
        .collect()
}

//! Shared by the OCI tests: bundles with a busybox root, the binary, a
//! state root, all in a temporary directory of the test's own.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::new_without_default
)]

pub mod cri;
pub mod cri_api;
pub mod image;
pub mod listener;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BUSYBOX: &str = "/bin/busybox";

/// Copy the program `from` to `to`, ready to run. A `cp` of its own writes
/// it: a write descriptor held by this process, even for a moment, would be
/// inherited by another test's fork and make the copy's exec fail with
/// "text file busy".
pub fn copy_program(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .output()
        .expect("cp runs");
    assert!(
        out.status.success(),
        "cp {from:?} {to:?}: {}",
        text(&out.stderr)
    );
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_warden-oci")
}

/// Whether the tests can run here; prints why not.
pub fn can_run() -> bool {
    if !Path::new(BUSYBOX).exists() {
        eprintln!("SKIPPED: no {BUSYBOX} (install busybox-static) to build a container root");
        return false;
    }
    true
}

pub struct Lab {
    pub dir: tempfile::TempDir,
    runs: std::sync::atomic::AtomicUsize,
}

impl Lab {
    pub fn new() -> Lab {
        let dir = tempfile::Builder::new()
            .prefix("warden-oci-")
            .tempdir()
            .unwrap();
        std::fs::create_dir(dir.path().join("root")).unwrap();
        // A root tree of a static busybox only: /bin/busybox and its names.
        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        std::fs::create_dir_all(rootfs.join("etc")).unwrap();
        copy_program(Path::new(BUSYBOX), &rootfs.join("bin/busybox"));
        for tool in [
            "sh", "echo", "cat", "sleep", "ls", "nc", "wget", "hostname", "touch",
        ] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(tool)).unwrap();
        }
        Lab {
            dir,
            runs: Default::default(),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A bundle named `name` whose config.json is `config` with the root
    /// pointed at the shared busybox tree.
    pub fn bundle(&self, name: &str, config: serde_json::Value) -> PathBuf {
        let b = self.dir.path().join(name);
        std::fs::create_dir_all(&b).unwrap();
        std::os::unix::fs::symlink(self.dir.path().join("rootfs"), b.join("rootfs")).unwrap();
        std::fs::write(
            b.join("config.json"),
            serde_json::to_vec_pretty(&config).unwrap(),
        )
        .unwrap();
        b
    }

    /// Run warden-oci. Its output goes through files, not pipes: what
    /// `create` is given is the container's stdio, held open (as the
    /// shim's fifos are) until the container ends.
    pub fn oci(&self, args: &[&str]) -> Output {
        self.oci_in(None, args)
    }

    /// [`Lab::oci`] from the directory `cwd` (containerd runs the runtime
    /// from the bundle's directory).
    pub fn oci_in(&self, cwd: Option<&std::path::Path>, args: &[&str]) -> Output {
        self.oci_env_in(cwd, &[], args)
    }

    /// [`Lab::oci`] with `env` set for warden-oci (the node's own
    /// settings, such as its secrets directory).
    pub fn oci_env(&self, env: &[(&str, &Path)], args: &[&str]) -> Output {
        self.oci_env_in(None, env, args)
    }

    fn oci_env_in(
        &self,
        cwd: Option<&std::path::Path>,
        env: &[(&str, &Path)],
        args: &[&str],
    ) -> Output {
        let n = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (out, err) = (
            self.path(&format!(".out{n}")),
            self.path(&format!(".err{n}")),
        );
        let mut cmd = Command::new(bin());
        // The node's catalogue is the lab's own (`node_profile`), never
        // the profiles of whoever runs the tests.
        cmd.env("XDG_CONFIG_HOME", self.path("config"));
        cmd.envs(env.iter().copied());
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let status = cmd
            .arg("--root")
            .arg(self.root())
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .status()
            .unwrap();
        Output {
            status,
            stdout: std::fs::read(&out).unwrap(),
            stderr: std::fs::read(&err).unwrap(),
        }
    }

    /// Put a profile in the node's catalogue (`warden.dev/profile=NAME`).
    pub fn node_profile(&self, name: &str, yaml: &str) {
        let dir = self.path("config/warden/profiles");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.yaml")), yaml).unwrap();
    }

    pub fn state(&self, id: &str) -> serde_json::Value {
        let o = self.oci(&["state", id]);
        assert!(
            o.status.success(),
            "state: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// Sandboxes left in the state store.
    pub fn left(&self) -> Vec<String> {
        std::fs::read_dir(self.root().join("sandboxes"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A config.json running `args` in the busybox root.
pub fn config(args: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"args": args, "env": ["PATH=/bin"], "cwd": "/"},
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "box",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"}
        ],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                                  {"type": "uts"}, {"type": "mount"}]}
    })
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The first of `tools` that is not on `PATH`, if one is not.
pub fn missing_tool<'a>(tools: &[&'a str]) -> Option<&'a str> {
    tools.iter().copied().find(|tool| {
        !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

//! The runtime specification's hooks, run where and when it says:
//! `prestart`, `createRuntime` (during `create`), `poststart` (after the
//! first process has started) and `poststop` (after `delete`) on the host,
//! in the runtime's namespaces, as the runtime's own user; `createContainer`
//! and `startContainer` in the container, as a process of its sandbox under
//! every restriction the container has (so their path resolves in the
//! container's root). Each gets the container's state on its standard input
//! and its whole environment from the hook's `env`; a hook that outlives
//! its `timeout` is killed.

use crate::container::{OciError, OciState, Record, OCI_VERSION};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use warden_policy::oci::Hook;
use warden_runtime::client::Connection;
use warden_runtime::protocol::ExecRequest;

/// The most of a failed hook's output an error quotes.
const QUOTED: usize = 512;

/// The state a hook reads on its standard input.
pub fn state(record: &Record, status: &str, pid: u32) -> Vec<u8> {
    let s = OciState {
        oci_version: OCI_VERSION.into(),
        id: record.id.clone(),
        status: status.into(),
        pid,
        bundle: record.bundle.clone(),
        rootfs: record.rootfs.clone(),
        created: record.created.clone(),
        annotations: record.annotations.clone(),
    };
    serde_json::to_vec(&s).unwrap_or_default()
}

fn failed(kind: &'static str, i: usize, h: &Hook, why: String) -> OciError {
    OciError::Hook {
        kind,
        index: i,
        path: h.path.clone(),
        why,
    }
}

fn quote(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(out);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let start = text
        .char_indices()
        .rev()
        .nth(QUOTED)
        .map(|(i, _)| i)
        .unwrap_or(0);
    format!(": {}", &text[start..])
}

/// Run `hooks` of `kind` on the host, one after the other; the first that
/// fails (cannot start, exits non-zero, is killed, outlives its timeout)
/// is the error.
pub fn run_on_host(kind: &'static str, hooks: &[Hook], state: &[u8]) -> Result<(), OciError> {
    for (i, h) in hooks.iter().enumerate() {
        let mut cmd = Command::new(&h.path);
        if let Some((first, rest)) = h.args.split_first() {
            cmd.arg0(first).args(rest);
        }
        cmd.env_clear();
        for e in &h.env {
            if let Some((k, v)) = e.split_once('=') {
                cmd.env(k, v);
            }
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| failed(kind, i, h, format!("cannot start it ({e})")))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A hook that does not read its state is not an error.
            let _ = stdin.write_all(state);
        }
        let mut out = child.stdout.take();
        let mut err = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            if let Some(o) = out.as_mut() {
                let _ = o.read_to_end(&mut all);
            }
            if let Some(e) = err.as_mut() {
                let _ = e.read_to_end(&mut all);
            }
            all
        });
        let deadline = h
            .timeout
            .map(|t| Instant::now() + Duration::from_secs(t.unsigned_abs()));
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => return Err(failed(kind, i, h, format!("cannot wait for it ({e})"))),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(
                    kind,
                    i,
                    h,
                    format!(
                        "it did not finish within its timeout of {}s and was killed",
                        h.timeout.unwrap_or_default()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let output = reader.join().unwrap_or_default();
        if !status.success() {
            return Err(failed(
                kind,
                i,
                h,
                format!("it ended with {status}{}", quote(&output)),
            ));
        }
    }
    Ok(())
}

/// Run `hooks` of `kind` in the container (through its supervisor at
/// `control`), one after the other, the first failure the error.
pub fn run_in_container(
    kind: &'static str,
    hooks: &[Hook],
    control: &Path,
    state: &[u8],
) -> Result<(), OciError> {
    for (i, h) in hooks.iter().enumerate() {
        let mut argv = vec![h.path.clone()];
        argv.extend(h.args.iter().skip(1).cloned());
        let env = h
            .env
            .iter()
            .filter_map(|e| e.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| failed(kind, i, h, format!("cannot make a pipe ({e})")))
        };
        let (in_r, in_w) = pipe()?;
        let (out_r, out_w) = pipe()?;
        let running = Connection::open(control)?
            .exec(
                ExecRequest {
                    argv,
                    env,
                    cwd: None,
                    tty: false,
                    winsize: None,
                    keep_output: None,
                },
                &[in_r.as_fd(), out_w.as_fd(), out_w.as_fd()],
            )
            .map_err(|e| {
                failed(
                    kind,
                    i,
                    h,
                    format!("cannot start it in the container ({e})"),
                )
            })?;
        drop(in_r);
        drop(out_w);
        let exec = running.exec;
        let mut stdin = std::fs::File::from(in_w);
        let _ = stdin.write_all(state);
        drop(stdin);
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = std::fs::File::from(out_r).read_to_end(&mut all);
            all
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(running.wait());
        });
        let ended = match h.timeout {
            Some(t) => rx.recv_timeout(Duration::from_secs(t.unsigned_abs())).ok(),
            None => rx.recv().ok(),
        };
        let Some(ended) = ended else {
            if let Ok(c) = Connection::open(control) {
                let _ = c.signal(exec, libc::SIGKILL);
            }
            return Err(failed(
                kind,
                i,
                h,
                format!(
                    "it did not finish within its timeout of {}s and was killed",
                    h.timeout.unwrap_or_default()
                ),
            ));
        };
        let status = ended
            .map_err(|e| failed(kind, i, h, format!("cannot wait for it ({e})")))?
            .status;
        let output = reader.join().unwrap_or_default();
        if status != 0 {
            return Err(failed(
                kind,
                i,
                h,
                format!("it ended with status {status}{}", quote(&output)),
            ));
        }
    }
    Ok(())
}

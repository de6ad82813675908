//! A VM's start: the VMM launched in its jail, then waited for until its
//! guest's init serves (a boot), or driven over QMP through a restore
//! (the stream loaded, checked, the guest let go).

use super::argv::Handed;
use super::files::{vmm_access, vmm_ids, workspace_view, HandedFiles, OpenedShares};
use super::*;

/// What follows a restore once the guest runs again.
pub(crate) enum Then<'a> {
    /// A template's copy: hand it its settings and wait for its `ready`.
    Attach(&'a crate::wire::Attach),
    /// A paused sandbox: its init served before the save and serves on.
    Serving(Ready),
}

/// A VMM started and not yet serving: what waiting for it needs.
pub(crate) struct Launched {
    pending: Pending,
    stream: UnixStream,
    control: UnixStream,
    console: PathBuf,
    vmm_log: PathBuf,
    start: Instant,
    fs_note: Option<String>,
    qmp: Option<crate::qmp::Qmp>,
    /// The descriptor the VMM reads a restore's stream from.
    incoming: Option<i32>,
    ram: crate::ram::Ram,
}

impl Launched {
    /// Wait (at most `timeout` since the launch) for the guest init's
    /// `want`: `ready` (it serves), or `parked` (a template's point).
    pub(crate) fn until(
        mut self,
        cfg: &Config,
        timeout: Duration,
        want: Kind,
    ) -> Result<Machine, MachineError> {
        let stream = self
            .stream
            .try_clone()
            .map_err(|source| MachineError::Accept {
                path: cfg.run_dir.clone(),
                source,
            })?;
        let booting = Booting {
            cfg,
            console: &self.console,
            vmm_log: &self.vmm_log,
            start: self.start,
            timeout,
        };
        let ready = self.pending.wait_for(&booting, &stream, want)?;
        self.into_machine(cfg, ready)
    }

    /// A restore: wait until the VMM has loaded the whole snapshot (it
    /// stays paused, as the guest was when saved), then `verified` must
    /// say the snapshot was intact before the guest runs a single
    /// instruction of it; then resume it and do `then`. On any failure the VMM is killed: never half-restored.
    pub(crate) fn restored(
        mut self,
        cfg: &Config,
        timeout: Duration,
        verified: impl FnOnce() -> Result<(), String>,
        then: Then<'_>,
    ) -> Result<Machine, MachineError> {
        let control = self
            .control
            .try_clone()
            .map_err(|source| MachineError::Accept {
                path: cfg.run_dir.clone(),
                source,
            })?;
        let mut qmp = crate::qmp::Qmp::open(control, timeout).map_err(MachineError::Control)?;
        // The phases of a restore, for `WARDEN_LOG=debug` (docs/performance.md).
        let up = self.start.elapsed();
        let fd = self
            .incoming
            .ok_or_else(|| MachineError::Restore("no snapshot was handed to the VMM".into()))?;
        set_capabilities(&mut qmp).map_err(MachineError::Control)?;
        qmp.execute(
            "migrate-incoming",
            Some(serde_json::json!({ "uri": format!("fd:{fd}") })),
        )
        .map_err(MachineError::Control)?;
        loop {
            self.pending.check_alive(&self.vmm_log)?;
            match qmp.status().map_err(MachineError::Control)?.as_str() {
                "inmigrate" => {}
                "paused" | "prelaunch" => break,
                other => return Err(MachineError::Restore(format!("the restored VM is {other}"))),
            }
            if self.start.elapsed() > timeout {
                return Err(MachineError::Restore(
                    "the snapshot did not load in time".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let loaded = self.start.elapsed();
        verified().map_err(MachineError::Restore)?;
        qmp.execute("cont", None).map_err(MachineError::Control)?;
        self.qmp = Some(qmp);
        let phases = |ready: Duration| {
            tracing::debug!(
                qemu_up_ms = up.as_millis() as u64,
                loaded_ms = loaded.as_millis() as u64,
                ready_ms = ready.as_millis() as u64,
                "VM restored (times since the VMM's launch began)"
            )
        };
        match then {
            Then::Attach(attach) => {
                let mut w = self
                    .stream
                    .try_clone()
                    .map_err(|source| MachineError::Accept {
                        path: cfg.run_dir.clone(),
                        source,
                    })?;
                Frame::json(Kind::Attach, 0, attach).write_to(&mut w)?;
                let start = self.start;
                let m = self.until(cfg, timeout, Kind::Ready)?;
                phases(start.elapsed());
                Ok(m)
            }
            Then::Serving(ready) => {
                phases(self.start.elapsed());
                self.into_machine(cfg, ready)
            }
        }
    }

    fn into_machine(mut self, cfg: &Config, ready: Ready) -> Result<Machine, MachineError> {
        let child = self.pending.child.take().ok_or(MachineError::NoVmm)?;
        Ok(Machine {
            child,
            fsd: self.pending.fsd.take(),
            stream: self.stream,
            control: Some(self.control),
            qmp: self.qmp,
            ready,
            run_dir: cfg.run_dir.clone(),
            fs_note: self.fs_note,
            ram: self.ram,
        })
    }
}

impl Machine {
    /// Start the VM and wait (at most `timeout`) until its init serves.
    pub fn boot(cfg: &Config, timeout: Duration) -> Result<Machine, MachineError> {
        Machine::launch(cfg)?.until(cfg, timeout, Kind::Ready)
    }

    /// Start the VMM (in its jail) with `cfg`; nothing waited for. Its
    /// shares and root tree are opened again for this launch whatever it
    /// is (a boot, a template's copy): see [`Machine::launch_opened`].
    pub(crate) fn launch(cfg: &Config) -> Result<Launched, MachineError> {
        let opened = OpenedShares::open(cfg)?;
        Machine::launch_opened(cfg, opened)
    }

    /// [`Machine::launch`] with the shares and root tree `opened` for it
    /// (through no link, and each still the very file checked when the
    /// sandbox was made: a link or another directory swapped in since is
    /// refused, `share_link` or `share_changed`, before any launch). A
    /// restore opens them before it takes its saved state, so that a
    /// share refused leaves the state as it was; everything the VMM is
    /// handed of them is made from these descriptors.
    pub(crate) fn launch_opened(
        cfg: &Config,
        opened: OpenedShares,
    ) -> Result<Launched, MachineError> {
        let start = Instant::now();
        let logs = Logs::create(&cfg.run_dir)?;
        let pair = || {
            nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::Stream,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
            .map_err(MachineError::Pair)
        };
        let (ours, theirs) = pair()?;
        let (control, control_theirs) = pair()?;
        let stream = UnixStream::from(ours);
        // The workspace, opened once here (through no link) and checked
        // to be the directory the sandbox was created over: the VMM or
        // virtiofsd is handed this descriptor, its owner read on it, its
        // Landlock rule made on it, and its path is never looked up again
        // (a directory swapped in at the path since the supervisor's check
        // is refused with `workspace_moved`, never shared).
        let ws = match (&cfg.workspace, &cfg.workspace_held) {
            // The disk budget's copy of the layer (`crate::disk`), opened
            // when it was made: never the layer on the host's disk.
            (Some(w), Some(held)) => {
                let dir = held.upper();
                let st = nix::sys::stat::fstat(dir).map_err(|e| MachineError::Open {
                    path: w.clone(),
                    source: e.into(),
                })?;
                Some((w.clone(), dir.clone(), (st.st_uid, st.st_gid)))
            }
            (Some(w), None) => {
                let (path, dir, owner) = warden_jail::open_workspace(w, cfg.workspace_id)
                    .map_err(MachineError::Workspace)?;
                Some((path, std::sync::Arc::new(dir), owner))
            }
            (None, _) => None,
        };
        // Each share and the root tree likewise were opened for this
        // launch (`opened`); everything below is made from those
        // descriptors.
        let (ids, swap) = vmm_ids(ws.as_ref().map(|(_, _, owner)| *owner));
        let (served, fs_note) = match (&ws, &cfg.workspace_fs) {
            (Some((ws, dir, _)), crate::fsd::WorkspaceFs::VirtioFs { fsd, forced }) => {
                // virtiofsd runs as the VMM's user too: a workspace of
                // another owner's it serves through the same view as 9p.
                let view = swap
                    .as_ref()
                    .map(|s| workspace_view((ws, dir), Some(s)))
                    .transpose()?;
                crate::fsd::start(
                    fsd,
                    *forced,
                    (ws, dir, view),
                    &cfg.run_dir,
                    ids,
                    (cfg.cgroup.as_deref(), cfg.cpu_budget.as_ref()),
                )
                .map_err(MachineError::Fsd)?
            }
            _ => (None, None),
        };
        // Served by the VMM (over 9p) unless virtiofsd serves it.
        let by_vmm = ws.as_ref().filter(|_| served.is_none());
        let mut files = HandedFiles::open(
            cfg,
            &logs.console,
            ids,
            by_vmm.map(|(p, d, _)| (p.as_path(), d.as_ref())),
            swap.as_ref(),
            &opened,
        )?;
        let ram = if served.is_some() {
            crate::ram::Ram::Anonymous
        } else {
            cfg.ram.clone()
        };
        let mut command = Command::new(&cfg.vmm);
        // Nothing of warden's environment (which may hold a secret's
        // source variable or the caller's tokens) reaches the VMM.
        command.env_clear();
        let handed = Handed::inherit(
            &mut command,
            cfg,
            (&theirs, &control_theirs),
            &files,
            served.as_ref(),
        );
        let root = cfg.run_dir.join("root");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .map_err(|source| MachineError::RunDir {
                path: root.clone(),
                source,
            })?;
        let (fsd, fsd_end) = match served {
            Some(s) => (Some(s.child), Some(s.vmm_end)),
            None => (None, None),
        };
        let mut fsd = crate::fsd::KillOnDrop(fsd);
        // Joined before the VMM runs: a VMM that cannot be confined is not
        // started.
        let mut jail = warden_jail::vmm::VmmJail::prepare(
            &vmm_access(
                cfg,
                &logs.console,
                &root,
                by_vmm.map(|(_, d, _)| d),
                &opened,
                &files.file_views,
            ),
            cfg.netns.as_deref(),
            Some(ids),
            cfg.cgroup.as_deref(),
        )?;
        // QEMU's 9p server changes the shares' modes for the guest: judged
        // on the host, whatever the guest's kernel says, at most at the
        // sandbox's CPU limit (one account with virtiofsd's judge).
        jail.judge_modes(cfg.cpu_budget.as_ref())?;
        jail.apply(&mut command);
        let (out, err) = (logs.out, logs.err);
        let child = command
            .args(cfg.argv(&handed))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| MachineError::Spawn {
                path: cfg.vmm.clone(),
                source,
            })?;
        if let Err(source) = jail.watch_modes() {
            // Nobody would answer its mode changes: it does not run.
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(MachineError::Spawn {
                path: cfg.vmm.clone(),
                source,
            });
        }
        // The VMM holds virtiofsd's other end now: when the VMM ends,
        // virtiofsd sees its socket close and ends too.
        let copies = files
            .console_copy
            .take()
            .into_iter()
            .chain([logs.vmm_copy])
            .collect();
        drop((theirs, control_theirs, files, jail, fsd_end));
        Ok(Launched {
            pending: Pending {
                child: Some(child),
                fsd: fsd.0.take(),
                copies,
                run_dir: cfg.run_dir.clone(),
                keep_dir: matches!(cfg.start, Start::Restore(_)),
            },
            stream,
            control: UnixStream::from(control),
            console: logs.console,
            vmm_log: logs.vmm,
            start,
            fs_note,
            qmp: None,
            incoming: handed.incoming,
            ram,
        })
    }
}

/// The VM's run directory with its logs: the guest's console (written by
/// the VMM) and the VMM's own output (`out` and `err`, one pipe into one
/// file within a bound, `warden_jail::vmm::bounded_log`: a guest that
/// makes QEMU print about its requests without end fills no disk).
pub(super) struct Logs {
    console: PathBuf,
    vmm: PathBuf,
    out: std::os::fd::OwnedFd,
    err: std::os::fd::OwnedFd,
    vmm_copy: warden_jail::vmm::LogCopy,
}

impl Logs {
    fn create(run_dir: &Path) -> Result<Logs, MachineError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(run_dir)
            .map_err(|source| MachineError::RunDir {
                path: run_dir.to_path_buf(),
                source,
            })?;
        let console = run_dir.join("console.log");
        let vmm = run_dir.join("vmm.log");
        let failed = |source| MachineError::RunDir {
            path: vmm.clone(),
            source,
        };
        let (out, vmm_copy) = warden_jail::vmm::bounded_log(&vmm, None).map_err(failed)?;
        let err = out.try_clone().map_err(failed)?;
        Ok(Logs {
            console,
            vmm,
            out,
            err,
            vmm_copy,
        })
    }
}

/// What waiting for a booting VM looks at: its logs, for the error, and
/// its time, counted from `start`.
pub(super) struct Booting<'a> {
    cfg: &'a Config,
    console: &'a Path,
    vmm_log: &'a Path,
    start: Instant,
    timeout: Duration,
}

/// A VMM not yet ready: killed, and its directory removed, if booting
/// fails.
pub(super) struct Pending {
    child: Option<Child>,
    fsd: Option<Child>,
    /// The copies into the VMM's bounded logs (its own output, the
    /// console): an ended VMM's last lines land before they are read.
    copies: Vec<warden_jail::vmm::LogCopy>,
    run_dir: PathBuf,
    /// A restore that fails leaves the run directory as the backend made
    /// it (its trust files, its single files' directories) for the cold
    /// boot that follows: only what the VMM's start made goes.
    keep_dir: bool,
}

impl Pending {
    fn check_alive(&mut self, log: &Path) -> Result<(), MachineError> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                for copy in &self.copies {
                    copy.wait(Duration::from_millis(500));
                }
                return Err(MachineError::VmmExited {
                    status: status.to_string(),
                    log: tail(log),
                });
            }
        }
        Ok(())
    }

    /// Wait on `stream` until the guest's init says `want` (`ready`: it
    /// serves; `parked`: a template's point), the guest or the VMM fails,
    /// or the boot's time is up.
    fn wait_for(
        &mut self,
        b: &Booting,
        stream: &UnixStream,
        want: Kind,
    ) -> Result<Ready, MachineError> {
        let accept_err = |source| MachineError::Accept {
            path: b.cfg.run_dir.clone(),
            source,
        };
        let mut reader = stream.try_clone().map_err(accept_err)?;
        let ready = loop {
            let left = b.timeout.saturating_sub(b.start.elapsed());
            if left.is_zero() {
                return Err(MachineError::BootTimeout {
                    secs: b.timeout.as_secs(),
                    accel: b.cfg.accel.as_str(),
                    console: tail(b.console),
                });
            }
            reader
                .set_read_timeout(Some(left.min(Duration::from_millis(200))))
                .map_err(accept_err)?;
            match Frame::read_from(&mut reader) {
                Ok(Some(f)) if f.kind == want && want == Kind::Ready => {
                    break f.parse::<Ready>()?
                }
                Ok(Some(f)) if f.kind == want => {
                    break Ready {
                        kernel: String::new(),
                        layers: Vec::new(),
                    }
                }
                Ok(Some(f)) if f.kind == Kind::Fatal => {
                    return Err(MachineError::GuestFailed(
                        f.parse::<String>().unwrap_or_default(),
                    ))
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    // The channel closed: the VMM ended, or the guest did.
                    // Its keeper ends right after the VMM: give it a moment
                    // to say which.
                    self.wait_exit(b.vmm_log, Duration::from_secs(1))?;
                    return Err(MachineError::GuestFailed(tail(b.console)));
                }
                Err(WireError::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    self.check_alive(b.vmm_log)?;
                }
                Err(e) => return Err(e.into()),
            }
        };
        reader.set_read_timeout(None).map_err(accept_err)?;
        Ok(ready)
    }

    /// [`Pending::check_alive`], for up to `within` while the VMM runs.
    fn wait_exit(&mut self, log: &Path, within: Duration) -> Result<(), MachineError> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            self.check_alive(log)?;
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            if self.keep_dir {
                let _ = warden_workspace::fsutil::remove_tree(&self.run_dir.join("root"));
            } else {
                let _ = warden_workspace::fsutil::remove_tree(&self.run_dir);
            }
        }
        crate::fsd::end(&mut self.fsd, Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Every launch (a boot, a resume from disk, a fork's copy, a restore
    /// from a snapshot) goes through `Machine::launch`, which opens the
    /// shares again before anything is started: a share whose path goes
    /// through a link swapped in since the sandbox was made (the review's
    /// 28b resume variant: no race, the paused state waits on disk) is
    /// refused there, before any VMM runs, and no view, rule or root is
    /// made of where the link points.
    #[test]
    fn a_launch_refuses_a_share_swapped_for_a_link_since_the_sandbox_was_made() {
        let dir = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(dir.path()).unwrap();
        let bind = top.join("p/sub/data");
        std::fs::create_dir_all(&bind).unwrap();
        std::fs::create_dir_all(top.join("victim/data")).unwrap();
        let cfg = super::super::config_sharing(&bind, &top.join("run"));
        std::os::unix::fs::symlink(top.join("victim"), top.join("p/sub.lnk")).unwrap();
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            top.join("p/sub"),
            rustix::fs::CWD,
            top.join("p/sub.lnk"),
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .unwrap();
        let refused = match Machine::launch(&cfg) {
            Ok(_) => panic!("a VMM was launched over a swapped share"),
            Err(e) => e,
        };
        assert!(
            matches!(&refused, MachineError::Share(s) if s.reason() == Some(crate::shares::SHARE_LINK)),
            "{refused}"
        );
        assert!(
            !cfg.run_dir.join("root").exists(),
            "the VMM's root was made"
        );
    }
}

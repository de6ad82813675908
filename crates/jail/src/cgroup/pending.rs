//! A sandbox's cgroup between its two halves: [`Pending`] holds the plan
//! and the v2 directory a new process can be born in (made by
//! [`Cgroup::begin`]), and [`Pending::finish`] makes the v1 directories and
//! writes every limit while the sandbox's init sets up its IDs and network.
//!
//! It owns the order of creation and the retry on a stale remembered plan;
//! it never decides where a controller lives (that is `plan`) nor knows a
//! hierarchy's files (that is `v1` and `v2`).

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;

use super::discover::Hierarchies;
use super::plan::{Backend, Plan};
use super::{hint, memo, v1, v2, write_file, Cgroup, CgroupError, Controller, Dir, Limits, Op};

/// Why [`Pending::finish`] failed, and what exists of the cgroup (the v2
/// directory, if any), removed when dropped.
#[derive(Debug)]
pub struct Unfinished {
    pub error: CgroupError,
    pub made: Cgroup,
}

/// A sandbox's cgroup between [`Cgroup::begin`] and [`Pending::finish`]:
/// its v2 directory (if the plan has one) exists, nothing else does.
/// Dropping it removes what was made.
#[derive(Debug)]
pub struct Pending {
    cg: Cgroup,
    h: Hierarchies,
    plan: Plan,
    name: String,
    limits: Limits,
    quota: Option<u64>,
    required: Vec<(Controller, Backend)>,
    /// The plan came from the memo (a failure in `finish` is retried on a
    /// fresh discovery).
    pub(super) remembered: bool,
}

impl Pending {
    pub(super) fn begin_planned(
        h: Hierarchies,
        plan: Plan,
        name: &str,
        limits: &Limits,
        quota: Option<u64>,
    ) -> Result<Pending, CgroupError> {
        let wanted = [
            (Controller::Memory, limits.memory.is_some()),
            (Controller::Pids, limits.pids.is_some()),
            (Controller::Cpu, quota.is_some()),
        ];
        // Fail before creating anything when a limit has nowhere to go.
        let mut required = Vec::new();
        for (c, _) in wanted.iter().filter(|(_, w)| *w) {
            let backend = plan
                .backend(&h, *c)
                .map_err(|reason| CgroupError::Unavailable {
                    controller: c.name(),
                    reason,
                })?;
            required.push((*c, backend));
        }
        // Dropping `cg` on an error path removes what was created so far.
        let mut cg = Cgroup { dirs: Vec::new() };
        if let Some(v2) = &plan.v2 {
            let enable = plan.v2_controllers(&h);
            let needed: Vec<Controller> = required
                .iter()
                .filter(|(_, b)| *b == Backend::V2)
                .map(|(c, _)| *c)
                .collect();
            match with_parent_retry(|| v2::create(&v2.place, name, &enable, &needed)) {
                Ok(dir) => cg.dirs.push(dir),
                Err(e) if !needed.is_empty() => return Err(e),
                Err(e) => tracing::debug!(error = %e, "optional cgroup v2 directory left out"),
            }
        }
        Ok(Pending {
            cg,
            h,
            plan,
            name: name.to_owned(),
            limits: *limits,
            quota,
            required,
            remembered: false,
        })
    }

    /// The v2 directory, open for `clone3(CLONE_INTO_CGROUP)`, if there is
    /// one.
    pub fn v2_dir(&self) -> Result<Option<OwnedFd>, CgroupError> {
        match self.cg.v2_dir() {
            Some(dir) => fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(&dir.path)
                .map(|f| Some(f.into()))
                .map_err(|source| CgroupError::AddProcess {
                    pid: 0,
                    path: dir.path.clone(),
                    hint: hint(Op::AddProcess, &source),
                    source,
                }),
            None => Ok(None),
        }
    }

    /// The v1 directories this plan joins (none: nothing to hand over).
    pub fn has_v1(&self) -> bool {
        self.plan.v1_usable.iter().any(|&i| self.v1_useful(i))
    }

    fn v1_useful(&self, i: usize) -> bool {
        let needed = self.required.iter().any(|(_, b)| *b == Backend::V1(i));
        // Every hierarchy joined costs a migration at start and an rmdir
        // at the end. CPU time comes from the init's rusage, and killing
        // from the v2 directory's cgroup.kill (or the PID namespace), so
        // cpuacct and freezer are joined only when there is no v2
        // directory to kill through.
        needed
            || (self.plan.v2.is_none() && self.h.v1[i].controllers.contains(&Controller::Freezer))
    }

    /// The second half of [`Cgroup::create`]: the v1 directories and every
    /// limit. A failure on a remembered plan is tried once more on the host
    /// as discovered now (the v2 directory stays as it is). On failure, what
    /// [`Cgroup::begin`] made is handed back with the error: a process may
    /// already live in its v2 directory, which can be removed only once that
    /// process is gone.
    pub fn finish(mut self) -> Result<Cgroup, Unfinished> {
        let done = match self.finish_planned() {
            Err(e) if self.remembered => {
                tracing::debug!(error = %e, "the remembered cgroup plan failed; discovering again");
                match memo::plan(memo::default_dir().as_deref(), true) {
                    Ok((h, plan, _)) if plan.v2.is_some() == self.plan.v2.is_some() => {
                        // Where each limit goes, on the plan as it is now;
                        // the v2 directory made by `begin` must still be
                        // where the v2-backed ones go.
                        match self.required_on(&h, &plan) {
                            Some(required) => {
                                self.remove_v1();
                                self.h = h;
                                self.plan = plan;
                                self.required = required;
                                self.remembered = false;
                                self.finish_planned()
                            }
                            None => Err(e),
                        }
                    }
                    Ok(_) => Err(e),
                    Err(again) => Err(again),
                }
            }
            done => done,
        };
        match done {
            Ok(()) => Ok(self.cg),
            Err(error) => {
                // Only what `begin` made is kept for the caller to remove.
                self.remove_v1();
                Err(Unfinished {
                    error,
                    made: self.cg,
                })
            }
        }
    }

    /// The controllers this cgroup's limits need, placed on `plan`, when
    /// the ones placed on v2 are the same as on the plan `begin` used
    /// (its v2 directory, already made, serves them).
    fn required_on(&self, h: &Hierarchies, plan: &Plan) -> Option<Vec<(Controller, Backend)>> {
        let mut required = Vec::new();
        for (c, _) in &self.required {
            required.push((*c, plan.backend(h, *c).ok()?));
        }
        let on_v2 = |r: &[(Controller, Backend)]| -> Vec<Controller> {
            r.iter()
                .filter(|(_, b)| *b == Backend::V2)
                .map(|(c, _)| *c)
                .collect()
        };
        (on_v2(&required) == on_v2(&self.required)).then_some(required)
    }

    /// Remove the v1 directories made so far (a `Cgroup` of them, dropped).
    fn remove_v1(&mut self) {
        let (v2, v1): (Vec<Dir>, Vec<Dir>) = std::mem::take(&mut self.cg.dirs)
            .into_iter()
            .partition(|d| d.v2);
        self.cg.dirs = v2;
        drop(Cgroup { dirs: v1 });
    }

    fn finish_planned(&mut self) -> Result<(), CgroupError> {
        let usable = self.plan.v1_usable.clone();
        for i in usable {
            if !self.v1_useful(i) {
                continue;
            }
            let needed = self.required.iter().any(|(_, b)| *b == Backend::V1(i));
            let v1 = &self.h.v1[i];
            let name = &self.name;
            match with_parent_retry(|| v1::create(v1, name)) {
                // In the plan's order, before the v2 directory (as
                // `Cgroup::paths` lists them).
                Ok(dir) => {
                    let at = self.cg.dirs.iter().filter(|d| !d.v2).count();
                    self.cg.dirs.insert(at, dir);
                }
                Err(e) if needed => return Err(e),
                Err(e) => tracing::debug!(error = %e, "optional cgroup v1 hierarchy left out"),
            }
        }
        let cg = &self.cg;
        if let Some(bytes) = self.limits.memory {
            cg.set_memory(bytes)?;
        }
        if let Some(n) = self.limits.pids {
            let dir = cg.require(Controller::Pids)?;
            write_file(&dir.path.join("pids.max"), &n.to_string(), Op::Write)?;
        }
        if let Some(quota) = self.quota {
            let dir = cg.require(Controller::Cpu)?;
            if dir.v2 {
                v2::set_cpu_quota(&dir.path, quota)?;
            } else {
                v1::set_cpu_quota(&dir.path, quota)?;
            }
        }
        tracing::debug!(paths = ?cg.paths(), "sandbox cgroup created");
        Ok(())
    }
}

/// Run `f` again when the shared `warden` parent vanished under it (another
/// sandbox's removal pruned it between our mkdir and our use).
fn with_parent_retry(mut f: impl FnMut() -> Result<Dir, CgroupError>) -> Result<Dir, CgroupError> {
    let mut attempts = 0;
    loop {
        match f() {
            Err(e) if e.errno() == Some(libc::ENOENT) && attempts < 3 => attempts += 1,
            other => return other,
        }
    }
}

//! runsc is shown the workspace the sandbox was created over: the gVisor
//! backend opens it once, checks it on that descriptor against the
//! identity the supervisor recorded, and shows runsc that directory (a
//! view attached in runsc's own mount namespace as root; this process's
//! descriptor rootless), never its path, which runsc would open later
//! and which whoever can write the workspace's parent can swap between
//! the supervisor's check and runsc's start.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use warden_jail::gvisor::GvisorError;
use warden_jail::{Attach, Desk, JailError, Network, Pid, Program};
use warden_policy::compose::{Layer, Origin, Val};
use warden_policy::{Defaults, Field, HostFacts, Placement, SandboxSpec, Trust};

/// Serves nothing: the test's sandboxes have no network and no secret.
struct Nothing;

impl warden_jail::secrets::Keeper for Nothing {
    fn placeholder(&mut self) -> Result<String, warden_jail::secrets::KeeperError> {
        Err("no secrets here".into())
    }
    fn keep(
        &mut self,
        _: Vec<warden_jail::secrets::SecretValue>,
    ) -> Result<String, warden_jail::secrets::KeeperError> {
        Err("no secrets here".into())
    }
}

impl Attach for Nothing {
    fn network(&mut self, _: Network) -> Result<Option<Box<dyn Desk>>, String> {
        Ok(None)
    }
    fn service(&mut self, _: OwnedFd, _: Pid) {}
    fn stopping(&mut self) {}
}

/// runsc and a state directory for its bundles, or `None` (said why).
fn gvisor_here() -> Option<()> {
    let state = std::env::temp_dir().join(format!("warden-jail-gvisor-{}", std::process::id()));
    std::fs::create_dir_all(&state).unwrap();
    let _ = warden_jail::settings::Settings {
        state_dir: Some(state),
        ..warden_jail::settings::Settings::from_vars(|n| std::env::var_os(n))
    }
    .install();
    if warden_jail::gvisor::runsc::find().is_none() {
        eprintln!("skipped: runsc is not installed");
        return None;
    }
    if warden_jail::settings::Settings::current()
        .state_dir
        .is_none()
    {
        eprintln!("skipped: no state directory");
        return None;
    }
    Some(())
}

/// A spec that runs `script` over the workspace `ws`, with no network,
/// recorded as created over the directory `id`, as the supervisor hands
/// it to the backend.
fn spec(ws: &Path, id: (u64, u64), script: &str) -> SandboxSpec {
    let mut layer = Layer::default();
    layer.add_one(
        Field::Command,
        Val::Argv(vec!["sh".into(), "-c".into(), script.into()]),
        Origin::CommandLine,
    );
    layer
        .add_text(
            Field::Workspace,
            ws.to_str().unwrap(),
            Origin::CommandLine,
            Trust::Owner,
        )
        .unwrap();
    let defaults = Defaults::for_host(HostFacts {
        total_memory: 4 << 30,
        cpus: 2,
        pid_max: 1 << 22,
    });
    let mut spec = layer
        .resolve(&Placement::default(), &defaults, &[])
        .unwrap();
    spec.network = warden_policy::NetworkSpec::LoopbackOnly;
    spec.filesystem.workspace_identity = Some(id);
    spec
}

/// The project's own directory (open to the sandbox's user), and its
/// recorded identity.
fn project(top: &Path) -> (PathBuf, (u64, u64)) {
    let ws = top.join("project");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("notes"), "the project's notes\n").unwrap();
    open_to_all(&ws);
    let m = std::fs::metadata(&ws).unwrap();
    (ws, (m.dev(), m.ino()))
}

fn open_to_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
}

const COPY: &str = "cat /workspace/notes > /workspace/seen";

fn run(spec: &SandboxSpec, id: &str) -> Result<warden_jail::Outcome, GvisorError> {
    warden_jail::gvisor::run(
        spec,
        id,
        Program::Command,
        &mut warden_audit::NullSink,
        &mut Nothing,
    )
}

/// Before, the bundle named the workspace's path and runsc opened it when
/// it started: the project moved away and another directory made at its
/// path after the supervisor's check, the sandbox ran over that other
/// directory and copied its planted file (`seen` in it held the secret).
/// Now the backend refuses with `workspace_moved` before runsc starts,
/// and nothing in the other directory is read or written.
#[test]
fn a_gvisor_sandbox_over_a_workspace_swapped_since_its_check_is_refused_and_reads_nothing() {
    if gvisor_here().is_none() {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    let (ws, id) = project(top.path());
    let spec = spec(&ws, id, COPY);
    std::fs::rename(&ws, top.path().join("project.old")).unwrap();
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("notes"), "HOST-SECRET-25\n").unwrap();
    open_to_all(&ws);
    let got = run(&spec, "ws-moved");
    let seen = std::fs::read_to_string(ws.join("seen"));
    assert!(
        seen.is_err(),
        "ran over another directory, whose file it copied: {seen:?}"
    );
    match got {
        Err(GvisorError::Workspace(e @ JailError::WorkspaceMoved { .. })) => {
            assert!(
                e.to_string().starts_with("refused (workspace_moved)"),
                "{e}"
            );
        }
        Err(e) => panic!("refused for another reason: {}", warden_jail::chain_str(&e)),
        Ok(o) => panic!("not refused: {o:?}"),
    }
    assert!(!top.path().join("project.old/seen").exists());
}

/// What runsc is shown is the sandbox's own directory: the sandbox reads
/// its file and what it writes lands there.
#[test]
fn a_gvisor_sandbox_over_its_own_workspace_reads_and_writes_that_directory() {
    if gvisor_here().is_none() {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    let (ws, id) = project(top.path());
    let outcome = run(&spec(&ws, id, COPY), "ws-own").unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("seen")).unwrap(),
        "the project's notes\n",
        "{outcome:?}"
    );
}

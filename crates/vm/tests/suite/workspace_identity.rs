//! The VMM (or virtiofsd) is handed the workspace the sandbox was created
//! over, opened once where the VM is launched and checked on that very
//! descriptor, never a directory found at its path later: the supervisor
//! checks the path under the sandbox's lock, but a VM is launched again
//! after that (a resume from disk, a template's copy), and whoever can
//! write the workspace's parent can swap the directory in between.

use crate::common::{config, run, BOOT};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use warden_vm::fsd::WorkspaceFs;
use warden_vm::machine::{Config, Machine, MachineError};
use warden_vm::wire::Ended;

/// The project's own directory, and the identity it is recorded with.
fn project(top: &Path) -> (std::path::PathBuf, (u64, u64)) {
    let ws = top.join("project");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("notes"), "the project's notes\n").unwrap();
    let m = std::fs::metadata(&ws).unwrap();
    (ws, (m.dev(), m.ino()))
}

/// `cfg` sharing `ws` as its workspace over `fs`, recorded as `id`.
fn sharing(mut cfg: Config, ws: &Path, id: (u64, u64), fs: WorkspaceFs) -> Config {
    cfg.workspace = Some(ws.to_path_buf());
    cfg.workspace_id = Some(id);
    cfg.workspace_fs = fs;
    for (k, v) in &mut cfg.params {
        if k == "workspace" {
            *v = "1".into();
        }
    }
    cfg
}

/// The ways this host can share a workspace: 9p always, virtio-fs where
/// a virtiofsd is installed.
fn ways() -> Vec<(&'static str, WorkspaceFs)> {
    let mut ways = vec![("9p", WorkspaceFs::NineP)];
    match warden_vm::fsd::find() {
        Some(fsd) => ways.push(("virtiofs", WorkspaceFs::VirtioFs { fsd, forced: true })),
        None => eprintln!("virtio-fs not tried: no virtiofsd on this host"),
    }
    ways
}

/// Before, the VMM was handed whatever directory the workspace's path
/// held when it was launched (9p's share, virtiofsd's source, opened by
/// path): the project moved away and another directory made at its path
/// after the sandbox's checks, the guest read that directory's planted
/// file (`cat /workspace/notes` printed it). Now the launch opens the
/// path once, compares the directory with the recorded one on that
/// descriptor and refuses with `workspace_moved`; no VMM runs, so nothing
/// reads the planted file.
#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_launched_over_a_workspace_swapped_since_its_check_is_refused_and_reads_nothing() {
    for (name, fs) in ways() {
        let top = tempfile::tempdir().unwrap();
        let (ws, id) = project(top.path());
        let Some(cfg) = config(&format!("ws-moved-{name}")) else {
            return;
        };
        let cfg = sharing(cfg, &ws, id, fs);
        // Moved away; another directory at its path, holding a file only
        // the host should have.
        std::fs::rename(&ws, top.path().join("project.old")).unwrap();
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("notes"), "HOST-SECRET-25\n").unwrap();
        match Machine::boot(&cfg, BOOT) {
            Ok(m) => {
                let (out, _) = run(&m, 1, "cat /workspace/notes");
                panic!("{name}: booted over another directory, whose file reads: {out}");
            }
            Err(e) => {
                let said = warden_jail::chain_str(&e);
                assert!(
                    matches!(e, MachineError::Workspace(_)),
                    "{name}: refused for another reason: {said}"
                );
                assert!(said.contains("refused (workspace_moved)"), "{name}: {said}");
            }
        }
        assert!(
            !cfg.run_dir.join("console.log").exists()
                || std::fs::read_to_string(cfg.run_dir.join("console.log"))
                    .unwrap_or_default()
                    .is_empty(),
            "{name}: a guest ran"
        );
    }
}

/// The descriptor handed over is the sandbox's own directory: the guest
/// reads its files and what it writes lands there, over 9p and virtio-fs.
#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_launched_over_its_own_workspace_reads_and_writes_that_directory() {
    for (name, fs) in ways() {
        let top = tempfile::tempdir().unwrap();
        let (ws, id) = project(top.path());
        let Some(cfg) = config(&format!("ws-own-{name}")) else {
            return;
        };
        let cfg = sharing(cfg, &ws, id, fs);
        let m = Machine::boot(&cfg, BOOT).unwrap();
        let (out, end) = run(
            &m,
            1,
            "cat /workspace/notes && echo made > /workspace/made && echo ok",
        );
        assert_eq!(end, Ended::Exited(0), "{name}: {out}");
        assert_eq!(out, "the project's notes\nok\n", "{name}");
        drop(m);
        assert_eq!(
            std::fs::read_to_string(ws.join("made")).unwrap(),
            "made\n",
            "{name}"
        );
    }
}

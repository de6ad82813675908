//! Volumes (`--volume HOST:INSIDE[:ro]`, `filesystem.volumes`) through the
//! real binary: a writable volume's writes are held in the sandbox's
//! size-limited tmpfs (`--disk`) while it runs and merged into the host
//! directory when it stops, so a run writing without end into a volume
//! ends in ENOSPC inside and the host directory grows by at most the
//! limit; a read-only one is never written; the VM and gVisor backends
//! refuse a spec with volumes before anything runs, rather than dropping
//! them. What the run wrote over a file the owner's configuration reads
//! (a profile's `extends` target in the volume's directory) is held back,
//! kept in the state's `held-back/` and said on stderr, on the one-shot
//! run as at a named sandbox's stop.

use crate::common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Bytes of disk the tree at `p` occupies (blocks; links not followed).
fn allocated(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            let Ok(m) = e.path().symlink_metadata() else {
                return 0;
            };
            m.blocks() * 512 + if m.is_dir() { allocated(&e.path()) } else { 0 }
        })
        .sum()
}

fn volume_arg(host: &Path, inside: &str, mode: &str) -> String {
    format!("{}:{inside}{mode}", host.display())
}

#[test]
fn a_writable_volume_gets_what_the_run_wrote_when_it_stops() {
    let state = TempDir::new("volume-write");
    let vol = TempDir::new("volume-write-dir");
    std::fs::write(vol.path().join("before"), "from the host\n").unwrap();
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--volume",
            &volume_arg(vol.path(), "/mnt/v", ""),
            "--",
            "sh",
            "-c",
            "cat /mnt/v/before && echo written > /mnt/v/after && rm /mnt/v/before",
        ],
    );
    assert_eq!(ok(&out), "from the host\n");
    assert_eq!(
        std::fs::read_to_string(vol.path().join("after")).unwrap(),
        "written\n"
    );
    assert!(
        !vol.path().join("before").exists(),
        "a removal is merged too"
    );
}

#[test]
fn a_run_writing_without_end_into_a_volume_is_stopped_at_its_disk_limit() {
    const LIMIT: u64 = 8 << 20;
    let state = TempDir::new("volume-fill");
    let vol = TempDir::new("volume-fill-dir");
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--disk",
            "8M",
            "--volume",
            &volume_arg(vol.path(), "/mnt/v", ""),
            "--",
            "sh",
            "-c",
            "(cat /dev/zero > /mnt/v/endless) 2>&1; echo status=$?; \
             truncate -s 50G /mnt/v/sparse; echo x >> /mnt/v/sparse; \
             du -sk /mnt/v >&2",
        ],
    );
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(
        o.contains("No space left on device"),
        "stdout: {o}\nstderr: {e}"
    );
    assert!(!o.contains("status=0"), "{o}");
    let grown = allocated(vol.path());
    assert!(
        grown <= LIMIT + (1 << 20),
        "the volume grew by {grown} bytes past the 8 MiB limit"
    );
    let sparse = vol.path().join("sparse");
    assert!(
        !sparse.exists() || sparse.metadata().unwrap().len() <= LIMIT,
        "a sparse file was merged whole"
    );
}

#[test]
fn a_read_only_volume_is_never_written() {
    let state = TempDir::new("volume-ro");
    let vol = TempDir::new("volume-ro-dir");
    std::fs::write(vol.path().join("data"), "kept\n").unwrap();
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--volume",
            &volume_arg(vol.path(), "/mnt/v", ":ro"),
            "--",
            "sh",
            "-c",
            "cat /mnt/v/data; echo changed > /mnt/v/data || echo refused; touch /mnt/v/new || echo refused",
        ],
    );
    assert_eq!(stdout(&out), "kept\nrefused\nrefused\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(vol.path().join("data")).unwrap(),
        "kept\n"
    );
    assert!(!vol.path().join("new").exists());
}

#[test]
fn a_vm_or_gvisor_sandbox_refuses_volumes_before_anything_runs() {
    let state = TempDir::new("volume-backends");
    let vol = TempDir::new("volume-backends-dir");
    for (isolation, word) in [("vm", "does not mount volumes"), ("gvisor", "volumes")] {
        let started = Instant::now();
        let out = warden(
            state.path(),
            &[
                "run",
                "--no-tty",
                "--isolation",
                isolation,
                "--volume",
                &volume_arg(vol.path(), "/mnt/v", ":ro"),
                "--",
                "touch",
                "/mnt/v/ran",
            ],
        );
        let e = stderr(&out);
        assert_ne!(code(&out), 0, "{isolation}: {e}");
        if e.contains("needs runsc") || e.contains("no VM") || e.contains("/dev/kvm") {
            skip(&format!("{isolation} is not usable here: {e}"));
            continue;
        }
        assert!(e.contains(word), "{isolation}: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{isolation} booted first"
        );
        assert!(!vol.path().join("ran").exists());
    }
}

#[test]
fn a_rootless_run_writing_without_end_into_a_volume_is_stopped_at_its_disk_limit() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let state = TempDir::new("volume-fill-rootless");
    let vol = TempDir::new("volume-fill-rootless-dir");
    who.own(state.path());
    who.own(vol.path());
    let out = who
        .command(who.bin.to_str().unwrap())
        .args([
            "run",
            "--no-tty",
            "--disk",
            "8M",
            "--volume",
            &volume_arg(vol.path(), "/mnt/v", ""),
            "--",
            "sh",
            "-c",
            "echo kept > /mnt/v/f; (cat /dev/zero > /mnt/v/endless) 2>&1; echo status=$?",
        ])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .output()
        .unwrap();
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(
        o.contains("No space left on device"),
        "stdout: {o}\nstderr: {e}"
    );
    assert!(!o.contains("status=0"), "{o}");
    assert!(
        allocated(vol.path()) <= (9 << 20),
        "the volume grew past the limit"
    );
    assert_eq!(
        std::fs::read_to_string(vol.path().join("f")).unwrap(),
        "kept\n"
    );
}

/// An owner whose catalogue (`XDG_CONFIG_HOME`) has a profile extending
/// `VOLUME/base.yaml`, and whose state is `STATE`.
struct OwnerWithVolume {
    config: TempDir,
    state: TempDir,
    vol: TempDir,
}

/// What a sandbox writes over the owner's `base.yaml`: a secret whose
/// program is its own, which the owner's profile would run on the host.
const PLANTED: &str = "secrets:\n  T:\n    from_command: [/tmp/planted]\n    hosts: [x.test]\n";
const BASE: &str = "description: the owner's shared settings\n";

impl OwnerWithVolume {
    fn new(tag: &str) -> OwnerWithVolume {
        let o = OwnerWithVolume {
            config: TempDir::new(&format!("{tag}-config")),
            state: TempDir::new(&format!("{tag}-state")),
            vol: TempDir::new(&format!("{tag}-dir")),
        };
        let profiles = o.config.path().join("warden/profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        std::fs::write(o.vol.path().join("base.yaml"), BASE).unwrap();
        std::fs::write(
            profiles.join("own.yaml"),
            format!("extends: [{}]\n", o.vol.path().join("base.yaml").display()),
        )
        .unwrap();
        o
    }

    fn warden(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", self.state.path())
            .env("XDG_CONFIG_HOME", self.config.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    /// The one directory of `held-back/` (one per volume), if any.
    fn held_back(&self) -> Option<std::path::PathBuf> {
        let dir = std::fs::read_dir(self.state.path().join("held-back")).ok()?;
        let all: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        assert!(all.len() <= 1, "{all:?}");
        all.into_iter().next()
    }

    /// The owner's files are as they were, the sandbox's other file
    /// merged, what it wrote over `base.yaml` kept under `held-back/`
    /// and said on `stderr`.
    fn assert_held_back(&self, stderr: &str) {
        assert_eq!(
            std::fs::read_to_string(self.vol.path().join("base.yaml")).unwrap(),
            BASE,
            "the owner's profile now extends what the sandbox wrote; stderr: {stderr}"
        );
        assert!(!self.vol.path().join("conf").exists(), "{stderr}");
        assert_eq!(
            std::fs::read_to_string(self.vol.path().join("note")).unwrap(),
            "mine\n"
        );
        let kept = self.held_back().expect("what was held back is kept");
        assert_eq!(
            std::fs::read_to_string(kept.join("base.yaml")).unwrap(),
            PLANTED
        );
        assert!(
            stderr.contains("HELD BACK (holds_configuration)")
                && stderr.contains("base.yaml")
                && stderr.contains(&kept.display().to_string()),
            "the owner is not told what was held back and where: {stderr}"
        );
    }
}

/// The sandbox's writes: over the owner's `base.yaml`, and a file of its
/// own.
fn overwrite_base(inside: &str) -> String {
    format!(
        "printf '{}' > {inside}/base.yaml && echo mine > {inside}/note",
        PLANTED.replace('\n', "\\n")
    )
}

#[test]
fn a_one_shot_run_never_merges_over_a_file_the_owners_profile_extends_and_says_what_it_held_back() {
    let o = OwnerWithVolume::new("volume-fence-run");
    let out = o.warden(&[
        "run",
        "--no-tty",
        "--volume",
        &volume_arg(o.vol.path(), "/mnt/v", ""),
        "--",
        "sh",
        "-c",
        &overwrite_base("/mnt/v"),
    ]);
    ok(&out);
    o.assert_held_back(&stderr(&out));
}

#[test]
fn a_named_sandboxs_stop_says_what_its_volumes_merge_held_back() {
    let o = OwnerWithVolume::new("volume-fence-stop");
    ok(&o.warden(&[
        "create",
        "vf",
        "--start",
        "--volume",
        &volume_arg(o.vol.path(), "/mnt/v", ""),
    ]));
    ok(&o.warden(&["exec", "vf", "--", "sh", "-c", &overwrite_base("/mnt/v")]));
    let out = o.warden(&["stop", "vf"]);
    ok(&out);
    o.assert_held_back(&stderr(&out));
    let _ = o.warden(&["rm", "-f", "vf"]);
}

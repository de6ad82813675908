//! Shared set-up: a VM's config from a spec, as the backend makes it, and
//! a command run in a guest over its channel.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use warden_vm::machine::{Accel, Config, Machine};
use warden_vm::wire::{Ended, Frame, Kind, Spawn};

/// The guest init built beside the test binary's `warden`, named for the
/// initramfs (the library finds it beside the running executable, which
/// here is the test), in the VM settings this test binary installs from
/// its environment, as a binary's `main` does.
pub fn use_built_guest_init() -> bool {
    let init =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/warden-guest-init");
    if !init.is_file() {
        eprintln!(
            "skipped: {} is not built (cargo build -p warden-cli)",
            init.display()
        );
        return false;
    }
    // Installed once for the whole binary; a second call changes nothing.
    warden_vm::Settings::from_vars(|name| match name {
        "WARDEN_GUEST_INIT" => Some(init.clone().into_os_string()),
        _ => std::env::var_os(name),
    })
    .install();
    true
}

/// A plain VM's config (no workspace, no network: the backend's defaults
/// for `run --isolation vm`), in its own run directory `id`, or `None`
/// (with the reason printed) where this host cannot boot one.
pub fn config(id: &str) -> Option<Config> {
    if !use_built_guest_init() {
        return None;
    }
    let Some(vmm) = warden_vm::machine::find_vmm() else {
        eprintln!("skipped: no qemu-system-x86_64 on this host");
        return None;
    };
    let kernel = match warden_vm::kernel::find() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("skipped: no guest kernel ({e})");
            return None;
        }
    };
    let dir = warden_vm::kernel::vm_dir().unwrap();
    let initramfs = warden_vm::image::initramfs(&kernel, &dir.join("cache"), None).unwrap();
    let mut cfg = Config {
        vmm,
        kernel: kernel.image.clone(),
        initramfs,
        accel: Accel::Tcg,
        memory_mib: 512,
        cpus: 1,
        workspace: None,
        workspace_id: None,
        workspace_held: None,
        trust: None,
        params: vec![
            ("nofile".into(), "1024".into()),
            ("tmp".into(), (64u64 << 20).to_string()),
            ("hostname".into(), id.into()),
            ("workspace".into(), "0".into()),
        ],
        shares: Vec::new(),
        rootfs: None,
        rootfs_id: None,
        root_image: None,
        run_dir: dir
            .join("run")
            .join(format!("{id}-{}-0", std::process::id())),
        cgroup: None,
        cpu_budget: None,
        net: None,
        netns: None,
        workspace_fs: Default::default(),
        start: Default::default(),
        ram: Default::default(),
    };
    cfg.accel = warden_vm::accel::choose(&cfg, &dir.join("cache"), &kernel.release).accel;
    Some(cfg)
}

pub const BOOT: Duration = Duration::from_secs(120);

/// Start a process in the guest (request `id`), not waiting for it.
pub fn spawn(m: &Machine, id: u64, script: &str) {
    let spawn = Spawn {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: "/".into(),
        tty: false,
        winsize: None,
    };
    let mut w = m.stream.try_clone().unwrap();
    Frame::json(Kind::Spawn, id, &spawn)
        .write_to(&mut w)
        .unwrap();
    Frame::new(Kind::StdinEof, id, Vec::new())
        .write_to(&mut w)
        .unwrap();
    w.flush().unwrap();
}

/// Run `script` in the guest; its stdout and how it ended.
pub fn run(m: &Machine, id: u64, script: &str) -> (String, Ended) {
    spawn(m, id, script);
    let mut r = m.stream.try_clone().unwrap();
    r.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut out = Vec::new();
    loop {
        let f = Frame::read_from(&mut r)
            .unwrap()
            .expect("the guest went away");
        if f.id != id {
            continue;
        }
        match f.kind {
            Kind::Stdout => out.extend_from_slice(&f.payload),
            Kind::Ended => return (String::from_utf8_lossy(&out).into(), f.parse().unwrap()),
            Kind::Failed => panic!("the guest could not start {script}"),
            _ => {}
        }
    }
}

/// `cfg` with a `--rootfs` tree holding only a static busybox, as a
/// read-only image (no 9p share at all), or `None` (the reason printed)
/// where the host has no busybox or no image tool.
pub fn with_busybox_root(mut cfg: Config, tree: &std::path::Path) -> Option<Config> {
    use warden_vm::rootimage;
    let busybox = std::path::Path::new("/usr/bin/busybox");
    let static_bin = std::fs::read(busybox).is_ok_and(|b| is_static_elf(&b));
    if !static_bin {
        eprintln!("skipped: no static /usr/bin/busybox on this host");
        return None;
    }
    let kernel = warden_vm::kernel::find().ok()?;
    let Some(tool) = rootimage::find_tool(Some(&kernel.modules)) else {
        eprintln!("skipped: no mkfs.erofs or mkfs.ext4 on this host");
        return None;
    };
    std::fs::create_dir_all(tree.join("bin")).unwrap();
    std::fs::create_dir_all(tree.join("usr/bin")).unwrap();
    std::fs::copy(busybox, tree.join("bin/busybox")).unwrap();
    for app in [
        "sh", "cat", "sleep", "echo", "head", "od", "tr", "hostname", "date",
    ] {
        let _ = std::os::unix::fs::symlink("busybox", tree.join("bin").join(app));
    }
    let cache = warden_vm::kernel::vm_dir().unwrap().join("cache");
    let manifest = rootimage::manifest(tree, tool.format).unwrap();
    let (image, _) = rootimage::image(&manifest, &tool, &cache).unwrap();
    cfg.initramfs = warden_vm::image::initramfs(&kernel, &cache, Some(tool.format)).unwrap();
    cfg.root_image = Some(image);
    cfg.params.push(("rootfs".into(), "1".into()));
    cfg.params
        .push(("root".into(), tool.format.as_str().into()));
    // As the backend does: a VM that can be saved keeps its RAM in a file.
    cfg.ram = warden_vm::pause::ram_for(&cfg);
    Some(cfg)
}

/// A 64-bit ELF without a program interpreter (`PT_INTERP`): it runs in a
/// tree that has no dynamic loader.
fn is_static_elf(b: &[u8]) -> bool {
    let u16_at = |o: usize| {
        b.get(o..o + 2)
            .map(|x| u16::from_le_bytes([x[0], x[1]]) as usize)
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|x| u64::from_le_bytes(x.try_into().unwrap_or_default()) as usize)
    };
    if b.get(..5) != Some(b"\x7fELF\x02") {
        return false;
    }
    let (Some(phoff), Some(phsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..phnum).all(|i| {
        let at = phoff + i * phsize;
        b.get(at..at + 4).is_some_and(|t| t != [3, 0, 0, 0])
    })
}

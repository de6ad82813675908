//! The VMM's command line: the guest kernel's, and QEMU's argv built
//! from a [`Config`] and what the VMM was handed as descriptors.

use super::files::{file_share_dir, HandedFiles};
use super::*;

/// The host CPU's clock rate in kHz, from `/proc/cpuinfo` (2 GHz when it
/// does not say).
pub(super) fn host_tsc_khz() -> u64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map(|mhz| (mhz * 1000.0) as u64)
        .filter(|k| *k > 0)
        .unwrap_or(2_000_000)
}

/// What the VMM is handed as descriptors: each names `/proc/self/fd/N`.
pub(super) struct Handed {
    pub(super) channel: i32,
    /// The VMM's end of its control channel (QMP).
    pub(super) control: i32,
    /// The snapshot a restore reads.
    pub(super) incoming: Option<i32>,
    pub(super) console: String,
    pub(super) kernel: String,
    pub(super) initramfs: String,
    pub(super) tap: Option<i32>,
    pub(super) trust: Option<String>,
    pub(super) workspace: Option<String>,
    /// Each bind's tag, writability and descriptor path.
    pub(super) shares: Vec<(String, bool, String)>,
    pub(super) rootfs: Option<String>,
    pub(super) root_image: Option<String>,
    /// The VMM's end of virtiofsd's socket, when virtio-fs serves the
    /// workspace.
    pub(super) virtiofs: Option<i32>,
    /// The guest's RAM file, when it has one.
    pub(super) ram: Option<String>,
}

impl Handed {
    /// Let `command` inherit the VMM's descriptors: the guest's channel
    /// (`theirs`), the opened `files`, the config's TAP and virtiofsd's
    /// socket (`served`).
    pub(super) fn inherit(
        command: &mut Command,
        cfg: &Config,
        (theirs, control): (&std::os::fd::OwnedFd, &std::os::fd::OwnedFd),
        files: &HandedFiles,
        served: Option<&crate::fsd::Served>,
    ) -> Handed {
        let fd = |c: &mut Command, f: &std::os::fd::OwnedFd| {
            format!("/proc/self/fd/{}", warden_jail::vmnet::inherit(c, f))
        };
        Handed {
            channel: warden_jail::vmnet::inherit(command, theirs),
            control: warden_jail::vmnet::inherit(command, control),
            incoming: match &cfg.start {
                Start::Restore(fd) => Some(warden_jail::vmnet::inherit(command, fd)),
                _ => None,
            },
            console: fd(command, &files.console),
            kernel: fd(command, &files.kernel),
            initramfs: fd(command, &files.initramfs),
            tap: cfg
                .net
                .as_deref()
                .map(|fd| warden_jail::vmnet::inherit(command, fd)),
            trust: files.trust.as_ref().map(|t| fd(command, t)),
            workspace: files.workspace.as_ref().map(|w| fd(command, w)),
            shares: cfg
                .shares
                .iter()
                .zip(&files.shares)
                .map(|(s, f)| {
                    let path = match f {
                        Some(f) => fd(command, f),
                        // A single file: the directory of the VMM's own
                        // root that holds it alone.
                        None => file_share_dir(&cfg.run_dir, s)
                            .display()
                            .to_string()
                            .replace(',', ",,"),
                    };
                    (s.tag.clone(), s.writable, path)
                })
                .collect(),
            rootfs: files.rootfs.as_ref().map(|r| fd(command, r)),
            root_image: files.root_image.as_ref().map(|r| fd(command, r)),
            virtiofs: served.map(|s| warden_jail::vmnet::inherit(command, &s.vmm_end)),
            ram: files.ram.as_ref().map(|r| fd(command, r)),
        }
    }
}

impl Config {
    /// The guest kernel's command line.
    fn cmdline(&self, h: &Handed) -> String {
        let mut cmdline =
            String::from("console=ttyS0 quiet loglevel=1 panic=-1 reboot=t rdinit=/init");
        if self.accel == Accel::Tcg {
            // Emulated, the guest cannot calibrate its TSC against a PIT
            // and would wait for a clock forever: tell it the rate (TCG's
            // TSC is the host's) and skip the checks.
            cmdline.push_str(&format!(
                " edd=off tsc=reliable no_timer_check tsc_early_khz={}",
                host_tsc_khz()
            ));
        } else {
            cmdline.push_str(" edd=off");
        }
        if self.start.parked() {
            // The same command line for a template and every copy of it:
            // the sandbox's own settings come through the channel.
            cmdline.push_str(" warden.template=1");
        } else {
            for (k, v) in &self.params {
                cmdline.push_str(&format!(" warden.{k}={v}"));
            }
            if h.virtiofs.is_some() {
                cmdline.push_str(" warden.wsfs=virtiofs");
            }
        }
        cmdline
    }

    pub(super) fn argv(&self, h: &Handed) -> Vec<String> {
        let tap = h.tap;
        let cmdline = self.cmdline(h);
        let (accel, cpu) = match self.accel {
            Accel::Kvm => ("kvm", "host"),
            // A smaller translation cache than QEMU's default (1 GiB, much
            // of it touched): an idle emulated guest holds less host memory.
            Accel::Tcg => ("tcg,tb-size=128", "max"),
        };
        let mut a: Vec<String> = [
            "-M",
            "microvm,x-option-roms=off,rtc=on",
            "-accel",
            accel,
            "-cpu",
            cpu,
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend([
            "-m".into(),
            format!("{}M", self.memory_mib),
            "-smp".into(),
            self.cpus.to_string(),
            "-kernel".into(),
            h.kernel.clone(),
            "-initrd".into(),
            h.initramfs.clone(),
            "-append".into(),
            cmdline,
            "-serial".into(),
            format!("file:{}", h.console),
            "-device".into(),
            "virtio-serial-device".into(),
            "-chardev".into(),
            format!("socket,id=chan,fd={}", h.channel),
            "-device".into(),
            format!("virtserialport,chardev=chan,name={PORT_NAME}"),
            "-chardev".into(),
            format!("socket,id=qmp,fd={}", h.control),
            "-mon".into(),
            "chardev=qmp,mode=control".into(),
        ]);
        if h.incoming.is_some() {
            // The stream is read once the capabilities it was saved with
            // are set over QMP (`Launched::restored`): QEMU 7.2 takes
            // `x-ignore-shared` from nowhere else.
            a.extend(["-incoming".into(), "defer".into()]);
        }
        // The guest's system directories: a --rootfs tree, else the host's
        // /usr (never both), read-only at the host.
        // A --rootfs tree's image is a read-only drive instead (the VMM
        // refuses every write to it, whatever the guest asks).
        let (system, tag) = match &h.rootfs {
            Some(r) => (r.clone(), "root"),
            None => ("/usr".to_string(), "usr"),
        };
        if let Some(img) = &h.root_image {
            a.extend([
                "-drive".into(),
                format!("file={img},if=none,id=root,format=raw,read-only=on"),
                "-device".into(),
                "virtio-blk-device,drive=root".into(),
            ]);
        } else {
            a.extend([
                "-fsdev".into(),
                format!("local,id={tag},path={system},security_model=none,readonly=on"),
                "-device".into(),
                format!("virtio-9p-device,fsdev={tag},mount_tag={tag}"),
            ]);
        }
        for (tag, writable, path) in &h.shares {
            let ro = if *writable { "" } else { ",readonly=on" };
            a.extend([
                "-fsdev".into(),
                format!("local,id={tag},path={path},security_model=none{ro}"),
                "-device".into(),
                format!("virtio-9p-device,fsdev={tag},mount_tag={tag}"),
            ]);
        }
        if let Some(fd) = tap {
            // The guest's one network device: frames go to the TAP in the
            // sandbox's network namespace, never to a network of QEMU's.
            a.extend([
                "-netdev".into(),
                format!("tap,id=net0,fd={fd}"),
                "-device".into(),
                "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56".into(),
            ]);
        } else if matches!(self.start, Start::Park { net: true }) {
            // A template's device, whose back end goes nowhere: each copy
            // gets its own sandbox's TAP behind the same device.
            a.extend([
                "-netdev".into(),
                "hubport,id=net0,hubid=0".into(),
                "-device".into(),
                "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56".into(),
            ]);
        }
        if let Some(dir) = &h.trust {
            a.extend([
                "-fsdev".into(),
                format!("local,id=trust,path={dir},security_model=none,readonly=on"),
                "-device".into(),
                "virtio-9p-device,fsdev=trust,mount_tag=trust".into(),
            ]);
        }
        if let Some(ws) = &self.workspace {
            // The VMM is handed the workspace as a descriptor; its name
            // (QEMU's guest name) says which one it serves, for `ps`.
            a.extend([
                "-name".into(),
                format!(
                    "guest=warden:{}",
                    ws.display().to_string().replace(',', ",,")
                ),
            ]);
        }
        self.memory_and_workspace(h, &mut a);
        a
    }

    /// The guest's memory and its workspace's device: virtio-fs (whose
    /// virtiofsd maps the guest's memory, a shared memfd), else 9p, with
    /// the guest's RAM in a file where it has one (see `crate::ram`).
    fn memory_and_workspace(&self, h: &Handed, a: &mut Vec<String>) {
        if let Some(fd) = h.virtiofs {
            // virtio-fs: virtiofsd maps the guest's memory, so it is a
            // shared memfd rather than QEMU's private anonymous memory.
            let m = a
                .iter()
                .position(|x| x.starts_with("microvm,"))
                .unwrap_or(1);
            a[m].push_str(",memory-backend=mem");
            a.extend([
                // vhost-user serves virtio 1.0 devices only; microvm's
                // virtio-mmio transport is the legacy one by default.
                "-global".into(),
                "virtio-mmio.force-legacy=false".into(),
                "-object".into(),
                format!(
                    "memory-backend-memfd,id=mem,size={}M,share=on",
                    self.memory_mib
                ),
                "-chardev".into(),
                format!("socket,id=fsws,fd={fd}"),
                "-device".into(),
                "vhost-user-fs-device,chardev=fsws,tag=workspace".into(),
            ]);
        } else {
            if let Some(ws) = &h.workspace {
                a.extend([
                    "-fsdev".into(),
                    format!("local,id=ws,path={ws},security_model=none"),
                    "-device".into(),
                    "virtio-9p-device,fsdev=ws,mount_tag=workspace".into(),
                ]);
            }
            if let Some(backend) = h
                .ram
                .as_deref()
                .and_then(|r| self.ram.backend(r, self.memory_mib))
            {
                // The guest's RAM in a file (see `crate::ram`).
                let m = a
                    .iter()
                    .position(|x| x.starts_with("microvm,"))
                    .unwrap_or(1);
                a[m].push_str(",memory-backend=mem");
                a.extend(["-object".into(), backend]);
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    pub(in crate::machine) fn config() -> Config {
        Config {
            vmm: PathBuf::from("/usr/bin/qemu-system-x86_64"),
            kernel: PathBuf::from("/k"),
            initramfs: PathBuf::from("/i"),
            accel: Accel::Tcg,
            memory_mib: 256,
            cpus: 1,
            workspace: None,
            workspace_id: None,
            workspace_held: None,
            trust: None,
            params: Vec::new(),
            shares: Vec::new(),
            rootfs: None,
            rootfs_id: None,
            root_image: None,
            run_dir: PathBuf::from("/run-dir"),
            cgroup: None,
            cpu_budget: None,
            net: None,
            netns: None,
            workspace_fs: Default::default(),
            start: Default::default(),
            ram: Default::default(),
        }
    }

    fn handed(shares: Vec<(String, bool, String)>, rootfs: Option<String>) -> Handed {
        Handed {
            channel: 3,
            control: 12,
            incoming: None,
            console: "/proc/self/fd/4".into(),
            kernel: "/proc/self/fd/5".into(),
            initramfs: "/proc/self/fd/6".into(),
            tap: None,
            trust: None,
            workspace: None,
            shares,
            rootfs,
            root_image: None,
            virtiofs: None,
            ram: None,
        }
    }

    fn fsdevs(c: &Config, h: &Handed) -> Vec<String> {
        let a = c.argv(h);
        a.windows(2)
            .filter(|w| w[0] == "-fsdev")
            .map(|w| w[1].clone())
            .collect()
    }

    #[test]
    fn a_read_only_bind_is_exported_read_only_and_a_writable_one_is_not() {
        let h = handed(
            vec![
                ("b0".into(), false, "/proc/self/fd/7".into()),
                ("b1".into(), true, "/proc/self/fd/8".into()),
            ],
            None,
        );
        let f = fsdevs(&config(), &h);
        assert!(
            f.contains(&"local,id=b0,path=/proc/self/fd/7,security_model=none,readonly=on".into())
        );
        assert!(f.contains(&"local,id=b1,path=/proc/self/fd/8,security_model=none".into()));
    }

    #[test]
    fn a_workspace_over_virtiofs_is_no_9p_share_and_the_guests_memory_is_shared() {
        let mut c = config();
        c.workspace = Some(PathBuf::from("/ws"));
        let mut h = handed(Vec::new(), None);
        h.workspace = Some("/proc/self/fd/10".into());
        h.virtiofs = Some(11);
        let a = c.argv(&h);
        assert!(!fsdevs(&c, &h).iter().any(|d| d.contains("id=ws")), "{a:?}");
        assert!(a.contains(&"socket,id=fsws,fd=11".to_string()), "{a:?}");
        assert!(a.contains(&"vhost-user-fs-device,chardev=fsws,tag=workspace".to_string()));
        assert!(a.contains(&"memory-backend-memfd,id=mem,size=256M,share=on".to_string()));
        assert!(a
            .iter()
            .any(|x| x.starts_with("microvm,") && x.ends_with(",memory-backend=mem")));
        assert!(a.contains(&"virtio-mmio.force-legacy=false".to_string()));
        assert!(a.iter().any(|x| x.contains(" warden.wsfs=virtiofs")));
        h.virtiofs = None;
        assert!(fsdevs(&c, &h).iter().any(|d| d.contains("id=ws")));
        assert!(!c.argv(&h).iter().any(|x| x.contains("memory-backend")));
    }

    #[test]
    fn a_vms_own_ram_file_is_mapped_shared_a_base_privately_and_virtio_fs_keeps_its_memfd() {
        let objects = |c: &Config, h: &Handed| -> Vec<String> {
            c.argv(h)
                .windows(2)
                .filter(|w| w[0] == "-object")
                .map(|w| w[1].clone())
                .collect()
        };
        let mut c = config();
        let mut h = handed(Vec::new(), None);
        h.ram = Some("/proc/self/fd/15".into());
        c.ram = crate::ram::Ram::Shared(PathBuf::from("/run-dir/memory.ram"));
        assert_eq!(
            objects(&c, &h),
            ["memory-backend-file,id=mem,size=256M,mem-path=/proc/self/fd/15,share=on"]
        );
        assert!(c
            .argv(&h)
            .iter()
            .any(|x| x.starts_with("microvm,") && x.ends_with(",memory-backend=mem")));
        // A VM that cannot be saved, on its own copy of a template's base:
        // the guest's writes land in the VMM's own pages.
        c.ram = crate::ram::Ram::Private(PathBuf::from("/run-dir/memory.ram"));
        assert_eq!(
            objects(&c, &h),
            ["memory-backend-file,id=mem,size=256M,mem-path=/proc/self/fd/15,share=off"]
        );
        // virtio-fs: virtiofsd maps the memfd; no file of the VM's.
        h.virtiofs = Some(11);
        assert_eq!(
            objects(&c, &h),
            ["memory-backend-memfd,id=mem,size=256M,share=on"]
        );
    }

    #[test]
    fn a_rootfs_is_exported_read_only_instead_of_the_hosts_usr() {
        let h = handed(Vec::new(), Some("/proc/self/fd/9".into()));
        let f = fsdevs(&config(), &h);
        assert!(f.contains(
            &"local,id=root,path=/proc/self/fd/9,security_model=none,readonly=on".into()
        ));
        assert!(!f.iter().any(|d| d.contains("path=/usr")), "{f:?}");
    }

    #[test]
    fn a_root_image_is_a_read_only_drive_and_no_root_share_is_exported() {
        let mut h = handed(Vec::new(), None);
        h.root_image = Some("/proc/self/fd/10".into());
        let a = config().argv(&h);
        let drives: Vec<&String> = a
            .windows(2)
            .filter(|w| w[0] == "-drive")
            .map(|w| &w[1])
            .collect();
        assert_eq!(
            drives,
            ["file=/proc/self/fd/10,if=none,id=root,format=raw,read-only=on"]
        );
        assert!(a.contains(&"virtio-blk-device,drive=root".to_string()));
        assert!(fsdevs(&config(), &h).is_empty(), "{a:?}");
    }

    #[test]
    fn a_template_and_its_copies_share_one_command_line_that_holds_no_sandbox_setting() {
        let mut c = config();
        c.params = vec![("hostname".into(), "secret-name".into())];
        let cold = c.cmdline(&handed(Vec::new(), None));
        assert!(cold.contains(" warden.hostname=secret-name"), "{cold}");
        c.start = Start::Park { net: true };
        let h = handed(Vec::new(), None);
        let parked = c.argv(&h);
        let line = c.cmdline(&h);
        assert!(line.ends_with(" warden.template=1"), "{line}");
        assert!(!line.contains("secret-name"), "{line}");
        // The network device is there, its back end going nowhere.
        assert!(parked.contains(&"hubport,id=net0,hubid=0".to_string()));
        assert!(parked.contains(&"socket,id=qmp,fd=12".to_string()));
        let fd = std::sync::Arc::new(std::os::fd::OwnedFd::from(
            std::fs::File::open("/dev/null").unwrap(),
        ));
        c.start = Start::Restore(fd);
        let mut h = handed(Vec::new(), None);
        h.incoming = Some(13);
        let restored = c.argv(&h);
        assert_eq!(c.cmdline(&h), line);
        assert!(restored
            .windows(2)
            .any(|w| w[0] == "-incoming" && w[1] == "defer"));
        assert!(!restored.iter().any(|a| a.contains("hubport")));
    }

    #[test]
    fn the_vmm_is_handed_every_socket_as_a_descriptor_whatever_the_run_directorys_length() {
        // A socket's path holds 107 bytes: QEMU never gets one by path, so
        // a state directory of any length starts a VM.
        let mut c = config();
        c.run_dir = PathBuf::from(format!("/{}", "d".repeat(300)));
        let mut h = handed(Vec::new(), None);
        h.virtiofs = Some(14);
        let a = c.argv(&h);
        let chardevs: Vec<&String> = a
            .windows(2)
            .filter(|w| w[0] == "-chardev")
            .map(|w| &w[1])
            .collect();
        assert_eq!(chardevs.len(), 3, "{a:?}");
        for dev in chardevs {
            assert!(dev.starts_with("socket,") && dev.contains(",fd="), "{dev}");
            assert!(!dev.contains("path="), "{dev}");
        }
        assert!(!a.iter().any(|x| x.contains("ddddd")), "{a:?}");
    }
}

//! What the guest's initramfs carries from the host, by name: the kernel
//! modules its init loads and the files and directories of the host's
//! `/etc` it copies. [`crate::image`] builds the archive from these lists
//! and [`crate::initmemo`] names an archive by the identity of the same
//! files; neither list is ever read from a sandbox's input.

/// The modules the guest init loads, in order (dependencies first). A
/// module the kernel has built in is simply absent from its package.
pub const MODULES: &[&str] = &[
    "kernel/drivers/virtio/virtio_ring.ko",
    "kernel/drivers/virtio/virtio.ko",
    "kernel/drivers/virtio/virtio_mmio.ko",
    "kernel/drivers/char/virtio_console.ko",
    "kernel/net/9p/9pnet.ko",
    "kernel/net/9p/9pnet_virtio.ko",
    "kernel/fs/netfs/netfs.ko",
    "kernel/fs/fscache/fscache.ko",
    "kernel/fs/9p/9p.ko",
    "kernel/fs/fuse/fuse.ko",
    "kernel/fs/fuse/virtiofs.ko",
    "kernel/net/core/failover.ko",
    "kernel/drivers/net/net_failover.ko",
    "kernel/drivers/net/virtio_net.ko",
];

/// Files of the host's `/etc` copied into the guest (when present).
pub(crate) const ETC_FILES: &[&str] = &[
    "passwd",
    "group",
    "hosts",
    "nsswitch.conf",
    "ld.so.cache",
    "ld.so.conf",
    "localtime",
    "profile",
    "bash.bashrc",
    "environment",
    "os-release",
    "debian_version",
    "mime.types",
    // The system's trust roots (public certificates): TLS clients in the
    // guest verify servers as the host's do.
    "ssl/certs/ca-certificates.crt",
    "ssl/openssl.cnf",
];

/// Directories of the host's `/etc` whose symbolic links are copied
/// (Debian's `alternatives`: `/usr/bin/awk -> /etc/alternatives/awk`).
pub(crate) const ETC_LINK_DIRS: &[&str] = &["alternatives"];

/// Directories of the host's `/etc` copied whole (their files and links,
/// and those of their subdirectories): the packaged, non-secret
/// configuration a desktop's programs read (the `chromium` launcher sources
/// `/etc/chromium.d/*` and fails without it; fontconfig reads
/// `/etc/fonts`).
pub(crate) const ETC_DIRS: &[&str] = &["chromium.d", "chromium", "fonts"];

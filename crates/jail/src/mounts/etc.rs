//! The files warden writes for the sandbox and binds read-only into its
//! root: `/etc/resolv.conf` naming warden's resolver, `/etc/hosts` with
//! the sandbox's own name, `/etc/passwd` and `/etc/group` with its user,
//! and the secret proxy's trust files.
//!
//! Each is staged in the scratch tmpfs and bound over the tree's own file;
//! it never writes into a host or image tree, and never follows a link of
//! the tree to find where a file goes.

use super::inside::{self, Kind, Root};
use super::ops::{bind, mount_on, set_attr_inside};
use super::{MountError, UserEntry};
use crate::sys;
use nix::mount::MsFlags;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Stage the secret proxy's trust files and mount them read-only at
/// [`warden_policy::CA_BUNDLE_PATH`] and [`warden_policy::CA_CERT_PATH`],
/// and the bundle over the system's own bundle where the root has one (for
/// programs that read no variable). A prepared root tree gets a tmpfs on
/// its `/run` rather than a directory written into the host's copy.
pub(super) fn provide_trust(
    root: &Root,
    trust: crate::secrets::TrustFiles,
    prepared_root: bool,
) -> Result<(), MountError> {
    use std::os::unix::fs::FileExt;
    let read_all = |fd: OwnedFd, what: &str| -> Result<Vec<u8>, MountError> {
        let f = std::fs::File::from(fd);
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n =
                f.read_at(&mut chunk, out.len() as u64)
                    .map_err(|source| MountError::Create {
                        path: PathBuf::from(what),
                        source,
                    })?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&chunk[..n]);
        }
    };
    let files = [
        (
            read_all(trust.bundle, warden_policy::CA_BUNDLE_PATH)?,
            Path::new("/.ca-bundle.crt"),
            Path::new(warden_policy::CA_BUNDLE_PATH),
        ),
        (
            read_all(trust.ca, warden_policy::CA_CERT_PATH)?,
            Path::new("/.ca.crt"),
            Path::new(warden_policy::CA_CERT_PATH),
        ),
    ];
    if prepared_root {
        let run = root
            .find(Path::new("/run"))?
            .filter(|spot| spot.file_type() == Some(rustix::fs::FileType::Directory))
            .ok_or_else(|| MountError::MountPoint {
                path: PathBuf::from("/run"),
                source: std::io::Error::other(
                    "the prepared root tree has no /run directory, where warden puts the trust files of `secrets`",
                ),
            })?;
        mount_on(
            Some("tmpfs"),
            &run,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("size=1m,mode=0755"),
            "a tmpfs for /run",
        )?;
    }
    for (content, staged, inside) in &files {
        std::fs::write(staged, content).map_err(|source| MountError::Create {
            path: staged.to_path_buf(),
            source,
        })?;
        bind(root, staged, inside, false)?;
    }
    let system = Path::new(crate::secrets::HOST_BUNDLE);
    if root.entry(system)? == Some(rustix::fs::FileType::RegularFile) {
        bind(root, files[0].1, system, false)?;
    }
    Ok(())
}

/// Put warden's resolver in the sandbox's `/etc/resolv.conf`: over the
/// host's file, or, where that is a link into a directory the sandbox does
/// not have (`/run/systemd/resolve/...`), at the link's target, created in
/// the sandbox's own root.
pub(super) fn provide_resolv_conf(root: &Root, content: &str) -> Result<(), MountError> {
    let staged = Path::new("/.resolv.conf");
    std::fs::write(staged, content).map_err(|source| MountError::Create {
        path: staged.to_path_buf(),
        source,
    })?;
    let etc_entry = Path::new("/etc/resolv.conf");
    // The link's text is the tree's (an image's): it names a place inside
    // the new root, its `..` stopping at that root as in the sandbox, and
    // that place is made beneath the root, never through another link.
    let target = match root.entry(etc_entry)? {
        Some(rustix::fs::FileType::Symlink) => {
            inside::link_target(Path::new("/etc"), &root.read_link(etc_entry)?)
        }
        _ => etc_entry.to_path_buf(),
    };
    let spot = root.make(&target, Kind::File)?;
    mount_on(
        Some(&staged.to_string_lossy()),
        &spot,
        None,
        MsFlags::MS_BIND,
        None,
        "warden's resolv.conf",
    )?;
    set_attr_inside(
        root,
        &target,
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        false,
    )
}

/// The sandbox's `/etc/hosts`: loopback names and its own hostname, bound
/// read-only over the tree's file (the host's entries are the host's; with
/// no route out the sandbox has no use for them, and with egress every
/// other name goes to warden's resolver). A hostname that is not a plain
/// DNS name gets no line.
pub(super) fn provide_hosts(root: &Root, hostname: &str) -> Result<(), MountError> {
    let plain = !hostname.is_empty()
        && hostname.len() <= 253
        && hostname
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    let mut text =
        String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    if plain && hostname != "localhost" {
        text.push_str(&format!("127.0.1.1\t{hostname}\n::1\t{hostname}\n"));
    }
    let staged = Path::new("/.hosts");
    std::fs::write(staged, text).map_err(|source| MountError::Create {
        path: staged.to_path_buf(),
        source,
    })?;
    let target = Path::new("/etc/hosts");
    let spot = match root.entry(target)? {
        Some(rustix::fs::FileType::RegularFile) => root.again(target)?,
        // A tree with no file there (or a link, which a bind would
        // follow): the tree's own is left as it is.
        Some(_) => return Ok(()),
        None => match root.make(target, Kind::File) {
            Ok(spot) => spot,
            Err(MountError::Link { path }) => return Err(MountError::Link { path }),
            Err(_) => return Ok(()),
        },
    };
    mount_on(
        Some(&staged.to_string_lossy()),
        &spot,
        None,
        MsFlags::MS_BIND,
        None,
        "warden's hosts file",
    )?;
    set_attr_inside(
        root,
        target,
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        false,
    )
}

/// The root tree's `/etc/passwd` and `/etc/group` with the sandbox's
/// user and group under their given name (any entry of that name or ID
/// taken out), bound read-only over the tree's own: `whoami`, `id`, `ls
/// -l` and a shell's prompt say the name, and the home is the sandbox's.
pub(super) fn provide_user(root: &Root, user: &UserEntry, home: &Path) -> Result<(), MountError> {
    let shell = if root.seen(Path::new("/bin/bash")) {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    let passwd = format!(
        "{}:x:{}:{}:{}:{}:{shell}\n",
        user.name,
        user.uid,
        user.gid,
        user.name,
        home.display()
    );
    let group = format!("{}:x:{}:\n", user.name, user.gid);
    for (file, entry, id) in [("passwd", passwd, user.uid), ("group", group, user.gid)] {
        let inside = Path::new("/etc").join(file);
        // Only a regular file of the tree is read, never through a link.
        let regular = root.entry(&inside)? == Some(rustix::fs::FileType::RegularFile);
        let mut content = root
            .read(&inside)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        content = without_entry(&content, &user.name, id);
        content.push_str(&entry);
        let staged = Path::new("/").join(format!(".{file}"));
        std::fs::write(&staged, content).map_err(|source| MountError::Create {
            path: staged.clone(),
            source,
        })?;
        if regular {
            bind(root, &staged, &inside, false)?;
        }
    }
    Ok(())
}

/// The lines of a passwd or group file but those naming `name` or the ID
/// `id` (its third field).
fn without_entry(content: &str, name: &str, id: u32) -> String {
    let id = id.to_string();
    let mut out = String::new();
    for line in content.lines() {
        let mut fields = line.split(':');
        let (n, i) = (fields.next(), fields.nth(1));
        if n == Some(name) || i == Some(id.as_str()) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandboxs_user_replaces_any_entry_of_its_name_or_id() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/sh\nbin:x:2:2::/bin:/usr/sbin/nologin\n";
        assert_eq!(
            without_entry(passwd, "user", 0),
            "bin:x:2:2::/bin:/usr/sbin/nologin\n"
        );
        assert_eq!(without_entry("", "user", 0), "");
    }
}

//! A `--rootfs` tree in a VM as a read-only block image: the guest boots
//! from it (read-only, `nosuid`, nothing of the host's `/usr`), the image
//! is built once per tree and reused, a changed tree gets a new one, a
//! half-written image is never used and is swept, and the host-side
//! attacks on the build (a link in the tree to a host secret, a tree named
//! through a link, a file the builder may not read) copy nothing of the
//! host's into the image.
//!
//! Booting tests are `#[ignore]`d (slow under emulation) and run with
//! `-- --ignored`; the others stop before the boot (the VMM is
//! `/bin/false`) and run by default. Each skips, saying why, when no VM
//! can start here or the host has no image tool.

use crate::common::vm::*;
use crate::common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The image a run built, as its "built" line names it.
fn built_image(stderr: &str) -> Option<PathBuf> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("warden: built the guest's root image "))?;
    let rest = line.strip_prefix("warden: built the guest's root image ")?;
    Some(PathBuf::from(rest.split(" (").next()?))
}

fn building(stderr: &str) -> bool {
    stderr.contains("building the guest's read-only root image")
}

/// Whether the host can build images (`mkfs.ext4` or `mkfs.erofs`).
fn tool_present() -> bool {
    let found = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().any(|d| {
        Path::new(d).join("mkfs.ext4").is_file() || Path::new(d).join("mkfs.erofs").is_file()
    });
    if !found {
        skip("neither mkfs.ext4 (e2fsprogs) nor mkfs.erofs (erofs-utils) is installed");
    }
    found
}

/// Everything before the boot, with a VMM that exits at once.
fn prepare_only(state: &Path, tree: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut e = vec![("WARDEN_VMM", "/bin/false"), ("WARDEN_VM_ACCEL", "tcg")];
    e.extend_from_slice(env);
    vm_warden_env(
        state,
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "--rootfs",
            tree.to_str().unwrap(),
            "--",
            "/bin/busybox",
            "true",
        ],
        None,
        &e,
    )
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
#[ignore = "boots VMs (slow under emulation): run with -- --ignored"]
fn a_rootfs_guest_boots_from_a_read_only_image_built_once_per_tree() {
    let Some(_) = guest_release() else {
        return;
    };
    if !tool_present() {
        return;
    }
    let Some(root) = busybox_rootfs() else {
        return;
    };
    // A tree extracted by a user (1234) whose files only that user may
    // read: the guest's processes run as the workspace's owner and read
    // their own files, as the host's owners are kept in the image.
    let private = root.path().join("usr/share/private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("mine"), "owner-readable").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(private.join("mine"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let ws = TempDir::new("vm-rootimage-ws");
    if is_root() {
        // The whole tree is the user's, as a rootless extraction leaves it.
        let out = std::process::Command::new("chown")
            .args(["-hR", "1234:1234", root.str(), ws.str()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let state = TempDir::new("vm-rootimage");
    let boot = || {
        vm_warden(
            state.path(),
            &[
                "run",
                "--isolation",
                "vm",
                "--no-tty",
                "--rootfs",
                root.str(),
                "-w",
                ws.str(),
                "--env",
                "PATH=/bin",
                "--",
                "/bin/busybox",
                "sh",
                "-c",
                "cat /proc/mounts; cat /etc/os-release; \
                 touch /usr/x 2>&1; touch /x 2>&1; ls /usr/lib 2>&1; \
                 cat /usr/share/private/mine; echo; true",
            ],
            None,
        )
    };
    let o = boot();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(code(&o), 0, "stdout: {out}\nstderr: {err}");
    assert!(building(&err), "no image was built: {err}");
    let image = built_image(&err).expect("the built image is named");
    assert!(image.is_file(), "{image:?}");
    // The guest's system directories come from the block device,
    // read-only, nosuid (a setuid file of the tree gives nothing), nodev;
    // no 9p share of the tree.
    let usr = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("/usr"))
        .unwrap_or("");
    assert!(usr.starts_with("/dev/vda /usr "), "{out}");
    let opts: Vec<&str> = usr
        .split_whitespace()
        .nth(3)
        .unwrap_or("")
        .split(',')
        .collect();
    for want in ["ro", "nosuid", "nodev"] {
        assert!(opts.contains(&want), "/usr is not {want}: {usr}");
    }
    assert!(!out.lines().any(|l| l.starts_with("root ")), "{out}");
    assert!(!out.contains("lost+found"), "{out}");
    assert!(out.contains("NAME=warden-test-rootfs"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(
        out.contains("touch: /x:"),
        "a write to / did not fail: {out}"
    );
    assert!(
        out.contains("No such file"),
        "the host's /usr/lib shows: {out}"
    );
    assert!(out.contains("owner-readable"), "{out}");
    assert!(!root.path().join("usr/x").exists());
    let ino = std::fs::metadata(&image).unwrap().ino();

    // The same tree again: the cached image, not a new build.
    let o = boot();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(code(&o), 0, "stdout: {out}\nstderr: {err}");
    assert!(!building(&err), "the unchanged tree was built again: {err}");
    assert_eq!(std::fs::metadata(&image).unwrap().ino(), ino);
    assert!(out.contains("owner-readable"), "{out}");

    // A changed tree: a new image, which the guest sees.
    std::fs::write(root.path().join("etc/os-release"), "NAME=changed\n").unwrap();
    let o = boot();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(code(&o), 0, "stdout: {out}\nstderr: {err}");
    let second = built_image(&err).expect("the changed tree was not built again");
    assert_ne!(second, image);
    assert!(out.contains("NAME=changed"), "{out}");
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_file(&second);
}

#[test]
fn a_link_in_the_tree_to_a_host_secret_goes_into_the_image_as_a_link_never_its_target() {
    let Some(_) = guest_release() else {
        return;
    };
    if !tool_present() {
        return;
    }
    let Some(root) = busybox_rootfs() else {
        return;
    };
    let secret = unique("rootimage-host-secret");
    let host = TempDir::new("rootimage-host");
    let target = host.path().join("secret");
    std::fs::write(&target, &secret).unwrap();
    let hostdir = host.path().join("dir");
    std::fs::create_dir(&hostdir).unwrap();
    std::fs::write(hostdir.join("inner"), &secret).unwrap();
    // Absolute and relative links out of the tree, to a file and to a
    // directory.
    std::os::unix::fs::symlink(&target, root.path().join("etc/passwd")).unwrap();
    std::os::unix::fs::symlink(&hostdir, root.path().join("usr/share")).unwrap();
    let up = "../".repeat(root.path().components().count() + 2);
    std::os::unix::fs::symlink(
        format!("{up}{}", target.display()),
        root.path().join("etc/shadow"),
    )
    .unwrap();
    let state = TempDir::new("rootimage-link");
    let o = prepare_only(state.path(), root.path(), &[]);
    let err = stderr(&o);
    let image = built_image(&err).unwrap_or_else(|| panic!("no image was built: {err}"));
    let bytes = std::fs::read(&image).unwrap();
    let _ = std::fs::remove_file(&image);
    assert!(
        contains(&bytes, target.to_str().unwrap().as_bytes()),
        "the link itself is not in the image"
    );
    assert!(
        !contains(&bytes, secret.as_bytes()),
        "the host file a link in the tree names was copied into the image"
    );

    // The tree itself named through a link: refused before anything is built.
    let link = host.path().join("rootlink");
    std::os::unix::fs::symlink(root.path(), &link).unwrap();
    let o = prepare_only(state.path(), &link, &[]);
    assert_eq!(code(&o), 125, "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    assert!(!building(&stderr(&o)), "{}", stderr(&o));
}

#[test]
fn a_half_written_root_image_of_a_dead_builder_is_never_used_and_is_swept() {
    let Some(_) = guest_release() else {
        return;
    };
    if !tool_present() {
        return;
    }
    let Some(root) = busybox_rootfs() else {
        return;
    };
    let state = TempDir::new("rootimage-half");
    let o = prepare_only(state.path(), root.path(), &[]);
    let image =
        built_image(&stderr(&o)).unwrap_or_else(|| panic!("no image was built: {}", stderr(&o)));
    // A builder killed half-way left its temporary file, and no image.
    let name = image.file_name().unwrap().to_str().unwrap().to_string();
    let half = image.with_file_name(format!(".{name}.999999999.0"));
    std::fs::rename(&image, &half).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&half)
        .unwrap()
        .set_len(4096)
        .unwrap();
    // An image of another tree that nothing used for two hours.
    let old = image.with_file_name(format!("rootfs-{}.ext4", unique("old")));
    std::fs::write(&old, "an old image").unwrap();
    std::fs::File::options()
        .append(true)
        .open(&old)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(7200))
        .unwrap();
    let o = prepare_only(state.path(), root.path(), &[]);
    let err = stderr(&o);
    let (half_kept, old_kept) = (half.exists(), old.exists());
    let _ = std::fs::remove_file(&half);
    let _ = std::fs::remove_file(&old);
    assert!(building(&err), "the half image was taken as built: {err}");
    let rebuilt = built_image(&err).unwrap();
    assert_eq!(rebuilt, image);
    assert!(std::fs::metadata(&rebuilt).unwrap().len() > 4096);
    let _ = std::fs::remove_file(&rebuilt);
    assert!(!half_kept, "a dead builder's half image stayed");
    assert!(!old_kept, "a root image unused for two hours stayed");
}

#[test]
fn a_tree_with_a_file_the_builder_cannot_read_is_refused_naming_it() {
    let Some(_) = guest_release() else {
        return;
    };
    if !tool_present() {
        return;
    }
    let Some(root) = busybox_rootfs() else {
        return;
    };
    let hidden = root.path().join("etc/unreadable");
    std::fs::write(&hidden, "x").unwrap();
    // No one's read bit: the builder runs without capabilities, so not
    // even root's reads override it.
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o000)).unwrap();
    let state = TempDir::new("rootimage-unreadable");
    let o = prepare_only(state.path(), root.path(), &[]);
    let err = stderr(&o);
    assert_eq!(code(&o), 125, "{err}");
    assert!(err.contains(hidden.to_str().unwrap()), "{err}");
    assert!(err.contains("cannot be read"), "{err}");
    assert!(!building(&err), "{err}");
}

#[test]
fn without_an_image_tool_the_tree_is_shared_and_the_run_says_it_is_degraded() {
    let Some(_) = guest_release() else {
        return;
    };
    let Some(root) = busybox_rootfs() else {
        return;
    };
    let state = TempDir::new("rootimage-notool");
    let none = [("WARDEN_TEST_VM_TOOLS", "/nonexistent")];
    let o = prepare_only(state.path(), root.path(), &none);
    let err = stderr(&o);
    assert!(err.contains("DEGRADED vm root image"), "{err}");
    assert!(!building(&err), "{err}");
    // Asked for an image, with no tool: refused, not silently shared.
    let o = prepare_only(
        state.path(),
        root.path(),
        &[none[0], ("WARDEN_VM_ROOT", "image")],
    );
    assert_eq!(code(&o), 125, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("WARDEN_VM_ROOT=image"),
        "{}",
        stderr(&o)
    );
    // Asked for the share: no image, and nothing said degraded.
    let o = prepare_only(state.path(), root.path(), &[("WARDEN_VM_ROOT", "share")]);
    assert!(!building(&stderr(&o)), "{}", stderr(&o));
    assert!(!stderr(&o).contains("DEGRADED vm root image"));
}

#[test]
fn an_image_tool_that_reads_outside_the_tree_copies_nothing_of_the_hosts() {
    let Some(_) = guest_release() else {
        return;
    };
    let Some(root) = busybox_rootfs() else {
        return;
    };
    // A tool tricked into following a link out of the tree (a file of
    // the tree swapped for a link while it runs): it reads a host file
    // and writes what it got into the image. Its jail reads beneath the
    // tree and the system's libraries only.
    let secret = unique("rootimage-tool-secret");
    let host = TempDir::new("rootimage-tool-host");
    let planted = host.path().join("secret");
    std::fs::write(&planted, &secret).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
    let tools = TempDir::new("rootimage-tools");
    let tool = tools.path().join("mkfs.ext4");
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\nfor a; do img=$a; done\necho TOOL-RAN >> \"$img\"\ncat {} >> \"$img\" 2>/dev/null\nexit 0\n",
            planted.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = TempDir::new("rootimage-tool");
    let o = prepare_only(
        state.path(),
        root.path(),
        &[("WARDEN_TEST_VM_TOOLS", tools.str())],
    );
    let err = stderr(&o);
    let image = built_image(&err).unwrap_or_else(|| panic!("no image was built: {err}"));
    let bytes = std::fs::read(&image).unwrap();
    let _ = std::fs::remove_file(&image);
    assert!(contains(&bytes, b"TOOL-RAN"), "the tool did not run: {err}");
    assert!(
        !contains(&bytes, secret.as_bytes()),
        "the image tool read a host file outside the tree into the image"
    );
}

#[test]
fn builders_of_the_same_tree_at_once_leave_one_whole_image() {
    let Some(_) = guest_release() else {
        return;
    };
    if !tool_present() {
        return;
    }
    let Some(root) = busybox_rootfs() else {
        return;
    };
    let tree = root.path().to_path_buf();
    let runs: Vec<_> = (0..3)
        .map(|i| {
            let tree = tree.clone();
            std::thread::spawn(move || {
                let state = TempDir::new(&format!("rootimage-race-{i}"));
                let o = prepare_only(state.path(), &tree, &[]);
                stderr(&o)
            })
        })
        .collect();
    let errs: Vec<String> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let images: Vec<PathBuf> = errs.iter().filter_map(|e| built_image(e)).collect();
    assert!(!images.is_empty(), "no run built the image: {errs:?}");
    let image = &images[0];
    assert!(images.iter().all(|i| i == image), "{images:?}");
    let name = image.file_name().unwrap().to_str().unwrap().to_string();
    let halves: Vec<_> = std::fs::read_dir(image.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!(".{name}"))
        })
        .collect();
    // The image is whole: the tool's own check reads it back.
    let fsck = ["/usr/sbin/e2fsck", "/sbin/e2fsck"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    let checked = match (fsck, image.extension().and_then(|e| e.to_str())) {
        (Some(fsck), Some("ext4")) => Some(
            std::process::Command::new(fsck)
                .args(["-n", "-f"])
                .arg(image)
                .output()
                .unwrap(),
        ),
        _ => None,
    };
    let _ = std::fs::remove_file(image);
    assert!(halves.is_empty(), "half images stayed: {halves:?}");
    if let Some(c) = checked {
        assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stdout));
    }
}

//! A writable bind grants writing, not ownership. Through the idmapped
//! bind that swaps a root-owned `--rw` path's owner with the sandbox's
//! user, the sandbox is that path's owner, and an owner may `chmod`: a
//! sandbox could open root's directory or file to every local user's
//! writes, for good. The sandbox's seccomp filter refuses every `chmod`
//! adding group or other write (one user lives inside; those bits only
//! ever speak to the host's other users), as it refuses set-ID bits; a
//! mode opening nothing to others stays the sandbox's to set. The VM's
//! helpers refuse the same through their own filter (`vm_fs.rs`).

use crate::common::*;
use std::os::unix::fs::PermissionsExt;

#[test]
fn a_sandbox_cannot_open_a_root_owned_rw_directory_or_file_to_other_users() {
    if !is_root() {
        skip("needs root: the --rw paths must be root's");
        return;
    }
    let dir = TempDir::new("share-modes");
    let rwdir = dir.path().join("rwdir");
    std::fs::create_dir(&rwdir).unwrap();
    std::fs::set_permissions(&rwdir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(rwdir.join("data"), "root's data").unwrap();
    std::fs::write(rwdir.join("plain"), "root's other data").unwrap();
    let rwfile = dir.path().join("rwfile.conf");
    std::fs::write(&rwfile, "root's config").unwrap();
    for f in [rwdir.join("data"), rwdir.join("plain"), rwfile.clone()] {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let (d, f) = (rwdir.display(), rwfile.display());
    let script = format!(
        "chmod 0777 {d} || echo REFUSED-DIR; \
         chmod 0666 {d}/data || echo REFUSED-DATA; \
         chmod 0664 {f} || echo REFUSED-FILE; \
         chmod 0755 {d}/plain && echo PLAIN-DONE; \
         echo written > {d}/data && echo WROTE"
    );
    let o = warden(
        dir.path(),
        &[
            "run",
            "--no-tty",
            "--rw",
            &d.to_string(),
            "--rw",
            &f.to_string(),
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let out = stdout(&o);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode(&rwdir),
        0o755,
        "root's --rw directory was opened to others: {out}"
    );
    assert_eq!(mode(&rwdir.join("data")), 0o644, "{out}");
    assert_eq!(
        mode(&rwfile),
        0o644,
        "root's --rw file was opened to others: {out}"
    );
    for said in ["REFUSED-DIR", "REFUSED-DATA", "REFUSED-FILE"] {
        assert!(out.contains(said), "{said} missing: {out}\n{}", stderr(&o));
    }
    // Writing stays granted, and a mode that opens nothing is the
    // sandbox's to set.
    assert!(
        out.contains("WROTE") && out.contains("PLAIN-DONE"),
        "{out}\n{}",
        stderr(&o)
    );
    assert_eq!(mode(&rwdir.join("plain")), 0o755);
    assert_eq!(
        std::fs::read_to_string(rwdir.join("data")).unwrap(),
        "written\n"
    );
}

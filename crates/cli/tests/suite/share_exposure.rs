//! A writable share grants writing, not the power to open a file to every
//! local user. Through the owner swap the sandbox owns root's `--rw` files,
//! and the kernel alone would let it make root's `0600` file `0644` for
//! good. Mode changes with group or other bits are judged by the sandbox's
//! supervisor (`jail/src/modes`): they may add such a bit only where the
//! file has it already (execute following read on a regular file), where
//! the file was born while the sandbox runs, or where the sandbox itself
//! took it away this run. `share_modes.rs` covers the bits the filter
//! refuses outright (set-ID, group and other write).

use crate::common::*;
use std::path::Path;

/// A root-owned share: a directory holding a private file and a readable
/// one, and a private file lent on its own.
struct Share {
    dir: TempDir,
}

impl Share {
    fn new(tag: &str) -> Share {
        let dir = TempDir::new(tag);
        set_mode(dir.path(), 0o755);
        let share = dir.path().join("share");
        std::fs::create_dir(&share).unwrap();
        set_mode(&share, 0o755);
        std::fs::write(share.join("secret.conf"), "root's secret\n").unwrap();
        set_mode(&share.join("secret.conf"), 0o600);
        std::fs::write(share.join("public.conf"), "root's public data\n").unwrap();
        set_mode(&share.join("public.conf"), 0o644);
        std::fs::write(dir.path().join("single.conf"), "root's other secret\n").unwrap();
        set_mode(&dir.path().join("single.conf"), 0o600);
        Share { dir }
    }
    fn share(&self) -> std::path::PathBuf {
        self.dir.path().join("share")
    }
    fn single(&self) -> std::path::PathBuf {
        self.dir.path().join("single.conf")
    }
    /// A program for the sandbox's python, in the share (root's, `0644`).
    fn program(&self, name: &str, text: &str) -> std::path::PathBuf {
        let p = self.share().join(name);
        std::fs::write(&p, text).unwrap();
        set_mode(&p, 0o644);
        p
    }
    fn run(&self, script: &str) -> std::process::Output {
        let (s, f) = (self.share(), self.single());
        warden(
            self.dir.path(),
            &[
                "run",
                "--no-tty",
                "--rw",
                s.to_str().unwrap(),
                "--rw",
                f.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                script,
            ],
        )
    }
}

/// Each way python opens a file's mode: by path, on an open descriptor,
/// and without following links (libc's `lchmod`, through `/proc/self/fd`).
const OPEN_EACH_WAY: &str = r#"
import os, sys
for p in sys.argv[1:]:
    try:
        os.chmod(p, 0o644); print("OPENED-BY-CHMOD", p)
    except PermissionError:
        print("REFUSED-CHMOD")
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fchmod(fd, 0o604); print("OPENED-BY-FCHMOD", p)
    except PermissionError:
        print("REFUSED-FCHMOD")
    try:
        os.chmod(p, 0o644, follow_symlinks=False); print("OPENED-BY-LCHMOD", p)
    except (PermissionError, NotImplementedError, OSError):
        print("REFUSED-LCHMOD")
    os.close(fd)
"#;

/// One thread points `link` at the sandbox's own file and at root's secret
/// in turn; the other chmods through it `0644`, by path and from a
/// directory descriptor.
const SWAP_RACE: &str = r#"
import os, sys, threading, time
d = sys.argv[1]
own = os.path.join(d, "own.txt")
open(own, "w").write("mine")
os.chmod(own, 0o600)
os.symlink(own, os.path.join(d, "link"))
stop = time.time() + 3
def swap():
    n = 0
    while time.time() < stop:
        target = own if n % 2 else os.path.join(d, "secret.conf")
        tmp = os.path.join(d, "link.%d" % n)
        os.symlink(target, tmp)
        os.rename(tmp, os.path.join(d, "link"))
        n += 1
t = threading.Thread(target=swap)
t.start()
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
done = refused = 0
while time.time() < stop:
    for how in (0, 1):
        try:
            if how:
                os.chmod("link", 0o644, dir_fd=dfd)
            else:
                os.chmod(os.path.join(d, "link"), 0o644)
            done += 1
        except PermissionError:
            refused += 1
        os.chmod(own, 0o600)
t.join()
print("DONE", done, "REFUSED", refused)
"#;

#[test]
fn a_root_owned_private_file_in_a_rw_share_cannot_be_opened_to_local_users() {
    if !is_root() {
        return skip("needs root: the --rw paths must be root's");
    }
    let sh = Share::new("share-exposure");
    let (secret, single) = (sh.share().join("secret.conf"), sh.single());
    let (s, f) = (secret.display(), single.display());
    let py = "/usr/bin/python3";
    let prog = sh.program("modes.py", OPEN_EACH_WAY);
    let prog = prog.display();
    let script = format!(
        "for m in 0644 0604 0640 o+r g+r a+rx; do \
           chmod $m {s} 2>/dev/null && echo OPENED-DIR-FILE-$m; \
           chmod $m {f} 2>/dev/null && echo OPENED-SINGLE-$m; \
         done; \
         if [ -x {py} ]; then {py} {prog} {s} {f}; fi; \
         cat {s} >/dev/null && echo READ-OK; echo written >> {f} && echo WROTE"
    );
    let o = sh.run(&script);
    let out = stdout(&o);
    let why = format!("{out}\n{}", stderr(&o));
    assert!(!out.contains("OPENED"), "a private file was opened: {why}");
    assert_eq!(mode(&secret), 0o600, "{why}");
    assert_eq!(mode(&single), 0o600, "{why}");
    if Path::new(py).exists() {
        assert_eq!(out.matches("REFUSED-CHMOD").count(), 2, "{why}");
        assert_eq!(out.matches("REFUSED-FCHMOD").count(), 2, "{why}");
    }
    // Reading and writing stay granted.
    assert!(out.contains("READ-OK") && out.contains("WROTE"), "{why}");
}

#[test]
fn a_link_swapped_under_a_chmod_by_another_thread_never_opens_a_private_file() {
    if !is_root() {
        return skip("needs root: the --rw paths must be root's");
    }
    let py = "/usr/bin/python3";
    if !Path::new(py).exists() {
        return skip("no /usr/bin/python3 for the racing threads");
    }
    let sh = Share::new("share-exposure-race");
    let secret = sh.share().join("secret.conf");
    let d = sh.share().display().to_string();
    let prog = sh.program("race.py", SWAP_RACE);
    let o = warden(
        sh.dir.path(),
        &[
            "run",
            "--no-tty",
            "--rw",
            &d,
            "--",
            py,
            prog.to_str().unwrap(),
            &d,
        ],
    );
    let out = stdout(&o);
    let why = format!("{out}\n{}", stderr(&o));
    assert_eq!(mode(&secret), 0o600, "root's secret was opened: {why}");
    // Both outcomes happened: the race was run, not skipped.
    let count = |word: &str| -> u64 {
        out.split_whitespace()
            .skip_while(|w| *w != word)
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert!(count("DONE") > 0 && count("REFUSED") > 0, "{why}");
}

#[test]
fn files_the_sandbox_makes_in_a_share_take_the_modes_tar_pip_and_npm_give_them() {
    if !is_root() {
        return skip("needs root: the --rw paths must be root's");
    }
    let sh = Share::new("share-exposure-own");
    // An archive made on the host: a directory, a 0644 file, a 0755 one.
    let src = sh.dir.path().join("src");
    std::fs::create_dir_all(src.join("pkg/bin")).unwrap();
    std::fs::write(src.join("pkg/README"), "read me\n").unwrap();
    std::fs::write(src.join("pkg/bin/tool"), "#!/bin/sh\necho tool\n").unwrap();
    set_mode(&src.join("pkg"), 0o755);
    set_mode(&src.join("pkg/bin"), 0o755);
    set_mode(&src.join("pkg/README"), 0o644);
    set_mode(&src.join("pkg/bin/tool"), 0o755);
    let archive = sh.share().join("pkg.tar");
    let made = std::process::Command::new("tar")
        .args([
            "-C",
            src.to_str().unwrap(),
            "-cf",
            archive.to_str().unwrap(),
            "pkg",
        ])
        .status()
        .unwrap();
    assert!(made.success());
    let d = sh.share().display().to_string();
    let script = format!(
        "cd {d} && umask 077 && \
         mkdir out && tar -xpf pkg.tar -C out && echo UNTARRED; \
         printf '#!/bin/sh\\necho hi\\n' > script.sh && chmod +x script.sh && chmod 0755 script.sh && echo SCRIPT; \
         echo data > made.txt && chmod 0644 made.txt && chmod 0600 made.txt && chmod 0644 made.txt && echo MADE; \
         mkdir made.d && chmod 0755 made.d && echo MADE-DIR; \
         chmod 0640 public.conf && chmod 0644 public.conf && echo PUBLIC-BACK; \
         chmod a+x public.conf && echo PUBLIC-X"
    );
    let o = sh.run(&script);
    let out = stdout(&o);
    let why = format!("{out}\n{}", stderr(&o));
    for said in [
        "UNTARRED",
        "SCRIPT",
        "MADE",
        "MADE-DIR",
        "PUBLIC-BACK",
        "PUBLIC-X",
    ] {
        assert!(out.contains(said), "{said} missing: {why}");
    }
    let share = sh.share();
    assert_eq!(mode(&share.join("out/pkg")), 0o755, "{why}");
    assert_eq!(mode(&share.join("out/pkg/README")), 0o644, "{why}");
    assert_eq!(mode(&share.join("out/pkg/bin/tool")), 0o755, "{why}");
    assert_eq!(mode(&share.join("script.sh")), 0o755, "{why}");
    assert_eq!(mode(&share.join("made.txt")), 0o644, "{why}");
    assert_eq!(mode(&share.join("made.d")), 0o755, "{why}");
    assert_eq!(mode(&share.join("public.conf")), 0o755, "{why}");
    // The share's private file was never touched.
    assert_eq!(mode(&share.join("secret.conf")), 0o600, "{why}");
}

#[test]
fn a_rootless_sandbox_cannot_open_its_users_private_file_to_others() {
    let Some(user) = Unprivileged::get() else {
        return skip("no unprivileged user to run warden as");
    };
    let dir = TempDir::new("share-exposure-rootless");
    set_mode(dir.path(), 0o755);
    let share = dir.path().join("share");
    std::fs::create_dir(&share).unwrap();
    std::fs::write(share.join("key"), "the user's key\n").unwrap();
    set_mode(&share.join("key"), 0o600);
    for p in [dir.path().to_path_buf(), share.clone(), share.join("key")] {
        user.own(&p);
    }
    let state = dir.path().join("state");
    let s = share.display();
    let script = format!(
        "chmod 0644 {s}/key 2>/dev/null && echo OPENED; \
         echo mine > {s}/new && chmod 0644 {s}/new && echo NEW-OK"
    );
    let o = user.warden(
        &state,
        &[
            "run",
            "--no-tty",
            "--rw",
            &s.to_string(),
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let out = stdout(&o);
    let why = format!("{out}\n{}", stderr(&o));
    if !out.contains("NEW-OK") && stderr(&o).contains("namespace") {
        return skip("this host gives the unprivileged user no namespaces");
    }
    assert!(!out.contains("OPENED"), "{why}");
    assert_eq!(mode(&share.join("key")), 0o600, "{why}");
    assert!(out.contains("NEW-OK"), "{why}");
    assert_eq!(mode(&share.join("new")), 0o644, "{why}");
}

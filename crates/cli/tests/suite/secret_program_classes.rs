//! A secret's program never runs a token's script through a way round
//! the rule's paths: a command its input names (`xargs prlimit`, `xargs -I{} setpriv {}`), a
//! directory that holds a root (`make -C DIR -f wsroot/...`), a path
//! through a process's own views (`/proc/self/cwd/...`), a file with
//! another name under the root (a hard link), a program that runs its
//! command in another file tree (`unshare --wd=DIR`).
//!
//! A daemon over a workspace root records it; a token's sandbox left a
//! script and a makefile in a project there. Before: the owner's `warden
//! run --secret 'T=cmd:...'` with each of these spellings ran the token's
//! script as the owner (each is first run on the host by the test
//! itself, outside warden, to show that it does). Now each is refused
//! before anything runs, naming its reason code, and no mark appears;
//! the owner's own program outside the root still runs.

use crate::common::owner::OwnerHost;
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[test]
fn a_command_its_input_names_a_directory_above_a_root_a_proc_view_or_a_hard_link_never_runs_a_tokens_script(
) {
    let Some(host) = OwnerHost::new("secret-classes") else {
        return;
    };
    let marker = host.marker.display().to_string();
    let proj = host.root.join("proj");
    let get = proj.join("get.sh");
    host.plant(&get);
    host.project("proj", "Makefile", &format!("all:\n\ttouch {marker}\n"));
    // The directory that holds the root, and the root's project seen
    // from it.
    let top = host.dir.path().canonicalize().unwrap();
    let rel = proj.strip_prefix(&top).unwrap().display().to_string();
    // The owner's own files: a list a program reads, a hard link the
    // owner once made to the project's script.
    let home = host.dir.path().join("home");
    let list = home.join("programs");
    std::fs::write(&list, format!("{}\n", get.display())).unwrap();
    let linked = home.join("get-token");
    std::fs::hard_link(&get, &linked).unwrap();
    let (top, list, linked) = (
        top.to_str().unwrap(),
        list.to_str().unwrap(),
        linked.to_str().unwrap(),
    );
    let u = "secret_program_unreadable_args";
    let cases: Vec<(&str, String)> = vec![
        (
            "/usr/bin/prlimit",
            format!("/usr/bin/xargs -a {list} prlimit"),
        ),
        (
            "/usr/bin/setpriv",
            format!("/usr/bin/xargs -a {list} -I{{}} setpriv {{}}"),
        ),
        (
            "/usr/bin/make",
            format!("/usr/bin/make -s -C {top} -f {rel}/Makefile"),
        ),
        (
            "/bin/sh",
            format!("/bin/sh -c 'cd {top} && exec sh /proc/self/cwd/{rel}/get.sh'"),
        ),
        ("/bin/sh", linked.to_string()),
        (
            "/usr/bin/unshare",
            format!("/usr/bin/unshare -r --wd={top} {rel}/get.sh"),
        ),
    ];
    // The daemon records its root as it starts; the record outlives it.
    drop(host.daemon_over_root());
    for (needs, line) in &cases {
        if !Path::new(needs).exists() {
            skip(&format!("{needs} is not installed"));
            continue;
        }
        let argv = shell_words(line);
        if !host.runs_the_tokens_code(&argv) {
            skip(&format!(
                "`{line}` does not run on this host: it proves nothing here"
            ));
            continue;
        }
        let secret = format!("T=cmd:{line}@example.com");
        let out = host.owner(&["run", "--no-tty", "--secret", &secret, "--", "true"]);
        let said = stderr(&out);
        assert!(
            !host.marker_appeared(),
            "`{line}` ran the token's script as the owner: {said}"
        );
        assert!(!out.status.success(), "`{line}`: {said}");
        assert!(said.contains(u), "`{line}` refused {u}: {said}");
    }
    // The owner's own program outside the root runs.
    if egress_available() {
        let own = home.join("own-token");
        std::fs::write(&own, format!("#!/bin/sh\ntouch {marker}\necho tok-own\n")).unwrap();
        std::fs::set_permissions(&own, PermissionsExt::from_mode(0o755)).unwrap();
        let secret = format!(
            "T=cmd:/bin/sh -c 'cat {list} >/dev/null; exec {}'@example.com",
            own.display()
        );
        let out = host.owner(&["run", "--no-tty", "--secret", &secret, "--", "true"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(host.marker.exists(), "the owner's own program ran");
    }
}

/// `line` split as `cmd:` splits it: blanks between words, single quotes
/// around one.
fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

//! Under a program allowlist, the sandbox cannot stack a Landlock domain
//! of its own: the kernel logs a refusal under the youngest domain (or not
//! at all, with that domain's logging off), so a domain of the sandbox's
//! would hide the allowlist's refusals from the record. Without an
//! allowlist, tools that sandbox themselves with Landlock keep it.

use crate::common::*;
use std::process::{Command, Stdio};

/// Asks the kernel for Landlock's ABI version (`landlock_create_ruleset`
/// with the version flag) and prints the answer or the errno.
const PROBE: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(444, None, 0, 1)
print("abi", r, "errno", ctypes.get_errno())
"#;

fn probe(allow: &[&str]) -> String {
    let dir = TempDir::new("landlock-nested");
    std::fs::write(dir.path().join("probe.py"), PROBE).unwrap();
    let mut c = Command::new(warden_bin());
    c.args(["run", "--no-tty", "--ro", dir.str()]);
    for a in allow {
        c.args(["--allow-exec", a]);
    }
    let out = c
        .args(["--", "python3", &format!("{}/probe.py", dir.str())])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn under_an_allowlist_the_sandbox_cannot_stack_a_landlock_domain_of_its_own() {
    if !std::path::Path::new("/usr/bin/python3").exists() {
        return skip("python3 is not installed");
    }
    let without = probe(&[]);
    if !without.contains("errno 0") {
        return skip(&format!("Landlock is not offered here: {without}"));
    }
    // ENOSYS (38): as on a kernel without Landlock.
    let with = probe(&["python3"]);
    assert!(with.contains("abi -1 errno 38"), "{with}");
}

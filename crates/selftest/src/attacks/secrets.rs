//! Secret theft: a credential from warden's own environment, a private
//! key from the user's home.
use crate::lab::{from_run, Attack, Lab, Verdict};
use crate::probes::{arg, contained, escaped, Finding, Probe};
use crate::Category;
use std::time::Instant;

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        // ---- secret theft ----
        (
            "secret.host-environment",
            Category::Secrets,
            "read a credential from warden's own environment",
            |lab| {
                let needle = lab.plant(
                    "needle/value",
                    &format!("selftest-credential-{}", lab.token),
                );
                let value = format!("selftest-credential-{}", lab.token);
                let mut c = lab.command(
                    &[
                        "--ro".to_string(),
                        needle
                            .parent()
                            .map(|p| p.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    ],
                    "find-value-file",
                    &[needle.to_string_lossy().into_owned()],
                );
                c.env("WARDEN_SELFTEST_CREDENTIAL", &value);
                let start = Instant::now();
                match c.spawn() {
                    Ok(child) => from_run(&Lab::finish(child, start)),
                    Err(e) => Verdict::Skipped(format!("cannot start warden: {e}")),
                }
            },
        ),
        (
            "secret.ssh-key",
            Category::Secrets,
            "read a private key from the user's ~/.ssh",
            |lab| {
                let key = lab.plant(
                    "home/.ssh/id_ed25519",
                    &format!("-----BEGIN OPENSSH PRIVATE KEY----- {}", lab.token),
                );
                let mut c = lab.command(&[], "read-file", &[key.to_string_lossy().into_owned()]);
                c.env("HOME", lab.dir.join("home"));
                let start = Instant::now();
                match c.spawn() {
                    Ok(child) => from_run(&Lab::finish(child, start)),
                    Err(e) => Verdict::Skipped(format!("cannot start warden: {e}")),
                }
            },
        ),
    ]
}

pub(crate) const PROBES: &[Probe] = &[Probe {
    name: "find-value-file",
    harmful: false,
    run: find_value_file,
}];

fn find_value_file(args: &[String]) -> Finding {
    // Look for a host value (read from a file, so that it is on no command
    // line) in the places a process can read.
    let needle = std::fs::read(arg(args, 0)).unwrap_or_default();
    if needle.is_empty() {
        return escaped("no value to look for was given");
    }
    let mut found = Vec::new();
    for (k, v) in std::env::vars_os() {
        if v.to_string_lossy()
            .as_bytes()
            .windows(needle.len())
            .any(|w| w == needle)
        {
            found.push(format!("environment variable {}", k.to_string_lossy()));
        }
    }
    for p in [
        "/proc/self/environ",
        "/proc/1/environ",
        "/proc/1/cmdline",
        "/proc/self/cmdline",
    ] {
        if let Ok(b) = std::fs::read(p) {
            if b.windows(needle.len()).any(|w| w == needle.as_slice()) {
                found.push(p.to_string());
            }
        }
    }
    if found.is_empty() {
        contained("the value is in no environment or readable /proc file")
    } else {
        escaped(format!("found in {}", found.join(", ")))
    }
}

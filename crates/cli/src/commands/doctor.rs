//! `warden doctor`: what isolation this host offers.

use warden_jail::gvisor::runsc::Usability;
use warden_policy::{Defaults, ENV_ALLOWLIST};

pub fn doctor(json: bool, defaults: &Defaults) -> anyhow::Result<u8> {
    let report = warden_jail::host::probe();
    // The VM backend is optional: its rows say what `--isolation vm`
    // would use (probing KVM once, bounded), never the exit status.
    let vm = warden_vm::report::report(true);
    // gVisor likewise: a real sandbox started and ended by runsc, bounded.
    let gvisor = warden_jail::gvisor::runsc::probe();
    let refusals = exec_refusals(report.root, report.landlock_abi);
    if json {
        let v = serde_json::json!({ "host": report, "defaults": defaults, "vm": vm,
                                    "gvisor": gvisor_json(&gvisor),
                                    "exec_refusals": { "recorded": refusals.is_ok(),
                                        "detail": refusals.as_ref().unwrap_or_else(|e| e) } });
        println!("{}", warden_audit::json::to_string_pretty(&v)?);
    } else {
        println!("{:<16} {} ({})", "kernel", report.kernel, report.arch);
        println!(
            "{:<16} {}",
            "mode",
            if report.root {
                "root (the sandbox maps to nobody on the host)"
            } else {
                "rootless (the sandbox maps to your own user)"
            }
        );
        for c in &report.checks {
            println!(
                "{:<16} {:<7} {}",
                c.name,
                if c.ok { "ok" } else { "MISSING" },
                c.detail
            );
            if let Some(lost) = &c.lost {
                println!("{:<16} degraded: {}", "", super::worded(lost));
            }
            if c.name == "exec allowlist" {
                let (ok, detail) = match &refusals {
                    Ok(d) => ("ok", d),
                    Err(d) => ("no", d),
                };
                println!("{:<16} {ok:<7} {detail}", "exec refusals");
            }
        }
        println!(
            "{:<16} memory {}M, pids {}, /tmp {}M, open files {}, file size {}G",
            "defaults",
            defaults.memory >> 20,
            defaults.pids,
            defaults.tmp_size >> 20,
            defaults.open_files,
            defaults.file_size >> 30
        );
        println!("{:<16} {}", "environment", ENV_ALLOWLIST.join(" "));
        print!("{}", super::vm::describe(&vm));
        println!("{}", gvisor_row(&gvisor));
        if report.fully_isolated() {
            println!("full isolation is available");
        } else {
            println!("full isolation is NOT available on this host (see above)");
        }
    }
    Ok(if report.fully_isolated() { 0 } else { 1 })
}

/// What `--isolation gvisor` would use, as doctor's row.
fn gvisor_row(u: &Usability) -> String {
    let (ok, detail) = match u {
        Usability::Usable { path, version } => (
            true,
            format!(
                "runsc ran a test sandbox ({}, {}, platform {})",
                path.display(),
                if version.is_empty() {
                    "version unknown"
                } else {
                    version
                },
                warden_jail::gvisor::runsc::PLATFORM
            ),
        ),
        Usability::Missing => (
            false,
            format!(
                "no runsc: `--isolation gvisor` is refused; {}",
                warden_jail::gvisor::runsc::INSTALL
            ),
        ),
        Usability::Unusable { path, why } => (
            false,
            format!(
                "{} is installed but cannot run a sandbox here: {why}",
                path.display()
            ),
        ),
    };
    format!(
        "{:<16} {:<7} {}",
        "gvisor",
        if ok { "ok" } else { "MISSING" },
        detail
    )
}

fn gvisor_json(u: &Usability) -> serde_json::Value {
    match u {
        Usability::Usable { path, version } => serde_json::json!({
            "usable": true, "runsc": path, "version": version,
            "platform": warden_jail::gvisor::runsc::PLATFORM }),
        Usability::Missing => serde_json::json!({
            "usable": false, "runsc": null,
            "why": format!("no runsc: {}", warden_jail::gvisor::runsc::INSTALL) }),
        Usability::Unusable { path, why } => serde_json::json!({
            "usable": false, "runsc": path, "why": why }),
    }
}

/// Whether a program the exec allowlist refuses inside a sandbox becomes
/// an `exec_refused` event here, and if not, why and what would make it
/// so. Never part of doctor's status: the allowlist is enforced either way.
fn exec_refusals(root: bool, landlock_abi: Option<i32>) -> Result<String, String> {
    let abi = landlock_abi.unwrap_or(0);
    if abi < 1 {
        return Err("not recorded: no exec allowlist without Landlock".into());
    }
    if abi < 7 {
        return Err(format!(
            "not recorded: Landlock ABI {abi} logs no refusals (ABI 7, Linux 6.15, does); \
             refusals are still enforced"
        ));
    }
    if !root {
        return Err(
            "not recorded when rootless: the kernel's audit records are read by root \
                    in the host's user namespace; refusals are still enforced (run warden as \
                    root to record them)"
                .into(),
        );
    }
    match warden_jail::landlock_audit::audit_enabled() {
        Ok(true) => Ok(
            "recorded: each program Landlock refuses is an exec_refused event \
                        (root, audit on, Landlock ABI 7); a file the sandbox wrote is refused \
                        by its noexec mount without a record (see docs/allow-exec.md)"
                .into(),
        ),
        Ok(false) => Err(
            "not recorded: the kernel's audit is off; `auditctl -e 1` (or an \
                          auditd) turns it on, and warden never does; refusals are still \
                          enforced"
                .into(),
        ),
        Err(e) => Err(format!(
            "not recorded: cannot ask the kernel's audit ({e}); refusals are still enforced"
        )),
    }
}

//! `warden doctor`: what isolation this host offers.

use warden_policy::{Defaults, ENV_ALLOWLIST};

pub fn doctor(json: bool, defaults: &Defaults) -> anyhow::Result<u8> {
    let report = warden_jail::host::probe();
    // The VM backend is optional: its rows say what `--isolation vm`
    // would use (probing KVM once, bounded), never the exit status.
    let vm = warden_vm::report::report(true);
    if json {
        let v = serde_json::json!({ "host": report, "defaults": defaults, "vm": vm });
        println!("{}", serde_json::to_string_pretty(&v)?);
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
        if report.fully_isolated() {
            println!("full isolation is available");
        } else {
            println!("full isolation is NOT available on this host (see above)");
        }
    }
    Ok(if report.fully_isolated() { 0 } else { 1 })
}

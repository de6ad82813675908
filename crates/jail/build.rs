//! Compiles the seccomp filter of the target architecture ahead of time, from
//! the same rule tables (`src/seccomp/`) the tests check, so that starting a
//! sandbox costs no filter generation. A test proves the embedded program
//! equals the one libseccomp builds from the table at run time.

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "src/seccomp/mod.rs"]
mod seccomp;

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/seccomp");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("seccomp.bpf");
    let target = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let arch = match target.as_str() {
        "x86_64" => Some(seccomp::Arch::X86_64),
        "aarch64" => Some(seccomp::Arch::Aarch64),
        _ => None,
    };
    let Some(arch) = arch else {
        // No filter for this architecture: an empty program, which the jail
        // refuses to run with (it says the architecture is unsupported).
        for empty in [
            out.clone(),
            out.with_file_name("seccomp-notify.bpf"),
            out.with_file_name("seccomp-notify-exec.bpf"),
            out.with_file_name("seccomp-gvisor.bpf"),
        ] {
            if let Err(e) = std::fs::write(&empty, b"") {
                println!("cargo:warning=cannot write {}: {e}", empty.display());
                std::process::exit(1);
            }
        }
        return;
    };
    let result = seccomp::build_filter_for(arch)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            let file = std::fs::File::create(&out).map_err(|e| e.to_string())?;
            f.export_bpf(&file).map_err(|e| e.to_string())
        });
    if let Err(e) = result {
        println!("cargo:warning=cannot compile the seccomp filter for {target}: {e}");
        std::process::exit(1);
    }
    // The second filter, whose mode changes the supervisor decides; and
    // the same with the exec allowlist's calls, which the supervisor
    // records (a process has one listener, so one filter serves both).
    for (name, exec) in [
        ("seccomp-notify.bpf", false),
        ("seccomp-notify-exec.bpf", true),
    ] {
        let notify = out.with_file_name(name);
        let result = seccomp::build_notify_filter_for(arch, exec)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                let file = std::fs::File::create(&notify).map_err(|e| e.to_string())?;
                f.export_bpf(&file).map_err(|e| e.to_string())
            });
        if let Err(e) = result {
            println!("cargo:warning=cannot compile the notifying filter {name} for {target}: {e}");
            std::process::exit(1);
        }
    }
    // The filter of a gVisor sandbox's later processes, loaded inside
    // gVisor's kernel by each before its command runs.
    let gvisor = out.with_file_name("seccomp-gvisor.bpf");
    let result = seccomp::build_gvisor_filter_for(arch)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            let file = std::fs::File::create(&gvisor).map_err(|e| e.to_string())?;
            f.export_bpf(&file).map_err(|e| e.to_string())
        });
    if let Err(e) = result {
        println!("cargo:warning=cannot compile the gVisor filter for {target}: {e}");
        std::process::exit(1);
    }
}

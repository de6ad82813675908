//! The start of each command a long-lived gVisor sandbox runs after its
//! first (see `warden_jail::gvisor::shim`): shown read-only inside the
//! sandbox, it loads the sandbox's seccomp filter, then executes the
//! command. Installed beside `warden`.

// The binaries only parse, wire and print: what needs unsafe is the
// libraries' (jail, egress, vm), each block with its reason.
#![forbid(unsafe_code)]

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let e = warden_jail::gvisor::shim::run(&args, std::env::vars_os().collect());
    eprintln!("warden: {}", warden_jail::chain_str(&e));
    std::process::exit(e.status());
}

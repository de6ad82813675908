//! The init of a VM sandbox's guest (`/init` of its initramfs): see
//! `warden_vm::guest`. Installed beside `warden`, which puts it into the
//! guest; it refuses to run anywhere but as PID 1, but for the launcher
//! step the init starts it again for (`warden_vm::guest::LAUNCH`).

// The binaries only parse, wire and print: what needs unsafe is the
// libraries' (jail, egress, vm), each block with its reason.
#![forbid(unsafe_code)]

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == warden_vm::guest::LAUNCH) {
        let e = warden_vm::guest::launch(&args[2..]);
        eprintln!("warden-guest-init: {}", warden_jail::chain_str(&e));
        std::process::exit(e.status());
    }
    if std::process::id() != 1 {
        eprintln!(
            "warden-guest-init is the init of a warden VM's guest and runs only as its PID 1"
        );
        std::process::exit(2);
    }
    warden_vm::guest::main()
}

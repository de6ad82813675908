//! The init of a VM sandbox's guest (`/init` of its initramfs): see
//! `warden_vm::guest`. Installed beside `warden`, which puts it into the
//! guest; it refuses to run anywhere but as PID 1.

fn main() {
    if std::process::id() != 1 {
        eprintln!(
            "warden-guest-init is the init of a warden VM's guest and runs only as its PID 1"
        );
        std::process::exit(2);
    }
    warden_vm::guest::main()
}

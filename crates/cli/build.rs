//! Links the statically linked binaries (`-C target-feature=+crt-static`,
//! as warden ships) with packed relative relocations (RELR): the kernel maps
//! a static-pie anywhere, and glibc's start-up then applies every relative
//! relocation before `main`. Packed, the table is a bitmap of a few KB
//! instead of 24 bytes per relocation (about 600 KB here), applied with a
//! fraction of the instructions; the binary's address stays randomised.
//! docs/performance.md has the measurements. Dynamic builds are left as
//! they are (a packed dynamic binary would need glibc 2.36 where it runs).

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let static_linux_gnu = var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("CARGO_CFG_TARGET_FEATURE")
            .split(',')
            .any(|f| f == "crt-static");
    if static_linux_gnu {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}

#[test]
fn dump() {
    let f = warden_jail::seccomp::build_filter().unwrap();
    let file = std::fs::File::create(env!("CARGO_TARGET_TMPDIR").to_string() + "/f.bpf").unwrap();
    f.export_bpf(&file).unwrap();
}

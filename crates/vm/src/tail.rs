//! The last lines of a helper's log (the guest's console as QEMU wrote
//! it, virtiofsd's), said in an error when the helper failed: what a
//! person needs to see why, without the whole file.

use std::path::Path;

/// The last lines of the log at `path` that say something, on one line;
/// the one early failure whose cause they do not show is said instead.
pub(crate) fn tail(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    // The one early failure whose cause the last lines (a kernel panic's
    // registers) do not show.
    if let Some(line) = s.lines().find(|l| l.contains("Initramfs unpacking failed")) {
        return format!(
            "{}: the guest's memory is too small to unpack its init image; give it more with `resources.memory` (a debug build's guest init is far larger than a release build's)",
            line.trim()
        );
    }
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(8);
    let t = lines[start..].join(" | ");
    if t.is_empty() {
        "(nothing)".into()
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    // The tests remove their own temporary directories with std's removal.
    #![allow(clippy::unwrap_used, clippy::disallowed_methods)]
    use super::*;

    #[test]
    fn a_guest_too_small_for_its_init_image_is_told_as_such_not_as_a_panic() {
        let dir = std::env::temp_dir().join(format!("warden-console-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("console.log");
        std::fs::write(
            &log,
            "[    1.98] Initramfs unpacking failed: write error\n[    2.4] Kernel panic - not syncing: No working init found\n[    2.5] RSP: 002b:00007ffce259d818\n",
        )
        .unwrap();
        let said = tail(&log);
        assert!(
            said.starts_with("[    1.98] Initramfs unpacking failed"),
            "{said}"
        );
        assert!(said.contains("`resources.memory`"), "{said}");
        std::fs::write(&log, "one\n\ntwo\n").unwrap();
        assert_eq!(tail(&log), "one | two");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! A named sandbox's home deeper than any path can name (3,000 nested
//! directories, each made beneath the last one's descriptor: 6,000 bytes
//! of path, past PATH_MAX's 4,096; deeper costs the sandbox time that
//! grows with the square of the depth, as Landlock checks each access
//! against every directory above it): written back when it stops and restored when it starts
//! whole, its deepest file read back. It once came back empty: the
//! write-back resolved each entry by its path, failed past PATH_MAX, and
//! the previous saved home (empty) stayed.

use super::*;

/// Python in the sandbox: N nested directories `d` below the home, then
/// a file `bottom` in the deepest.
const MAKE: &str = r#"import os, sys
n = int(sys.argv[1])
fd = os.open(os.path.expanduser('~'), os.O_RDONLY | os.O_DIRECTORY)
for _ in range(n):
    os.mkdir('d', dir_fd=fd)
    nfd = os.open('d', os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = nfd
f = os.open('bottom', os.O_WRONLY | os.O_CREAT, 0o640, dir_fd=fd)
os.write(f, b'the deepest file')
os.close(f)
print('made', n)
"#;

/// Python in the sandbox: how deep the chain below the home goes, and
/// what its deepest file holds.
const READ: &str = r#"import os
fd = os.open(os.path.expanduser('~'), os.O_RDONLY | os.O_DIRECTORY)
levels = 0
while True:
    try:
        nfd = os.open('d', os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    except FileNotFoundError:
        break
    os.close(fd)
    fd = nfd
    levels += 1
try:
    f = os.open('bottom', os.O_RDONLY, dir_fd=fd)
    print('levels', levels, os.read(f, 100).decode())
except FileNotFoundError:
    print('levels', levels, 'no bottom')
"#;

#[test]
fn a_home_three_thousand_directories_deep_is_kept_whole_across_stop_and_start() {
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        return skip("python3 is not installed");
    }
    let (state, ws) = fresh(None, "deep-home");
    let w = Runner {
        who: None,
        state: &state,
        env: Vec::new(),
    };
    ok(&w.run(&["create", "deep", "-w", ws.str(), "--disk", "256M"]));
    let made = ok(&w.run(&["exec", "deep", "--", "python3", "-c", MAKE, "3000"]));
    assert!(made.contains("made 3000"), "{made}");
    let stopped = w.run(&["stop", "deep"]);
    assert!(
        stopped.status.success(),
        "the stop did not write the home back: {}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    ok(&w.run(&["start", "deep"]));
    let back = ok(&w.run(&["exec", "deep", "--", "python3", "-c", READ]));
    assert!(
        back.contains("levels 3000 the deepest file"),
        "the home came back otherwise: {back}"
    );
    ok(&w.run(&["stop", "deep"]));
    ok(&w.run(&["rm", "deep"]));
}

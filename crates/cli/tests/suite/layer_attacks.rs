//! Attacks on the host-side code that reads and changes a sandbox's layer,
//! through the real daemon and the real CLI: code in a running sandbox
//! swaps a directory of its workspace for a link to the host's `/` in a
//! loop while a per-sandbox read-only token asks for the changes with
//! their content; a stopped sandbox leaves links to victims outside its
//! layer and a token asks to discard paths through them. A planted host
//! file (0600, outside the layer) must never come back, `changes_bytes`
//! must not count host files, and the victims must stay whole.

use crate::common::daemon::{self, Daemon};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MARKER: &str = "HOST-SECRET-only-on-the-host";

/// The swapper run inside the sandbox: `d` (a tree of decoys shaped like
/// the host's, down to the marker's path) and `l -> /` are exchanged with
/// `renameat2(RENAME_EXCHANGE)` for the given seconds.
const SWAP: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
os.chdir('/workspace')
rel = sys.argv[2].lstrip('/')
os.makedirs(os.path.join('d', os.path.dirname(rel)), exist_ok=True)
with open(os.path.join('d', rel), 'w') as f:
    f.write('decoy\n')
os.makedirs('d/dev', exist_ok=True)
with open('d/dev/zero', 'w') as f:
    f.write('five\n')
os.symlink('/', 'l')
end = time.time() + float(sys.argv[1])
while time.time() < end:
    if libc.renameat2(-100, b'd', -100, b'l', 2) != 0:
        break
"#;

fn setup(tag: &str) -> Option<(TempDir, Daemon, PathBuf)> {
    if !daemon::curl_available() {
        skip("curl is not installed");
        return None;
    }
    if !Path::new("/usr/bin/python3").exists() {
        skip("/usr/bin/python3 is not installed (the sandbox's swapper needs it)");
        return None;
    }
    let dir = TempDir::new(tag);
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let d = Daemon::start(dir.path(), true);
    Some((dir, d, ws))
}

fn owner(d: &Daemon, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
    let (s, b) = daemon::call(d, method, path, body, None);
    (
        s,
        serde_json::from_str(&b).unwrap_or(serde_json::Value::Null),
    )
}

fn create(d: &Daemon, name: &str, ws: &Path) {
    let body = serde_json::json!({ "name": name, "workspace": ws }).to_string();
    let (s, r) = owner(d, "POST", "/v1/sandboxes", Some(&body));
    assert_eq!(s, 201, "{r}");
}

fn sh(d: &Daemon, id: &str, script: &str) {
    let body = serde_json::json!({ "shell": script }).to_string();
    let (s, r) = owner(d, "POST", &format!("/v1/sandboxes/{id}/exec"), Some(&body));
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["exit_status"], 0, "{script}: {r}");
}

/// A host directory outside every layer: the marker (0600) and victims.
fn host(dir: &Path) -> PathBuf {
    let host = dir.join("host");
    std::fs::create_dir_all(host.join("victim/tree/deeper")).unwrap();
    std::fs::write(host.join("victim/important.txt"), "keep me\n").unwrap();
    std::fs::write(host.join("victim/tree/deeper/file"), "keep me too\n").unwrap();
    let marker = host.join("marker.txt");
    std::fs::write(&marker, format!("{MARKER}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&marker, std::fs::Permissions::from_mode(0o600)).unwrap();
    host
}

fn victims_intact(host: &Path) {
    assert_eq!(
        std::fs::read_to_string(host.join("victim/important.txt"))
            .ok()
            .as_deref(),
        Some("keep me\n"),
        "a file outside the layer was removed or written"
    );
    assert_eq!(
        std::fs::read_to_string(host.join("victim/tree/deeper/file"))
            .ok()
            .as_deref(),
        Some("keep me too\n"),
        "a tree outside the layer was removed or written"
    );
}

#[test]
fn a_host_file_never_comes_back_in_the_changes_while_the_sandbox_swaps_in_a_link_to_root() {
    let Some((dir, d, ws)) = setup("layer-f1") else {
        return;
    };
    let host = host(dir.path());
    std::fs::write(ws.join("swap.py"), SWAP).unwrap();
    create(&d, "rz", &ws);
    let marker = host.join("marker.txt");
    let body = serde_json::json!({
        "argv": ["/usr/bin/python3", "/workspace/swap.py", "60", marker],
        "background": true,
    })
    .to_string();
    let (s, r) = owner(&d, "POST", "/v1/sandboxes/rz/exec", Some(&body));
    assert!(matches!(s, 200 | 202), "{s}: {r}");
    let token = daemon::api_token(&d, "agent-rz", &["sandboxes:read"], Some("rz"));
    // The swapper has made its trees once `l` shows in the changes.
    wait_until("the swapper started", Duration::from_secs(30), || {
        let (_, b) = daemon::call_on(
            &d,
            true,
            "GET",
            "/v1/sandboxes/rz/changes",
            None,
            Some(&token),
        );
        b.contains("\"l\"") || b.contains("\"d\"")
    });
    // The decoy tree (named `d` or, swapped, `l`) down to the marker's
    // path and to `dev/zero`, and the link under the other name.
    let rel = marker.strip_prefix("/").unwrap();
    let mut allowed: Vec<String> = vec!["swap.py".into()];
    for top in ["d", "l"] {
        for tail in [rel, Path::new("dev/zero")] {
            let p = Path::new(top).join(tail);
            allowed.extend(
                p.ancestors()
                    .filter(|a| !a.as_os_str().is_empty())
                    .map(|a| a.to_string_lossy().into_owned()),
            );
        }
    }
    let mut answered = 0;
    for round in 0..150 {
        let (s, b) = daemon::call_on(
            &d,
            true,
            "GET",
            "/v1/sandboxes/rz/changes?content=true",
            None,
            Some(&token),
        );
        assert!(
            !b.contains(MARKER),
            "round {round}: the host's file came back to a read-only token: {b}"
        );
        assert!(
            !b.contains("important.txt") && !b.contains("/proc/"),
            "round {round}: the answer names the host's tree: {b}"
        );
        // Only what the sandbox made is listed: its decoys, never an entry
        // of the host's directories.
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&b) {
            for c in v["changes"].as_array().into_iter().flatten() {
                let p = c["path"].as_str().unwrap_or_default();
                assert!(
                    allowed.iter().any(|a| a == p),
                    "round {round}: {p} is not the sandbox's: {b}"
                );
            }
        }
        assert!(
            b.len() < 1 << 20,
            "round {round}: an answer of {} bytes",
            b.len()
        );
        assert!(matches!(s, 200 | 409), "round {round}: status {s}: {b}");
        if s == 200 {
            answered += 1;
        }
        if round % 10 == 0 {
            let (s, b) = daemon::call(&d, "GET", "/v1/sandboxes", None, None);
            assert_eq!(s, 200, "{b}");
            let listed = daemon::json(&b);
            let bytes = listed["sandboxes"]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["name"] == "rz"))
                .and_then(|s| s["changes_bytes"].as_u64())
                .unwrap_or(0);
            assert!(bytes < 1 << 20, "changes_bytes counted host files: {bytes}");
        }
        if round % 30 == 0 {
            // The owner's CLI reads the same layer the same way.
            let o = warden(dir.path(), &["diff", "rz"]);
            let text = format!("{}{}", stdout(&o), stderr(&o));
            assert!(
                !text.contains(MARKER),
                "warden diff read the host's file: {text}"
            );
        }
    }
    assert!(answered > 0, "no review answered during the race");
}

#[test]
fn discard_through_a_planted_link_is_refused_and_only_real_changes_are_discarded() {
    let Some((dir, d, ws)) = setup("layer-f2") else {
        return;
    };
    let host = host(dir.path());
    create(&d, "del1", &ws);
    let victim = host.join("victim");
    sh(
        &d,
        "del1",
        &format!(
            "ln -s {v} /workspace/vd && echo x > /workspace/x",
            v = victim.display()
        ),
    );
    let (s, r) = owner(&d, "POST", "/v1/sandboxes/del1/stop", Some("{}"));
    assert_eq!(s, 200, "{r}");
    // The owner asks (a token reaches only the sandboxes it made): even
    // the owner's discard never follows the sandbox's link.
    let discard = |paths: &[&str]| {
        let body = serde_json::json!({ "paths": paths }).to_string();
        owner(&d, "POST", "/v1/sandboxes/del1/discard", Some(&body))
    };
    for path in ["vd/important.txt", "vd/tree", "vd/tree/deeper/file"] {
        let (s, r) = discard(&[path]);
        assert_eq!(s, 400, "a discard through the link was not refused: {r}");
        let message = r["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("symbolic link") && message.contains("vd"),
            "the refusal does not say why: {r}"
        );
        assert!(!message.contains(&*host.to_string_lossy()), "{r}");
        victims_intact(&host);
    }
    // The CLI's discard refuses or does nothing, and never follows.
    let o = warden(dir.path(), &["discard", "del1", "vd/important.txt"]);
    victims_intact(&host);
    assert!(
        !stdout(&o).contains("discarded"),
        "warden discard claims to have discarded through the link: {}",
        stdout(&o)
    );
    let (s, r) = discard(&["x", "vd/important.txt"]);
    assert_eq!(s, 200, "{r}");
    let discarded: Vec<&str> = r["discarded"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert_eq!(discarded, ["x"], "{r}");
    victims_intact(&host);
    // What is left is the link itself, never what it leads to.
    let o = warden(dir.path(), &["diff", "del1"]);
    let text = stdout(&o);
    assert!(text.contains("vd") && !text.contains("important"), "{text}");
}

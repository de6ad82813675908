//! A desktop in a sandbox, for the tests of the daemon's desktop routes:
//! the one place that says how a desktop sandbox is made. Today it is an
//! ordinary sandbox created through the daemon in which the test starts
//! `Xvfb :99`, `x11vnc` on the sandbox's own 127.0.0.1:5900 and, when
//! asked, Chromium with its DevTools on the sandbox's own 127.0.0.1:9222;
//! with the `desktop` profile this becomes a create with that profile.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::daemon::{call, json, Daemon};
use std::time::{Duration, Instant};

/// The programs a test desktop needs on the host (the sandbox sees the
/// host's system directories): which one is missing, if any.
pub fn missing_packages(browser: bool) -> Option<&'static str> {
    let mut needed = vec![
        ("Xvfb", "xvfb"),
        ("x11vnc", "x11vnc"),
        ("xdotool", "xdotool"),
        ("xev", "x11-utils"),
    ];
    if browser {
        needed.push(("chromium", "chromium"));
    }
    needed
        .into_iter()
        .find(|(bin, _)| {
            !["/usr/bin", "/bin", "/usr/local/bin"]
                .iter()
                .any(|d| std::path::Path::new(d).join(bin).exists())
        })
        .map(|(_, pkg)| pkg)
}

/// Run `argv` in the sandbox in the background (as the daemon's API does
/// for anyone), as the owner.
pub fn background(d: &Daemon, sandbox: &str, argv: &[&str]) {
    let body = serde_json::json!({ "argv": argv, "background": true }).to_string();
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/{sandbox}/exec"),
        Some(&body),
        None,
    );
    assert!(s == 200 || s == 201 || s == 202, "{argv:?}: {s} {b}");
}

/// Run `script` with `sh -c` in the sandbox and return its output.
pub fn sh(d: &Daemon, sandbox: &str, script: &str) -> String {
    let body = serde_json::json!({ "argv": ["sh", "-c", script] }).to_string();
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/{sandbox}/exec"),
        Some(&body),
        None,
    );
    assert!(s == 200 || s == 201, "{script}: {s} {b}");
    json(&b)["stdout"].as_str().unwrap_or("").to_string()
}

/// The sandbox's desktop status, as the owner.
pub fn status(d: &Daemon, sandbox: &str) -> serde_json::Value {
    let (s, b) = call(
        d,
        "GET",
        &format!("/v1/sandboxes/{sandbox}/desktop/status"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    json(&b)
}

/// A desktop sandbox `name`, its screen up (and its browser's DevTools
/// with `browser`). `spec` is merged into the sandbox's spec (egress
/// rules for the browser).
pub fn start(d: &Daemon, name: &str, spec: serde_json::Value, browser: bool) {
    let mut full = serde_json::json!({
        "resources": { "memory": "2G", "pids": 512 },
        "filesystem": { "tmp_size": "512M" },
    });
    merge(&mut full, spec);
    let body = serde_json::json!({ "name": name, "spec": full }).to_string();
    let (s, b) = call(d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(s, 201, "{b}");
    // -retro: the classic stippled root window, so the screen is not one
    // colour before anything draws on it.
    background(
        d,
        name,
        &[
            "Xvfb",
            ":99",
            "-screen",
            "0",
            "1024x768x24",
            "-nolisten",
            "tcp",
            "-retro",
        ],
    );
    wait(d, name, "the X server", |_| {
        sh(d, name, "xdpyinfo -display :99 >/dev/null 2>&1 && echo up").contains("up")
    });
    background(
        d,
        name,
        &[
            "x11vnc",
            "-display",
            ":99",
            "-localhost",
            "-rfbport",
            "5900",
            "-forever",
            "-shared",
            "-nopw",
            "-quiet",
            "-noxdamage",
        ],
    );
    if browser {
        // Chromium's own sandbox needs namespaces that warden's seccomp
        // filter refuses; warden is the sandbox here.
        background(
            d,
            name,
            &[
                "chromium",
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--user-data-dir=/tmp/chromium",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=9222",
                "about:blank",
            ],
        );
    }
    wait(d, name, "the desktop's services", |s| {
        s["screen"] == true && (!browser || s["devtools"] == true)
    });
}

fn wait(d: &Daemon, name: &str, what: &str, f: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if f(&status(d, name)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not come up in {name}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

//! Desktop sandboxes through a real daemon over HTTP: one desktop sandbox
//! (the `desktop` profile) is started, its screen read back as PNG and
//! decoded, a page served by the test on the host's loopback opened
//! through an allowed name and seen in the next screenshot, a form typed
//! into until the page changes colour, a denied name that never reaches
//! its listener, the host's socket table unchanged by the desktop, and a
//! view-only token that may look but not touch.

use crate::common;
use crate::common::daemon::*;
use crate::common::*;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Green at first; magenta once "magic" is typed into the page's input,
/// which covers the whole page (a click anywhere focuses it).
const PAGE: &str = r#"<!doctype html><html><head><title>warden desktop test</title></head>
<body style="margin:0;background:rgb(0,200,0)">
<input id="i" style="position:fixed;top:0;left:0;width:100%;height:100%;border:0;background:transparent;font-size:48px"
 oninput="if (this.value.indexOf('magic') >= 0) document.body.style.background='rgb(200,0,200)'">
</body></html>"#;

/// An HTTP server on 127.0.0.1 that serves [`PAGE`] and records every
/// connection that reaches it.
struct PageServer {
    port: u16,
    arrivals: Arc<Mutex<usize>>,
}

impl PageServer {
    fn start() -> PageServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let arrivals = Arc::new(Mutex::new(0));
        let a = arrivals.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                *a.lock().unwrap() += 1;
                std::thread::spawn(move || {
                    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut buf = vec![0u8; 8192];
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = if got.starts_with(b"GET / ") { PAGE } else { "" };
                    let status = if body.is_empty() {
                        "404 Not Found"
                    } else {
                        "200 OK"
                    };
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status}\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        PageServer { port, arrivals }
    }

    fn arrivals(&self) -> usize {
        *self.arrivals.lock().unwrap()
    }
}

/// A decoded screenshot.
struct Shot {
    width: u32,
    height: u32,
    rgb: Vec<[u8; 3]>,
}

impl Shot {
    fn decode(png_bytes: &[u8]) -> Shot {
        assert!(
            png_bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            "not a PNG: {} bytes",
            png_bytes.len()
        );
        let mut decoder = png::Decoder::new(png_bytes);
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        let rgb = buf[..info.buffer_size()]
            .chunks(channels)
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        Shot {
            width: info.width,
            height: info.height,
            rgb,
        }
    }

    /// The share of pixels within 40 of `c` on each channel.
    fn share(&self, c: [u8; 3]) -> f64 {
        let near = self
            .rgb
            .iter()
            .filter(|p| (0..3).all(|i| (i32::from(p[i]) - i32::from(c[i])).abs() <= 40))
            .count();
        near as f64 / self.rgb.len() as f64
    }

    /// The variance of the pixels' brightness.
    fn variance(&self) -> f64 {
        let l: Vec<f64> = self
            .rgb
            .iter()
            .map(|p| (f64::from(p[0]) + f64::from(p[1]) + f64::from(p[2])) / 3.0)
            .collect();
        let mean = l.iter().sum::<f64>() / l.len() as f64;
        l.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / l.len() as f64
    }
}

const GREEN: [u8; 3] = [0, 200, 0];
const MAGENTA: [u8; 3] = [200, 0, 200];

fn screenshot(d: &Daemon, id: &str, token: Option<&str>) -> (u16, Vec<u8>) {
    let mut extra = vec![];
    let auth;
    if let Some(t) = token {
        auth = format!("authorization: Bearer {t}");
        extra.extend(["-H", auth.as_str()]);
    }
    curl(
        d,
        "GET",
        &format!("/v1/sandboxes/{id}/desktop/screenshot"),
        &extra,
    )
}

/// Take screenshots until `f` holds for one (or panic with the last).
fn until_screen(
    d: &Daemon,
    id: &str,
    what: &str,
    within: Duration,
    f: impl Fn(&Shot) -> bool,
) -> Shot {
    let deadline = Instant::now() + within;
    loop {
        let (s, b) = screenshot(d, id, None);
        if s == 200 {
            let shot = Shot::decode(&b);
            if f(&shot) {
                return shot;
            }
            if Instant::now() > deadline {
                let _ = std::fs::write(
                    std::env::temp_dir().join(format!("warden-desktop-{id}.png")),
                    &b,
                );
                panic!("{what}: not seen within {within:?} (last screenshot saved in the temp directory; green {:.3}, magenta {:.3})", shot.share(GREEN), shot.share(MAGENTA));
            }
        } else if Instant::now() > deadline {
            panic!(
                "{what}: the screenshot failed: {s} {}",
                String::from_utf8_lossy(&b)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn act(d: &Daemon, id: &str, action: &str, body: &str, token: Option<&str>) -> (u16, String) {
    call(
        d,
        "POST",
        &format!("/v1/sandboxes/{id}/desktop/{action}"),
        Some(body),
        token,
    )
}

/// The host's listening sockets (TCP and TCP6 `local:port`, Unix paths),
/// each with its inode.
fn host_listeners() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 9 && cols[3] == "0A" {
                out.push((format!("{f} {}", cols[1]), cols[9].to_string()));
            }
        }
    }
    for line in std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
    {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Flags 00010000: a listening socket.
        if cols.len() > 6 && cols[3] == "00010000" {
            let path = cols.get(7).copied().unwrap_or("(unnamed)");
            out.push((format!("unix {path}"), cols[6].to_string()));
        }
    }
    out
}

/// The host PIDs of a process and all its descendants.
fn tree(root: i32) -> HashSet<i32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            if let Some(rest) = stat.rsplit_once(')') {
                if let Some(ppid) = rest
                    .1
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.parse().ok())
                {
                    parent.push((pid, ppid));
                }
            }
        }
    }
    let mut set: HashSet<i32> = [root].into();
    loop {
        let before = set.len();
        for (pid, ppid) in &parent {
            if set.contains(ppid) {
                set.insert(*pid);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

/// The socket inodes a process holds.
fn socket_inodes(pid: i32) -> HashSet<String> {
    let mut out = HashSet::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in rd.flatten() {
            if let Ok(t) = std::fs::read_link(e.path()) {
                let t = t.to_string_lossy();
                if let Some(i) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                    out.insert(i.to_string());
                }
            }
        }
    }
    out
}

#[test]
// One desktop sandbox (an X server, a window manager, a VNC server and Chromium,
// whose start is most of the test's time) seen and driven step by step; tests of
// their own would each start a desktop.
#[allow(clippy::too_many_lines)] // one desktop's start, views and actions in order
fn a_desktop_sandbox_is_seen_and_driven_through_the_api_and_nothing_else() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if let Some(why) = common::desktop::unavailable() {
        return skip(&why);
    }
    if !egress_available() {
        return;
    }
    let began = Instant::now();
    let state = TempDir::new("desktop");
    let d = Daemon::start(state.path(), true);
    let page = PageServer::start();
    let denied = PageServer::start();
    let before: HashSet<(String, String)> = host_listeners().into_iter().collect();
    let body = format!(
        r#"{{"name":"desk","profile":"desktop","spec":{{"egress":{{"domains":["page.test:{}"],"allow_http":true,"hosts":{{"page.test":"127.0.0.1","denied.test":"127.0.0.1"}}}}}}}}"#,
        page.port
    );
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(s, 201, "{b}");

    // What it is, and where people and tools reach it.
    let (s, b) = call(&d, "GET", "/v1/sandboxes/desk/desktop", None, None);
    assert_eq!(s, 200, "{b}");
    let info = json(&b);
    assert_eq!(info["display"], ":99");
    assert_eq!(
        (info["width"].as_u64(), info["height"].as_u64()),
        (Some(1280), Some(800))
    );
    assert_eq!(info["vnc"], "/v1/sandboxes/desk/desktop/vnc");
    assert_eq!(info["cdp"], "/v1/sandboxes/desk/desktop/cdp");
    assert_eq!(info["stream_url"], "/#/sandboxes/desk/desktop");
    assert_eq!(info["running"], true, "{b}");
    assert_eq!(info["control"], true, "the owner may drive: {b}");
    // Its programs start with the sandbox: up once the screen and the
    // browser answer.
    let info = common::desktop::wait_up(&d, "desk");
    assert_eq!(
        (&info["screen"], &info["devtools"]),
        (&true.into(), &true.into())
    );

    // The desktop comes up: a real picture of it, not a blank screen.
    let shot = until_screen(&d, "desk", "the desktop", Duration::from_secs(60), |s| {
        s.variance() > 100.0
    });
    assert_eq!((shot.width, shot.height), (1280, 800));
    let (s, b) = call(&d, "GET", "/v1/sandboxes/desk/desktop", None, None);
    let services = json(&b)["services"].as_array().cloned().unwrap_or_default();
    assert_eq!(s, 200);
    for name in ["xvfb", "window-manager", "vnc", "browser"] {
        let svc = services
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {b}"));
        assert_eq!(svc["state"], "running", "{b}");
    }

    // The VNC server and the browser's debugger listen on the sandbox's
    // own loopback ...
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/desk/exec",
        Some(r#"{"argv":["cat","/proc/net/tcp"]}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let inside = json(&b)["stdout"].as_str().unwrap().to_string();
    for port in ["170C", "2406"] {
        assert!(
            inside
                .lines()
                .any(|l| l.contains(&format!("0100007F:{port} ")) && l.contains(" 0A ")),
            "nothing listens on the sandbox's 127.0.0.1:{port} (hex): {inside}"
        );
    }
    // ... and nothing of the sandbox listens on the host, loopback
    // included: every listener the host gained meanwhile belongs to a
    // process outside the sandbox.
    let after = host_listeners();
    // The supervisor is warden's own host side (its control socket is in
    // the state directory); the sandbox is everything below it.
    let supervisor = supervisor_pid(state.path(), "desk");
    let sandbox_sockets: HashSet<String> = tree(supervisor)
        .into_iter()
        .filter(|p| *p != supervisor)
        .flat_map(socket_inodes)
        .collect();
    assert!(
        sandbox_sockets.len() > 5,
        "the sandbox's processes were not found"
    );
    for (what, inode) in &after {
        if before.contains(&(what.clone(), inode.clone())) {
            continue;
        }
        assert!(
            !sandbox_sockets.contains(inode),
            "the sandbox listens on the host: {what}"
        );
        for port in [":170C", ":2406", ":17D3"] {
            assert!(
                !what.contains(port),
                "a new host listener on a desktop port: {what}"
            );
        }
        assert!(
            !what.contains("X11-unix") && !what.contains("warden-dbus"),
            "{what}"
        );
    }

    // A page through an allowed name: its colour fills the screen.
    let url = format!("http://page.test:{}/", page.port);
    let (s, b) = act(&d, "desk", "open", &format!(r#"{{"url":"{url}"}}"#), None);
    assert_eq!(s, 200, "{b}");
    until_screen(
        &d,
        "desk",
        "the allowed page",
        Duration::from_secs(30),
        |s| s.share(GREEN) > 0.3,
    );
    assert!(
        page.arrivals() > 0,
        "the page was shown without reaching its server"
    );

    // Typed into: the page reacts.
    let (s, b) = act(&d, "desk", "left_click", r#"{"x":640,"y":500}"#, None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = act(&d, "desk", "write", r#"{"text":"magic"}"#, None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = act(&d, "desk", "press", r#"{"keys":"Return"}"#, None);
    assert_eq!(s, 200, "{b}");
    until_screen(
        &d,
        "desk",
        "the page's answer to typing",
        Duration::from_secs(15),
        |s| s.share(MAGENTA) > 0.3,
    );

    // A denied name never loads: its listener sees nothing.
    let (s, b) = act(
        &d,
        "desk",
        "open",
        &format!(r#"{{"url":"http://denied.test:{}/"}}"#, denied.port),
        None,
    );
    assert_eq!(s, 200, "{b}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(denied.arrivals(), 0, "a denied name reached its server");
    // Both decisions are in the sandbox's log.
    let (_, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/desk/events?follow=false",
        None,
        None,
    );
    assert!(b.contains("page.test") && b.contains("denied.test"), "{b}");

    // Bad input: refused with its reason, nothing done.
    for (action, body, status) in [
        ("explode", "{}", 422),
        ("left_click", r#"{"x":1280,"y":5}"#, 422),
        ("move_mouse", r#"{"x":-1,"y":5}"#, 422),
        ("press", r#"{"keys":"--help"}"#, 422),
        ("open", r#"{"url":"file:///etc/passwd"}"#, 422),
        ("write", r#"{"txt":"a"}"#, 422),
    ] {
        let (s, b) = act(&d, "desk", action, body, None);
        assert_eq!(s, status, "{action} {body}: {b}");
        assert!(
            json(&b)["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{b}"
        );
    }

    // A view-only token sees the screen and may not touch it.
    // Tokens the owner made for this sandbox (the owner's sandboxes are
    // reached by no other token but an admin one).
    let viewer = token_for(state.path(), "viewer", &["desktop:view"], "desk");
    sees_the_screen(&d, &viewer, false);
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/desk/desktop/left_click",
        Some(r#"{"x":10,"y":10}"#),
        Some(&viewer),
    );
    assert_eq!(s, 403, "{b}");
    assert!(b.contains("desktop:control"), "{b}");
    // A token with desktop:control alone sees the screen too, and acts.
    let controller = token_for(state.path(), "controller", &["desktop:control"], "desk");
    sees_the_screen(&d, &controller, true);
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/desk/desktop/move_mouse",
        Some(r#"{"x":10,"y":10}"#),
        Some(&controller),
    );
    assert_eq!(s, 200, "{b}");
    eprintln!("desktop test took {:?}", began.elapsed());
}

#[test]
fn a_sandbox_without_a_desktop_refuses_desktop_calls() {
    let Some((_state, d)) = on_socket("no-desktop") else {
        return;
    };
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"plain"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    for (method, path, body) in [
        ("GET", "/v1/sandboxes/plain/desktop", None),
        ("GET", "/v1/sandboxes/plain/desktop/screenshot", None),
        ("POST", "/v1/sandboxes/plain/desktop/left_click", Some("{}")),
    ] {
        let (s, b) = call(&d, method, path, body, None);
        assert_eq!(s, 409, "{path}: {b}");
        assert_eq!(json(&b)["code"], "not_a_desktop", "{b}");
    }
    // The state is `GET .../desktop` alone; a GET of an action's path
    // runs nothing and says what the path takes.
    let (s, b) = call(&d, "GET", "/v1/sandboxes/plain/desktop/status", None, None);
    assert_eq!(s, 405, "{b}");
    assert!(
        json(&b)["message"].as_str().unwrap().contains("takes POST"),
        "{b}"
    );
}

/// Programs named as executables in `dir` (a root tree's `usr/bin`).
fn plant(dir: &Path, programs: &[&str]) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    for p in programs {
        let f = dir.join(p);
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn a_host_without_the_programs_is_told_the_apt_line_that_installs_them() {
    // Root trees in place of the host's system directories: one with
    // none of the desktop's programs, one that lacks only the browser and
    // the VNC server.
    let state = TempDir::new("desktop-missing");
    let empty = state.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = warden(
        state.path(),
        &[
            "create",
            "-P",
            "desktop",
            "--rootfs",
            empty.to_str().unwrap(),
            "nodesk",
        ],
    );
    assert_ne!(code(&o), 0);
    let e = stderr(&o);
    assert!(
        e.contains("`sudo apt-get install -y --no-install-recommends xvfb dbus xfwm4 xfce4-panel x11vnc chromium xdotool maim libnss3-tools`"),
        "{e}"
    );
    assert!(e.contains("Xvfb (package xvfb)"), "{e}");
    assert!(
        !sandbox_dir(state.path(), "nodesk").exists(),
        "a refused create left the sandbox behind"
    );
    let partial = state.path().join("partial");
    plant(
        &partial.join("usr/bin"),
        &[
            "Xvfb",
            "dbus-daemon",
            "xfwm4",
            "xfce4-panel",
            "xdotool",
            "maim",
            "certutil",
        ],
    );
    let o = warden(
        state.path(),
        &[
            "create",
            "-P",
            "desktop",
            "--rootfs",
            partial.to_str().unwrap(),
            "halfdesk",
        ],
    );
    assert_ne!(code(&o), 0);
    let e = stderr(&o);
    assert!(
        e.contains("lacks: x11vnc (package x11vnc), chromium (package chromium);")
            && e.contains("`sudo apt-get install -y --no-install-recommends x11vnc chromium`"),
        "{e}"
    );
    assert!(!sandbox_dir(state.path(), "halfdesk").exists());
    // Through the daemon: the same words, on the field, nothing made.
    if !curl_available() {
        return skip("curl is not installed (the API half)");
    }
    let d = Daemon::start(state.path(), false);
    let body = serde_json::json!({
        "name": "apidesk",
        "profile": "desktop",
        "spec": { "filesystem": { "rootfs": partial } },
    })
    .to_string();
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(s, 422, "{b}");
    let p = json(&b);
    assert_eq!(p["field"], "/spec/desktop", "{b}");
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("`sudo apt-get install -y --no-install-recommends x11vnc chromium`"),
        "{b}"
    );
    assert!(!sandbox_dir(state.path(), "apidesk").exists());
}

#[test]
fn a_desktop_in_a_vm_is_accepted_without_booting_it() {
    // Booting one is the VM's full set (tests/suite/vm_desktop.rs): here only
    // that the profile and the isolation go together.
    if let Some(why) = common::desktop::unavailable() {
        return skip(&why);
    }
    let state = TempDir::new("desktop-vm");
    ok(&warden(
        state.path(),
        &["create", "-P", "desktop", "--isolation", "vm", "vmdesk"],
    ));
    assert!(sandbox_dir(state.path(), "vmdesk").exists());
}

/// `token` reads the desktop's state (saying whether it may `control` it)
/// and takes a screenshot.
fn sees_the_screen(d: &Daemon, token: &str, control: bool) {
    let (s, b) = call_on(
        d,
        true,
        "GET",
        "/v1/sandboxes/desk/desktop",
        None,
        Some(token),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["control"], control, "{b}");
    let out = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
        .arg(format!("authorization: Bearer {token}"))
        .arg(format!(
            "http://{}/v1/sandboxes/desk/desktop/screenshot",
            d.tcp.as_ref().unwrap()
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
}

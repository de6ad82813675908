//! A desktop sandbox's screen and browser through `warden serve`: RFB over
//! the daemon's WebSocket (`.../desktop/vnc`), view-only unless the token
//! has `desktop:control`, and Chromium's DevTools (`.../desktop/cdp`),
//! both reached through connections the sandbox's init opens, so nothing
//! listens on the host. Some tests put a recorder on the sandbox's
//! 127.0.0.1:5900 in place of a VNC server, which writes down every byte
//! that reaches it; one makes a sandbox from the shipped `desktop` profile
//! (its X server, window manager, x11vnc and Chromium started by its
//! supervisor, as a person gets them) and watches, drives and debugs it
//! through the daemon (skipped, saying so, when the host lacks them).

use crate::common;
use crate::common::daemon::{call, json, on_socket, token, token_for, Daemon};
use crate::common::desktop::on_host;
use crate::common::rfb::*;
use crate::common::sockets::{listening_of, tcp_port_listens};
use crate::common::*;
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// A sandbox whose 127.0.0.1:5900 is a recorder: it greets like a VNC
/// server and appends, as hex, every byte a connection sends it to
/// /tmp/rfb.log (one line per read).
fn recorder_sandbox(d: &Daemon, name: &str) {
    let body = format!(r#"{{"name":"{name}"}}"#);
    let (s, b) = call(d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(s, 201, "{b}");
    let script = r#"import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 5900)); s.listen()
lock = threading.Lock()
def log(line):
    with lock, open('/tmp/rfb.log', 'a') as f: f.write(line + '\n')
def serve(c, n):
    c.sendall(b'RFB 003.008\n')
    while True:
        b = c.recv(65536)
        if not b: break
        log(f'{n} {b.hex()}')
n = 0
while True:
    c, _ = s.accept()
    n += 1
    log(f'{n} connection')
    threading.Thread(target=serve, args=(c, n)).start()
"#;
    common::desktop::background(d, name, &["python3", "-c", script]);
    // Listening once it has a connection to log (its own probe's, made
    // inside the sandbox), which is then cleared.
    let up = common::desktop::sh(
        d,
        name,
        "for i in $(seq 200); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 5900), 1).close()' 2>/dev/null && grep -q connection /tmp/rfb.log 2>/dev/null && echo up && exit; sleep 0.1; done",
    );
    assert!(up.contains("up"), "the recorder did not start");
    std::thread::sleep(Duration::from_millis(200));
    common::desktop::sh(d, name, "rm -f /tmp/rfb.log");
}

/// What reached the recorder, as one hex string per connection, in the
/// order they were accepted (the probe's, made before the log was
/// cleared, left out).
fn recorded(d: &Daemon, name: &str) -> Vec<String> {
    let log = common::desktop::sh(d, name, "cat /tmp/rfb.log 2>/dev/null");
    let mut out: std::collections::BTreeMap<u64, String> = Default::default();
    for line in log.lines() {
        let Some((n, rest)) = line.split_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap();
        let entry = out.entry(n);
        if rest == "connection" {
            entry.or_default();
        } else {
            entry.or_default().push_str(rest);
        }
    }
    out.into_values().collect()
}

/// The close frame's code, waiting for it (the session must end).
async fn closed_with(ws: &mut Ws) -> Option<u16> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(Message::Close(f)))) => return f.map(|f| u16::from(f.code)),
            Ok(None) | Ok(Some(Err(_))) => return None,
            Ok(Some(Ok(_))) => {}
            Err(_) => panic!("the session did not close"),
        }
    }
}

fn key(down: u8, sym: u32) -> Vec<u8> {
    let mut m = vec![4, down, 0, 0];
    m.extend_from_slice(&sym.to_be_bytes());
    m
}

fn pointer(mask: u8, x: u16, y: u16) -> Vec<u8> {
    let mut m = vec![5, mask];
    m.extend_from_slice(&x.to_be_bytes());
    m.extend_from_slice(&y.to_be_bytes());
    m
}

fn update_request(incremental: u8, w: u16, h: u16) -> Vec<u8> {
    let mut m = vec![3, incremental, 0, 0, 0, 0];
    m.extend_from_slice(&w.to_be_bytes());
    m.extend_from_slice(&h.to_be_bytes());
    m
}

#[test]
fn a_watchers_keys_pointer_and_clipboard_never_reach_the_vnc_server() {
    let Some((_state, d)) = on_socket("desk-viewonly") else {
        return;
    };
    recorder_sandbox(&d, "rec");
    // Tokens the owner made for this sandbox: the owner's sandboxes are
    // reached by no other token but an admin one.
    let viewer = token_for(&d.state, "viewer", &["desktop:view"], "rec");
    let driver = token_for(
        &d.state,
        "driver",
        &["desktop:view", "desktop:control"],
        "rec",
    );
    let mut input = key(1, 0x61);
    input.extend(pointer(1, 100, 50));
    input.extend([6, 0, 0, 0, 0, 0, 0, 3]);
    input.extend(b"pwd");
    input.extend(update_request(0, 1024, 768));
    runtime().block_on(async {
        for t in [&viewer, &driver] {
            let mut ws = connect(&d, "/v1/sandboxes/rec/desktop/vnc", Some(t))
                .await
                .unwrap();
            let mut buf = Vec::new();
            assert!(read_bytes(&mut ws, &mut buf, 12).await);
            assert_eq!(&buf, b"RFB 003.008\n");
            // Version, None, ClientInit asking for exclusive access.
            send(&mut ws, b"RFB 003.008\n\x01\x00").await;
            send(&mut ws, &input).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let _ = ws.close(None).await;
        }
    });
    let seen = recorded(&d, "rec");
    assert_eq!(seen.len(), 2, "{seen:?}");
    // Both: the handshake, with the shared flag forced on.
    let handshake = common::hex(b"RFB 003.008\n\x01\x01");
    assert!(seen.iter().all(|s| s.starts_with(&handshake)), "{seen:?}");
    // The watcher's input never arrived; its update request did.
    assert_eq!(
        seen[0],
        format!("{handshake}{}", common::hex(&update_request(0, 1024, 768))),
        "the watcher's input reached the VNC server"
    );
    // The driver's all did.
    assert_eq!(seen[1], format!("{handshake}{}", common::hex(&input)));
}

#[test]
fn a_stream_the_daemon_cannot_parse_closes_the_session_before_it_reaches_the_server() {
    let Some((_state, d)) = on_socket("desk-malformed") else {
        return;
    };
    recorder_sandbox(&d, "mal");
    let viewer = token_for(&d.state, "viewer", &["desktop:view"], "mal");
    runtime().block_on(async {
        let mut ws = connect(&d, "/v1/sandboxes/mal/desktop/vnc", Some(&viewer))
            .await
            .unwrap();
        let mut buf = Vec::new();
        read_bytes(&mut ws, &mut buf, 12).await;
        send(&mut ws, b"RFB 003.008\n\x01\x01").await;
        // Message type 250 (xvp: reboot the machine), then a key event
        // the daemon would otherwise drop and an update request.
        let mut bad = vec![250, 0, 1, 2];
        bad.extend(key(1, 0x61));
        bad.extend(update_request(0, 10, 10));
        send(&mut ws, &bad).await;
        assert_eq!(closed_with(&mut ws).await, Some(1008));
        // A version the daemon does not relay closes at once, too.
        let mut ws = connect(&d, "/v1/sandboxes/mal/desktop/vnc", Some(&viewer))
            .await
            .unwrap();
        let mut buf = Vec::new();
        read_bytes(&mut ws, &mut buf, 12).await;
        send(&mut ws, b"RFB 003.003\n").await;
        assert_eq!(closed_with(&mut ws).await, Some(1008));
    });
    std::thread::sleep(Duration::from_millis(300));
    let seen = recorded(&d, "mal");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0], common::hex(b"RFB 003.008\n\x01\x01"), "{seen:?}");
    assert_eq!(seen[1], "", "{seen:?}");
}

#[test]
fn a_token_without_the_scope_is_refused_before_any_byte_reaches_the_sandbox() {
    let Some((_state, d)) = on_socket("desk-scope") else {
        return;
    };
    recorder_sandbox(&d, "sc");
    // Every scope but the desktop's two (desktop:control grants
    // desktop:view).
    let others = token(
        &d.state,
        "others",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
    );
    let viewer = token_for(&d.state, "viewer", &["desktop:view"], "sc");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"elsewhere","start":false}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let other_box = ok(&warden(
        &d.state,
        &[
            "token",
            "create",
            "agent",
            "--scope",
            "desktop:view",
            "--scope",
            "desktop:control",
            "--sandbox",
            "elsewhere",
        ],
    ))
    .trim()
    .lines()
    .last()
    .unwrap()
    .to_string();
    runtime().block_on(async {
        let path = "/v1/sandboxes/sc/desktop/vnc";
        assert_eq!(connect(&d, path, Some(&others)).await.err(), Some(403));
        assert_eq!(connect(&d, path, Some(&other_box)).await.err(), Some(403));
        assert_eq!(
            connect(&d, path, Some("wdn_000000000000_nope")).await.err(),
            Some(401)
        );
    });
    // DevTools drive the browser: desktop:view is not enough.
    for p in [
        "/v1/sandboxes/sc/desktop/cdp/json/version",
        "/v1/sandboxes/sc/desktop/cdp/json/version/",
        "/v1/sandboxes/sc/desktop/cdp/json/list",
    ] {
        let (s, b) = call(&d, "GET", p, None, Some(&viewer));
        assert_eq!(s, 403, "{p}: {b}");
        assert!(b.contains("desktop:control"), "{b}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        recorded(&d, "sc").is_empty(),
        "a refused caller's connection reached the sandbox"
    );
}

#[test]
fn revoking_the_token_closes_its_open_screen() {
    let Some((_state, d)) = on_socket("desk-revoke") else {
        return;
    };
    recorder_sandbox(&d, "rv");
    let viewer = token_for(&d.state, "viewer", &["desktop:view"], "rv");
    runtime().block_on(async {
        let mut ws = connect(&d, "/v1/sandboxes/rv/desktop/vnc", Some(&viewer))
            .await
            .unwrap();
        let mut buf = Vec::new();
        read_bytes(&mut ws, &mut buf, 12).await;
        send(&mut ws, b"RFB 003.008\n\x01\x01").await;
        let id = viewer.split('_').nth(1).unwrap();
        ok(&warden(&d.state, &["token", "revoke", id]));
        assert_eq!(closed_with(&mut ws).await, Some(1008));
    });
}

#[test]
fn a_sandbox_that_is_not_a_desktop_says_so() {
    let Some((_state, d)) = on_socket("desk-none") else {
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
    let (s, b) = call(&d, "GET", "/v1/sandboxes/plain/desktop", None, None);
    assert_eq!(s, 409, "{b}");
    assert_eq!(json(&b)["code"], "not_a_desktop", "{b}");
    runtime().block_on(async {
        assert_eq!(
            connect(&d, "/v1/sandboxes/plain/desktop/vnc", None)
                .await
                .err(),
            Some(409)
        );
    });
    let (s, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/plain/desktop/cdp/json/version",
        None,
        None,
    );
    assert_eq!(s, 409, "{b}");
    assert!(b.contains("not a desktop"), "{b}");
}

/// One raw FramebufferUpdate of the whole screen: its pixels.
async fn full_frame(ws: &mut Ws, w: u16, h: u16, bpp: usize, mut buf: Vec<u8>) -> Vec<u8> {
    // SetEncodings: raw only.
    send(ws, &[2, 0, 0, 1, 0, 0, 0, 0]).await;
    send(ws, &update_request(0, w, h)).await;
    let mut pixels = Vec::new();
    assert!(read_bytes(ws, &mut buf, 4).await);
    assert_eq!(buf[0], 0, "not a FramebufferUpdate: {:?}", &buf[..4]);
    let rects = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    let mut at = 4;
    for _ in 0..rects {
        assert!(read_bytes(ws, &mut buf, at + 12).await);
        let rw = u16::from_be_bytes([buf[at + 4], buf[at + 5]]) as usize;
        let rh = u16::from_be_bytes([buf[at + 6], buf[at + 7]]) as usize;
        let enc = i32::from_be_bytes([buf[at + 8], buf[at + 9], buf[at + 10], buf[at + 11]]);
        at += 12;
        if enc != 0 {
            // A pseudo-rectangle (cursor, size) carries no raw pixels we
            // asked for; the test only asked for raw.
            panic!("encoding {enc} in reply to raw only");
        }
        let len = rw * rh * bpp;
        assert!(read_bytes(ws, &mut buf, at + len).await);
        pixels.extend_from_slice(&buf[at..at + len]);
        at += len;
    }
    pixels
}

fn distinct_pixels(pixels: &[u8], bpp: usize) -> usize {
    let mut seen = std::collections::HashSet::new();
    for p in pixels.chunks_exact(bpp) {
        seen.insert(p.to_vec());
        if seen.len() > 16 {
            break;
        }
    }
    seen.len()
}

/// The shipped desktop, watched, driven and debugged through the daemon
/// only: one desktop sandbox for every check of this file that needs a
/// real one (it is the expensive part), each check a function that says
/// what it proves.
#[test]
fn a_desktop_from_the_shipped_profile_is_watched_driven_and_debugged_only_through_the_daemon() {
    if let Some(why) = common::desktop::unavailable() {
        return skip(&why);
    }
    if !on_host("xev") {
        return skip("the host lacks xev (x11-utils), which records the keys the desktop gets");
    }
    let Some((state, d)) = on_socket("desk-real") else {
        return;
    };
    let began = std::time::Instant::now();
    let before_host = (tcp_port_listens(5900), tcp_port_listens(9222));
    let info = common::desktop::start(&d, "real", serde_json::json!({}));
    let viewer = token_for(&d.state, "viewer", &["desktop:view"], "real");
    // desktop:control alone: it grants desktop:view.
    let driver = token_for(&d.state, "driver", &["desktop:control"], "real");
    assert_eq!(info["control"], true, "the owner may drive: {info}");
    for (t, control) in [(&viewer, false), (&driver, true)] {
        let (s, b) = call(&d, "GET", "/v1/sandboxes/real/desktop", None, Some(t));
        assert_eq!(s, 200, "{b}");
        assert_eq!(json(&b)["control"], control, "{b}");
    }
    the_screen_comes_through_with_real_pixels_and_nothing_listens_on_the_host(
        &d,
        state.path(),
        &viewer,
        before_host,
    );
    a_watchers_pointer_and_keys_do_not_move_the_desktop_and_a_controllers_do(&d, &viewer, &driver);
    devtools_through_the_daemon_point_back_at_the_daemon_and_answer(&d, &driver);
    eprintln!("the desktop checks took {:?}", began.elapsed());
}

fn the_screen_comes_through_with_real_pixels_and_nothing_listens_on_the_host(
    d: &Daemon,
    state: &std::path::Path,
    viewer: &str,
    before_host: (bool, bool),
) {
    let supervisor = supervisor_pid(state, "real");
    let ours = [d.pid(), supervisor];
    let before = listening_of(&ours);
    runtime().block_on(async {
        let mut ws = connect(d, "/v1/sandboxes/real/desktop/vnc", Some(viewer))
            .await
            .unwrap();
        let (w, h, bpp, rest) = rfb_handshake(&mut ws).await;
        assert_eq!((w, h), (1280, 800), "the profile's screen");
        // Up means the VNC server answers; the window manager, the panel
        // and the browser may still be drawing: frames until they have.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut rest = rest;
        loop {
            let pixels = full_frame(&mut ws, w, h, bpp, std::mem::take(&mut rest)).await;
            assert_eq!(pixels.len(), w as usize * h as usize * bpp);
            if distinct_pixels(&pixels, bpp) > 16 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the screen came through blank"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // While the session is open: nothing of it listens on the host.
        assert_eq!(
            (tcp_port_listens(5900), tcp_port_listens(9222)),
            before_host,
            "the sandbox's VNC or DevTools port listens on the host"
        );
        assert_eq!(listening_of(&ours), before, "a new listener on the host");
    });
}

/// Where X says the pointer is, inside the sandbox.
fn pointer_at(d: &Daemon, name: &str) -> String {
    common::desktop::sh(d, name, "xdotool getmouselocation")
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

fn a_watchers_pointer_and_keys_do_not_move_the_desktop_and_a_controllers_do(
    d: &Daemon,
    viewer: &str,
    driver: &str,
) {
    // An X client in the sandbox with a window of its own at the top
    // left, given the keyboard's focus, that writes down every key it
    // gets (the desktop's own windows would otherwise take them). The
    // browser's window is shown first, so that it takes no focus after.
    let shown = common::desktop::sh(
        d,
        "real",
        "timeout 30 xdotool search --sync --onlyvisible --class chromium >/dev/null && echo shown",
    );
    assert!(
        shown.contains("shown"),
        "the browser's window is not on the screen"
    );
    common::desktop::background(
        d,
        "real",
        &[
            "sh",
            "-c",
            "exec xev -event keyboard -geometry 400x300+0+0 -name warden-keys > /tmp/keys.log",
        ],
    );
    let focused = common::desktop::sh(
        d,
        "real",
        "timeout 20 xdotool search --sync --name warden-keys windowfocus --sync && echo focused",
    );
    assert!(focused.contains("focused"), "the key recorder has no focus");
    common::desktop::sh(d, "real", "xdotool mousemove 640 400");
    let start = pointer_at(d, "real");
    assert_eq!(start, "x:640 y:400");
    let drive = |t: &str| {
        runtime().block_on(async {
            let mut ws = connect(d, "/v1/sandboxes/real/desktop/vnc", Some(t))
                .await
                .unwrap();
            let (w, h, bpp, rest) = rfb_handshake(&mut ws).await;
            // The pointer moved (no button: a click would move the focus),
            // and a key typed.
            let mut input = pointer(0, 100, 50);
            input.extend(key(1, 0x61));
            input.extend(key(0, 0x61));
            send(&mut ws, &input).await;
            // A frame after the input: the server has read what came
            // before it.
            full_frame(&mut ws, w, h, bpp, rest).await;
            let _ = ws.close(None).await;
        })
    };
    drive(viewer);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pointer_at(d, "real"), start, "a watcher moved the pointer");
    let keys = common::desktop::sh(d, "real", "cat /tmp/keys.log");
    assert!(!keys.contains("KeyPress"), "a watcher typed: {keys}");
    drive(driver);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        pointer_at(d, "real"),
        "x:100 y:50",
        "the controller's pointer did not arrive"
    );
    let keys = common::desktop::sh(d, "real", "cat /tmp/keys.log");
    assert!(
        keys.contains("KeyPress") && keys.contains("(keysym 0x61, a)"),
        "the controller's key did not arrive: {keys}"
    );
}

fn devtools_through_the_daemon_point_back_at_the_daemon_and_answer(d: &Daemon, driver: &str) {
    let (s, b) = call(
        d,
        "GET",
        "/v1/sandboxes/real/desktop/cdp/json/version/",
        None,
        Some(driver),
    );
    assert_eq!(s, 200, "{b}");
    let v = json(&b);
    let url = v["webSocketDebuggerUrl"].as_str().unwrap().to_string();
    assert!(
        url.starts_with("ws://warden/v1/sandboxes/real/desktop/cdp/devtools/browser/"),
        "{url}"
    );
    assert!(!b.contains("9222"), "the sandbox's own address leaked: {b}");
    let (s, b) = call(
        d,
        "GET",
        "/v1/sandboxes/real/desktop/cdp/json/list",
        None,
        Some(driver),
    );
    assert_eq!(s, 200, "{b}");
    assert!(
        json(&b)
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["type"] == "page"),
        "{b}"
    );
    let path = url.strip_prefix("ws://warden").unwrap().to_string();
    runtime().block_on(async {
        let mut ws = connect(d, &path, Some(driver)).await.unwrap();
        ws.send(Message::Text(
            r#"{"id":1,"method":"Browser.getVersion"}"#.into(),
        ))
        .await
        .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match tokio::time::timeout_at(deadline, ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => {
                    let m = json(&t);
                    if m["id"] == 1 {
                        assert!(
                            m["result"]["product"]
                                .as_str()
                                .unwrap_or("")
                                .contains("Chrome"),
                            "{m}"
                        );
                        break;
                    }
                }
                Ok(Some(Ok(_))) => {}
                other => panic!("no answer over DevTools: {other:?}"),
            }
        }
        // A made-up target is an HTTP error, before any upgrade.
        let bad = "/v1/sandboxes/real/desktop/cdp/devtools/page/0000";
        assert_eq!(connect(d, bad, Some(driver)).await.err(), Some(502));
    });
}

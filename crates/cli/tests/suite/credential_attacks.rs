//! Credentials that outlive their sandbox, and host paths shown to token
//! holders. A per-sandbox token, an E2B envd access token and a signed
//! file URL are made for one sandbox: once it is removed, however it is
//! removed, each is refused, and a later sandbox given the same name never
//! honours them. A token holder who may read a sandbox is shown nothing of
//! where warden keeps it on the host. Each test drives a real `warden
//! serve` over HTTP and judges from its answers.

use crate::common::daemon::*;
use crate::common::*;
use std::process::Command;
use std::time::Duration;

/// A refusal of the credential itself (not a missing sandbox, not a
/// success).
fn refused(status: u16, body: &str, what: &str) {
    assert!(
        status == 401 || status == 403,
        "{what}: status {status}, expected 401 or 403: {body}"
    );
}

/// A sandbox made by the owner over the socket.
fn create(d: &Daemon, name: &str) {
    let (s, b) = call(
        d,
        "POST",
        "/v1/sandboxes",
        Some(&format!(r#"{{"name":"{name}"}}"#)),
        None,
    );
    assert_eq!(s, 201, "{b}");
}

/// A per-sandbox token made by the owner through the API.
fn sandbox_token(d: &Daemon, name: &str, sandbox: &str) -> String {
    api_token(d, name, &["exec", "files", "sandboxes:read"], Some(sandbox))
}

/// Each data route of sandbox `sb`, called over TCP with `token`.
fn data_routes(d: &Daemon, sb: &str, token: &str) -> Vec<(String, u16, String)> {
    let calls: [(&str, String, Option<&str>); 5] = [
        ("GET", format!("/v1/sandboxes/{sb}"), None),
        (
            "POST",
            format!("/v1/sandboxes/{sb}/exec"),
            Some(r#"{"shell":"echo ran"}"#),
        ),
        ("GET", format!("/v1/sandboxes/{sb}/files/list?path=."), None),
        (
            "GET",
            format!("/v1/sandboxes/{sb}/files?path=note.txt"),
            None,
        ),
        (
            "GET",
            format!("/v1/sandboxes/{sb}/events?follow=false"),
            None,
        ),
    ];
    calls
        .into_iter()
        .map(|(m, p, body)| {
            let (s, b) = call_on(d, true, m, &p, body, Some(token));
            (format!("{m} {p}"), s, b)
        })
        .collect()
}

#[test]
fn a_per_sandbox_token_ends_with_its_sandbox_and_a_namesake_refuses_it() {
    let Some((state, d)) = over_tcp("cred-native") else {
        return;
    };
    create(&d, "x");
    let old = sandbox_token(&d, "agent", "x");
    for (what, s, b) in data_routes(&d, "x", &old) {
        // The note is not written yet: the read alone finds nothing.
        let want = if what.contains("note.txt") { 404 } else { 200 };
        assert_eq!(s, want, "{what} before the removal: {b}");
        if what.contains("exec") {
            assert!(b.contains("ran"), "{b}");
        }
    }
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/x", None, None);
    assert_eq!(s, 204, "{b}");
    // Right after the removal the token itself is refused, not answered
    // with "no such sandbox".
    let (s, b) = call_on(&d, true, "GET", "/v1/sandboxes/x", None, Some(&old));
    refused(s, &b, "the removed sandbox's token");
    // A new sandbox takes the name; the old token reaches none of it.
    create(&d, "x");
    let (s, b) = curl(
        &d,
        "PUT",
        "/v1/sandboxes/x/files?path=note.txt",
        &["--data-binary", "the new sandbox's note"],
    );
    assert!(s == 200 || s == 204, "{s} {}", String::from_utf8_lossy(&b));
    for (what, s, b) in data_routes(&d, "x", &old) {
        refused(s, &b, &what);
        assert!(
            !b.contains("new sandbox's note") && !b.contains("ran"),
            "{what}: {b}"
        );
    }
    // The token is recorded as revoked, and one made for the new sandbox
    // works.
    let list = ok(&warden(state.path(), &["token", "list", "--json"]));
    let agent = json(&list)
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "agent")
        .cloned()
        .unwrap();
    assert_eq!(agent["revoked"], true, "{list}");
    let new = sandbox_token(&d, "agent2", "x");
    let (s, b) = call_on(&d, true, "GET", "/v1/sandboxes/x", None, Some(&new));
    assert_eq!(s, 200, "{b}");
}

#[test]
fn a_token_for_a_sandbox_removed_behind_the_daemon_is_refused_by_its_namesake() {
    let Some((state, d)) = over_tcp("cred-cli") else {
        return;
    };
    ok(&warden(state.path(), &["create", "y"]));
    let old = ok(&warden(
        state.path(),
        &[
            "token",
            "create",
            "agent",
            "--scope",
            "files",
            "--scope",
            "sandboxes:read",
            "--sandbox",
            "y",
        ],
    ))
    .trim()
    .to_string();
    let (s, b) = call_on(&d, true, "GET", "/v1/sandboxes/y", None, Some(&old));
    assert_eq!(s, 200, "{b}");
    // Removed and made again with the CLI: the daemon's records never saw
    // either.
    ok(&warden(state.path(), &["rm", "y"]));
    ok(&warden(state.path(), &["create", "y"]));
    for path in ["/v1/sandboxes/y", "/v1/sandboxes/y/files/list?path=."] {
        let (s, b) = call_on(&d, true, "GET", path, None, Some(&old));
        refused(s, &b, path);
    }
}

/// One exchange with the E2B door: status and body.
fn e2b(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, String) {
    exchange(method, &format!("http://{addr}{path}"), headers, body, &[])
}

/// The query of a URL the SDK signs for reading `path` with `key`.
fn signed_read(path: &str, key: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{path}:read:user:{key}").as_bytes());
    let sig = base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest);
    format!(
        "/files?path={}&username=user&signature=v1_{}",
        q(path),
        q(&sig)
    )
}

/// A daemon with its E2B door, a token for it, and a sandbox the door
/// made with the envd access token it answered.
struct E2bSandbox {
    state: TempDir,
    addr: String,
    d: Daemon,
    token: String,
    id: String,
    key: String,
}

impl E2bSandbox {
    fn new(tag: &str) -> E2bSandbox {
        let state = TempDir::new(tag);
        let addr = format!("127.0.0.1:{}", free_port());
        let d = Daemon::start_with(state.path(), true, &["--e2b", &addr], &[]);
        let token = token(
            state.path(),
            "e2b",
            &["sandboxes:read", "sandboxes:write", "exec", "files"],
        );
        let (s, b) = e2b(
            &addr,
            "POST",
            "/sandboxes",
            &[("x-api-key", &token)],
            Some(r#"{"templateID":"base","timeout":300}"#),
        );
        assert!(s == 200 || s == 201, "{s} {b}");
        let made = json(&b);
        let id = made["sandboxID"].as_str().unwrap().to_string();
        let key = made["envdAccessToken"].as_str().unwrap().to_string();
        E2bSandbox {
            state,
            addr,
            d,
            token,
            id,
            key,
        }
    }
}

#[test]
fn an_envd_access_token_and_a_signed_url_end_with_their_sandbox() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let E2bSandbox {
        state,
        addr,
        d,
        token: _,
        id,
        key,
    } = E2bSandbox::new("cred-e2b");
    assert!(key.starts_with("wde_"), "{key}");
    // Written by the native API into the workspace; read by the door at
    // its absolute path (E2B's relative paths are its home's).
    let file = "/workspace/note.txt";
    let write = |text: &str| {
        let (s, b) = curl(
            &d,
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=note.txt"),
            &["--data-binary", text],
        );
        assert!(s == 200 || s == 204, "{s} {}", String::from_utf8_lossy(&b));
    };
    write("the first sandbox's note");
    let with_key = |key: &str| {
        e2b(
            &addr,
            "GET",
            &format!("/files?path={}", q(file)),
            &[("x-access-token", key), ("e2b-sandbox-id", &id)],
            None,
        )
    };
    let (s, b) = with_key(&key);
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("first sandbox's note"), "{b}");
    let (s, b) = e2b(&addr, "GET", &signed_read(file, &key), &[], None);
    assert_eq!(s, 200, "{b}");
    // Removed behind the daemon, and a sandbox of the same name made.
    ok(&warden(state.path(), &["stop", "--time", "1s", &id]));
    ok(&warden(state.path(), &["rm", &id]));
    create(&d, &id);
    write("the second sandbox's note");
    let (s, b) = with_key(&key);
    refused(s, &b, "the envd access token of a removed sandbox");
    assert!(!b.contains("second sandbox's note"), "{b}");
    let (s, b) = e2b(&addr, "GET", &signed_read(file, &key), &[], None);
    refused(s, &b, "a URL signed for a removed sandbox");
    assert!(!b.contains("second sandbox's note"), "{b}");
}

#[test]
fn a_download_through_a_signed_url_ends_when_its_sandbox_is_killed() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let E2bSandbox {
        state: _state,
        addr,
        d,
        token,
        id,
        key,
    } = E2bSandbox::new("cred-signed-stream");
    // 64 MiB, read at 1 MiB/s: about a minute if nothing ends it.
    let (s, b) = call(
        &d,
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(r#"{"argv":["sh","-c","head -c 67108864 /dev/zero > /workspace/big.bin"]}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let path = signed_read("/home/user/big.bin", &key);
    // A reader at 1 MB/s with a small receive buffer, so that what the
    // kernels hold in flight when the sandbox is killed is a few seconds'
    // worth, not the ten that loopback's autotuned buffers would.
    const READER: &str = r#"import socket, sys, time
host, port = sys.argv[1].rsplit(':', 1)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
s.connect((host, int(port)))
s.sendall(('GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % (sys.argv[2], sys.argv[1])).encode())
got = 0
s.settimeout(90)
while True:
    b = s.recv(16384)
    if not b:
        break
    got += len(b)
    time.sleep(len(b) / 1e6)
print(got)
"#;
    let began = std::time::Instant::now();
    let reader = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            Command::new("python3")
                .args(["-c", READER, &addr, &path])
                .output()
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let (s, b) = e2b(
        &addr,
        "DELETE",
        &format!("/sandboxes/{id}"),
        &[("x-api-key", &token)],
        None,
    );
    assert!(s == 200 || s == 204, "{s} {b}");
    let killed = began.elapsed();
    let out = reader.join().unwrap();
    let took = began.elapsed() - killed;
    let got: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(
        got > 0,
        "the reader got nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < Duration::from_secs(10),
        "the download went on {took:?} after its sandbox was killed ({got} bytes)"
    );
    assert!(got < 64 << 20, "the whole file came: {got} bytes");
}

#[test]
fn a_token_holder_is_shown_no_host_path_of_the_state_directory() {
    let Some((state, d)) = over_tcp("cred-paths") else {
        return;
    };
    create(&d, "z");
    let state_dir = state.path().join("warden").display().to_string();
    // The owner is shown where the sandbox's own workspace is.
    let (s, b) = call(&d, "GET", "/v1/sandboxes/z", None, None);
    assert_eq!(s, 200, "{b}");
    assert!(b.contains(&state_dir), "the owner sees the workspace: {b}");
    let reader = ok(&warden(
        state.path(),
        &["token", "create", "reader", "--scope", "sandboxes:read"],
    ))
    .trim()
    .to_string();
    let agent = sandbox_token(&d, "agent", "z");
    for token in [&reader, &agent] {
        for path in [
            "/v1/sandboxes/z",
            "/v1/sandboxes",
            "/v1/sandboxes/z/events?follow=false",
        ] {
            let (s, b) = call_on(&d, true, "GET", path, None, Some(token));
            if token == &agent && path == "/v1/sandboxes" {
                // Not part of a sandbox's data API.
                assert_eq!(s, 403, "{b}");
                continue;
            }
            if token == &reader && path != "/v1/sandboxes" {
                // The owner's sandbox is not a general token's to see.
                assert_eq!(s, 404, "{b}");
                assert!(!b.contains(&state_dir), "{path}: {b}");
                continue;
            }
            assert_eq!(s, 200, "{path}: {b}");
            assert!(
                !b.contains(&state_dir),
                "{path} shows the state directory: {b}"
            );
            // The general token lists only what it made: nothing here.
            if token != &reader {
                assert!(b.contains("\"z\"") || b.contains("created"), "{path}: {b}");
            }
        }
    }
}

#[test]
fn a_token_holder_is_shown_no_host_path_of_a_project_in_any_event() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("cred-project");
    let project = state.path().join("secret-project");
    std::fs::create_dir_all(&project).unwrap();
    let d = Daemon::start(state.path(), true);
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(&format!(
            r#"{{"name":"p","workspace":"{}"}}"#,
            project.display()
        )),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let agent = sandbox_token(&d, "agent", "p");
    let (s, b) = call_on(
        &d,
        true,
        "GET",
        "/v1/sandboxes/p/events?follow=false",
        None,
        Some(&agent),
    );
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("created"), "{b}");
    assert!(
        !b.contains("secret-project"),
        "the events show the project's path: {b}"
    );
    assert!(
        !b.contains("/sys/fs/cgroup"),
        "the events show the cgroup: {b}"
    );
    // The owner's own view keeps it.
    let (_, b) = call(&d, "GET", "/v1/sandboxes/p/events?follow=false", None, None);
    assert!(b.contains("secret-project"), "{b}");
}

/// One exchange over TCP with extra headers: status, the `set-cookie`
/// header if any, and the body.
fn with_headers(
    d: &Daemon,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Option<String>, String) {
    let (status, head, body) = http_on(d.tcp.as_ref().unwrap(), method, path, headers, body);
    let cookie =
        header(&head, "set-cookie").map(|v| v.split(';').next().unwrap_or("").trim().to_string());
    (status, cookie, body)
}

#[test]
fn a_browser_session_of_a_sandboxs_token_ends_with_the_sandbox() {
    let Some((state, d)) = over_tcp("cred-session") else {
        return;
    };
    create(&d, "w");
    let token = sandbox_token(&d, "agent", "w");
    let origin = format!("http://{}", d.tcp.as_ref().unwrap());
    let login = serde_json::json!({ "token": token }).to_string();
    let (s, cookie, b) = with_headers(&d, "POST", "/login", &[("origin", &origin)], Some(&login));
    assert_eq!(s, 200, "{b}");
    let cookie = cookie.expect("a session cookie");
    let csrf = json(&b)["csrf"].as_str().unwrap().to_string();
    let browse = |path: &str| {
        with_headers(
            &d,
            "GET",
            path,
            &[
                ("cookie", &cookie),
                ("x-warden-csrf", &csrf),
                ("origin", &origin),
            ],
            None,
        )
    };
    let (s, _, b) = browse("/v1/sandboxes/w");
    assert_eq!(s, 200, "{b}");
    // Removed and made again behind the daemon's back: nothing revoked the
    // token, and the session must still end.
    ok(&warden(state.path(), &["stop", "--time", "1s", "w"]));
    ok(&warden(state.path(), &["rm", "w"]));
    create(&d, "w");
    for path in [
        "/v1/sandboxes/w",
        "/v1/sandboxes/w/files/list?path=.",
        "/session",
    ] {
        let (s, _, b) = browse(path);
        refused(s, &b, path);
    }
    let (s, _, b) = with_headers(&d, "POST", "/login", &[("origin", &origin)], Some(&login));
    refused(s, &b, "a new login with the removed sandbox's token");
}

/// Every answer that describes a sandbox (pause, resume, fork, a sandbox
/// made from a snapshot, not only the listed routes) shows a token holder
/// no host path: the description is found by its shape.
#[test]
fn no_answer_describing_a_sandbox_shows_a_token_holder_a_host_path() {
    let Some((state, d)) = over_tcp("cred-shapes") else {
        return;
    };
    let state_dir = state.path().join("warden").display().to_string();
    let t = api_token(&d, "maker", &["sandboxes:write", "sandboxes:read"], None);
    let call_t = |method: &str, path: &str, body: Option<&str>| {
        let (s, b) = call_on(&d, true, method, path, body, Some(&t));
        assert!(s < 300, "{method} {path}: {s} {b}");
        assert!(
            !b.contains(&state_dir),
            "{method} {path} shows the state directory: {b}"
        );
        b
    };
    call_t("POST", "/v1/sandboxes", Some(r#"{"name":"shaped"}"#));
    call_t("POST", "/v1/sandboxes/shaped/pause", None);
    call_t("POST", "/v1/sandboxes/shaped/resume", None);
    let forks = call_t("POST", "/v1/sandboxes/shaped/fork", Some(r#"{"count":1}"#));
    assert!(forks.contains("shaped"), "{forks}");
    call_t(
        "POST",
        "/v1/sandboxes/shaped/snapshots",
        Some(r#"{"name":"shaped-snap"}"#),
    );
    call_t(
        "POST",
        "/v1/snapshots/shaped-snap/sandboxes",
        Some(r#"{"name":"from-snap"}"#),
    );
}

//! The doors' trust boundary, attacked through the real daemon: nothing a
//! caller who is not the owner sends (a token holder over HTTP, an E2B
//! client) is ever read as the owner's configuration. Each attack plants a
//! profile whose secret runs a program on the host, and checks that the
//! program never ran and that no sandbox was made.

use crate::common::daemon::*;
use crate::common::mcp::CurlSession;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The host as an attacker would like it: a profile of the caller's in
/// the daemon's working directory and in a sandbox's saved layer, a preset
/// beside the owner's catalogue, and the owner's own catalogue.
struct Host {
    dir: TempDir,
    marker: PathBuf,
}

impl Host {
    fn new(tag: &str) -> Host {
        let dir = TempDir::new(tag);
        let marker = dir.path().join("ran-on-host");
        let evil = evil_profile(&marker);
        std::fs::create_dir_all(dir.path().join("cwd")).unwrap();
        std::fs::write(dir.path().join("cwd/evil.yaml"), &evil).unwrap();
        let config = dir.path().join("config");
        std::fs::create_dir_all(config.join("warden/profiles")).unwrap();
        std::fs::create_dir_all(config.join("warden/presets")).unwrap();
        // `presets: [../../climb]` would reach this from the presets
        // directory.
        std::fs::write(config.join("climb.yaml"), "domains: [evil.test]\n").unwrap();
        // The owner's profile may pin a name to the host's loopback: the
        // owner wrote it.
        std::fs::write(
            config.join("warden/profiles/owners.yaml"),
            "egress:\n  domains: [pinned.test]\n  hosts: {pinned.test: 127.0.0.1}\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Host { dir, marker }
    }

    fn daemon(&self, args: &[&str], tcp: bool) -> Daemon {
        let p = self.dir.path();
        Daemon::start_in(
            Some(&p.join("cwd")),
            p,
            tcp,
            args,
            &[
                ("XDG_CONFIG_HOME", &p.join("config")),
                ("HOME", &p.join("home")),
            ],
        )
    }

    fn evil(&self) -> String {
        self.dir.path().join("cwd/evil.yaml").display().to_string()
    }
}

/// A profile whose secret's source is a program: read as configuration,
/// the program runs on the host when the sandbox starts.
fn evil_profile(marker: &Path) -> String {
    format!(
        "secrets:\n  X:\n    from_command: [/usr/bin/touch, {}]\n    hosts: [evil.test]\negress:\n  domains: [evil.test]\n",
        marker.display()
    )
}

fn sandboxes(d: &Daemon) -> Vec<String> {
    let (_, b) = call(d, "GET", "/v1/sandboxes", None, None);
    json(&b)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A JSON body sent over TCP with a token.
fn json_tcp(d: &Daemon, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    tcp(
        d,
        method,
        path,
        token,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
        ],
    )
}

/// One HTTP exchange over TCP with a token and extra curl arguments.
fn tcp(d: &Daemon, method: &str, path: &str, token: &str, extra: &[&str]) -> (u16, String) {
    let url = format!("http://{}{path}", d.tcp.as_ref().unwrap());
    let bearer = format!("Bearer {token}");
    exchange(method, &url, &[("authorization", &bearer)], None, extra)
}

#[test]
fn a_token_holder_names_no_file_as_a_profile_in_any_spelling_and_nothing_is_read() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-names");
    let d = host.daemon(&[], true);
    let t = token(
        host.dir.path(),
        "writer",
        &["sandboxes:write", "exec", "files"],
    );
    // A file the token holder writes into its own sandbox, which sits in
    // that sandbox's saved layer on the host once it is stopped.
    let (s, b) = json_tcp(&d, "POST", "/v1/sandboxes", &t, r#"{"name":"mine"}"#);
    assert_eq!(s, 201, "{b}");
    let upload = host.dir.path().join("upload.yaml");
    std::fs::write(&upload, evil_profile(&host.marker)).unwrap();
    let (s, b) = tcp(
        &d,
        "PUT",
        &format!("/v1/sandboxes/mine/files?path={}", q("planted.yaml")),
        &t,
        &["-T", upload.to_str().unwrap()],
    );
    assert!(s == 200 || s == 201 || s == 204, "{s} {b}");
    let (s, b) = tcp(
        &d,
        "POST",
        "/v1/sandboxes/mine/stop",
        &t,
        &[
            "--data-binary",
            "{}",
            "-H",
            "content-type: application/json",
        ],
    );
    assert!(s < 300, "{s} {b}");
    let planted = find_file(&host.dir.path().join("warden"), "planted.yaml")
        .expect("the uploaded file is in the sandbox's layer on the host");

    let abs = host.evil();
    let planted = planted.display().to_string();
    let attempts = [
        // A bare name the loader reads as a path, relative to the
        // daemon's working directory.
        r#"{"profile":"evil.yaml"}"#.to_string(),
        r#"{"profile":"./evil.yaml"}"#.to_string(),
        r#"{"profile":"../cwd/evil.yaml"}"#.to_string(),
        r#"{"profile":".."}"#.to_string(),
        // A path with an inline spec beside it (once the path check was
        // skipped then).
        format!(r#"{{"profile":"{abs}","spec":{{}}}}"#),
        format!(r#"{{"profile":"{planted}","spec":{{"resources":{{"memory":"64M"}}}}}}"#),
        format!(r#"{{"profile":"{planted}"}}"#),
        // `extends`, at the top and after a name of the catalogue.
        format!(r#"{{"spec":{{"extends":["{abs}"]}}}}"#),
        r#"{"spec":{"extends":["evil.yaml"]}}"#.to_string(),
        format!(r#"{{"profile":"owners","spec":{{"extends":["{planted}"]}}}}"#),
        r#"{"spec":{"extends":["owners","../../cwd/evil"]}}"#.to_string(),
        r#"{"spec":{"extends":["~/evil.yaml"]}}"#.to_string(),
        // A preset that climbs out of the presets directory.
        r#"{"spec":{"egress":{"presets":["../../climb"]}}}"#.to_string(),
        r#"{"profile":"owners","spec":{"egress":{"presets":["../../climb"]}}}"#.to_string(),
    ];
    for body in &attempts {
        let (s, b) = json_tcp(&d, "POST", "/v1/sandboxes", &t, body);
        assert_eq!(s, 403, "{body}: {s} {b}");
        let p = json(&b);
        assert_eq!(p["code"], "not_a_name", "{body}: {b}");
        assert!(
            p["field"] == "/profile" || p["field"].as_str().unwrap_or("").starts_with("/spec/"),
            "{body}: {b}"
        );
        // Nothing of the file was read into the answer.
        assert!(
            !b.contains("from_command") && !b.contains("evil.test"),
            "{body}: {b}"
        );
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !host.marker.exists(),
            "{body}: the profile's program ran on the host"
        );
        assert_eq!(sandboxes(&d), ["mine"], "{body}: a sandbox was made");
    }
    // What the owner's catalogue offers, the token holder gets, pins
    // included.
    let (s, b) = json_tcp(
        &d,
        "POST",
        "/v1/sandboxes",
        &t,
        r#"{"name":"ok","profile":"owners","start":false}"#,
    );
    assert_eq!(s, 201, "{b}");
    // The owner, on its own socket, names files as on the command line.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(&format!(
            r#"{{"name":"own","profile":"{abs}","start":false}}"#
        )),
        None,
    );
    assert_eq!(s, 201, "{b}");
}

#[test]
fn a_token_holders_names_never_use_the_owners_pins_or_ranges() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return;
    }
    /// A server on 127.0.0.1 that counts the connections reaching it.
    fn listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let s = seen.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in l.incoming().flatten() {
                s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(conn);
            }
        });
        (port, seen)
    }
    let arrived = |a: &std::sync::Arc<std::sync::atomic::AtomicUsize>| {
        a.load(std::sync::atomic::Ordering::SeqCst)
    };
    let (owners_port, owners) = listener();
    let (other_port, other) = listener();
    let (live_port, live) = listener();
    let host = Host::new("trust-pins");
    // The owner pins a name to a local address, for one port.
    std::fs::write(
        host.dir
            .path()
            .join("config/warden/profiles/internal.yaml"),
        format!(
            "egress:\n  domains: [\"pinned.test:{owners_port}\"]\n  hosts: {{pinned.test: 127.0.0.1}}\n"
        ),
    )
    .unwrap();
    let d = host.daemon(&[], true);
    let t = token(host.dir.path(), "writer", &["sandboxes:write", "exec"]);
    // The token holder names the owner's profile and adds the pinned name
    // on a port of its own: accepted (names are a caller's to give) ...
    let (s, b) = tcp(
        &d,
        "POST",
        "/v1/sandboxes",
        &t,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            &format!(
                r#"{{"name":"pins","spec":{{"extends":["internal"],"egress":{{"domains":["pinned.test:{other_port}"]}}}}}}"#
            ),
        ],
    );
    assert_eq!(s, 201, "{b}");
    // Raw bytes that are neither TLS nor HTTP: an explicit `name:port`
    // entry lets them through on its name.
    let connect = |port: u16| {
        let body = serde_json::json!({"argv": ["python3", "-c",
            "import socket,sys\ntry:\n s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=10); s.sendall(b'hello\\n'); s.settimeout(2)\n print('open', s.recv(10), flush=True)\nexcept OSError as e:\n print('failed', e, flush=True)",
            "pinned.test", port.to_string()]})
        .to_string();
        let (s, b) = json_tcp(&d, "POST", "/v1/sandboxes/pins/exec", &t, &body);
        assert_eq!(s, 200, "{b}");
        b
    };
    // ... but the owner's pin does not serve it: it never reaches the
    // pinned address.
    let b = connect(other_port);
    assert_eq!(
        arrived(&other),
        0,
        "a caller's port reached the owner's pin: {b}"
    );
    // The owner's own entry does.
    let b = connect(owners_port);
    assert_eq!(
        arrived(&owners),
        1,
        "the owner's entry must reach its pin: {b}"
    );
    // Added live by the token holder: still a caller's.
    let (s, b) = tcp(
        &d,
        "PATCH",
        "/v1/sandboxes/pins/egress",
        &t,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            &format!(r#"{{"allow":["pinned.test:{live_port}"]}}"#),
        ],
    );
    assert_eq!(s, 200, "{b}");
    let b = connect(live_port);
    assert_eq!(
        arrived(&live),
        0,
        "a token's live entry reached the owner's pin: {b}"
    );
    // The reason is in the sandbox's record.
    let (_, events) = call(
        &d,
        "GET",
        "/v1/sandboxes/pins/events?follow=false",
        None,
        None,
    );
    assert!(
        events.contains("only by a caller's entry"),
        "no reason recorded: {events}"
    );
    // The same entry given by the owner (their own socket) is the owner's.
    let (s, b) = call(
        &d,
        "PATCH",
        "/v1/sandboxes/pins/egress",
        Some(&format!(r#"{{"allow":["pinned.test:{live_port}"]}}"#)),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let b = connect(live_port);
    assert_eq!(
        arrived(&live),
        1,
        "the owner's live entry must reach its pin: {b}"
    );
    assert_eq!(arrived(&other), 0);
}

#[test]
fn a_token_holder_sets_nothing_that_reaches_the_host_however_it_spells_it() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-reach");
    let d = host.daemon(&[], true);
    let t = token(host.dir.path(), "writer", &["sandboxes:write"]);
    let m = host.marker.display().to_string();
    let attempts = [
        (
            format!(
                r#"{{"spec":{{"secrets":{{"X":{{"from_command":["/bin/sh","-c","touch {m}"],"hosts":["a.test"]}}}}}}}}"#
            ),
            "/spec/secrets",
        ),
        (
            r#"{"spec":{"secrets":{"X":{"from_env":"HOME","hosts":["a.test"]}}}}"#.to_string(),
            "/spec/secrets",
        ),
        (
            r#"{"profile":"owners","spec":{"egress":{"hosts":{"a.test":"127.0.0.1"}}}}"#
                .to_string(),
            "/spec/egress/hosts",
        ),
        (
            r#"{"spec":{"egress":{"allow_cidrs":["127.0.0.0/8"]}}}"#.to_string(),
            "/spec/egress/allow_cidrs",
        ),
        (
            r#"{"spec":{"egress":{"host_ports":[22]}}}"#.to_string(),
            "/spec/egress/host_ports",
        ),
        (
            r#"{"spec":{"egress":{"learn":true}}}"#.to_string(),
            "/spec/egress/learn",
        ),
        // Lets a secret's host carry what the scrub never reads.
        (
            r#"{"spec":{"egress":{"secret_plain_ports":["a.test:22"]}}}"#.to_string(),
            "/spec/egress/secret_plain_ports",
        ),
        (
            r#"{"spec":{"egress":{"upstream_ca":["/etc/ssl/certs/x.pem"]}}}"#.to_string(),
            "/spec/egress/upstream_ca",
        ),
        (
            r#"{"spec":{"filesystem":{"read_only":["/root"]}}}"#.to_string(),
            "/spec/filesystem/read_only",
        ),
        (
            r#"{"spec":{"filesystem":{"rootfs":"/"}}}"#.to_string(),
            "/spec/filesystem/rootfs",
        ),
        (
            r#"{"spec":{"filesystem":{"caches":["pip"]}}}"#.to_string(),
            "/spec/filesystem/caches",
        ),
        (
            r#"{"spec":{"env":{"pass":["HOME"]}}}"#.to_string(),
            "/spec/env/pass",
        ),
        (
            r#"{"spec":{"allow_degraded":true}}"#.to_string(),
            "/spec/allow_degraded",
        ),
    ];
    for (body, field) in &attempts {
        let (s, b) = json_tcp(&d, "POST", "/v1/sandboxes", &t, body);
        assert_eq!(s, 403, "{body}: {s} {b}");
        let p = json(&b);
        assert_eq!(p["code"], "owner_only", "{body}: {b}");
        assert_eq!(p["field"], *field, "{body}: {b}");
        assert!(!host.marker.exists(), "{body}: a program ran on the host");
        assert!(sandboxes(&d).is_empty(), "{body}: a sandbox was made");
    }
    // What stays inside the sandbox, a token holder sets.
    let (s, b) = tcp(
        &d,
        "POST",
        "/v1/sandboxes",
        &t,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            r#"{"name":"inside","start":false,"spec":{"egress":{"domains":["a.test"]},"resources":{"memory":"128M"},"env":{"set":{"A":"1"}}}}"#,
        ],
    );
    assert_eq!(s, 201, "{b}");
}

#[test]
fn an_e2b_template_is_a_plain_name_of_the_owners_catalogue_and_never_a_file() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-e2b");
    let d = host.daemon(&["--e2b", "127.0.0.1:0"], false);
    let key = token(
        host.dir.path(),
        "e2b",
        &["sandboxes:write", "sandboxes:read", "exec", "files"],
    );
    let abs = host.evil();
    for template in [
        "evil.yaml",
        "./evil.yaml",
        abs.as_str(),
        "..",
        "../cwd/evil",
        "evil.yml",
    ] {
        let body = format!(r#"{{"templateID":"{template}","timeout":60}}"#);
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "60", "-w", "\n%{http_code}"])
            .args(["-H", &format!("X-API-Key: {key}")])
            .args([
                "-H",
                "content-type: application/json",
                "--data-binary",
                &body,
            ])
            .arg(format!("http://{}/sandboxes", d.e2b.as_ref().unwrap()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (b, s) = text.rsplit_once('\n').unwrap_or(("", "0"));
        assert_eq!(s.trim(), "400", "{template}: {b}");
        assert!(b.contains("template"), "{template}: {b}");
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !host.marker.exists(),
            "{template}: the profile's program ran on the host"
        );
        assert!(sandboxes(&d).is_empty(), "{template}: a sandbox was made");
    }
}

#[test]
fn a_token_holder_gets_no_workspace_that_holds_the_owners_catalogue() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-catalogue");
    // The owner lets token holders name workspaces anywhere in a home
    // whose configuration directory holds warden's catalogue: a sandbox
    // over it could write a profile, commit it, and name it.
    let home = host.dir.path().join("home");
    std::fs::create_dir_all(home.join(".config/warden/profiles")).unwrap();
    std::fs::create_dir_all(home.join("proj")).unwrap();
    let p = host.dir.path();
    let d = Daemon::start_in(
        Some(&p.join("cwd")),
        p,
        true,
        &["--workspace-root", home.to_str().unwrap()],
        &[("XDG_CONFIG_HOME", &home.join(".config")), ("HOME", &home)],
    );
    let t = token(p, "writer", &["sandboxes:write"]);
    for ws in [
        home.clone(),
        home.join(".config"),
        home.join(".config/warden"),
        home.join(".config/warden/profiles"),
    ] {
        let body = format!(r#"{{"workspace":"{}","start":false}}"#, ws.display());
        let (s, b) = json_tcp(&d, "POST", "/v1/sandboxes", &t, &body);
        assert_eq!(s, 403, "{}: {b}", ws.display());
        assert_eq!(json(&b)["field"], "/workspace", "{b}");
        assert!(
            sandboxes(&d).is_empty(),
            "{}: a sandbox was made",
            ws.display()
        );
    }
    let body = format!(
        r#"{{"name":"proj","workspace":"{}","start":false}}"#,
        home.join("proj").display()
    );
    let (s, b) = json_tcp(&d, "POST", "/v1/sandboxes", &t, &body);
    assert_eq!(s, 201, "{b}");
}

#[test]
fn a_callers_document_does_not_choose_whose_caches_it_shares() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-caches");
    let p = host.dir.path();
    std::fs::write(
        p.join("config/warden/profiles/py.yaml"),
        "filesystem:\n  caches: [pip]\n",
    )
    .unwrap();
    let d = host.daemon(&[], true);
    let t = token(p, "writer", &["sandboxes:write"]);
    let (s, b) = tcp(
        &d,
        "POST",
        "/v1/sandboxes",
        &t,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            r#"{"name":"c","start":false,"spec":{"extends":["py"],"name":"ownerproj"}}"#,
        ],
    );
    assert_eq!(s, 201, "{b}");
    let stored = find_file(&p.join("warden/sandboxes/c"), "sandbox.json").expect("a stored spec");
    let text = std::fs::read_to_string(stored).unwrap();
    // The profile's caches, the token's own (never the owner's directory,
    // nor one a name in the caller's document chose).
    assert!(text.contains("/py/pip"), "{text}");
    assert!(text.contains("/token-caches/t"), "{text}");
    assert!(!text.contains("/warden/caches/"), "{text}");
    assert!(!text.contains("ownerproj"), "{text}");
}

#[test]
fn the_model_behind_mcp_names_no_file_even_on_the_owners_socket() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-mcp");
    let d = host.daemon(&[], false);
    let model = CurlSession::open(&d, None, host.dir.path().join("mcp-headers"));
    for profile in [
        host.evil(),
        "evil.yaml".to_string(),
        "../cwd/evil".to_string(),
    ] {
        let b = model.call_tool("create_sandbox", serde_json::json!({ "profile": profile }));
        assert!(
            b.contains("isError") && b.contains("true"),
            "{profile}: {b}"
        );
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !host.marker.exists(),
            "{profile}: the profile's program ran on the host"
        );
        assert!(sandboxes(&d).is_empty(), "{profile}: a sandbox was made");
    }
}

/// The first file named `name` beneath `dir`.
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(f) = find_file(&p, name) {
                return Some(f);
            }
        }
    }
    None
}

/// What the owner's files hold is the owner's: a caller who names a broken
/// profile, extends one whose values do not resolve, or starts one whose
/// secret's file is missing learns that it failed, never the text, the
/// command line, the credential in it, or where the file is.
#[test]
fn a_caller_is_never_shown_what_the_owners_files_hold_or_where_they_are() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-conceal");
    let p = host.dir.path();
    let profiles = p.join("config/warden/profiles");
    std::fs::write(
        profiles.join("broken.yaml"),
        "resources: {memory: hunter2-is-the-password}\n",
    )
    .unwrap();
    std::fs::write(
        profiles.join("badsecret.yaml"),
        "secrets:\n  GH:\n    from_command: [sh, -c, \"echo ghp_OWNERSECRET123\"]\n    hosts: [\"api.github.com:99999\"]\n",
    )
    .unwrap();
    let hidden = p.join("owner-private/gh-token");
    std::fs::write(
        profiles.join("filesecret.yaml"),
        format!(
            "secrets:\n  GH:\n    from_file: {}\n    hosts: [api.github.com]\n",
            hidden.display()
        ),
    )
    .unwrap();
    std::fs::write(profiles.join("binary.yaml"), b"\xff\xfe\x00 not text\n").unwrap();
    let d = host.daemon(&[], true);
    let t = token(p, "writer", &["sandboxes:write"]);
    for body in [
        r#"{"profile":"broken","start":false}"#,
        r#"{"start":false,"spec":{"extends":["broken"]}}"#,
        r#"{"start":false,"spec":{"extends":["badsecret"]}}"#,
        r#"{"profile":"badsecret","start":false}"#,
        r#"{"profile":"filesecret"}"#,
        r#"{"profile":"binary","start":false}"#,
        r#"{"start":false,"spec":{"extends":["binary"]}}"#,
    ] {
        let (s, b) = json_tcp(&d, "POST", "/v1/sandboxes", &t, body);
        assert!((400..500).contains(&s), "{body}: {s} {b}");
        for secret in [
            "hunter2",
            "ghp_OWNERSECRET123",
            "owner-private",
            "binary.yaml",
            "config/warden",
        ] {
            assert!(
                !b.contains(secret),
                "{body}: the caller was shown {secret}: {b}"
            );
        }
    }
    assert!(sandboxes(&d).is_empty(), "a sandbox was left behind");
}

/// A caller's document is read at a bounded cost: a list or section larger
/// than any profile needs is refused before anything is composed, at once,
/// and `extends` given as anything but a list is refused, not ignored.
#[test]
fn a_caller_cannot_make_the_daemon_read_a_document_for_long() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-cost");
    let d = host.daemon(&[], true);
    let t = token(host.dir.path(), "writer", &["sandboxes:write"]);
    let set: serde_json::Map<String, serde_json::Value> = (0..20_000)
        .map(|i| (format!("V{i}"), serde_json::Value::from("x")))
        .collect();
    let domains: Vec<String> = (0..20_000).map(|i| format!("d{i}.example.test")).collect();
    let extends: Vec<&str> = vec!["owners"; 5_000];
    for (spec, pointer) in [
        (serde_json::json!({"env": {"set": set}}), "/spec/env/set"),
        (
            serde_json::json!({"egress": {"domains": domains}}),
            "/spec/egress/domains",
        ),
        (serde_json::json!({"extends": extends}), "/spec/extends"),
    ] {
        let body = serde_json::json!({"start": false, "spec": spec}).to_string();
        // Larger than one argument may be: sent from a file.
        let file = host.dir.path().join("body.json");
        std::fs::write(&file, &body).unwrap();
        let from = format!("@{}", file.display());
        let started = std::time::Instant::now();
        let (s, b) = tcp(
            &d,
            "POST",
            "/v1/sandboxes",
            &t,
            &[
                "-H",
                "content-type: application/json",
                "--data-binary",
                &from,
            ],
        );
        assert_eq!(s, 422, "{pointer}: {s} {b}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{pointer}: {:?}",
            started.elapsed()
        );
        assert!(b.len() < 4096, "{pointer}: an answer of {} bytes", b.len());
        assert_eq!(json(&b)["field"], pointer, "{b}");
    }
    let (s, b) = json_tcp(
        &d,
        "POST",
        "/v1/sandboxes",
        &t,
        r#"{"profile":"owners","start":false,"spec":{"extends":"../x"}}"#,
    );
    assert_eq!(s, 422, "{b}");
    assert_eq!(json(&b)["field"], "/spec/extends", "{b}");
    assert!(sandboxes(&d).is_empty(), "a sandbox was made");
}

#[test]
fn a_token_holder_adds_no_request_rule_wider_than_the_owners_nor_one_on_a_pinned_name() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-requests");
    // The owner's read-only view of a host service, pinned to loopback.
    std::fs::write(
        host.dir.path().join("config/warden/profiles/apiro.yaml"),
        "egress:\n  domains: [\"api.test:18443\", \"db.test\"]\n  hosts: {api.test: 127.0.0.1, db.test: 127.0.0.1}\n  allow_requests: [\"GET,HEAD api.test:18443/**\"]\n",
    )
    .unwrap();
    let d = host.daemon(&[], true);
    let t = token(host.dir.path(), "writer", &["sandboxes:write"]);
    let create = |name: &str, key: &str, rule: &str| {
        json_tcp(
            &d,
            "POST",
            "/v1/sandboxes",
            &t,
            &format!(
                r#"{{"name":"{name}","spec":{{"extends":["apiro"],"egress":{{"{key}":["{rule}"]}}}}}}"#
            ),
        )
    };
    for (i, (key, rule, code)) in [
        (
            "allow_requests",
            "POST,PUT,DELETE api.test:18443/**",
            "loosens",
        ),
        ("allow_requests", "* api.test:18443/admin/**", "loosens"),
        ("ask_requests", "DELETE api.test:18443/**", "loosens"),
        // No owner rule for db.test, but the owner pinned it: only the
        // owner's rules serve it.
        ("allow_requests", "POST db.test/**", "owner_only"),
    ]
    .into_iter()
    .enumerate()
    {
        let (s, b) = create(&format!("rq{i}"), key, rule);
        assert_eq!(s, 403, "{rule}: {b}");
        assert!(b.contains(code), "{rule}: {b}");
        assert!(b.contains(&format!("/spec/egress/{key}")), "{rule}: {b}");
    }
    assert!(
        !sandboxes(&d).iter().any(|s| s.starts_with("rq")),
        "a refused request made a sandbox"
    );
    // Within the owner's rule, a caller's rule only narrows: accepted;
    // and a deny rule is always a caller's to add.
    let (s, b) = create("within", "allow_requests", "GET api.test:18443/repos/**");
    assert_eq!(s, 201, "{b}");
    let (s, b) = create("denied", "deny_requests", "* api.test:18443/**");
    assert_eq!(s, 201, "{b}");
}

mod given;

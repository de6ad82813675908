//! The daemon's TCP listeners answer only the names they were told
//! about, over real HTTP against a real `warden serve --listen
//! 127.0.0.1:0 --e2b`: a web page that rebinds its own name
//! (`evil.example`) to 127.0.0.1 gets 421 from every listener (the
//! dashboard, the login, the health check, the API with a valid token,
//! the E2B door with a valid key) before any handler runs: nothing is
//! made, no session is opened, no refusal is recorded. Loopback, localhost
//! and the E2B door's `PORT-ID.localhost` names are answered; a name the
//! owner allowed (`--allow-host`, `allowed_hosts:`) is served; the owner's
//! Unix socket has no such check.

use crate::common::daemon::*;
use crate::common::*;
use std::process::Command;

/// One exchange with `addr` under the name `host`, resolved to `addr`
/// as a rebinding resolver would: status and body.
fn as_name(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    let (ip, port) = addr.rsplit_once(':').unwrap();
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-i", "--max-time", "60", "-X", method]);
    cmd.args(["--resolve", &format!("{host}:{port}:{ip}")]);
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    if let Some(b) = body {
        cmd.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    let out = cmd
        .arg(format!("http://{host}:{port}{path}"))
        .output()
        .expect("curl is installed");
    answer_of(&out.stdout)
}

/// A request: method, path, headers, body.
type Call<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, Option<&'a str>);

fn start(tag: &str, args: &[&str]) -> Option<(TempDir, Daemon, String)> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new(tag);
    let door = format!("127.0.0.1:{}", free_port());
    let mut all = vec!["--e2b", door.as_str()];
    all.extend_from_slice(args);
    let d = Daemon::start_with(state.path(), true, &all, &[]);
    Some((state, d, door))
}

fn sandbox_count(d: &Daemon) -> usize {
    let (s, b) = call(d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(s, 200, "{b}");
    json(&b)["sandboxes"].as_array().unwrap().len()
}

fn denials(d: &Daemon) -> usize {
    std::fs::read_to_string(d.state.join("warden/daemon-audit.jsonl"))
        .map(|l| l.lines().count())
        .unwrap_or(0)
}

/// Refused as a misdirected request, saying which setting answers it.
fn misdirected(what: &str, (s, head, body): &(u16, Vec<(String, String)>, String)) {
    assert_eq!(*s, 421, "{what}: {body}");
    assert_eq!(json(body)["code"], "host_not_allowed", "{what}: {body}");
    assert!(body.contains("--allow-host"), "{what}: {body}");
    assert!(body.contains("allowed_hosts"), "{what}: {body}");
    assert_eq!(
        header(head, "connection"),
        Some("close"),
        "{what}: {head:?}"
    );
    assert_eq!(header(head, "set-cookie"), None, "{what}: {head:?}");
}

#[test]
fn a_rebound_name_is_refused_on_every_listener_before_any_handler_runs() {
    let Some((_state, d, door)) = start("hosts-rebound", &[]) else {
        return;
    };
    let api = d.tcp.clone().unwrap();
    let admin = token(&d.state, "admin", &["admin"]);
    // A token that may read but not make sandboxes: its create is refused
    // by the scope check, which records the refusal.
    let reader = token(&d.state, "reader", &["sandboxes:read"]);
    let e2b = token(&d.state, "e2b", &["sandboxes:read", "sandboxes:write"]);
    let (sandboxes, recorded) = (sandbox_count(&d), denials(&d));
    let evil = "evil.example";
    let origin = format!("http://{evil}:{}", api.rsplit_once(':').unwrap().1);
    let login = serde_json::json!({ "token": admin }).to_string();
    let bearer = |t: &str| format!("Bearer {t}");
    let (admin_b, reader_b) = (bearer(&admin), bearer(&reader));
    let create = r#"{"name":"made-through-a-rebound-name","start":false}"#;
    let api_calls: Vec<Call> = vec![
        ("GET", "/", vec![], None),
        ("GET", "/assets/app.js", vec![], None),
        ("POST", "/login", vec![("origin", &origin)], Some(&login)),
        ("GET", "/v1/health", vec![], None),
        ("GET", "/v1/health", vec![("authorization", &admin_b)], None),
        (
            "GET",
            "/v1/sandboxes",
            vec![("authorization", &admin_b)],
            None,
        ),
        (
            "POST",
            "/v1/sandboxes",
            vec![("authorization", &admin_b)],
            Some(create),
        ),
        (
            "POST",
            "/v1/sandboxes",
            vec![("authorization", &reader_b)],
            Some(create),
        ),
        ("GET", "/v1/nothing/here", vec![], None),
    ];
    for (method, path, headers, body) in &api_calls {
        let got = as_name(&api, evil, method, path, headers, *body);
        misdirected(&format!("API {method} {path}"), &got);
    }
    let door_create = r#"{"templateID":"base","timeout":60}"#;
    let door_calls: Vec<Call> = vec![
        ("GET", "/sandboxes", vec![("x-api-key", &e2b)], None),
        (
            "POST",
            "/sandboxes",
            vec![("x-api-key", &e2b)],
            Some(door_create),
        ),
        (
            "GET",
            "/health",
            vec![("x-access-token", &e2b), ("e2b-sandbox-id", "any")],
            None,
        ),
        (
            "GET",
            "/",
            vec![
                ("x-access-token", &e2b),
                ("e2b-sandbox-id", "any"),
                ("e2b-sandbox-port", "8080"),
            ],
            None,
        ),
    ];
    for (method, path, headers, body) in &door_calls {
        let got = as_name(&door, evil, method, path, headers, *body);
        misdirected(&format!("E2B door {method} {path}"), &got);
    }
    // A name that only looks local is no more answered.
    for host in ["localhost.evil.example", "127.0.0.1.evil.example"] {
        let got = as_name(&api, host, "GET", "/v1/health", &[], None);
        misdirected(host, &got);
    }
    // No handler ran: nothing was made, no refusal of the scope check
    // was recorded.
    assert_eq!(sandbox_count(&d), sandboxes);
    assert_eq!(denials(&d), recorded, "a handler or the scope check ran");
    // The same calls under the listener's own names are answered (the
    // reader's create reaching the scope check, which records it).
    let (s, _, b) = as_name(&api, "localhost", "GET", "/v1/health", &[], None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = call_on(&d, true, "GET", "/v1/sandboxes", None, Some(&admin));
    assert_eq!(s, 200, "{b}");
    let (s, _, b) = as_name(
        &api,
        "localhost",
        "POST",
        "/v1/sandboxes",
        &[("authorization", &reader_b)],
        Some(create),
    );
    assert_eq!(s, 403, "{b}");
    assert_eq!(denials(&d), recorded + 1);
    let (s, _, b) = as_name(
        &door,
        "localhost",
        "GET",
        "/sandboxes",
        &[("x-api-key", &e2b)],
        None,
    );
    assert_eq!(s, 200, "{b}");
    // The door's sandbox hosts are its own: answered by the door (here:
    // no such sandbox for this key), not refused as a foreign name.
    let (s, _, b) = as_name(
        &door,
        "8080-nosuch.localhost",
        "GET",
        "/",
        &[("x-access-token", &e2b)],
        None,
    );
    assert_ne!(s, 421, "{b}");
    // On the API they are not its names.
    let got = as_name(
        &api,
        "8080-nosuch.localhost",
        "GET",
        "/v1/health",
        &[],
        None,
    );
    misdirected("a sandbox host on the API", &got);
    // The owner's socket answers whatever Host it is sent.
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "-H", "Host: evil.example"])
        .arg("--unix-socket")
        .arg(&d.socket)
        .arg("http://warden/v1/health")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.ends_with("\n200"), "{text}");
}

#[test]
fn a_name_the_owner_allowed_is_served_and_no_other() {
    let Some((_state, d, door)) = start("hosts-allowed", &["--allow-host", "box.lan"]) else {
        return;
    };
    let api = d.tcp.clone().unwrap();
    let admin = token(&d.state, "admin", &["admin"]);
    let bearer = format!("Bearer {admin}");
    for addr in [&api, &door] {
        let (s, _, b) = as_name(addr, "box.lan", "GET", "/v1/health", &[], None);
        assert_ne!(s, 421, "{addr}: {b}");
        let got = as_name(addr, "evil.example", "GET", "/v1/health", &[], None);
        misdirected("a name not allowed", &got);
    }
    let (s, _, b) = as_name(
        &api,
        "BOX.LAN",
        "GET",
        "/v1/sandboxes",
        &[("authorization", &bearer)],
        None,
    );
    assert_eq!(s, 200, "{b}");
    let got = as_name(&api, "www.box.lan", "GET", "/v1/health", &[], None);
    misdirected("a name under an exact one", &got);
}

#[test]
fn the_configuration_file_allows_a_name_and_everything_under_it() {
    let Some((_state, d)) =
        with_config("hosts-config", "allowed_hosts: [.corp.example]\n", &[], &[])
    else {
        return;
    };
    let api = d.tcp.clone().unwrap();
    for host in ["corp.example", "dev.corp.example"] {
        let (s, _, b) = as_name(&api, host, "GET", "/v1/health", &[], None);
        assert_eq!(s, 200, "{host}: {b}");
    }
    let got = as_name(&api, "evilcorp.example", "GET", "/v1/health", &[], None);
    misdirected("a name that only ends the same", &got);
}

#[test]
fn an_allowed_host_that_is_not_a_name_is_refused_at_start() {
    let state = TempDir::new("hosts-bad");
    let file = state.path().join("daemon.yaml");
    for (entry, flag) in [("'*'", "*"), ("http://box.lan", "box.lan:7070")] {
        std::fs::write(&file, format!("allowed_hosts: [{entry}]\n")).unwrap();
        let o = warden(state.path(), &["serve", "--config", file.to_str().unwrap()]);
        assert_ne!(code(&o), 0, "{entry} was taken");
        assert!(stderr(&o).contains("is not a host name"), "{}", stderr(&o));
        let o = warden(state.path(), &["serve", "--allow-host", flag]);
        assert_ne!(code(&o), 0, "--allow-host {flag} was taken");
        assert!(stderr(&o).contains("--allow-host"), "{}", stderr(&o));
    }
}

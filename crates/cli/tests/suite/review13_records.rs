//! The daemon's record of refusals without a token, against a client
//! that floods one door: each door's and each peer's first refusals in a
//! window are recorded in full (a wrong envd key, a dashboard login, a
//! stranger on the owner's socket, another address at the same door),
//! and the log stays bounded however many addresses a flood comes from.
//! The real daemon over TCP and its socket, its real log read back.

use crate::common::daemon::*;
use crate::common::*;
use std::path::Path;
use std::process::Command;

/// `n` GETs of `url` with a bogus bearer token, on one curl from local
/// address `from`: the statuses seen.
fn flood(url: &str, from: &str, n: usize) -> Vec<String> {
    let out = Command::new("curl")
        .args(["-s", "--interface", from, "-w", "%{http_code}\n"])
        .args(["-H", "Authorization: Bearer wdn_bogus_bogus"])
        .args((0..n).flat_map(|_| ["-o", "/dev/null", url]))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The lines whose route is `route` and whose reason names `peer`.
fn of(log: &Path, route: &str, peer: &str) -> Vec<String> {
    let (route, peer) = (format!("\"route\":\"{route}\""), format!("({peer} at"));
    denied(log, |l| l.contains(&route) && l.contains(&peer))
}

#[test]
fn a_flood_of_bad_bearer_tokens_from_one_client_leaves_every_other_door_and_peer_its_refusals_in_full(
) {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("r13-records");
    let e2b = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &e2b], &[]);
    let log = state.path().join("warden/daemon-audit.jsonl");
    let tcp = d.tcp.clone().unwrap();
    let a = token(state.path(), "a", &["sandboxes:read", "sandboxes:write"]);
    let sandbox = e2b_sandbox(&e2b, &a)["sandboxID"]
        .as_str()
        .unwrap()
        .to_string();

    // One client floods the native API with bad bearer tokens.
    let statuses = flood(&format!("http://{tcp}/v1/sandboxes"), "127.0.0.1", 200);
    assert_eq!(statuses.iter().filter(|s| *s == "401").count(), 200);
    let flooded = of(&log, "/v1/sandboxes", "127.0.0.1");
    assert!(
        (1..=10).contains(&flooded.len()),
        "{} lines for 200 bad tokens from one client",
        flooded.len()
    );

    // The same client at the E2B door, with a wrong envd key: recorded.
    let (s, _) = exchange(
        "GET",
        &format!("http://{e2b}/health"),
        &[
            ("x-access-token", "wde_bogus"),
            ("e2b-sandbox-id", &sandbox),
        ],
        None,
        &[],
    );
    assert_eq!(s, 401);
    let envd = of(&log, "/e2b/envd", "127.0.0.1");
    assert_eq!(envd.len(), 1, "{:?}", denied(&log, |_| true));
    assert!(envd[0].contains("e2b-sandbox door"), "{}", envd[0]);

    // A dashboard login with a token that is none: recorded.
    let origin = format!("http://{tcp}");
    let (s, b) = exchange(
        "POST",
        &format!("http://{tcp}/login"),
        &[("origin", &origin), ("content-type", "application/json")],
        Some(r#"{"token":"wdn_nobody_nothing"}"#),
        &[],
    );
    assert_eq!(s, 401, "{b}");
    let login = of(&log, "/login", "127.0.0.1");
    assert_eq!(login.len(), 1, "{:?}", denied(&log, |_| true));
    assert!(login[0].contains("dashboard door"), "{}", login[0]);

    // Another client at the flooded door: its own refusal in full.
    let other = flood(&format!("http://{tcp}/v1/sandboxes"), "127.0.0.2", 1);
    assert_eq!(other, ["401"]);
    assert_eq!(of(&log, "/v1/sandboxes", "127.0.0.2").len(), 1);

    // A stranger on the owner's socket, where the host lets one reach it
    // (its directories and the socket opened to everyone, as a careless
    // host might).
    use std::os::unix::fs::PermissionsExt;
    let mut opened = d.socket.clone();
    let _ = std::fs::set_permissions(&opened, std::fs::Permissions::from_mode(0o666));
    while opened.pop() && opened.starts_with(state.path()) {
        let _ = std::fs::set_permissions(&opened, std::fs::Permissions::from_mode(0o755));
    }
    let stranger = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "curl"])
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--unix-socket",
        ])
        .arg(&d.socket)
        .arg("http://warden/v1/health")
        .output();
    match stranger {
        Ok(out) if String::from_utf8_lossy(&out.stdout) == "403" => {
            let socket = of(&log, "(the owner's socket)", "uid 65534");
            assert_eq!(socket.len(), 1, "{:?}", denied(&log, |_| true));
        }
        Ok(out) => eprintln!(
            "not tried: another user cannot reach the owner's socket here ({})",
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(e) => eprintln!("not tried: setpriv cannot run ({e})"),
    }

    // Forty more addresses flood the same door: their records stay
    // bounded (sixteen peers' shares and one shared window), and another
    // door still records its first refusal.
    let before = denied(&log, |_| true).len();
    for i in 0..40 {
        let from = format!("127.0.1.{}", i + 1);
        let got = flood(&format!("http://{tcp}/v1/sandboxes"), &from, 20);
        assert_eq!(got.iter().filter(|s| *s == "401").count(), 20, "{from}");
    }
    let added = denied(&log, |_| true).len() - before;
    assert!(
        added <= 16 * 10 + 60,
        "{added} lines for 800 refusals from 40 addresses"
    );
    let (s, _) = exchange(
        "GET",
        &format!("http://{e2b}/health"),
        &[
            ("x-access-token", "wde_other"),
            ("e2b-sandbox-id", &sandbox),
        ],
        None,
        &["--interface", "127.0.0.3"],
    );
    assert_eq!(s, 401);
    assert_eq!(of(&log, "/e2b/envd", "127.0.0.3").len(), 1);
    let verify = warden(
        &d.state.join("warden"),
        &["audit", "verify", log.to_str().unwrap()],
    );
    assert!(stdout(&verify).contains("intact"), "{}", stdout(&verify));
}

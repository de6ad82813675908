//! The dashboard's side of the daemon over real HTTP (curl against the
//! built `warden serve` on TCP): a token turned into a browser session
//! whose cookie no script reads and no other site sends; the attacks a
//! page of another origin can make with that cookie (a change without the
//! session's CSRF token, a change or a WebSocket from a foreign Origin, a
//! login from one) refused with nothing changed; the headers that keep the
//! page from being framed, sniffed or made to run scripts of elsewhere;
//! logout and revocation ending the session.

use crate::common::daemon::*;
use crate::common::*;

/// One HTTP exchange on the daemon's TCP port: status, headers
/// (lower-cased names), body.
fn http(
    d: &Daemon,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    http_on(d.tcp.as_ref().unwrap(), method, path, headers, body)
}

fn admin_token(d: &Daemon) -> String {
    ok(&warden(
        &d.state,
        &["token", "create", "web", "--scope", "admin"],
    ))
    .trim()
    .lines()
    .last()
    .unwrap()
    .to_string()
}

/// A logged-in session: the cookie header to send, and its CSRF token.
struct Session {
    cookie: String,
    csrf: String,
    origin: String,
}

fn login(d: &Daemon, token: &str) -> Session {
    let origin = format!("http://{}", d.tcp.as_ref().unwrap());
    let body = serde_json::json!({ "token": token }).to_string();
    let (s, h, b) = http(d, "POST", "/login", &[("origin", &origin)], Some(&body));
    assert_eq!(s, 200, "{b}");
    let set = header(&h, "set-cookie").expect("a session cookie");
    let cookie = set.split(';').next().unwrap().trim().to_string();
    Session {
        cookie,
        csrf: json(&b)["csrf"].as_str().unwrap().to_string(),
        origin,
    }
}

fn token_count(d: &Daemon) -> usize {
    let (s, b) = call(d, "GET", "/v1/tokens", None, None);
    assert_eq!(s, 200, "{b}");
    json(&b)["tokens"].as_array().unwrap().len()
}

fn start() -> Option<(TempDir, Daemon)> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new("dash-auth");
    let d = Daemon::start(state.path(), true);
    Some((state, d))
}

#[test]
fn a_token_logs_in_with_a_cookie_no_script_reads_and_a_wrong_one_is_refused() {
    let Some((_state, d)) = start() else { return };
    let token = admin_token(&d);
    let origin = format!("http://{}", d.tcp.as_ref().unwrap());
    // A wrong token: 401, and no cookie.
    for wrong in [
        format!("{token}x"),
        "wdn_000000000000_nope".into(),
        "".into(),
    ] {
        let body = serde_json::json!({ "token": wrong }).to_string();
        let (s, h, b) = http(&d, "POST", "/login", &[("origin", &origin)], Some(&body));
        assert_eq!(s, 401, "{b}");
        assert!(header(&h, "set-cookie").is_none(), "{h:?}");
    }
    // The right one: a cookie that is HttpOnly and SameSite=Strict, and
    // the API takes it.
    let body = serde_json::json!({ "token": token }).to_string();
    let (s, h, b) = http(&d, "POST", "/login", &[("origin", &origin)], Some(&body));
    assert_eq!(s, 200, "{b}");
    let set = header(&h, "set-cookie").unwrap();
    assert!(set.starts_with("warden_session="), "{set}");
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    assert!(!set.contains(&token), "the cookie carries the token itself");
    assert_eq!(header(&h, "cache-control"), Some("no-store"));
    let cookie = set.split(';').next().unwrap().to_string();
    let csrf = json(&b)["csrf"].as_str().unwrap().to_string();
    let (s, _, b) = http(
        &d,
        "GET",
        "/v1/sandboxes",
        &[("cookie", &cookie), ("x-warden-csrf", &csrf)],
        None,
    );
    assert_eq!(s, 200, "{b}");
    // Without it, or with a made-up one: 401.
    let (s, _, _) = http(&d, "GET", "/v1/sandboxes", &[], None);
    assert_eq!(s, 401);
    let (s, _, _) = http(
        &d,
        "GET",
        "/v1/sandboxes",
        &[("cookie", "warden_session=00112233")],
        None,
    );
    assert_eq!(s, 401);
    // A login from another origin is refused (login CSRF).
    let (s, h, b) = http(
        &d,
        "POST",
        "/login",
        &[("origin", "http://evil.test")],
        Some(&body),
    );
    assert_eq!(s, 403, "{b}");
    assert!(header(&h, "set-cookie").is_none());
    let log = std::fs::read_to_string(d.state.join("warden/daemon-audit.jsonl")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains(r#""route":"/login""#) && l.contains("evil.test")),
        "{log}"
    );
}

#[test]
fn a_change_through_the_cookie_needs_the_csrf_token_and_the_own_origin() {
    let Some((_state, d)) = start() else { return };
    let token = admin_token(&d);
    let s = login(&d, &token);
    let before = token_count(&d);
    let new = r#"{"name":"made-by-csrf","scopes":["admin"]}"#;
    let csrf = s.csrf.as_str();
    let attacks: &[(&str, Vec<(&str, &str)>)] = &[
        ("no CSRF token", vec![("origin", &s.origin)]),
        (
            "a wrong CSRF token",
            vec![("origin", &s.origin), ("x-warden-csrf", "0000")],
        ),
        (
            "a foreign origin",
            vec![("origin", "http://evil.test"), ("x-warden-csrf", csrf)],
        ),
        (
            "another port of the same host",
            vec![("origin", "http://127.0.0.1:1"), ("x-warden-csrf", csrf)],
        ),
        ("no origin at all", vec![("x-warden-csrf", csrf)]),
        (
            "a cross-site fetch's metadata",
            vec![("sec-fetch-site", "cross-site"), ("x-warden-csrf", csrf)],
        ),
    ];
    for (what, extra) in attacks {
        let mut headers = vec![("cookie", s.cookie.as_str())];
        headers.extend(extra.iter().cloned());
        let (status, _, b) = http(&d, "POST", "/v1/tokens", &headers, Some(new));
        assert_eq!(status, 403, "{what}: {b}");
        assert_eq!(json(&b)["code"], "csrf", "{what}: {b}");
        assert_eq!(token_count(&d), before, "{what}: a token was made");
    }
    // Reading from a foreign origin is refused too (and a WebSocket,
    // which a page of any origin may open with the cookie, needs the own
    // origin).
    let (status, _, _) = http(
        &d,
        "GET",
        "/v1/tokens",
        &[("cookie", &s.cookie), ("origin", "http://evil.test")],
        None,
    );
    assert_eq!(status, 403);
    for origin in [Some("http://evil.test"), None] {
        let mut headers = vec![
            ("cookie", s.cookie.as_str()),
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        if let Some(o) = origin {
            headers.push(("origin", o));
        }
        let (status, _, b) = http(&d, "GET", "/v1/sandboxes/none/pty", &headers, None);
        assert_eq!(status, 403, "{origin:?}: {b}");
    }
    // Each refusal is in the daemon's audit log, under the session's
    // token.
    let log = std::fs::read_to_string(d.state.join("warden/daemon-audit.jsonl")).unwrap();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(r#""event":"api_denied""#) && l.contains("browser session"))
        .collect();
    assert_eq!(refusals.len(), attacks.len() + 3, "{log}");
    let id = token.split('_').nth(1).unwrap();
    assert!(refusals.iter().all(|l| l.contains(id)), "{log}");
    // With both, the change is made.
    let (status, _, b) = http(
        &d,
        "POST",
        "/v1/tokens",
        &[
            ("cookie", &s.cookie),
            ("origin", &s.origin),
            ("x-warden-csrf", csrf),
        ],
        Some(new),
    );
    assert_eq!(status, 201, "{b}");
    assert_eq!(token_count(&d), before + 1);
}

#[test]
fn every_answer_says_no_framing_no_sniffing_and_only_its_own_scripts() {
    let Some((_state, d)) = start() else { return };
    for path in [
        "/",
        "/assets/app.js",
        "/v1/health",
        "/v1/sandboxes",
        "/nowhere",
    ] {
        let (_, h, _) = http(&d, "GET", path, &[], None);
        let csp = header(&h, "content-security-policy").unwrap_or_else(|| panic!("{path}: no CSP"));
        for part in [
            "default-src 'none'",
            "script-src 'self';",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(part), "{path}: {csp} lacks {part}");
        }
        assert!(!csp.contains("unsafe-eval"), "{csp}");
        assert!(!csp.contains("script-src 'self' 'unsafe-inline'"), "{csp}");
        assert_eq!(header(&h, "x-frame-options"), Some("DENY"), "{path}");
        assert_eq!(
            header(&h, "x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    }
    // The page is the embedded one: it loads its script from the daemon
    // and holds no inline script.
    let (s, h, page) = http(&d, "GET", "/", &[], None);
    assert_eq!(s, 200);
    assert!(header(&h, "content-type").unwrap().starts_with("text/html"));
    assert!(
        page.contains(r#"<script type="module" src="/assets/app.js""#),
        "{page}"
    );
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert!(!page.contains("http://") && !page.contains("https://"));
    let (s, h, _) = http(&d, "GET", "/assets/app.js", &[], None);
    assert_eq!(s, 200);
    assert!(header(&h, "content-type")
        .unwrap()
        .starts_with("text/javascript"));
}

#[test]
fn logout_and_revocation_end_the_session() {
    let Some((_state, d)) = start() else { return };
    let token = admin_token(&d);
    let s = login(&d, &token);
    // Logout is a change: without the CSRF token it is refused and the
    // session lives on.
    let (status, _, _) = http(
        &d,
        "POST",
        "/logout",
        &[("cookie", &s.cookie), ("origin", &s.origin)],
        None,
    );
    assert_eq!(status, 403);
    let (status, _, b) = http(
        &d,
        "GET",
        "/session",
        &[("cookie", &s.cookie), ("x-warden-csrf", &s.csrf)],
        None,
    );
    assert_eq!(status, 200, "{b}");
    assert_eq!(json(&b)["token"]["name"], "web");
    let (status, h, _) = http(
        &d,
        "POST",
        "/logout",
        &[
            ("cookie", &s.cookie),
            ("origin", &s.origin),
            ("x-warden-csrf", &s.csrf),
        ],
        None,
    );
    assert_eq!(status, 204);
    assert!(header(&h, "set-cookie").unwrap().contains("Max-Age=0"));
    for path in ["/session", "/v1/sandboxes"] {
        let h = [("cookie", s.cookie.as_str()), ("x-warden-csrf", &s.csrf)];
        let (status, _, _) = http(&d, "GET", path, &h, None);
        assert_eq!(status, 401, "{path} after logout");
    }
    // A token revoked while its session lives: the session ends.
    let s = login(&d, &token);
    let id = token.split('_').nth(1).unwrap();
    ok(&warden(&d.state, &["token", "revoke", id]));
    let h = [("cookie", s.cookie.as_str()), ("x-warden-csrf", &s.csrf)];
    let (status, _, b) = http(&d, "GET", "/v1/sandboxes", &h, None);
    assert_eq!(status, 401, "{b}");
}

/// The browser sends the daemon's cookie to every port of the daemon's
/// host (cookies do not separate ports, and `SameSite` counts two ports
/// of one host as one site): a sandbox's dev server published on
/// `127.0.0.1:PORT` that the person opens receives it, as does any other
/// local service. Such a thief is no browser: it claims the daemon's own
/// `Origin` and `Sec-Fetch-Site` as it likes. The cookie alone must be
/// worth nothing to it: no read, no CSRF token, no change, no terminal.
#[test]
fn a_cookie_received_by_another_port_of_the_host_is_worth_nothing_alone() {
    let Some((_state, d)) = start() else { return };
    let token = admin_token(&d);
    let s = login(&d, &token);
    let before = token_count(&d);
    let own: &[(&str, &str)] = &[
        ("cookie", &s.cookie),
        ("origin", &s.origin),
        ("sec-fetch-site", "same-origin"),
    ];
    // Learning the CSRF token from the session route.
    let (status, _, b) = http(&d, "GET", "/session", own, None);
    assert_eq!(status, 403, "the cookie alone opened /session: {b}");
    assert!(!b.contains(&s.csrf), "the CSRF token was given out: {b}");
    // Reading through the API.
    for path in ["/v1/tokens", "/v1/sandboxes", "/v1/approvals"] {
        let (status, _, b) = http(&d, "GET", path, own, None);
        assert_eq!(status, 403, "the cookie alone read {path}: {b}");
        assert_eq!(json(&b)["code"], "csrf", "{path}: {b}");
    }
    // An event stream or a terminal.
    let ws: &[(&str, &str)] = &[
        ("cookie", &s.cookie),
        ("origin", &s.origin),
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let (status, _, b) = http(&d, "GET", "/v1/sandboxes/none/pty", ws, None);
    assert_eq!(status, 403, "{b}");
    let (status, _, b) = http(&d, "GET", "/v1/sandboxes/none/events", own, None);
    assert_eq!(status, 403, "{b}");
    assert_eq!(token_count(&d), before);
    // The page itself holds the CSRF token (in its origin's own storage,
    // which no other port reads) and sends it with every request: in the
    // header, or where a browser cannot set one (EventSource, WebSocket)
    // in the query, which the daemon takes out before the route sees it.
    let mut page = own.to_vec();
    page.push(("x-warden-csrf", &s.csrf));
    let (status, _, b) = http(&d, "GET", "/session", &page, None);
    assert_eq!(status, 200, "{b}");
    let (status, _, b) = http(&d, "GET", "/v1/tokens", &page, None);
    assert_eq!(status, 200, "{b}");
    let q = format!("/v1/sandboxes/none/events?csrf={}", s.csrf);
    let (status, _, b) = http(&d, "GET", &q, own, None);
    assert_eq!(status, 404, "the route saw the query's CSRF token: {b}");
    let q = format!("/v1/sandboxes/none/pty?csrf={}", s.csrf);
    let (status, _, b) = http(&d, "GET", &q, ws, None);
    assert_eq!(status, 404, "the route saw the query's CSRF token: {b}");
    // A CSRF token in the query is not taken for a change.
    let q = format!("/v1/tokens?csrf={}", s.csrf);
    let (status, _, b) = http(
        &d,
        "POST",
        &q,
        own,
        Some(r#"{"name":"by-query","scopes":["admin"]}"#),
    );
    assert_eq!(status, 403, "{b}");
    assert_eq!(token_count(&d), before);
}

/// Another port's page can also set cookies for the daemon's host: it
/// plants a session of its own (made with a lesser token it holds) under
/// a longer path, which the browser sends first. The person's page must
/// go on as the person, never as the planted session.
#[test]
fn a_session_planted_by_another_port_never_stands_for_the_person() {
    let Some((_state, d)) = start() else { return };
    let person = login(&d, &admin_token(&d));
    let planted = login(&d, &token(&d.state, "agent", &["sandboxes:read"]));
    let both = format!("{}; {}", planted.cookie, person.cookie);
    let page: &[(&str, &str)] = &[
        ("cookie", &both),
        ("origin", &person.origin),
        ("x-warden-csrf", &person.csrf),
    ];
    let (status, _, b) = http(&d, "GET", "/session", page, None);
    assert_eq!(status, 200, "{b}");
    assert_eq!(json(&b)["token"]["name"], "web", "the planted session: {b}");
    let (status, _, b) = http(&d, "GET", "/v1/tokens", page, None);
    assert_eq!(status, 200, "the planted session answered: {b}");
    // The planted session alone, with the person's CSRF token: refused.
    let alone: &[(&str, &str)] = &[
        ("cookie", &planted.cookie),
        ("origin", &person.origin),
        ("x-warden-csrf", &person.csrf),
    ];
    let (status, _, b) = http(&d, "GET", "/session", alone, None);
    assert_eq!(status, 403, "{b}");
}

/// A browser keeps what it fetched in its cache on disk unless told not
/// to: tokens, files, a command's output would stay there after logout.
#[test]
fn no_answer_of_the_api_is_kept_by_a_cache() {
    let Some((_state, d)) = start() else { return };
    let token = admin_token(&d);
    let bearer = format!("Bearer {token}");
    for path in ["/v1/tokens", "/v1/sandboxes", "/v1/nowhere"] {
        let (_, h, _) = http(&d, "GET", path, &[("authorization", &bearer)], None);
        assert_eq!(header(&h, "cache-control"), Some("no-store"), "{path}");
    }
}

/// Sessions are bounded; a holder of any token (an agent's per-sandbox
/// token, say) logging in over and over must not push the person's
/// session out.
#[test]
fn logging_in_again_and_again_with_one_token_logs_no_one_else_out() {
    let Some((_state, d)) = start() else { return };
    let person = login(&d, &admin_token(&d));
    let agent = token(&d.state, "agent", &["sandboxes:read"]);
    // More logins than the daemon keeps sessions (256), in one curl (one
    // curl per login took 13 s of the test's time).
    let origin = format!("http://{}", d.tcp.as_ref().unwrap());
    let url = format!("{origin}/login");
    let body = serde_json::json!({ "token": agent }).to_string();
    let mut curl = std::process::Command::new("curl");
    curl.arg("-sS");
    for i in 0..300 {
        if i > 0 {
            curl.arg("--next");
        }
        curl.args([
            "--max-time",
            "60",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %header{set-cookie}\n",
        ])
        .args(["-X", "POST", "-H", &format!("origin: {origin}")])
        .args([
            "-H",
            "content-type: application/json",
            "--data-binary",
            &body,
        ])
        .arg(&url);
    }
    let out = curl.output().expect("curl is installed");
    let answers = String::from_utf8_lossy(&out.stdout);
    let logged_in = answers
        .lines()
        .filter(|l| l.starts_with("200 ") && l.len() > 4)
        .count();
    assert_eq!(
        logged_in,
        300,
        "{answers}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let h = [
        ("cookie", person.cookie.as_str()),
        ("x-warden-csrf", &person.csrf),
    ];
    let (status, _, b) = http(&d, "GET", "/session", &h, None);
    assert_eq!(status, 200, "the person was logged out: {b}");
}

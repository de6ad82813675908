//! The daemon's callers named exactly, over real HTTP against a real
//! `warden serve --listen 127.0.0.1:0 --e2b`: a request on TCP with no
//! credential is nobody, and every route that needs none (the health
//! check, the OpenAPI document, the dashboard's page, assets, login,
//! session and logout, an unknown route; on the E2B door every route, its
//! envd probe, its signed file URLs and its sandbox ports) answers nobody
//! with nothing the owner would get: no sandbox, no count, no state, no
//! host path. A credential that does not stand is refused where it is
//! given, never taken as nobody.

use crate::common::daemon::*;
use crate::common::*;

/// A request: method, path, headers.
type Call<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
/// A request whose headers are made here: method, path, headers.
type Made<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>);

/// A daemon on TCP with its E2B door, and a sandbox of the owner's.
struct Owned {
    _state: TempDir,
    d: Daemon,
    api: String,
    door: String,
}

const OWNERS: &str = "owners-secret-sb";

fn start(tag: &str) -> Option<Owned> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new(tag);
    let door = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &door], &[]);
    let (s, b) = json_call(
        &d,
        "POST",
        "/v1/sandboxes",
        &format!(r#"{{"name":"{OWNERS}","start":false}}"#),
    );
    assert_eq!(s, 201, "{b}");
    let api = d.tcp.clone().unwrap();
    Some(Owned {
        _state: state,
        d,
        api,
        door,
    })
}

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = call(
            &self.d,
            "DELETE",
            &format!("/v1/sandboxes/{OWNERS}?force=true"),
            None,
            None,
        );
    }
}

/// What nobody must find in an answer: the owner's sandbox, the state
/// directory (where every host path of the daemon's lies).
fn tells_nothing(o: &Owned, what: &str, body: &str) {
    let state = o.d.state.display().to_string();
    assert!(
        !body.contains(OWNERS),
        "{what}: names the owner's sandbox: {body}"
    );
    assert!(
        !body.contains(&state),
        "{what}: names the state directory: {body}"
    );
}

#[test]
fn nobody_on_a_public_route_gets_nothing_the_owner_would() {
    let Some(o) = start("callers-nobody") else {
        return;
    };
    // The owner, on its socket, is told its sandbox is there.
    let (s, b) = call(&o.d, "GET", "/v1/health", None, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["sandboxes"], 1, "{b}");
    // Nobody on the API's listener: the public routes answer, with
    // nothing of the owner's; the others are refused.
    let public: &[(&str, &str, Option<&str>, u16)] = &[
        ("GET", "/v1/health", None, 200),
        ("GET", "/v1/openapi.json", None, 200),
        ("GET", "/", None, 200),
        ("GET", "/assets/app.js", None, 200),
        ("GET", "/assets/app.css", None, 200),
        ("GET", "/assets/icon.svg", None, 200),
        ("GET", "/session", None, 401),
        ("POST", "/logout", None, 401),
        ("POST", "/login", Some(r#"{"token":""}"#), 401),
        ("GET", "/v1/nothing/here", None, 404),
        ("GET", "/v1/sandboxes", None, 401),
        ("GET", &format!("/v1/sandboxes/{OWNERS}"), None, 401),
        ("GET", "/v1/tokens", None, 401),
        ("POST", "/mcp", Some("{}"), 401),
    ];
    let origin = format!("http://{}", o.api);
    for (method, path, body, want) in public {
        let (s, h, b) = http_on(&o.api, method, path, &[("origin", &origin)], *body);
        assert_eq!(s, *want, "{method} {path}: {b}");
        tells_nothing(&o, path, &b);
        assert!(
            !h.iter().any(|(k, _)| k == "set-cookie"),
            "{method} {path} set a cookie for nobody: {h:?}"
        );
    }
    let (_, _, b) = http_on(&o.api, "GET", "/v1/health", &[], None);
    assert!(
        json(&b).get("sandboxes").is_none(),
        "counted for nobody: {b}"
    );
    // Nobody on the E2B door: every route asks for a credential, its
    // envd probe, file URLs and sandbox ports included.
    let sandbox = [("e2b-sandbox-id", OWNERS)];
    let door: &[Call] = &[
        ("GET", "/sandboxes", &[]),
        ("GET", "/v2/sandboxes", &[]),
        ("GET", &format!("/sandboxes/{OWNERS}"), &[]),
        ("GET", "/templates", &[]),
        ("GET", "/snapshots", &[]),
        ("GET", "/health", &sandbox),
        ("GET", "/files?path=/etc/passwd", &sandbox),
        ("GET", "/files?path=/etc/passwd", &[]),
        ("POST", "/process.Process/List", &sandbox),
        ("GET", "/", &[("host", &format!("8080-{OWNERS}.localhost"))]),
        (
            "GET",
            "/",
            &[("e2b-sandbox-port", "8080"), ("e2b-sandbox-id", OWNERS)],
        ),
    ];
    for (method, path, headers) in door {
        let (s, _, b) = http_on(&o.door, method, path, headers, None);
        assert!(
            s == 400 || s == 401,
            "{method} {path} {headers:?} answered nobody with {s}: {b}"
        );
        tells_nothing(&o, path, &b);
    }
    // The owner's sandbox is as it was: nothing started it.
    let (s, b) = call(&o.d, "GET", &format!("/v1/sandboxes/{OWNERS}"), None, None);
    assert_eq!(s, 200, "{b}");
    assert_ne!(json(&b)["state"], "running", "{b}");
}

#[test]
fn a_credential_that_does_not_stand_is_refused_and_never_taken_as_nobody() {
    let Some(o) = start("callers-bogus") else {
        return;
    };
    let made_up = "wdn_000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let bearer = format!("Bearer {made_up}");
    // On the API, a public route given a credential checks it: refused,
    // where nobody would have been answered.
    for auth in [bearer.as_str(), "Bearer nonsense", "Basic dXNlcjpwYXNz"] {
        for path in ["/v1/health", "/v1/openapi.json"] {
            let (s, _, b) = http_on(&o.api, "GET", path, &[("authorization", auth)], None);
            assert_eq!(s, 401, "{path} with {auth}: {b}");
            tells_nothing(&o, path, &b);
        }
    }
    // A session cookie that names no session: refused by the routes that
    // take one.
    let cookie = [
        ("cookie", "warden_session=00112233"),
        ("x-warden-csrf", "00"),
    ];
    for (method, path) in [
        ("GET", "/v1/sandboxes"),
        ("GET", "/session"),
        ("POST", "/logout"),
    ] {
        let (s, _, b) = http_on(&o.api, method, path, &cookie, None);
        assert_eq!(s, 401, "{method} {path}: {b}");
        tells_nothing(&o, path, &b);
    }
    // A made-up token at the login: no session.
    let origin = format!("http://{}", o.api);
    let body = serde_json::json!({ "token": made_up }).to_string();
    let (s, h, b) = http_on(
        &o.api,
        "POST",
        "/login",
        &[("origin", &origin)],
        Some(&body),
    );
    assert_eq!(s, 401, "{b}");
    assert!(!h.iter().any(|(k, _)| k == "set-cookie"), "{h:?}");
    // On the E2B door: an API key, an access token, a signature that do
    // not stand are refused.
    let door: &[Made] = &[
        ("GET", "/sandboxes", vec![("x-api-key", made_up)]),
        ("GET", "/sandboxes", vec![("x-api-key", "e2b_1234")]),
        (
            "GET",
            "/health",
            vec![("x-access-token", made_up), ("e2b-sandbox-id", OWNERS)],
        ),
        (
            "GET",
            "/health",
            vec![
                (
                    "x-access-token",
                    "wde_00000000000000000000000000000000000000000000",
                ),
                ("e2b-sandbox-id", OWNERS),
            ],
        ),
        (
            "GET",
            "/files?path=/etc/passwd&username=user&signature=v1_AAAA",
            vec![],
        ),
        (
            "GET",
            "/",
            vec![
                ("e2b-sandbox-port", "8080"),
                ("e2b-sandbox-id", OWNERS),
                ("x-access-token", made_up),
            ],
        ),
    ];
    for (method, path, headers) in door {
        let (s, _, b) = http_on(&o.door, method, path, headers, None);
        assert_eq!(s, 401, "{method} {path} {headers:?}: {b}");
        // A refusal may repeat the sandbox the request named, but says
        // of the owner's nothing it would not say of a missing one.
        let missing: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (*k, if *v == OWNERS { MISSING } else { *v }))
            .collect();
        let (s2, _, b2) = http_on(&o.door, method, path, &missing, None);
        assert_eq!((s, b.replace(OWNERS, MISSING)), (s2, b2), "{method} {path}");
        tells_nothing(&o, path, &b.replace(OWNERS, MISSING));
    }
}

/// A sandbox that does not exist.
const MISSING: &str = "nosuch-sandbox-x";

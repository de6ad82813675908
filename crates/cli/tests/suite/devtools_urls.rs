//! What a sandbox says in its DevTools discovery answers (`/json/version`,
//! `/json/list` on its own 127.0.0.1:9222) is passed on to a client only
//! reduced to one strict shape: the daemon hands the client a
//! `webSocketDebuggerUrl` that the client then opens with its token, so a
//! path the sandbox chose (dot segments, percent-escapes, a query) would
//! send that token to any other route of the daemon. Code in the sandbox
//! plays the browser here: a plain sandbox whose 127.0.0.1:9222 is a
//! small server answering discovery as the test tells it, which is what
//! code inside a desktop can do once it kills its Chromium.

use crate::common;
use crate::common::daemon::{call, json, on_socket, Daemon};
use crate::common::rfb::{connect, runtime};

/// Sandbox `name` whose 127.0.0.1:9222 answers `/json/version` with
/// `{"Browser": ..., "webSocketDebuggerUrl": URL}` and `/json/list` with
/// one target per URL, the URLs read from /tmp/urls.json (one JSON list,
/// rewritten by [`answer_with`]) at each request.
fn fake_devtools(d: &Daemon, name: &str) {
    let body = format!(r#"{{"name":"{name}"}}"#);
    let (s, b) = call(d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(s, 201, "{b}");
    let script = r#"import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        urls = json.load(open('/tmp/urls.json'))
        if self.path.startswith('/json/list'):
            v = [{"id": "A1B2", "type": "page", "title": "t", "url": "about:blank",
                  "faviconUrl": "http://127.0.0.1:9222/x.ico",
                  "devtoolsFrontendUrl": "/devtools/inspector.html?ws=" + u,
                  "webSocketDebuggerUrl": u} for u in urls]
        else:
            v = {"Browser": "Chrome/140", "Protocol-Version": "1.3",
                 "webSocketDebuggerUrl": urls[0]}
        b = json.dumps(v).encode()
        self.send_response(200)
        self.send_header('content-type', 'application/json')
        self.send_header('content-length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 9222), H).serve_forever()
"#;
    answer_with(d, name, &["ws://127.0.0.1:9222/devtools/browser/1b2c-3d4e"]);
    common::desktop::background(d, name, &["python3", "-c", script]);
    let up = common::desktop::sh(
        d,
        name,
        "for i in $(seq 200); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9222), 1).close()' 2>/dev/null && echo up && exit; sleep 0.1; done",
    );
    assert!(up.contains("up"), "the fake DevTools server did not start");
}

/// Make the fake server of `name` answer with `urls`.
fn answer_with(d: &Daemon, name: &str, urls: &[&str]) {
    let list = serde_json::to_string(urls).unwrap();
    let script = format!("cat > /tmp/urls.json <<'EOF'\n{list}\nEOF");
    common::desktop::sh(d, name, &script);
}

/// `path` with its dot segments removed as a WHATWG URL parser (a
/// browser's, Playwright's, Node's) removes them, `%2e` counted as a dot.
fn normalised(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, s) in segments.iter().enumerate() {
        let dots = s.to_ascii_lowercase().replace("%2e", ".");
        let last = i + 1 == segments.len();
        match dots.as_str() {
            ".." => {
                out.pop();
                if last {
                    out.push("");
                }
            }
            "." if last => out.push(""),
            "." => {}
            _ => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// The attack URLs: each one, followed by a client after the daemon's
/// rewrite, would leave `.../desktop/cdp/devtools/` for another route.
const ATTACKS: &[&str] = &[
    "ws://127.0.0.1:9222/devtools/../../../../tgt/pty?shell=touch%20/workspace/PWNED",
    "ws://127.0.0.1:9222/devtools/%2e%2e/%2E%2E/%2e%2e/%2e%2e/tgt/pty",
    "ws://127.0.0.1:9222/devtools/page/../../../../../tgt/pty",
    "ws://127.0.0.1:9222/devtools/page/A1B2?x=/../../tgt/pty",
    "ws://127.0.0.1:9222/devtools/page/A1B2#/../../tgt",
    "ws://127.0.0.1:9222/devtools/page/A1B2/../../../../../tgt/pty",
    "ws://127.0.0.1:9222/devtools/./page/A1B2",
    "ws://127.0.0.1:9222/devtools/page/A1%42B2",
    "ws://127.0.0.1:9222/devtools/page\\..\\..\\tgt",
    "ws://127.0.0.1:9222/devtools/json/A1B2",
    "ws://127.0.0.1:9222/devtools/page/",
    "wss://127.0.0.1:9222/devtools/page/A1B2",
];

#[test]
fn a_debugger_url_the_sandbox_bends_out_of_its_devtools_route_is_refused_not_rewritten() {
    let Some((_state, d)) = on_socket("cdp-bent") else {
        return;
    };
    fake_devtools(&d, "dk");
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"tgt"}"#), None);
    assert_eq!(s, 201, "{b}");
    let own = "/v1/sandboxes/dk/desktop/cdp/devtools/";
    for attack in ATTACKS {
        answer_with(&d, "dk", &[attack]);
        for path in [
            "/v1/sandboxes/dk/desktop/cdp/json/version",
            "/v1/sandboxes/dk/desktop/cdp/json/version/",
        ] {
            let (s, b) = call(&d, "GET", path, None, None);
            // Whatever came back, nothing in it leads a client elsewhere.
            if let Some(url) = json(&b)["webSocketDebuggerUrl"].as_str() {
                let p = url.split_once("/v1/").map(|(_, p)| format!("/v1/{p}"));
                let p = p.unwrap_or_default();
                panic!(
                    "{attack} was passed on as {url}; a client opens {}",
                    normalised(p.split(['?', '#']).next().unwrap_or(""))
                );
            }
            assert_eq!(s, 502, "{attack}: {b}");
            let v = json(&b);
            assert_eq!(v["reason"], "devtools_url_refused", "{attack}: {b}");
            assert!(!b.contains("tgt"), "the sandbox's text told back: {b}");
            assert!(
                v["message"].as_str().unwrap_or("").contains("/devtools/"),
                "the refusal says what is accepted: {b}"
            );
        }
        let (s, b) = call(
            &d,
            "GET",
            "/v1/sandboxes/dk/desktop/cdp/json/list",
            None,
            None,
        );
        assert_eq!(s, 200, "{b}");
        let targets = json(&b);
        let t = &targets.as_array().unwrap()[0];
        assert!(t.get("webSocketDebuggerUrl").is_none(), "{attack}: {b}");
        assert_eq!(t["wardenRefused"]["code"], "devtools_url_refused", "{b}");
        // Nor is the sandbox's text told back in the refusal.
        assert!(
            !b.contains("tgt") && !b.contains("/../") && !b.contains("A1B2?"),
            "{attack}: {b}"
        );
        assert!(t.get("faviconUrl").is_none(), "{b}");
        assert!(t.get("devtoolsFrontendUrl").is_none(), "{b}");
    }
    // Nothing reached the other sandbox.
    let left = common::desktop::sh(&d, "tgt", "ls /workspace");
    assert!(!left.contains("PWNED"), "{left}");
    // A normal answer still comes through, pointed at the daemon.
    answer_with(
        &d,
        "dk",
        &["ws://127.0.0.1:9222/devtools/browser/1b2c-3d4e-AF09"],
    );
    let (s, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/dk/desktop/cdp/json/version/",
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    let url = json(&b)["webSocketDebuggerUrl"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        url.ends_with(&format!("{own}browser/1b2c-3d4e-AF09")),
        "{url}"
    );
    answer_with(&d, "dk", &["ws://127.0.0.1:9222/devtools/page/A1B2"]);
    let (s, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/dk/desktop/cdp/json/list",
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    let t = &json(&b)[0];
    assert!(
        t["webSocketDebuggerUrl"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{own}page/A1B2")),
        "{b}"
    );
    assert_eq!(t["id"], "A1B2", "{b}");
    assert_eq!(t["type"], "page", "{b}");
    assert_eq!(t["url"], "about:blank", "{b}");
}

#[test]
fn the_daemons_devtools_route_opens_only_a_browser_or_page_endpoint() {
    let Some((_state, d)) = on_socket("cdp-route") else {
        return;
    };
    fake_devtools(&d, "dk");
    // Refused before anything is opened inside (the fake answers no
    // WebSocket: a path it was asked for would be a 502).
    runtime().block_on(async {
        for bad in [
            "/v1/sandboxes/dk/desktop/cdp/devtools/worker/A1B2",
            "/v1/sandboxes/dk/desktop/cdp/devtools/page/A1B2Z",
            "/v1/sandboxes/dk/desktop/cdp/devtools/page/%2e%2e",
            "/v1/sandboxes/dk/desktop/cdp/devtools/page/a%2fb",
        ] {
            assert_eq!(connect(&d, bad, None).await.err(), Some(400), "{bad}");
        }
        let good = "/v1/sandboxes/dk/desktop/cdp/devtools/page/A1B2";
        assert_eq!(connect(&d, good, None).await.err(), Some(502), "{good}");
    });
}

//! `--secret-rule`s on a real terminated connection (the request rules'
//! rig: a recording HTTPS server upstream, a raw HTTP/1.1 client): a
//! request the server may take as another method or path than the rule
//! allows never leaves with the secret; and a request without a body
//! reaches the server without one.

use super::super::{placeholder, Secret, Terminator};
use super::tests::{rig_made, Rig};
use warden_policy::{DomainRule, SecretRule};

/// The real value the upstream gets in place of the placeholder.
const VALUE: &str = "sv-RealSecretValue-8d41c07e2b";

/// A terminator with one secret for `api.test` on the upstream's port,
/// its `--secret-rule`s `rules` (`PORT` standing for that port); the rig
/// and the placeholder.
async fn secret_rig(rules: &[&str]) -> (Rig, String) {
    let held = placeholder().unwrap();
    let h = held.clone();
    let rules: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
    // An HTTP/1.1 server, which reads a request's framing from its head.
    let rig = rig_made(false, move |ca_file, port| {
        let host = DomainRule::parse(&format!("api.test:{port}")).unwrap();
        let secret = Secret::new("TOKEN".into(), h, VALUE.into(), vec![host], false);
        let rules = rules
            .iter()
            .map(|r| SecretRule::parse(&r.replace("PORT", &port.to_string())).unwrap())
            .collect();
        Terminator::new(vec![secret], &[ca_file.to_path_buf()])
            .unwrap()
            .with_rules(rules)
    })
    .await;
    (rig, held)
}

/// A POST of `body` (form-encoded) to `target` with the placeholder as
/// its bearer token and `extra` headers.
fn post(held: &str, target: &str, extra: &str, body: &str) -> String {
    format!(
        "POST {target} HTTP/1.1\r\nHost: HOST\r\nAuthorization: Bearer {held}\r\n{extra}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rule_refuses_what_a_method_override_or_a_routing_header_makes_of_a_request() {
    let (rig, held) = secret_rig(&["POST api.test:PORT/echo"]).await;
    for (what, request) in [
        (
            "an override header",
            post(&held, "/echo", "X-HTTP-Method-Override: DELETE\r\n", "a=b"),
        ),
        (
            "an override header as CGI names it",
            post(&held, "/echo", "X_HTTP_Method_Override: DELETE\r\n", "a=b"),
        ),
        (
            "_method in the body",
            post(&held, "/echo", "", "_method=DELETE"),
        ),
        (
            "_method in the query",
            post(&held, "/echo?_method=DELETE", "", "a=b"),
        ),
        (
            "a routing header",
            post(&held, "/echo", "X-Original-URL: /admin/users/1\r\n", "a=b"),
        ),
        (
            "a body too long to read for its _method",
            post(&held, "/echo", "", &format!("a={}", "b".repeat(70_000))),
        ),
    ] {
        let answer = rig.raw(&request).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{what}: {answer}");
        assert!(
            answer.contains("x-warden-reason: secret_rule"),
            "{what}: {answer}"
        );
    }
    assert!(
        rig.seen().is_empty(),
        "reached the upstream: {:?}",
        rig.seen()
    );
    // What the rule allows goes, with the real value.
    let answer = rig.raw(&post(&held, "/echo", "", "a=b")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let heads = rig.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_eq!(heads[0].0, "POST /echo");
    assert_eq!(
        heads[0].1.get("authorization").unwrap(),
        &format!("Bearer {VALUE}")
    );
    let decisions = rig.decisions.lock().unwrap();
    let refused: Vec<_> = decisions.iter().filter(|d| !d.allowed).collect();
    assert_eq!(refused.len(), 6, "{refused:?}");
    assert!(
        refused
            .iter()
            .any(|d| d.detail.contains("as the DELETE its method override names")),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rule_for_any_method_leaves_a_method_override_to_the_server() {
    let (rig, held) = secret_rig(&["* api.test:PORT/echo"]).await;
    let answer = rig.raw(&post(&held, "/echo", "", "_method=DELETE")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answer = rig
        .raw(&post(&held, "/echo", "X-Original-URL: /admin\r\n", "a=b"))
        .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(rig.seen(), ["POST /echo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_body_reaches_a_secrets_host_without_one_and_a_body_keeps_its_length() {
    let (rig, held) = secret_rig(&[]).await;
    for method in ["TRACE", "DELETE", "OPTIONS", "POST", "FOO", "GET"] {
        let answer = rig
            .raw(&format!(
                "{method} /m HTTP/1.1\r\nHost: HOST\r\nAuthorization: Bearer {held}\r\nConnection: close\r\n\r\n"
            ))
            .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{method}: {answer}");
    }
    let answer = rig.raw(&post(&held, "/m", "", "abcde")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let heads = rig.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 7, "{heads:?}");
    for (line, h) in &heads[..6] {
        assert!(
            h.get("transfer-encoding").is_none(),
            "{line} went with a body of warden's own: {h:?}"
        );
        let length = h.get("content-length").map(|v| v.to_str().unwrap());
        assert!(matches!(length, None | Some("0")), "{line}: {h:?}");
    }
    let (line, h) = &heads[6];
    assert!(h.get("transfer-encoding").is_none(), "{line}: {h:?}");
    assert_eq!(h.get("content-length").unwrap(), "5", "{line}: {h:?}");
}

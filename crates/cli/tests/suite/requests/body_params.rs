//! A query condition is decided on the parameters servers merge from the
//! body too (PHP's `$_REQUEST`, a servlet's `getParameter`, Spring's
//! `@RequestParam`, Rails' `params`, Flask's `request.values`): the key a
//! deny rule names, sent in a form, a JSON object, a multipart field or a
//! compressed body no reader can look into, is refused as the same key in
//! the query is, and never reaches the recording server; an allow
//! condition passes no other value the body gives its key. The rules
//! name no method, so nothing else here reads a body (a `_method` field).

use super::ask::{answer, create_named, first_question, post_in, posted, warden_asking};
use super::kept_grants;
use crate::common::forge::Forge;
use crate::common::*;

/// `c LABEL ARGS...`: curl, globbing off (`[]` is sent as it is).
const CURL: &str = labelled_curl!("-g");

/// Any request under `/users/` but one whose parameters hold `admin=1`.
const ADMIN_DENIED: &[&str] = &[
    "--allow-request",
    "* forge.test:PORT/users/**",
    "--deny-request",
    "* forge.test:PORT/users/**?admin=1",
];

#[test]
fn a_denied_query_key_sent_in_the_body_never_reaches_the_server() {
    let Some(forge) = Forge::start() else { return };
    if !std::path::Path::new("/usr/bin/gzip").exists()
        && !std::path::Path::new("/bin/gzip").exists()
    {
        eprintln!("skipped: no gzip on this host to compress a body with");
        return;
    }
    let out = forge.run(
        ADMIN_DENIED,
        &format!(
            r#"{CURL}form='Content-Type: application/x-www-form-urlencoded'
c query -X POST -d '' "$u/users/7?admin=1"
c form -H "$form" --data-binary 'admin=1' $u/users/7
c form-spelled -H "$form" --data-binary 'name=x&Admin%5B%5D=1' $u/users/7
c json -H 'Content-Type: application/json' --data-binary '{{"name":"x","admin":1}}' $u/users/7
c multipart -F name=x -F admin=1 $u/users/7
printf 'admin=1' | gzip -c > /tmp/gz
c gzip -H "$form" -H 'Content-Encoding: gzip' --data-binary @/tmp/gz $u/users/7
c plain-form -H "$form" --data-binary 'admin=0&name=x' $u/users/7
c plain-json -H 'Content-Type: application/json' --data-binary '{{"name":"x"}}' $u/users/7
"#
        ),
    );
    assert_eq!(
        super::answered(&out),
        [
            "403 query",
            "403 form",
            "403 form-spelled",
            "403 json",
            "403 multipart",
            "403 gzip",
            "200 plain-form",
            "200 plain-json",
        ],
    );
    forge.up.arrived(2, "only the plain bodies");
}

/// A body in a charset warden reads otherwise than UTF-8 may hold the
/// key: `admin=1` in UTF-16 (ASP.NET Core's `FormReader` and Tomcat's
/// `getParameter` decode a form with the charset it declares), however
/// the charset is spelled, is refused and never reaches the server; a
/// form in UTF-8, and an ASCII one in Latin-1, are read as before.
#[test]
fn a_denied_key_in_a_form_of_another_charset_never_reaches_the_server() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        ADMIN_DENIED,
        &format!(
            r#"{CURL}form='Content-Type: application/x-www-form-urlencoded'
printf 'a\000d\000m\000i\000n\000=\0001\000' > /tmp/le
printf '\000a\000d\000m\000i\000n\000=\0001' > /tmp/be
c utf-16le -H "$form; charset=utf-16le" --data-binary @/tmp/le $u/users/2
c utf-16be -H "$form; charset=UTF-16BE" --data-binary @/tmp/be $u/users/3
c utf-16 -H "$form; charset=\"utf-16\"" --data-binary @/tmp/le $u/users/4
c twice -H "$form; charset=utf-8; charset=utf-16le" --data-binary @/tmp/le $u/users/5
c utf-7 -H "$form; charset=utf-7" --data-binary '+AGE-dmin=1' $u/users/6
c utf-8 -H "$form; charset=utf-8" --data-binary 'name=x' $u/users/7
c latin1 -H "$form; charset=iso-8859-1" --data-binary 'name=x' $u/users/8
"#
        ),
    );
    assert_eq!(
        super::answered(&out),
        [
            "403 utf-16le",
            "403 utf-16be",
            "403 utf-16",
            "403 twice",
            "403 utf-7",
            "200 utf-8",
            "200 latin1",
        ],
    );
    forge.up.arrived(2, "only the readable forms");
}

#[test]
fn an_allowed_query_value_never_passes_another_value_the_body_gives_its_key() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &["--allow-request", "POST forge.test:PORT/search?q=safe-*"],
        &format!(
            r#"{CURL}form='Content-Type: application/x-www-form-urlencoded'
c other-form -H "$form" --data-binary 'q=evil' "$u/search?q=safe-1"
c other-json -H 'Content-Type: application/json' --data-binary '{{"q":"evil"}}' "$u/search?q=safe-1"
c other-multipart -F q=evil "$u/search?q=safe-1"
c same -H "$form" --data-binary 'page=2' "$u/search?q=safe-1"
"#
        ),
    );
    assert_eq!(
        super::answered(&out),
        [
            "403 other-form",
            "403 other-json",
            "403 other-multipart",
            "200 same",
        ],
    );
    forge
        .up
        .arrived(1, "only the request without another value");
}

/// An ask whose condition's key the body gives: the question says so, and
/// no answer covers more than that one request. "always" about
/// `?action=read` with no body keeps that grant; the same query with the
/// body `action=delete` is asked about every time (the grant does not
/// cover it, nor does "always" about it), and nothing is kept for it.
#[test]
fn an_ask_about_a_key_the_body_gives_covers_that_request_only() {
    let Some(forge) = Forge::start() else { return };
    let port = forge.up.port;
    let state = TempDir::new("requests-body-params-ask");
    let w = |args: &[&str]| warden_asking(state.path(), args);
    create_named(
        state.path(),
        &forge,
        "bodied",
        &["--ask-request", "POST forge.test:PORT/ok?action=*"],
    );
    ok(&w(&["start", "bodied"]));
    // `/ok?action=read&n=N`: `n` tells the requests apart in the
    // server's record (no condition looks at it).
    let post = |n: u32, body: &str| {
        let form = "Content-Type: application/x-www-form-urlencoded";
        let url = format!("https://forge.test:{port}/ok?action=read&n={n}");
        post_in(
            state.path(),
            "bodied",
            &["-H", form, "--data-binary", body],
            &url,
        )
    };
    let question = || first_question(w);
    // The query alone: asked, always.
    let first = post(1, "");
    let q = question();
    assert!(!q["request"].as_str().unwrap_or("").contains("body"), "{q}");
    answer(state.path(), &q, "allow_always");
    assert_eq!(posted(first), "200");
    // The same query, the body giving the key another value: asked (the
    // grant does not cover it), the question says why; denied.
    let second = post(2, "action=delete");
    let q = question();
    assert!(
        q["request"]
            .as_str()
            .is_some_and(|r| r.contains("its body gives parameters the rule looks at")),
        "{q}"
    );
    answer(state.path(), &q, "deny");
    assert_eq!(posted(second), "403");
    // "always" about it lets that request go once, and covers no other.
    let third = post(3, "action=delete");
    answer(state.path(), &question(), "allow_always");
    assert_eq!(posted(third), "200");
    let fourth = post(4, "action=delete");
    answer(state.path(), &question(), "deny");
    assert_eq!(posted(fourth), "403");
    let seen = forge.up.requests();
    let reached: Vec<&str> = seen
        .iter()
        .filter_map(|r| r.split_once("&n=").map(|(_, n)| n))
        .collect();
    assert_eq!(reached, ["1", "3"], "{seen:?}");
    ok(&w(&["stop", "--time", "1s", "bodied"]));
    // Kept: the grant about the query alone, and nothing for the body.
    let kept = kept_grants(state.path());
    assert!(
        kept.contains(&format!(
            r#"allow_requests: ["POST forge.test:{port}/ok?action=read"]"#
        )),
        "{kept}"
    );
    ok(&w(&["rm", "bodied"]));
}

/// A form that declares no charset, a key spelled with a byte past ASCII:
/// read as UTF-8 it is no key a rule names (`pa\xDF` is not UTF-8), while
/// Tomcat and Spring read such a form as ISO-8859-1, where it is `paß`,
/// which a reader ignoring case takes as `pass`. Plain, escaped or as a
/// multipart part's name, it is refused and never reaches the server; a
/// form whose bytes past ASCII are in values only is read both ways and
/// goes.
#[test]
fn a_denied_key_spelled_in_latin1_in_a_form_without_a_charset_never_reaches_the_server() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &[
            "--allow-request",
            "* forge.test:PORT/users/**",
            "--deny-request",
            "* forge.test:PORT/users/**?pass",
        ],
        &format!(
            r#"{CURL}form='Content-Type: application/x-www-form-urlencoded'
printf 'pa\337=1' > /tmp/raw
printf '\055-XyZ\r\nContent-Disposition: form-data; name="pa\337"\r\n\r\n1\r\n--XyZ--\r\n' > /tmp/mp
c raw -H "$form" --data-binary @/tmp/raw $u/users/1
c escaped -H "$form" --data-binary 'pa%DF=1' $u/users/2
c no-type -H 'Content-Type:' --data-binary @/tmp/raw $u/users/3
c multipart -H 'Content-Type: multipart/form-data; boundary=XyZ' --data-binary @/tmp/mp $u/users/4
c values-only -H "$form" --data-binary 'name=Jos%C3%A9&city=K%F6ln' $u/users/5
"#
        ),
    );
    assert_eq!(
        super::answered(&out),
        [
            "403 raw",
            "403 escaped",
            "403 no-type",
            "403 multipart",
            "200 values-only",
        ],
    );
    let seen = forge.up.arrived(1, "only the form with ASCII keys");
    assert!(seen[0].ends_with("/users/5"), "{seen:?}");
}

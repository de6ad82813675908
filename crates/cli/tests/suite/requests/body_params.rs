//! A query condition is decided on the parameters servers merge from the
//! body too (PHP's `$_REQUEST`, a servlet's `getParameter`, Spring's
//! `@RequestParam`, Rails' `params`, Flask's `request.values`): the key a
//! deny rule names, sent in a form, a JSON object, a multipart field or a
//! compressed body no reader can look into, is refused as the same key in
//! the query is, and never reaches the recording server; an allow
//! condition passes no other value the body gives its key. The rules
//! name no method, so nothing else here reads a body (a `_method` field).

use crate::common::forge::Forge;
use crate::common::*;

/// `curl` of the script's lines: `c LABEL ARGS...` prints the status and
/// the label.
const CURL: &str =
    "c() { l=$1; shift; curl -sS -g --noproxy '*' -o /dev/null -w \"%{http_code} $l\\n\" \"$@\"; }\nu=https://forge.test:PORT\n";

#[test]
fn a_denied_query_key_sent_in_the_body_never_reaches_the_server() {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    if !std::path::Path::new("/usr/bin/gzip").exists()
        && !std::path::Path::new("/bin/gzip").exists()
    {
        eprintln!("skipped: no gzip on this host to compress a body with");
        return;
    }
    let out = super::run(
        &ca,
        &up,
        &[
            "--allow-request",
            "* forge.test:PORT/users/**",
            "--deny-request",
            "* forge.test:PORT/users/**?admin=1",
        ],
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
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
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
        "{s}"
    );
    let seen = up.requests();
    assert_eq!(seen.len(), 2, "only the plain bodies arrived: {seen:?}");
}

#[test]
fn an_allowed_query_value_never_passes_another_value_the_body_gives_its_key() {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    let out = super::run(
        &ca,
        &up,
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
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        [
            "403 other-form",
            "403 other-json",
            "403 other-multipart",
            "200 same",
        ],
        "{s}"
    );
    let seen = up.requests();
    assert_eq!(
        seen.len(),
        1,
        "only the request without another value arrived: {seen:?}"
    );
}

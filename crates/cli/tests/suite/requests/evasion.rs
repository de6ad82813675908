//! A refusing request rule cannot be stepped around by a spelling the
//! server reads as the refused request: a trailing slash (most servers
//! route `/x/` as `/x`), or `_method` in a form, multipart or JSON body
//! (Rails, Laravel and Symfony take the method from it). Each attack is
//! made through the real binary and never reaches the recording server.

use crate::common::forge::Forge;
use crate::common::*;

const RULES: &[&str] = &[
    "--allow-request",
    "* forge.test:PORT/**",
    "--deny-request",
    "* forge.test:PORT/**/git-receive-pack",
    "--deny-request",
    "DELETE forge.test:PORT/repos/*/*",
];

/// `curl` of the script's lines: `c LABEL ARGS...` prints the status and
/// the label.
const CURL: &str =
    "c() { l=$1; shift; curl -sS --noproxy '*' -o /dev/null -w \"%{http_code} $l\\n\" \"$@\"; }\nu=https://forge.test:PORT\n";

#[test]
fn a_trailing_slash_never_carries_a_request_past_a_deny_rule() {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    let out = super::run(
        &ca,
        &up,
        RULES,
        &format!(
            "{CURL}c push -X POST $u/acme/w.git/git-receive-pack/
c push2 -X POST $u/acme/w.git/git-receive-pack//
c delete -X DELETE $u/repos/a/b/
c other -X DELETE $u/repos/a/b/c/
"
        ),
    );
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["403 push", "403 push2", "403 delete", "200 other"],
        "{s}"
    );
    let seen = up.requests();
    assert_eq!(seen.len(), 1, "only the unruled path arrived: {seen:?}");
    assert!(seen[0].contains("DELETE /repos/a/b/c/"), "{seen:?}");
}

#[test]
fn a_method_named_in_a_form_multipart_or_json_body_is_decided_as_that_method() {
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    let out = super::run(
        &ca,
        &up,
        RULES,
        &format!(
            "{CURL}c form -d _method=DELETE $u/repos/a/b
c escaped -d '%5Fmethod=delete' $u/repos/a/b
c untyped -H 'Content-Type:' --data-binary _method=DELETE $u/repos/a/b
c multipart -F _method=DELETE $u/repos/a/b
c json -H 'content-type: application/json' -d '{{\"_method\":\"DELETE\"}}' $u/repos/a/b
{{ printf 'a='; head -c 70000 /dev/zero | tr '\\0' a; printf '&_method=DELETE'; }} > /tmp/big
c big --data-binary @/tmp/big $u/repos/a/b
c plain -d a=1 $u/repos/a/b
c elsewhere -d _method=DELETE $u/issues/1
c big-elsewhere --data-binary @/tmp/big $u/issues/1
c octets -H 'content-type: application/octet-stream' --data-binary _method=DELETE $u/repos/a/b
"
        ),
    );
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        [
            "403 form",
            "403 escaped",
            "403 untyped",
            "403 multipart",
            "403 json",
            // Larger than is read to decide: it may name any method.
            "403 big",
            "200 plain",
            "200 elsewhere",
            "200 big-elsewhere",
            "200 octets",
        ],
        "{s}"
    );
    let seen = up.requests();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(
        seen.iter().all(|r| r.contains(" POST ")),
        "only POSTs that no override turns into the denied DELETE arrived: {seen:?}"
    );
}

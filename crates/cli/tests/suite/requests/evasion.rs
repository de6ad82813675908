//! A refusing request rule cannot be stepped around by a spelling the
//! server reads as the refused request: a trailing slash (most servers
//! route `/x/` as `/x`), a format suffix (Rails and Spring route
//! `/x.json` as `/x`), or `_method` in a form, multipart or JSON body
//! (Rails, Laravel and Symfony take the method from it), however its
//! content type is spelled and whether or not warden can parse it, or a
//! header some servers route on in place of the path. Each
//! attack is made through the real binary and never reaches the
//! recording server.

use super::answered;
use crate::common::forge::Forge;

const RULES: &[&str] = &[
    "--allow-request",
    "* forge.test:PORT/**",
    "--deny-request",
    "* forge.test:PORT/**/git-receive-pack",
    "--deny-request",
    "DELETE forge.test:PORT/repos/*/*",
];

/// `c LABEL ARGS...`: curl as it is.
const CURL: &str = labelled_curl!("");

#[test]
fn a_trailing_slash_never_carries_a_request_past_a_deny_rule() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        RULES,
        &format!(
            "{CURL}c push -X POST $u/acme/w.git/git-receive-pack/
c push2 -X POST $u/acme/w.git/git-receive-pack//
c delete -X DELETE $u/repos/a/b/
c other -X DELETE $u/repos/a/b/c/
"
        ),
    );
    assert_eq!(
        answered(&out),
        ["403 push", "403 push2", "403 delete", "200 other"],
    );
    let seen = forge.up.arrived(1, "only the unruled path");
    assert!(seen[0].contains("DELETE /repos/a/b/c/"), "{seen:?}");
}

#[test]
fn a_method_named_in_a_form_multipart_or_json_body_is_decided_as_that_method() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        RULES,
        &format!(
            "{CURL}c form -d _method=DELETE $u/repos/a/b
c escaped -d '%5Fmethod=delete' $u/repos/a/b
c untyped -H 'Content-Type:' --data-binary _method=DELETE $u/repos/a/b
c multipart -F _method=DELETE $u/repos/a/b
c json -H 'content-type: application/json' -d '{{\"_method\":\"DELETE\"}}' $u/repos/a/b
c php-dot -d .method=DELETE $u/repos/a/b
c php-query -d a=1 \"$u/repos/a/b?%5Bmethod=DELETE\"
c header-field -d X-HTTP-Method-Override=DELETE $u/repos/a/b
{{ printf 'a='; head -c 70000 /dev/zero | tr '\\0' a; printf '&_method=DELETE'; }} > /tmp/big
c big --data-binary @/tmp/big $u/repos/a/b
c plain -d a=1 $u/repos/a/b
c elsewhere -d _method=DELETE $u/issues/1
c big-elsewhere --data-binary @/tmp/big $u/issues/1
c octets -H 'content-type: application/octet-stream' --data-binary _method=DELETE $u/repos/a/b
"
        ),
    );
    assert_eq!(
        answered(&out),
        [
            "403 form",
            "403 escaped",
            "403 untyped",
            "403 multipart",
            "403 json",
            // PHP makes `.` and `[` in a name `_`; a header's name as a
            // field (ASP.NET Core's form field).
            "403 php-dot",
            "403 php-query",
            "403 header-field",
            // Larger than is read to decide: it may name any method.
            "403 big",
            "200 plain",
            "200 elsewhere",
            "200 big-elsewhere",
            "200 octets",
        ],
    );
    let seen = forge.up.arrived(4, "only the POSTs");
    assert!(
        seen.iter().all(|r| r.contains(" POST ")),
        "only POSTs that no override turns into the denied DELETE arrived: {seen:?}"
    );
}

/// A body a server may read `_method` from is decided as naming any
/// method unless warden read it for certain: JSON that serde cannot parse
/// but PHP can (a number out of range, nesting deeper than serde's
/// limit), content types the frameworks read as JSON, a form or
/// multipart without matching them exactly (Laravel's `text/json`,
/// `x-json`; Rack's `a, b` split; `multipart/mixed`), and a multipart
/// body whose content type names two boundaries.
#[test]
fn a_method_named_in_a_body_warden_cannot_read_for_certain_is_decided_as_any_method() {
    let Some(forge) = Forge::start() else { return };
    let mp = r#"printf -- '--XyZ\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--XyZ--\r\n' > /tmp/mp
printf -- "--XyZ\r\nContent-Disposition: form-data; name*=UTF-8''_%%6Dethod\r\n\r\nDELETE\r\n--XyZ--\r\n" > /tmp/mp2231
printf -- '--XyZ\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--XyZ--\r\n' > /tmp/mpok"#;
    let out = forge.run(
        RULES,
        &format!(
            r#"{CURL}{mp}
j='{{"_method":"DELETE"}}'
c huge -H 'content-type: application/json' -d '{{"_method":"DELETE","n":1e400}}' $u/repos/a/b
{{ printf '{{"_method":"DELETE","d":'; head -c 200 /dev/zero | tr '\0' '['; head -c 200 /dev/zero | tr '\0' ']'; printf '}}'; }} > /tmp/deep
c deep -H 'content-type: application/json' --data-binary @/tmp/deep $u/repos/a/b
c text-json -H 'content-type: text/json' -d "$j" $u/repos/a/b
c x-json -H 'content-type: application/x-json' -d "$j" $u/repos/a/b
c laravel -H 'content-type: text/plain; x=/json' -d "$j" $u/repos/a/b
c comma -H 'content-type: application/x-www-form-urlencoded, text/plain' -d _method=DELETE $u/repos/a/b
c empty-type -H 'content-type;' -d _method=DELETE $u/repos/a/b
c mixed -H 'content-type: multipart/mixed; boundary=XyZ' --data-binary @/tmp/mp $u/repos/a/b
c related -H 'content-type: Multipart/Related; boundary=XyZ' --data-binary @/tmp/mp $u/repos/a/b
c two-bounds -H 'content-type: multipart/form-data; boundary=XyZ; boundary=Q' --data-binary @/tmp/mp $u/repos/a/b
c rfc2231 -H 'content-type: multipart/form-data; boundary=XyZ' --data-binary @/tmp/mp2231 $u/repos/a/b
c dup -H 'content-type: application/json' -d '{{"_method":"DELETE","_method":"POST"}}' $u/repos/a/b
c json-plain -H 'content-type: text/json' -d '{{"a":1e400}}' $u/issues/1
c json-ok -H 'content-type: application/x-json' -d '{{"a":1}}' $u/repos/a/b
c mixed-ok -H 'content-type: multipart/mixed; boundary=XyZ' --data-binary @/tmp/mpok $u/repos/a/b
"#
        ),
    );
    assert_eq!(
        answered(&out),
        [
            "403 huge",
            "403 deep",
            "403 text-json",
            "403 x-json",
            "403 laravel",
            "403 comma",
            "403 empty-type",
            "403 mixed",
            "403 related",
            "403 two-bounds",
            "403 rfc2231",
            "403 dup",
            "200 json-plain",
            "200 json-ok",
            "200 mixed-ok",
        ],
    );
    let seen = forge.up.arrived(3, "only the controls");
    assert!(seen.iter().all(|r| r.contains(" POST ")), "{seen:?}");
}

/// A format suffix on the last segment (`hooks.json`, which Rails'
/// `(.:format)` and Spring's suffix patterns route as `hooks`) never
/// carries a request past a deny rule for the bare path; an allow rule
/// that names a suffix still allows it.
#[test]
fn a_format_suffix_never_carries_a_request_past_a_deny_rule() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &[
            "--allow-request",
            "* forge.test:PORT/repos/**",
            "--allow-request",
            "* forge.test:PORT/files/**",
            "--deny-request",
            "* forge.test:PORT/repos/*/*/hooks/**",
            "--deny-request",
            "DELETE forge.test:PORT/files/a.b",
            "--allow-request",
            "GET forge.test:PORT/dist/*.tgz",
        ],
        &format!(
            r#"{CURL}c json -X POST $u/repos/acme/w/hooks.json
c xml -X POST $u/repos/acme/w/hooks.xml
c slash -X POST $u/repos/acme/w/hooks.json/
c escaped -X POST $u/repos/acme/w/hooks%2Ejson
c two -X POST $u/repos/acme/w/hooks.tar.gz
c params -X POST "$u/repos/acme/w/hooks.json;x=1"
c dotted -X DELETE $u/files/a.b.c
c other -X POST $u/repos/acme/w/hooksjson
c tgz $u/dist/left-pad-1.3.0.tgz
"#
        ),
    );
    assert_eq!(
        answered(&out),
        [
            "403 json",
            "403 xml",
            "403 slash",
            "403 escaped",
            "403 two",
            "403 params",
            "403 dotted",
            "200 other",
            "200 tgz",
        ],
    );
    forge.up.arrived(2, "only the controls");
}

/// IIS and ASP.NET (and Symfony and Zend before their fixes) route a
/// request by `X-Original-URL` or `X-Rewrite-URL` in place of its path,
/// and gateways rebuild it from a forwarded prefix: a request that names
/// another path so is refused on a ruled name, however the header's name
/// is spelled, and never reaches the server; without one it goes.
#[test]
fn a_header_that_names_another_path_never_carries_a_request_past_a_deny_rule() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        RULES,
        &format!(
            "{CURL}c original -X DELETE -H 'X-Original-URL: /repos/a/b' $u/public/a
c rewrite -X DELETE -H 'X-Rewrite-URL: /repos/a/b' $u/public/a
c cgi -X DELETE -H 'X_ORIGINAL_URL: /repos/a/b' $u/public/a
c prefix -H 'X-Forwarded-Prefix: /acme/w.git/git-receive-pack' $u/public/a
c plain -X DELETE $u/public/a
"
        ),
    );
    assert_eq!(
        answered(&out),
        [
            "403 original",
            "403 rewrite",
            "403 cgi",
            "403 prefix",
            "200 plain"
        ],
    );
    let seen = forge
        .up
        .arrived(1, "only the request without a path override");
    assert!(seen[0].contains("DELETE /public/a"), "{seen:?}");
}

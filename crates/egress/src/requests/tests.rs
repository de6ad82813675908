use super::*;
use crate::secrets::normalise_path;

fn rules(list: &[(RequestAction, &str)]) -> RequestRules {
    RequestRules::new(
        list.iter()
            .map(|(a, e)| RequestRule::parse(*a, e).unwrap())
            .collect(),
    )
}

/// Decide `method target` (a raw request target, path and query) on
/// `name:443`, reading the path as the terminator does before it decides
/// and forwards; `None` when the terminator refuses the path itself.
fn decide(r: &RequestRules, name: &str, method: &str, target: &str) -> Option<Outcome> {
    let (raw, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let path = normalise_path(raw, false).ok()?;
    Some(
        r.decide(&Request {
            name,
            port: 443,
            method,
            path: &path,
            query,
            rpc: &Rpc::NoBody,
            params: &Params::None,
        })
        .outcome,
    )
}

use RequestAction::{Allow, Ask, Deny};

#[test]
fn once_a_name_has_rules_a_request_that_matches_none_is_refused() {
    let r = rules(&[(Allow, "GET,HEAD api.forge.test/repos/**")]);
    let d = |m, t| decide(&r, "api.forge.test", m, t);
    assert_eq!(d("GET", "/repos/acme/w"), Some(Outcome::Allow));
    assert_eq!(d("HEAD", "/repos"), Some(Outcome::Allow));
    assert_eq!(d("POST", "/repos/acme/w"), Some(Outcome::NoRule));
    assert_eq!(d("GET", "/user"), Some(Outcome::NoRule));
    assert_eq!(
        d("get", "/repos/acme/w"),
        Some(Outcome::NoRule),
        "methods are case-sensitive"
    );
    assert!(r.covers("api.forge.test", 443));
    assert!(!r.covers("other.test", 443));
    // Ruled on every port it is reached on; on one no rule names, no
    // request is allowed.
    assert!(r.covers("api.forge.test", 8443));
    assert_eq!(
        r.decide(&Request {
            name: "api.forge.test",
            port: 8443,
            method: "GET",
            path: "/repos/acme/w",
            query: None,
            rpc: &Rpc::NoBody,
            params: &Params::None,
        })
        .outcome,
        Outcome::NoRule
    );
}

#[test]
fn deny_wins_over_ask_and_ask_over_allow_whatever_their_order() {
    let r = rules(&[
        (Allow, "* forge.test/**"),
        (Ask, "POST forge.test/**"),
        (Deny, "* forge.test/**/git-receive-pack"),
    ]);
    let d = |m, t| decide(&r, "forge.test", m, t);
    assert_eq!(d("GET", "/a/b"), Some(Outcome::Allow));
    assert_eq!(d("POST", "/a/b"), Some(Outcome::Ask));
    assert_eq!(d("POST", "/a/b.git/git-receive-pack"), Some(Outcome::Deny));
    let v = r.decide(&Request {
        name: "forge.test",
        port: 443,
        method: "POST",
        path: "/a/b.git/git-receive-pack",
        query: None,
        rpc: &Rpc::NoBody,
        params: &Params::None,
    });
    assert_eq!(v.rule.as_deref(), Some("* forge.test/**/git-receive-pack"));
    assert!(v.why.contains("denied by the request rule"), "{}", v.why);
}

/// A push is a request to git-receive-pack: the POST, and the ref
/// advertisement that precedes it, however its query or path is spelled.
#[test]
fn a_push_is_refused_however_its_request_is_spelled() {
    let r = rules(&[
        (Allow, "GET forge.test/**/info/refs?service=git-upload-pack"),
        (Allow, "POST forge.test/**/git-upload-pack"),
        (Allow, "GET forge.test/**"),
        (Deny, "* forge.test/**/git-receive-pack"),
        (Deny, "* forge.test/**/info/refs?service=git-receive-pack"),
    ]);
    let d = |m, t| decide(&r, "forge.test", m, t);
    assert_eq!(
        d("GET", "/acme/w.git/info/refs?service=git-upload-pack"),
        Some(Outcome::Allow)
    );
    assert_eq!(
        d("POST", "/acme/w.git/git-upload-pack"),
        Some(Outcome::Allow)
    );
    for (m, t) in [
        ("GET", "/acme/w.git/info/refs?service=git-receive-pack"),
        ("GET", "/acme/w.git/info/refs?service=git%2Dreceive%2dpack"),
        ("GET", "/acme/w.git/info/refs?service=GIT-RECEIVE-PACK"),
        (
            "GET",
            "/acme/w.git/info/refs?service=git-upload-pack&service=git-receive-pack",
        ),
        ("GET", "/acme/w.git/info/refs?x=1;service=git-receive-pack"),
        ("GET", "/acme/w.git/info/refs?serv%69ce=git-receive-pack"),
        ("POST", "/acme/w.git/git-receive-pack"),
        ("post", "/acme/w.git/git-receive-pack"),
        ("POST", "/acme/w.git/GIT-RECEIVE-PACK"),
        ("POST", "/acme/w.git/git-receive-pack;jsessionid=1"),
        ("POST", "/acme/w.git/git-%72eceive-pack"),
        ("POST", "/acme/w.git/x/../git-receive-pack"),
        ("POST", "/acme//w.git/./git-receive-pack"),
        ("POST", "/acme/w.git/git-upload-pack/../git-receive-pack"),
        ("POST", "/acme/w.git%2Fgit-receive-pack"),
    ] {
        assert_ne!(d(m, t), Some(Outcome::Allow), "{m} {t}");
    }
}

#[test]
fn an_encoded_slash_allows_only_when_both_readings_do_and_never_hides_dots() {
    let r = rules(&[
        (Allow, "GET lab.test/api/v4/projects/*"),
        (Allow, "GET lab.test/api/v4/groups/**"),
        (Allow, "GET lab.test/repos/acme/**"),
    ]);
    let d = |t| decide(&r, "lab.test", "GET", t);
    // One segment as written, two as a decoding server reads it.
    assert_eq!(d("/api/v4/projects/group%2Fproject"), Some(Outcome::NoRule));
    assert_eq!(d("/api/v4/groups/group%2Fsub"), Some(Outcome::Allow));
    assert_eq!(d("/api/v4/projects/p"), Some(Outcome::Allow));
    // A dot segment behind encoded slashes: ambiguous, refused.
    assert_eq!(d("/repos/acme%2F..%2Fother/x"), Some(Outcome::Ambiguous));
    assert_eq!(
        d("/repos/acme%2F%2E%2E%2Fother/x"),
        Some(Outcome::Ambiguous)
    );
    // Dot segments in plain or encoded spelling are resolved first.
    assert_eq!(d("/repos/acme/../other/x"), Some(Outcome::NoRule));
    assert_eq!(d("/repos/acme/%2e%2e/other/x"), Some(Outcome::NoRule));
    assert_eq!(d("/repos/other/../acme/x"), Some(Outcome::Allow));
    // What the terminator refuses outright never reaches the rules.
    assert_eq!(d("/repos/acme/..;/other"), None);
    assert_eq!(d("/repos/acme\\..\\other"), None);
}

#[test]
fn an_encoded_semicolon_or_a_trailing_dot_or_space_never_steps_around_a_rule() {
    let r = rules(&[
        (Allow, "GET lab.test/public/**"),
        (Deny, "* lab.test/public/admin/**"),
    ]);
    let d = |t| decide(&r, "lab.test", "GET", t);
    // Parameters cut at an encoded `;` as at a plain one.
    assert_eq!(d("/public/admin;x/y"), Some(Outcome::Deny));
    assert_eq!(d("/public/admin%3Bx/y"), Some(Outcome::Deny));
    assert_eq!(d("/public/admin%3bx/y"), Some(Outcome::Deny));
    // Trailing dots and spaces, which servers on some file systems drop.
    assert_eq!(d("/public/admin./x"), Some(Outcome::Deny));
    assert_eq!(d("/public/admin%20/x"), Some(Outcome::Deny));
    assert_eq!(d("/public/admin.%20./x"), Some(Outcome::Deny));
    // A dot segment once parameters are cut or dots and spaces trimmed:
    // refused before any rule.
    for t in [
        "/public/..%3B/private",
        "/public/..;/private",
        "/public/..%20/private",
        "/public/.../private",
    ] {
        assert_eq!(d(t), None, "{t}");
    }
    // What is not a delimiter stays allowed.
    assert_eq!(d("/public/v1.2/x"), Some(Outcome::Allow));
    assert_eq!(d("/public/.well-known/x"), Some(Outcome::Allow));
    // An allow rule is not widened by a reading: `x.` is `x` only where
    // every reading is allowed.
    let r = rules(&[(Allow, "GET lab.test/public/**")]);
    assert_eq!(
        decide(&r, "lab.test", "GET", "/public./x"),
        Some(Outcome::NoRule)
    );
}

#[test]
fn a_format_suffix_never_steps_around_a_deny_or_an_ask_and_never_narrows_an_allow() {
    let r = rules(&[
        (Allow, "* forge.test/repos/**"),
        (Deny, "* forge.test/repos/*/*/hooks/**"),
        (Ask, "DELETE forge.test/repos/*/*/keys"),
        (Allow, "GET forge.test/dist/*.tgz"),
    ]);
    let d = |m, t| decide(&r, "forge.test", m, t);
    for t in [
        "/repos/a/w/hooks.json",
        "/repos/a/w/HOOKS.xml",
        "/repos/a/w/hooks.json/",
        "/repos/a/w/hooks%2Ejson",
        "/repos/a/w/hooks.tar.gz",
        "/repos/a/w/hooks.json;x=1",
        "/repos/a/w/hooks.json.",
    ] {
        assert_eq!(d("POST", t), Some(Outcome::Deny), "{t}");
    }
    assert_eq!(d("DELETE", "/repos/a/w/keys.json"), Some(Outcome::Ask));
    // Only the last segment names a format.
    assert_eq!(d("POST", "/repos/a/w.json/x"), Some(Outcome::Allow));
    assert_eq!(d("POST", "/repos/a/w/hooksjson"), Some(Outcome::Allow));
    // An allow rule that names a suffix allows it as written; the bare
    // path was never allowed by it.
    assert_eq!(d("GET", "/dist/left-pad-1.3.0.tgz"), Some(Outcome::Allow));
    assert_eq!(d("GET", "/dist/left-pad"), Some(Outcome::NoRule));
    // A `{name}` read up to its last dot (Spring's suffix pattern).
    let r = rules(&[
        (Allow, "* lab.test/**"),
        (Deny, "DELETE lab.test/files/a.b"),
    ]);
    assert_eq!(
        decide(&r, "lab.test", "DELETE", "/files/a.b.c"),
        Some(Outcome::Deny)
    );
}

#[test]
fn letters_are_compared_as_written_to_allow_and_without_case_to_deny() {
    let r = rules(&[
        (Allow, "GET forge.test/**"),
        (Deny, "* forge.test/acme/secret/**"),
    ]);
    let d = |t| decide(&r, "forge.test", "GET", t);
    assert_eq!(d("/acme/public"), Some(Outcome::Allow));
    assert_eq!(d("/acme/secret/x"), Some(Outcome::Deny));
    assert_eq!(d("/ACME/Secret/x"), Some(Outcome::Deny));
    let r = rules(&[(Allow, "GET forge.test/acme/**")]);
    assert_eq!(
        decide(&r, "forge.test", "GET", "/ACME/x"),
        Some(Outcome::NoRule)
    );
}

#[test]
fn a_query_condition_allows_only_when_every_value_of_its_key_fits() {
    let r = rules(&[(Allow, "GET search.test/find?q&page=*")]);
    let d = |t| decide(&r, "search.test", "GET", t);
    assert_eq!(d("/find?q=a&page=2"), Some(Outcome::Allow));
    assert_eq!(d("/find?q=a"), Some(Outcome::NoRule), "page is required");
    let r = rules(&[(Allow, "GET search.test/find?scope=public")]);
    let d = |t| decide(&r, "search.test", "GET", t);
    assert_eq!(d("/find?scope=public"), Some(Outcome::Allow));
    assert_eq!(d("/find?scope=public&scope=private"), Some(Outcome::NoRule));
    assert_eq!(d("/find?scope=public;scope=private"), Some(Outcome::NoRule));
}

#[test]
fn json_rpc_methods_are_decided_message_by_message() {
    let r = rules(&[
        (
            Allow,
            "POST mcp.test/mcp rpc:initialize,notifications/*,tools/list,tools/call:search",
        ),
        (Allow, "GET,DELETE mcp.test/mcp"),
        (Deny, "POST mcp.test/mcp rpc:tools/call:delete_*"),
    ]);
    let body = |b: &str| match rpc_labels(b.as_bytes()) {
        Some(l) => Rpc::Labels(l),
        None => Rpc::Unreadable,
    };
    let d = |method: &str, rpc: Rpc| {
        r.decide(&Request {
            name: "mcp.test",
            port: 443,
            method,
            path: "/mcp",
            query: None,
            rpc: &rpc,
            params: &Params::None,
        })
        .outcome
    };
    assert!(r.needs_body("mcp.test", 443, "POST", "/mcp"));
    assert!(!r.needs_body("mcp.test", 443, "GET", "/mcp"));
    assert_eq!(
        d(
            "POST",
            body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        ),
        Outcome::Allow
    );
    assert_eq!(
        d(
            "POST",
            body(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search"}}"#)
        ),
        Outcome::Allow
    );
    assert_eq!(
        d(
            "POST",
            body(
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_file"}}"#
            )
        ),
        Outcome::NoRule
    );
    assert_eq!(
        d(
            "POST",
            body(
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_repo"}}"#
            )
        ),
        Outcome::Deny
    );
    // A batch is as refused as its most refused message.
    assert_eq!(
        d(
            "POST",
            body(
                r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_file"}}]"#
            )
        ),
        Outcome::NoRule
    );
    // A body that cannot be read is denied by a rule that would deny,
    // and allowed by none.
    assert_eq!(d("POST", Rpc::Unreadable), Outcome::Deny);
    assert_eq!(
        d("POST", body(r#"{"method":"tools/list","method":"x"}"#)),
        Outcome::Deny
    );
    assert_eq!(d("GET", Rpc::NoBody), Outcome::Allow);
    assert_eq!(d("POST", Rpc::NoBody), Outcome::NoRule);
}

#[test]
fn what_is_shown_of_a_request_never_holds_a_query_value() {
    assert_eq!(redacted("/a", Some("token=s3cret&x")), "/a?token=…&x");
    let r = rules(&[(Allow, "GET a.test/b")]);
    let v = r.decide(&Request {
        name: "a.test",
        port: 443,
        method: "GET",
        path: "/c",
        query: Some("key=s3cret"),
        rpc: &Rpc::NoBody,
        params: &Params::None,
    });
    assert!(!v.why.contains("s3cret"), "{}", v.why);
    assert!(v.why.contains("/c?key=…"), "{}", v.why);
}

/// Most servers route `/x/` as `/x`: a rule that refuses is matched with
/// and without one trailing slash, and an allow rule only as written, so
/// a slash neither evades a refusal nor widens an allow.
#[test]
fn a_trailing_slash_never_evades_a_deny_or_an_ask_and_never_widens_an_allow() {
    let r = rules(&[
        (Allow, "* forge.test/**"),
        (Deny, "* forge.test/**/git-receive-pack"),
        (Deny, "DELETE forge.test/repos/*/*"),
        (Ask, "POST forge.test/issues/*/lock/"),
    ]);
    let d = |m, t| decide(&r, "forge.test", m, t);
    for (m, t) in [
        ("POST", "/acme/w.git/git-receive-pack/"),
        ("POST", "/acme/w.git/git-receive-pack//"),
        ("POST", "/acme/w.git/git-receive-pack/."),
        ("DELETE", "/repos/a/b/"),
        ("DELETE", "/repos/a/b"),
    ] {
        assert_eq!(d(m, t), Some(Outcome::Deny), "{m} {t}");
    }
    assert_eq!(d("POST", "/issues/1/lock"), Some(Outcome::Ask));
    assert_eq!(d("POST", "/issues/1/lock/"), Some(Outcome::Ask));
    assert_eq!(d("DELETE", "/repos/a/b/c"), Some(Outcome::Allow));
    let narrow = rules(&[
        (Allow, "GET forge.test/repos/*/*"),
        (Allow, "GET forge.test/tree/"),
    ]);
    let d = |t| decide(&narrow, "forge.test", "GET", t);
    assert_eq!(d("/repos/a/b"), Some(Outcome::Allow));
    assert_eq!(d("/repos/a/b/"), Some(Outcome::NoRule));
    assert_eq!(d("/tree/"), Some(Outcome::Allow));
    assert_eq!(d("/tree"), Some(Outcome::NoRule));
}

/// A rule made from a request keeps its stars as stars (`\*`): it
/// matches that path and no other, and a grant made of it allows nothing
/// a sibling path asks for.
#[test]
fn an_escaped_star_matches_itself_only() {
    let literal = warden_policy::requests::literal_path("/issues/**");
    assert_eq!(literal, "/issues/\\*\\*");
    let r = rules(&[(Allow, &format!("GET forge.test{literal}"))]);
    let d = |t| decide(&r, "forge.test", "GET", t);
    assert_eq!(d("/issues/**"), Some(Outcome::Allow));
    for sibling in [
        "/issues/1",
        "/issues/a/b",
        "/issues/*",
        "/issues/**/x",
        "/issues",
    ] {
        assert_eq!(d(sibling), Some(Outcome::NoRule), "{sibling}");
    }
    let r = rules(&[(Allow, "GET forge.test/a\\*b/*")]);
    let d = |t| decide(&r, "forge.test", "GET", t);
    assert_eq!(d("/a*b/x"), Some(Outcome::Allow));
    assert_eq!(d("/aXb/x"), Some(Outcome::NoRule));
}

/// PHP, Rack and Express's `qs` read `debug[]`, `debug[x]`, `[debug]` and
/// ` debug` as `debug`, PHP `de.bug` as `de_bug` and a key cut at NUL;
/// ASP.NET any case: a condition on a key holds for each such spelling
/// (any to refuse; to allow, every value under every spelling fits).
#[test]
fn a_query_condition_reads_every_spelling_a_server_takes_for_its_key() {
    let r = rules(&[
        (Allow, "GET api.test/ok/**"),
        (Deny, "* api.test/ok/**?debug"),
        (Deny, "* api.test/ok/**?de_bug=on"),
        (Deny, "* api.test/ok/**?sudo"),
        (Allow, "GET api.test/search?q=safe-*"),
    ]);
    let d = |t: &str| decide(&r, "api.test", "GET", t);
    for q in [
        "debug=1",
        "debug[]=1",
        "debug[x]=1",
        "debug[0]=1",
        "debug%5B%5D=1",
        "debug%5b0%5d=1",
        "%20debug=1",
        "+debug=1",
        "[debug]=1",
        "debug]=1",
        "debug.x=1",
        "debug%00x=1",
        "DEBUG=1",
        "%C5%BFudo=1",
        "%C5%BFUDO[]=1",
        "de.bug=on",
        "de%20bug=on",
        "de[bug=on",
    ] {
        assert_eq!(d(&format!("/ok/a?{q}")), Some(Outcome::Deny), "{q}");
    }
    for q in ["debugger=1", "a=debug", "x[debug]=1", "de.bug=off"] {
        assert_eq!(d(&format!("/ok/a?{q}")), Some(Outcome::Allow), "{q}");
    }
    for q in ["q=safe-1", "q=safe-1&q[]=safe-2", "q=safe-1&Q=safe-2"] {
        assert_eq!(d(&format!("/search?{q}")), Some(Outcome::Allow), "{q}");
    }
    for q in [
        "q=safe-1&q=evil",
        "q=safe-1&q[]=evil",
        "q=safe-1&q[x]=evil",
        "q=safe-1&q%5B%5D=evil",
        "q=safe-1&%20q=evil",
        "q=safe-1&Q=evil",
        "q=safe-1&q.x=evil",
        "q=safe-1&q%00=evil",
        // Only another spelling: the key as the rule writes it is absent.
        "q[]=safe-1",
    ] {
        assert_eq!(d(&format!("/search?{q}")), Some(Outcome::NoRule), "{q}");
    }
}

/// Flask, Express, Rails, Spring and Go's ServeMux answer HEAD with the
/// GET handler: a rule naming GET governs HEAD too, and one naming HEAD
/// only HEAD.
#[test]
fn a_rule_naming_get_governs_head_and_one_naming_head_governs_only_head() {
    let r = rules(&[
        (Allow, "* api.test/**"),
        (Deny, "GET api.test/admin/export"),
        (Ask, "GET api.test/admin/asked"),
        (Deny, "HEAD api.test/probe"),
    ]);
    let d = |m, t| decide(&r, "api.test", m, t);
    assert_eq!(d("HEAD", "/admin/export"), Some(Outcome::Deny));
    assert_eq!(d("head", "/admin/export"), Some(Outcome::Deny));
    assert_eq!(d("HEAD", "/admin/asked"), Some(Outcome::Ask));
    assert_eq!(d("GET", "/probe"), Some(Outcome::Allow));
    assert_eq!(d("HEAD", "/probe"), Some(Outcome::Deny));
    let r = rules(&[(Allow, "GET api.test/**"), (Allow, "HEAD api.test/h")]);
    let d = |m, t| decide(&r, "api.test", m, t);
    assert_eq!(d("HEAD", "/x"), Some(Outcome::Allow));
    assert_eq!(d("GET", "/h"), Some(Outcome::Allow));
    assert_eq!(d("POST", "/x"), Some(Outcome::NoRule));
    let r = rules(&[(Allow, "HEAD api.test/**")]);
    assert_eq!(decide(&r, "api.test", "GET", "/x"), Some(Outcome::NoRule));
}

/// `method target` on `api.test:443` with its body's parameters `params`.
fn decide_with(r: &RequestRules, method: &str, target: &str, params: &Params) -> Verdict {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    r.decide(&Request {
        name: "api.test",
        port: 443,
        method,
        path,
        query,
        rpc: &Rpc::NoBody,
        params,
    })
}

/// The body's parameters as a form `body` is read.
fn form(body: &str) -> Params {
    Params::Read(path::query_readings(body))
}

/// PHP's `$_REQUEST`, a servlet's `getParameter`, Spring's
/// `@RequestParam`, Rails' `params` and Flask's `request.values` merge
/// the body's parameters with the query's: a deny or ask condition
/// matches a key given in either, under every spelling, and a body that
/// could not be read may give any.
#[test]
fn a_refusing_condition_matches_a_key_the_body_gives_as_the_query_would() {
    let r = rules(&[
        (Allow, "POST api.test/users/**"),
        (Deny, "POST api.test/users/**?admin=1"),
        (Ask, "POST api.test/orders/**?refund"),
        (Allow, "POST api.test/orders/**"),
    ]);
    let d = |t: &str, p: &Params| decide_with(&r, "POST", t, p).outcome;
    assert_eq!(d("/users/7?admin=1", &Params::None), Outcome::Deny);
    assert_eq!(d("/users/7", &Params::None), Outcome::Allow);
    for body in [
        "admin=1",
        "x=2&ADMIN=1",
        "admin[]=1",
        "%20admin=1",
        "a=1;admin=1",
    ] {
        assert_eq!(d("/users/7", &form(body)), Outcome::Deny, "{body}");
    }
    assert_eq!(d("/users/7", &form("admin=0&name=x")), Outcome::Allow);
    assert_eq!(d("/users/7", &Params::Read(vec![])), Outcome::Allow);
    let unread = decide_with(&r, "POST", "/users/7", &Params::Unknown);
    assert_eq!(unread.outcome, Outcome::Deny);
    assert!(unread.why.contains("cannot be read"), "{}", unread.why);
    assert_eq!(d("/orders/1", &form("refund=yes")), Outcome::Ask);
    assert_eq!(d("/orders/1", &Params::Unknown), Outcome::Ask);
    assert_eq!(d("/orders/1", &form("item=2")), Outcome::Allow);
}

/// An allow condition holds only when every value the query and the body
/// give its key fits: a body giving it another value, or one that could
/// not be read, is allowed by no such rule.
#[test]
fn an_allow_condition_never_passes_a_value_the_body_gives_its_key() {
    let r = rules(&[(Allow, "POST api.test/search?q=safe-*")]);
    let d = |t: &str, p: &Params| decide_with(&r, "POST", t, p).outcome;
    assert_eq!(d("/search?q=safe-1", &Params::None), Outcome::Allow);
    assert_eq!(d("/search?q=safe-1", &form("page=2")), Outcome::Allow);
    assert_eq!(d("/search?q=safe-1", &form("q=safe-2")), Outcome::Allow);
    for body in ["q=evil", "q[]=evil", "Q=evil", "q=safe-2&q=evil"] {
        assert_eq!(
            d("/search?q=safe-1", &form(body)),
            Outcome::NoRule,
            "{body}"
        );
    }
    assert_eq!(d("/search?q=safe-1", &Params::Unknown), Outcome::NoRule);
    // The key given in the body alone, as the rule writes it, fits too.
    assert_eq!(d("/search", &form("q=safe-3")), Outcome::Allow);
    assert_eq!(d("/search", &form("q=evil")), Outcome::NoRule);
}

/// An ask whose body gives a key its condition looks at states only the
/// query: no answer covers more than this request, and no grant is kept.
#[test]
fn an_ask_whose_body_gives_a_looked_at_key_covers_no_other_request() {
    let r = rules(&[(Ask, "POST api.test/ok?action=*")]);
    let scope = |t: &str, p: &Params| decide_with(&r, "POST", t, p).scope.unwrap();
    let plain = scope("/ok?action=read", &Params::None);
    assert!(plain.repeatable() && plain.entry().is_some(), "{plain:?}");
    let other = scope("/ok?action=read", &form("page=1"));
    assert!(other.repeatable(), "{other:?}");
    for p in [
        form("action=delete"),
        form("Action[]=delete"),
        Params::Unknown,
    ] {
        let s = scope("/ok?action=read", &p);
        assert!(s.body_params && !s.repeatable(), "{s:?}");
        assert_eq!(s.entry(), None, "{s:?}");
    }
    let ask = AskedRequest {
        method: "POST".into(),
        target: "/ok?action=…".into(),
        shown: None,
        rule: "POST api.test/ok?action=*".into(),
        rpc: vec![],
        unread_body: false,
        body_params: true,
    };
    assert!(
        ask.line().contains("its body gives parameters"),
        "{}",
        ask.line()
    );
}

//! A request is decided as the server reads it, not only as warden does:
//! a JSON-RPC key Go's `encoding/json` folds to `params` (`paramſ`), a
//! query key PHP, Rack or Express's `qs` read as the condition's
//! (`debug[]`, ` debug`, `q[x]`), a method-override header spelled as a
//! CGI server names it (`X_HTTP_METHOD_OVERRIDE`), and HEAD, which most
//! frameworks answer with the GET handler. Each attack is made through
//! the real binary and never reaches the recording server.

use super::{answered, printed};
use crate::common::forge::Forge;

/// `c LABEL ARGS...`: curl, globbing off (`[]` is sent as it is).
const CURL: &str = labelled_curl!("-g");

#[test]
fn a_json_rpc_key_a_decoder_folds_to_a_read_one_never_carries_a_call_past_the_rule() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &[
            "--allow-request",
            "POST forge.test:PORT/mcp rpc:tools/call:search",
        ],
        &format!(
            r#"{CURL}j() {{ l=$1; printf '%s' "$2" > /tmp/body; c "$l" -H 'Content-Type: application/json' --data-binary @/tmp/body $u/mcp; }}
j search '{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"search","arguments":{{}}}}}}'
j long-s '{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"search","arguments":{{}}}},"param\u017f":{{"name":"delete_repo","arguments":{{}}}}}}'
j dotted-i '{{"jsonrpc":"2.0","\u0130d":1,"method":"tools/call","params":{{"name":"search"}}}}'
j nul '{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"search","name\u0000":"delete_repo"}}}}'
"#
        ),
    );
    assert_eq!(
        answered(&out),
        ["200 search", "403 long-s", "403 dotted-i", "403 nul"],
    );
    forge.up.arrived(1, "only the plain call");
}

#[test]
fn a_query_key_spelled_as_php_rack_or_qs_read_it_never_carries_a_value_past_a_condition() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/ok/**",
            "--deny-request",
            "* forge.test:PORT/ok/**?debug",
            "--allow-request",
            "GET forge.test:PORT/search?q=safe-*",
        ],
        &format!(
            "{CURL}for q in 'debug[]=1' 'debug[x]=1' 'debug[0]=1' 'debug%5B%5D=1' '%20debug=1' '[debug]=1' 'DEBUG=1'; do c \"deny $q\" \"$u/ok/a?$q\"; done
for q in 'q=safe-1&q[]=evil' 'q=safe-1&q[x]=evil' 'q=safe-1&q%5B%5D=evil' 'q=safe-1&%20q=evil' 'q=safe-1&q=evil'; do c \"allow $q\" \"$u/search?$q\"; done
c plain $u/ok/a?debugger=1
c safe $u/search?q=safe-1
"
        ),
    );
    let s = printed(&out);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 14, "{s}");
    assert!(
        lines[..12].iter().all(|l| l.starts_with("403 ")),
        "every other spelling is refused: {s}"
    );
    assert_eq!(lines[12..], ["200 plain", "200 safe"], "{s}");
    forge.up.arrived(2, "only the plain requests");
}

#[test]
fn an_override_header_spelled_as_a_cgi_server_names_it_is_decided_as_its_method() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &[
            "--allow-request",
            "GET,POST forge.test:PORT/ok/**",
            "--deny-request",
            "DELETE forge.test:PORT/ok/**",
        ],
        &format!(
            "{CURL}for h in X_HTTP_METHOD_OVERRIDE X_HTTP_Method_Override X_HTTP_METHOD X_METHOD_OVERRIDE X-Http_Method; do c \"$h\" -X POST --data-binary x -H 'Content-Type: application/octet-stream' -H \"$h: DELETE\" $u/ok/a; done
c plain -X POST --data-binary x -H 'Content-Type: application/octet-stream' $u/ok/a
"
        ),
    );
    let s = printed(&out);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 6, "{s}");
    assert!(
        lines[..5].iter().all(|l| l.starts_with("403 ")),
        "every spelling of an override is read: {s}"
    );
    assert_eq!(lines[5], "200 plain", "{s}");
    forge.up.arrived(1, "only the plain POST");
}

#[test]
fn head_is_refused_where_get_is_and_allowed_where_get_is() {
    let Some(forge) = Forge::start() else { return };
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/**",
            "--deny-request",
            "GET forge.test:PORT/admin/export",
        ],
        // A refused HEAD over HTTP/2 too: its answer carries no body,
        // which curl would take as a broken stream. The allowed one over
        // HTTP/1.1: the forge's own HTTP/2 answer to HEAD carries `ok`.
        &format!(
            "{CURL}c get $u/admin/export
c head --http1.1 -I $u/admin/export
c head-h2 --http2 -I $u/admin/export
c head-other --http1.1 -I $u/public
"
        ),
    );
    assert_eq!(
        answered(&out),
        ["403 get", "403 head", "403 head-h2", "200 head-other"],
    );
    let seen = forge.up.arrived(1, "only the HEAD of another path");
    assert!(seen[0].contains(" HEAD /public"), "{seen:?}");
}

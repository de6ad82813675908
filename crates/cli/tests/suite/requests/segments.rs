//! A deny rule with a fixed part cannot be stepped around by a segment
//! that a server's reading leaves empty: a segment of `;parameters` only
//! (plain or `%3B`), of spaces only (`%20`), or what an encoded slash
//! leaves between two. Tomcat and Spring cut the parameters and then
//! merge the slashes (`/ok/;x/secret/y` is `/ok/secret/y` to them), so
//! each reading collapses such a segment as the normalised path does
//! `//`. Each attack goes through the real binary, over HTTP/1.1 and
//! HTTP/2, and never reaches the recording server.

use super::printed;
use crate::common::forge::Forge;

const RULES: &[&str] = &[
    "--allow-request",
    "* forge.test:PORT/ok/**",
    "--deny-request",
    "* forge.test:PORT/ok/secret/**",
    "--allow-request",
    "* forge.test:PORT/repos/**",
    "--deny-request",
    "* forge.test:PORT/repos/*/*/hooks/**",
];

/// Each path under the rules above that a server reads as a denied one.
const STEPPED: &[&str] = &[
    "/ok/;x/secret/y",
    "/ok/;/secret/y",
    "/ok/%3B/secret/y",
    "/ok/%20/secret/y",
    "/repos/acme/w/;/hooks",
    "/repos/acme/w/%20/hooks",
    // The same class: several such segments, an encoded slash or
    // backslash alone in one, and a trailing `;` on the denied segment.
    "/ok/;a/%20/%3Bb/secret/y",
    "/ok/%2F/secret/y",
    "/ok/%5C/secret/y",
    "/repos/acme/w/hooks;",
    "/repos/acme;x/w/%3B/hooks/1",
];

#[test]
fn a_segment_a_server_reads_as_empty_never_carries_a_request_past_a_deny_rule() {
    let Some(forge) = Forge::start() else { return };
    let mut script = String::from(labelled_curl!("--path-as-is"));
    for v in ["--http1.1", "--http2"] {
        for p in STEPPED {
            script.push_str(&format!("c '{v} {p}' {v} -X DELETE \"$u{p}\"\n"));
        }
        // What the rules still allow: a segment with a name before its
        // parameters, and a path beside the denied one.
        script.push_str(&format!(
            "c '{v} named' {v} -X DELETE \"$u/ok/x;y/secret/z\"\n"
        ));
        script.push_str(&format!(
            "c '{v} beside' {v} -X DELETE \"$u/ok/;/public/z\"\n"
        ));
    }
    let s = printed(&forge.run(RULES, &script));
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 2 * (STEPPED.len() + 2), "{s}");
    for v in ["--http1.1", "--http2"] {
        for p in STEPPED {
            let want = format!("403 {v} {p}");
            assert!(lines.contains(&want.as_str()), "{want}: {s}");
        }
        for l in ["named", "beside"] {
            let want = format!("200 {v} {l}");
            assert!(lines.contains(&want.as_str()), "{want}: {s}");
        }
    }
    let seen = forge.up.requests();
    let paths: Vec<&str> = seen
        .iter()
        .map(|r| r.split_once(' ').map_or(r.as_str(), |(_, rest)| rest))
        .collect();
    assert_eq!(
        paths,
        [
            "DELETE /ok/x;y/secret/z",
            "DELETE /ok/;/public/z",
            "DELETE /ok/x;y/secret/z",
            "DELETE /ok/;/public/z",
        ],
        "only what no reading denies arrived: {seen:?}"
    );
}

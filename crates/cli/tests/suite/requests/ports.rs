//! A name with request rules is ruled on every port it is reached on: a
//! second port of the same name allowed by an entry of its own (as an ssh
//! `github.com:22` beside a read-only preset) is terminated too, so a
//! request there is decided (and refused when no rule names that port),
//! and bytes that are not TLS naming it never reach the server.

use super::answered;
use crate::common::forge::{Forge, Recorder};

/// `c LABEL ARGS...`: curl as it is.
const CURL: &str = labelled_curl!("");

#[test]
fn another_port_of_a_ruled_name_is_ruled_too_and_reaches_nothing_unruled() {
    let Some(forge) = Forge::start() else { return };
    let other = Recorder::start(&forge.ca, "forge.test");
    let port2 = other.port.to_string();
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/public/**",
            "--allow-domain",
            &format!("forge.test:{port2}"),
        ],
        &format!(
            "{CURL}c allowed $u/public/a
c other-port -k https://forge.test:{port2}/secret
c other-port-public -k https://forge.test:{port2}/public/a
c plain http://forge.test:{port2}/secret
"
        ),
    );
    let got = answered(&out);
    assert_eq!(
        got[..3],
        ["200 allowed", "403 other-port", "403 other-port-public"],
        "{got:?}"
    );
    assert!(
        got[3].ends_with(" plain") && !got[3].starts_with('2'),
        "{got:?}"
    );
    forge
        .up
        .arrived(1, "only the allowed request on the ruled port");
    other.arrived(0, "nothing on the other port");
}

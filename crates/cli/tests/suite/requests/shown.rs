//! What a run says of the requests its sandbox made is the sandbox's
//! choice of text: its end-of-run summary (the refusals, the request
//! rules proposed from them) shows a path's controls as escapes, never
//! raw, so a path cannot recolour, move or reorder the terminal's lines
//! (a C1 CSI, NEL, the line and paragraph separators, direction
//! overrides and isolates). Through the real binary, with a raw client
//! that puts the characters in the request line as they are.

use super::{forge_for_raw_client, raw_gets};
use crate::common::*;

/// What follows `/denied/` in the first path: a C1 CSI, NEL, the line and
/// paragraph separators, a direction override and an isolate.
const TAIL: &str =
    "\u{9b}31mRED\u{9b}0m\u{85}NEL\u{2028}FAKE\u{2029}\u{202e}gnp.exe\u{202a}\u{2066}x\u{2069}";
/// The same without the C1 controls (no rule can name one: refused before
/// any rule), for a rule to deny.
const BIDI: &str = "RED\u{2028}FAKE\u{2029}\u{202e}gnp.exe\u{202a}\u{2066}x\u{2069}";
/// The same without Unicode's whitespace either, for a rule to be
/// proposed at exit.
const WORD: &str = "RED\u{202e}gnp.exe\u{202a}\u{2066}x\u{2069}";

#[test]
fn the_end_of_run_summary_shows_a_paths_controls_escaped_and_never_raw() {
    let Some(forge) = forge_for_raw_client() else {
        return;
    };
    let out = forge.run(
        &[
            "--allow-request",
            "GET forge.test:PORT/ok/**",
            "--deny-request",
            "* forge.test:PORT/denied/**",
        ],
        &raw_gets(&[
            &format!("/denied/{TAIL}"),
            &format!("/denied/{BIDI}"),
            &format!("/proposed/{WORD}?token=abc"),
        ]),
    );
    let s = stdout(&out);
    let err = stderr(&out);
    assert!(out.status.success(), "{s}\n{err}");
    // The C1 path is refused before any rule (no rule can name it), the
    // others are refused by the rules, and nothing went upstream.
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["400", "403", "403"],
        "{s}\n{err}"
    );
    forge.up.arrived(0, "nothing");
    // The summary names the first refusal and proposes a rule for the
    // request no rule allowed: each path is there, escaped (the refused
    // one as its characters, the proposed one in the escaped spelling
    // every path is read and written in).
    assert!(err.contains("no rule can name it"), "{err}");
    let proposed = format!(
        "--allow-request 'GET forge.test:{}/proposed/RED%E2%80%AEgnp.exe%E2%80%AA%E2%81%A6x%E2%81%A9'",
        forge.up.port
    );
    assert!(err.contains(&proposed), "{proposed} is not in: {err}");
    for escaped in [
        "\\u{9b}31mRED",
        "\\u{85}NEL",
        "\\u{2028}FAKE",
        "\\u{2029}",
        "\\u{202e}gnp.exe",
        "\\u{202a}",
        "\\u{2066}x\\u{2069}",
    ] {
        assert!(err.contains(escaped), "{escaped} is not in: {err}");
    }
    assert!(err.contains("/denied/"), "{err}");
    assert!(err.contains("/proposed/"), "{err}");
    let raw: Vec<char> = err
        .chars()
        .filter(|c| {
            let n = u32::from(*c);
            (n < 0x20 && *c != '\n' && *c != '\t')
                || (0x7f..=0x9f).contains(&n)
                || matches!(n, 0x2028 | 0x2029 | 0x202a..=0x202e | 0x2066..=0x2069)
        })
        .collect();
    assert!(raw.is_empty(), "raw controls {raw:?} in: {err:?}");
}

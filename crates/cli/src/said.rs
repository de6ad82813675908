//! warden's own lines on stderr: every one goes through [`shown`], so no
//! text a sandbox chose (a request's path in the end-of-run summary, a
//! rule proposed from it, a program answered "always", a message a
//! guest's init sent) reaches the terminal with a control that acts on
//! it. The `eprintln!` and `eprint!` these define shadow the standard
//! ones throughout the binary that includes this file first.
//!
//! A line that cannot be written (a closed window, a hung-up session) is
//! dropped, never a panic that turns the run's status into 101.

/// `text` as warden says it: each line through
/// [`warden_workspace::printable`] (C0 and C1 controls, DEL, the line and
/// paragraph separators U+2028/U+2029, direction overrides, embeddings
/// and isolates and the other format characters become visible escapes),
/// the newlines warden itself wrote between them kept. A sandbox cannot
/// put a newline in what it chooses here: a request's path or name with
/// one is refused before it is decided on, so none is ever recorded.
pub fn shown(text: &str) -> String {
    // Almost every line is plain ASCII without a control: shown as it is.
    if text
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t')
    {
        return text.to_string();
    }
    text.split('\n')
        .map(warden_workspace::printable)
        .collect::<Vec<_>>()
        .join("\n")
}

macro_rules! eprintln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{}", $crate::said::shown(&format!($($arg)*)));
    }};
}

#[allow(unused_macros)]
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), "{}", $crate::said::shown(&format!($($arg)*)));
    }};
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn a_line_keeps_its_newlines_and_loses_every_control_a_sandbox_could_choose() {
        assert_eq!(shown("a\nb\tc"), "a\nb\tc");
        assert_eq!(shown("caf\u{e9} \u{4e2d}"), "caf\u{e9} \u{4e2d}");
        for (raw, want) in [
            ("/x\u{9b}31mRED", "/x\\x9b31mRED"),
            ("/x\u{85}NEL", "/x\\x85NEL"),
            ("/x\u{2028}FAKE", "/x\\u{2028}FAKE"),
            ("/x\u{2029}FAKE", "/x\\u{2029}FAKE"),
            ("/x\u{202e}gnp.exe", "/x\\u{202e}gnp.exe"),
            (
                "/x\u{202a}\u{2066}\u{2069}y",
                "/x\\u{202a}\\u{2066}\\u{2069}y",
            ),
            ("/x\x1b[2J\ry\x7f", "/x\\x1b[2J\\x0dy\\x7f"),
        ] {
            assert_eq!(shown(raw), want, "{raw:?}");
            assert_eq!(
                shown(&format!("first\n{raw}")),
                format!("first\n{want}"),
                "{raw:?}"
            );
        }
    }
}

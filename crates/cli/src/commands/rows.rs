//! One record, one line: what a sandbox chose (a process's command line,
//! an event's names) printed in a table or a log so that it cannot pass
//! for a line of its own. Controls and format characters are escaped
//! ([`warden_workspace::printable`]); a run of blanks longer than
//! [`BLANKS`] is written as its count (`[93 blanks]`), so spaces cannot
//! push text onto a line of its own when the terminal wraps it; and a
//! table's cell is cut with `…` to the room left on the terminal's line
//! (as procps `ps` cuts), or to [`CELL`] columns when the output is not a
//! terminal.

use std::io::IsTerminal;
use std::os::fd::AsFd;

/// The longest run of blanks (spaces, tabs, Unicode's other spaces) shown
/// as it is.
pub const BLANKS: usize = 2;

/// The most columns a table's last cell takes when the output is not a
/// terminal (`--json` has it whole).
pub const CELL: usize = 200;

/// `text` as one line: escaped, its long runs of blanks counted.
pub fn one_line(text: &str) -> String {
    let shown = warden_workspace::printable(text);
    let mut out = String::with_capacity(shown.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        let n = run.chars().count();
        if n > BLANKS {
            out.push_str(&format!("[{n} blanks]"));
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in shown.chars() {
        if c.is_whitespace() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// The columns `text` takes at most (a character outside ASCII counted
/// as two, as a wide character is drawn).
fn columns(c: char) -> usize {
    if c.is_ascii() {
        1
    } else {
        2
    }
}

/// `text` (already [`one_line`]) cut to `room` columns, its end `…` when
/// cut.
pub fn cut(text: &str, room: usize) -> String {
    let total: usize = text.chars().map(columns).sum();
    if total <= room {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        if used + columns(c) + 1 > room {
            break;
        }
        used += columns(c);
        out.push(c);
    }
    out.push('…');
    out
}

/// The room a table's last cell has after `prefix` columns: what is left
/// of the terminal's line when standard output is one, else [`CELL`].
pub fn room_after(prefix: usize) -> usize {
    let out = std::io::stdout();
    if !out.is_terminal() {
        return CELL;
    }
    match warden_jail::pty::window_size(out.as_fd()) {
        Some((_, cols)) if cols > 0 => usize::from(cols).saturating_sub(prefix).max(8),
        _ => CELL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_blanks_is_counted_and_a_long_cell_is_cut() {
        let fake = format!(
            "sleep{}      1     26620     -  /usr/bin/python3",
            " ".repeat(70)
        );
        let shown = one_line(&fake);
        assert_eq!(
            shown,
            "sleep[76 blanks]1[5 blanks]26620[5 blanks]-  /usr/bin/python3"
        );
        assert_eq!(
            one_line("a\u{3000}\u{3000}\u{3000}b\nc"),
            "a[3 blanks]b\\x0ac"
        );
        assert_eq!(one_line("sh -c  'x y'"), "sh -c  'x y'");
        assert_eq!(cut("abcdefghij", 10), "abcdefghij");
        assert_eq!(cut("abcdefghijk", 10), "abcdefghi…");
        assert_eq!(cut("ééééé", 6), "éé…");
    }
}

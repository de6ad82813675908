//! How servers read a key: the name of a query or form parameter, or a
//! JSON object's member. Two keys a reader takes as one are one key to
//! the rules, so that a spelling one reader sees and this reading would
//! not never carries a value past them. Reading only; deciding is the
//! rules' (`super`), what a body holds the terminator's.
//!
//! The readers, and what each takes as the same key:
//! - any case, Unicode's simple case folding (Go's `encoding/json` for
//!   a struct's fields, ASP.NET's query and form collections): see
//!   [`fold`];
//! - a C string (PHP's request variables): the key cut at its first NUL;
//! - PHP: leading spaces dropped, ` ` and `.` made `_`, and a `[...]`
//!   suffix an array's index (`a[]`, `a[x]` are `a`), an unclosed `[`
//!   made `_` (see [`php_name`]);
//! - Rack 3 and Express's `qs`: the part before the first `[` (not the
//!   key's first byte); `qs` with `allowDots`: before the first `.`;
//! - Rack 2: leading brackets dropped, then up to the next bracket
//!   (`[a]` and `a]` are `a`).

/// `key` as the readers that ignore case compare it: each letter
/// lower-cased, and each one whose case mappings lead to ASCII (`ſ` is
/// `s`, Kelvin's `K` is `k`, `ı` and `İ` are `i`, `ß` is `ss`) as that
/// ASCII. Keys the rules name are ASCII, so that is where a reading that
/// ignores case can meet them.
///
/// Go folds a rune as `ToUpper(ToLower(r))` with Unicode's simple
/// mappings; Rust's `char` offers the full ones, which agree with the
/// simple ones wherever they lead to ASCII except for `İ` (U+0130, whose
/// full lower case is `i` and a combining dot), listed in
/// [`SIMPLE_ONLY`]. A test walks every `char` to keep this true. No case
/// folding crate is in the tree, and those in the field implement full
/// folding (`unicase`, `caseless`), which is not what Go does either.
pub(crate) fn fold(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        fold_char(c, &mut out);
    }
    out
}

/// Letters whose simple lower case is ASCII where their full one is not.
const SIMPLE_ONLY: &[(char, char)] = &[('\u{130}', 'i')];

fn fold_char(c: char, out: &mut String) {
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
        return;
    }
    if let Some((_, a)) = SIMPLE_ONLY.iter().find(|(s, _)| *s == c) {
        out.push(*a);
        return;
    }
    let lower: String = c.to_lowercase().collect();
    if lower.is_ascii() {
        out.push_str(&lower);
        return;
    }
    let upper_lower: String = c.to_uppercase().flat_map(char::to_lowercase).collect();
    if upper_lower.is_ascii() {
        out.push_str(&upper_lower);
        return;
    }
    out.push_str(&lower);
}

/// Whether a reader that ignores case takes `a` and `b` as one key.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a == b || fold(a) == fold(b)
}

/// `key` up to its first NUL, where a reader that keeps keys as C
/// strings ends it; `None` when it holds none.
pub(crate) fn cut_at_nul(key: &str) -> Option<&str> {
    key.find('\0').map(|i| &key[..i])
}

/// The name PHP registers a request variable `key` (decoded) under, and
/// whether it is an array's (`key[...]`): cut at NUL, leading spaces
/// dropped, ` ` and `.` made `_` up to the first `[`; a `[` closed later
/// starts the array's indices, an unclosed one is made `_` and the rest
/// kept as written (`php_register_variable_ex`). `None` for a name PHP
/// drops (empty).
pub(crate) fn php_name(key: &str) -> Option<(String, bool)> {
    let key = cut_at_nul(key).unwrap_or(key).trim_start_matches(' ');
    let mut name = String::with_capacity(key.len());
    for (i, c) in key.char_indices() {
        match c {
            ' ' | '.' => name.push('_'),
            '[' if key[i + 1..].contains(']') => {
                return (!name.is_empty()).then_some((name, true));
            }
            '[' => {
                name.push('_');
                name.push_str(&key[i + 1..]);
                break;
            }
            c => name.push(c),
        }
    }
    (!name.is_empty()).then_some((name, false))
}

/// Every name a server may take a query or form `key` (decoded) as: the
/// key itself, then each reading of the module's list that differs.
pub(crate) fn names(key: &str) -> Vec<String> {
    let mut out = vec![key.to_string()];
    let mut add = |n: &str| {
        if !n.is_empty() && !out.iter().any(|o| o == n) {
            out.push(n.to_string());
        }
    };
    if let Some(cut) = cut_at_nul(key) {
        add(cut);
    }
    if let Some((php, _)) = php_name(key) {
        add(&php);
    }
    // Rack 3 and qs: before the first `[` that is not the first char;
    // qs with `allowDots`: before the first `.` (`a.b` is `a[b]`).
    for stop in ['[', '.'] {
        if let Some((i, _)) = key.char_indices().skip(1).find(|(_, c)| *c == stop) {
            add(&key[..i]);
        }
    }
    // Rack 2: `\A[\[\]]*([^\[\]]+)`.
    let rack2 = key.trim_start_matches(['[', ']']);
    add(rack2.split(['[', ']']).next().unwrap_or(""));
    out
}

/// Whether some server takes the query or form key `key` (decoded) as
/// the parameter `name`.
pub(crate) fn spells(key: &str, name: &str) -> bool {
    names(key).iter().any(|n| same(n, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_fold_to_ascii_wherever_a_case_mapping_leads_there() {
        assert_eq!(fold("Param\u{17f}"), "params");
        assert_eq!(fold("\u{212a}ey"), "key");
        assert_eq!(fold("\u{131}d"), "id");
        assert_eq!(fold("\u{130}D"), "id");
        assert_eq!(fold("Stra\u{df}e"), "strasse");
        assert_eq!(fold("n\u{e4}me"), "n\u{e4}me");
        assert_eq!(fold("\u{410}"), "\u{430}");
        // Every char: one whose lower or upper case (or the upper's
        // lower) is ASCII alone folds to that ASCII.
        for c in (0..=0x10ffff_u32).filter_map(char::from_u32) {
            if c.is_ascii() {
                continue;
            }
            let lower: String = c.to_lowercase().collect();
            let upper: String = c.to_uppercase().collect();
            let upper_lower: String = c.to_uppercase().flat_map(char::to_lowercase).collect();
            for m in [&lower, &upper, &upper_lower] {
                if m.is_ascii() {
                    assert_eq!(fold(&c.to_string()), m.to_ascii_lowercase(), "{c:?}");
                }
            }
            // A full mapping that starts with an ASCII letter and goes on
            // with a mark: only `İ` has a simple mapping that is the
            // letter alone (UnicodeData.txt); the others (`ǰ`, `ẖ`, ...)
            // have none, and no reader folds them to ASCII.
            if !lower.is_ascii() && lower.starts_with(|l: char| l.is_ascii_alphabetic()) {
                assert_eq!(c, '\u{130}', "{c:?} lowers to {lower:?}");
            }
        }
    }

    #[test]
    fn php_names_a_variable_as_its_request_code_does() {
        let php = |k: &str| php_name(k);
        assert_eq!(php("a.b c"), Some(("a_b_c".into(), false)));
        assert_eq!(php("  a"), Some(("a".into(), false)));
        assert_eq!(php("a[]"), Some(("a".into(), true)));
        assert_eq!(php("a.b[c.d]"), Some(("a_b".into(), true)));
        assert_eq!(php("a[b.c"), Some(("a_b.c".into(), false)));
        assert_eq!(php("[method"), Some(("_method".into(), false)));
        assert_eq!(php("a\0b"), Some(("a".into(), false)));
        assert_eq!(php("[a]"), None);
        assert_eq!(php(" "), None);
    }

    #[test]
    fn a_key_is_every_name_php_rack_and_qs_take_it_as() {
        for key in [
            "debug",
            "DEBUG",
            "debug[]",
            "debug[x]",
            " debug",
            "[debug]",
            "debug]",
            "debug.x",
            "debug\0x",
            "debu\u{17f}",
        ] {
            // `ſ` folds to `s`: `debuſ` is not `debug`.
            let want = !key.starts_with("debu\u{17f}");
            assert_eq!(spells(key, "debug"), want, "{key:?}");
        }
        for key in ["debugger", "x[debug]", "de.bug", "xdebug"] {
            assert!(!spells(key, "debug"), "{key:?}");
        }
        assert!(spells("de.bug", "de_bug"));
        assert!(spells("\u{17f}udo[]", "sudo"));
    }
}

//! A request's path and query as the rules read them, and the globs they
//! are matched with.
//!
//! The path a rule sees is the one the upstream gets: the terminator
//! normalises it (`secrets::target::normalise_path`: unreserved escapes
//! decoded, other escapes in upper case, dot segments resolved, empty
//! segments from duplicate slashes dropped) and forwards exactly that.
//! What a server may still read two ways is read both ways here, and a
//! rule must hold under every reading to allow, and under any to deny or
//! ask: an encoded slash or backslash (`%2F`, `%5C`) is kept as it is on
//! the way out, and read as part of its segment and as a separator; a
//! segment's `;parameters` (which Java servers drop), the `;` plain or
//! encoded (`%3B`), are read kept and dropped; a segment's trailing dots
//! and spaces (which servers on Windows file systems ignore) are read
//! kept and trimmed; to refuse, the last segment's format suffix
//! (`hooks.json`, which Rails and Spring route as `hooks`) is read kept
//! and dropped. A segment that a reading leaves empty (`;x`, `%3B`,
//! `%20`, the nothing between `%2F%2F`) is collapsed in that reading as
//! `//` is in the normalised path: Tomcat and Spring cut parameters and
//! then merge the slashes, routing `/ok/;x/secret` as `/ok/secret`; only
//! a last segment stays, empty, as the trailing slash it is. A path
//! whose readings would put a dot segment where the normalised path has
//! none (`a%2F..%2Fb`) is refused: resolving it is the server's choice. Letters are compared as written to allow and
//! without case to deny (servers that ignore case exist, such as forges'
//! owner names).

/// Why a path cannot be decided on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the path {0:?} holds a dot segment behind an encoded slash, which servers resolve differently"
)]
pub struct Ambiguous(pub String);

/// The segments of a normalised path under each way a server may read
/// it (see the module's comment): the first reading is the path as it
/// stands.
pub(crate) fn readings(path: &str) -> Result<Vec<Vec<String>>, Ambiguous> {
    let plain: Vec<String> = path.split('/').skip(1).map(str::to_string).collect();
    let plain = collapsed(plain);
    let mut out = vec![plain.clone()];
    let upper = path.to_ascii_uppercase();
    if upper.contains("%2F") || upper.contains("%5C") {
        let split: Vec<String> = plain.iter().flat_map(|s| split_encoded(s)).collect();
        if split.iter().any(|s| s == "." || s == "..") {
            return Err(Ambiguous(path.to_string()));
        }
        let split = collapsed(split);
        if !out.contains(&split) {
            out.push(split);
        }
    }
    // Each further reading is taken of every reading before it: a server
    // may drop parameters and trim a segment both.
    for reading in [without_params as fn(&str) -> String, trimmed] {
        let more: Vec<Vec<String>> = out
            .iter()
            .map(|r| collapsed(r.iter().map(|s| reading(s)).collect::<Vec<String>>()))
            .filter(|r| !out.contains(r))
            .collect();
        for r in more {
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    Ok(out)
}

/// `segments` with every empty one but the last dropped: how servers
/// that merge `//` read a segment that a reading left empty (Tomcat's
/// `CoyoteAdapter.normalize` and Spring's `UrlPathHelper` cut
/// `;parameters` first, then merge; a server on a file system that trims
/// `a%20` reads `/x/%20/y` as `/x//y`). The last one stays, empty: it is
/// the trailing slash (`/x/;` is `/x/`), which refusing rules read both
/// ways already; a path left with no segment is the root.
fn collapsed(segments: Vec<String>) -> Vec<String> {
    let n = segments.len();
    if !segments[..n.saturating_sub(1)].iter().any(String::is_empty) {
        return segments;
    }
    let mut out: Vec<String> = Vec::with_capacity(n);
    for (k, s) in segments.into_iter().enumerate() {
        if !s.is_empty() || k + 1 == n {
            out.push(s);
        }
    }
    out
}

/// `readings` and, for a rule that refuses (deny, ask), each of them with
/// the format suffix of its last segment dropped: Rails routes
/// `hooks.json` to `hooks(.:format)`, Spring before 5.3 matches `hooks`
/// against `hooks.*` and a `{name}` against all but the last `.ext`, so
/// the segment is read cut at its first dot and at its last (`hooks.tar.gz`
/// as `hooks` and `hooks.tar`; a trailing slash after it kept). An allow
/// rule never sees these readings: one that names a suffix (`*.tgz`)
/// allows it as written, and one without it never matched the suffixed
/// path.
pub(crate) fn refusal_readings(readings: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut out = readings.to_vec();
    for r in readings {
        // The last segment that has a name: `hooks.json/` ends in an
        // empty one.
        let Some(at) = r.iter().rposition(|s| !s.is_empty()) else {
            continue;
        };
        let seg = &r[at];
        for cut in [seg.find('.'), seg.rfind('.')].into_iter().flatten() {
            if cut == 0 {
                continue;
            }
            let mut cut_reading = r.clone();
            cut_reading[at] = seg[..cut].to_string();
            if !out.contains(&cut_reading) {
                out.push(cut_reading);
            }
        }
    }
    out
}

/// A segment without its `;parameters`, the `;` written plain or as
/// `%3B` (servers that decode before they cut read both alike; the path
/// is normalised, so the escape is in upper case).
pub(crate) fn without_params(s: &str) -> String {
    let at = [s.find(';'), s.find("%3B")].into_iter().flatten().min();
    match at {
        Some(at) => s[..at].to_string(),
        None => s.to_string(),
    }
}

/// A segment without its trailing dots and spaces (plain or `%20`), as
/// servers on file systems that ignore them read it (`admin.` and
/// `admin%20` are `admin` there).
pub(crate) fn trimmed(s: &str) -> String {
    let mut t = s;
    loop {
        let next = t
            .strip_suffix('.')
            .or_else(|| t.strip_suffix(' '))
            .or_else(|| t.strip_suffix("%20"));
        match next {
            Some(n) => t = n,
            None => return t.to_string(),
        }
    }
}

/// `s` cut at each `%2F` and `%5C` (upper case: the path is normalised).
fn split_encoded(s: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut rest = s;
    while let Some(at) = rest.find("%2F").into_iter().chain(rest.find("%5C")).min() {
        if let Some(last) = parts.last_mut() {
            last.push_str(&rest[..at]);
        }
        parts.push(String::new());
        rest = &rest[at + 3..];
    }
    if let Some(last) = parts.last_mut() {
        last.push_str(rest);
    }
    parts
}

/// Whether the glob `pattern` (normalised) matches the segments of a
/// path: `**` as a whole segment matches any number of segments (none
/// included), `*` any run of bytes within one segment. `fold`: compare
/// letters without case.
pub(crate) fn matches(pattern: &str, segments: &[String], fold: bool) -> bool {
    let pat: Vec<&str> = pattern.split('/').skip(1).collect();
    wildcard(
        &pat,
        segments,
        |p| *p == "**",
        |p, s| glob(p.as_bytes(), s.as_bytes(), fold),
    )
}

/// Whether `pattern` matches the path as it stands or with one trailing
/// slash dropped or added: how a rule that refuses (deny, ask) is matched.
/// Most servers route `/x/` as `/x` (Express, Rails, Spring before 6, and
/// others), so a refusal that one slash could step around would be none;
/// an allow rule is matched as written, so this never widens one.
pub(crate) fn matches_either_slash(pattern: &str, segments: &[String], fold: bool) -> bool {
    if matches(pattern, segments, fold) {
        return true;
    }
    let slashed = segments.len() > 1 && segments.last().is_some_and(String::is_empty);
    if slashed {
        return matches(pattern, &segments[..segments.len() - 1], fold);
    }
    // The path has none: the pattern's own trailing slash (an empty last
    // segment, which only an empty segment matches) is dropped instead.
    match pattern.strip_suffix('/') {
        Some(bare) if !bare.is_empty() => matches(bare, segments, fold),
        _ => false,
    }
}

/// `*` matches any run of bytes (a `/` included: for values and JSON-RPC
/// methods, which have no segments); `\*` a star itself (how a rule made
/// from a request keeps its literal stars); everything else itself.
pub(crate) fn glob(pattern: &[u8], text: &[u8], fold: bool) -> bool {
    let same = |p: &u8, t: &u8| {
        if fold {
            p.eq_ignore_ascii_case(t)
        } else {
            p == t
        }
    };
    // Almost every pattern has no escape: matched on its bytes as they are.
    if !pattern.contains(&b'\\') {
        return wildcard(pattern, text, |p| *p == b'*', same);
    }
    let mut units: Vec<(u8, bool)> = Vec::with_capacity(pattern.len());
    let mut bytes = pattern.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        match b {
            b'\\' if bytes.peek() == Some(&b'*') => {
                bytes.next();
                units.push((b'*', false));
            }
            b'*' => units.push((b'*', true)),
            b => units.push((b, false)),
        }
    }
    wildcard(&units, text, |(_, star)| *star, |(p, _), t| same(p, t))
}

/// Wildcard matching in linear space and at most `|pattern| * |text|`
/// steps (backtracking only to the last star), whatever the pattern: a
/// rule's author cannot make one request cost more than that.
fn wildcard<P, T>(
    pattern: &[P],
    text: &[T],
    star: impl Fn(&P) -> bool,
    one: impl Fn(&P, &T) -> bool,
) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && star(&pattern[p]) {
            back = Some((p, t));
            p += 1;
        } else if p < pattern.len() && one(&pattern[p], &text[t]) {
            p += 1;
            t += 1;
        } else if let Some((bp, bt)) = back {
            p = bp + 1;
            t = bt + 1;
            back = Some((bp, bt + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(star)
}

/// The query's `(key, value)` pairs under each way a server may read them:
/// split at `&`, or at `&` and `;`; escapes decoded, and `+` kept or read
/// as a space. A key without `=` has no value.
pub(crate) fn query_readings(query: &str) -> Vec<Vec<(String, Option<String>)>> {
    let mut out = Vec::with_capacity(4);
    for seps in [&['&'][..], &['&', ';'][..]] {
        for plus in [false, true] {
            out.push(
                query
                    .split(seps)
                    .filter(|p| !p.is_empty())
                    .map(|p| match p.split_once('=') {
                        Some((k, v)) => (decode(k, plus), Some(decode(v, plus))),
                        None => (decode(p, plus), None),
                    })
                    .collect(),
            );
        }
    }
    out
}

/// Percent-escapes decoded (a bad one kept as written), `+` as a space
/// when `plus`; bytes that are not UTF-8 replaced.
fn decode(s: &str, plus: bool) -> String {
    let spaced;
    let s = if plus && s.contains('+') {
        spaced = s.replace('+', " ");
        &spaced
    } else {
        s
    };
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(p: &str) -> Vec<String> {
        p.split('/').skip(1).map(str::to_string).collect()
    }

    #[test]
    fn a_star_stays_within_a_segment_and_two_stars_cross_them() {
        let m = |pat: &str, path: &str| {
            matches(
                &warden_policy::requests::pattern(pat).unwrap(),
                &segs(path),
                false,
            )
        };
        assert!(m("/repos/*/issues", "/repos/acme/issues"));
        assert!(!m("/repos/*/issues", "/repos/acme/w/issues"));
        assert!(m("/repos/**", "/repos/acme/w/issues"));
        assert!(m("/repos/**", "/repos"));
        assert!(m("/repos/**", "/repos/"));
        assert!(!m("/repos/**", "/repository"));
        assert!(m("/**/info/refs", "/acme/w.git/info/refs"));
        assert!(m("/**/git-upload-pack", "/git-upload-pack"));
        assert!(m("/*.git/**", "/w.git/info/refs"));
        assert!(m("/v1/*-x", "/v1/a-b-x"));
        assert!(!m("/v1/*-x", "/v1/a-b-y"));
        assert!(m("/**", "/"));
        assert!(!m("/a/b", "/a/B"));
        assert!(matches("/a/b", &segs("/A/b"), true));
        // Many stars cost a bounded amount, never an exponential one.
        let many = format!("/{}x", "**/".repeat(30));
        let long = format!("/{}", vec!["a"; 200].join("/"));
        assert!(!matches(&many, &segs(&long), false));
    }

    #[test]
    fn an_encoded_slash_is_read_both_ways_and_never_hides_a_dot_segment() {
        let r = readings("/projects/group%2Fproject/issues").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0], segs("/projects/group%2Fproject/issues"));
        assert_eq!(r[1], segs("/projects/group/project/issues"));
        assert!(readings("/repos/acme%2F..%2Fother/x").is_err());
        assert!(readings("/repos/acme%5C..%5Cother/x").is_err());
        let r = readings("/r.git/git-receive-pack;x=1").unwrap();
        assert_eq!(r[1], segs("/r.git/git-receive-pack"));
        assert_eq!(readings("/a/b").unwrap().len(), 1);
    }

    /// `raw` as the terminator reads it (normalised; `None` when it
    /// refuses the path) and as a refusing rule then reads it.
    fn read_to_refuse(raw: &str) -> Option<Vec<Vec<String>>> {
        let path = crate::secrets::normalise_path(raw, false).ok()?;
        Some(refusal_readings(&readings(&path).ok()?))
    }

    fn refused_by(pattern: &str, raw: &str) -> bool {
        let pat = warden_policy::requests::pattern(pattern).unwrap();
        read_to_refuse(raw).is_none_or(|rs| rs.iter().any(|r| matches_either_slash(&pat, r, true)))
    }

    #[test]
    fn a_segment_that_a_reading_leaves_empty_is_collapsed_as_a_double_slash_is() {
        for raw in [
            // Only parameters, the `;` plain or encoded in either case.
            "/ok/;x/secret/y",
            "/ok/;/secret/y",
            "/ok/;x;y=1/secret/y",
            "/ok/%3B/secret/y",
            "/ok/%3b/secret/y",
            "/ok/%3Bx/secret/y",
            // Only spaces, or spaces and dots after a name-less start.
            "/ok/%20/secret/y",
            "/ok/%20%20/secret/y",
            "/ok/%20./secret/y",
            "/ok/%20;x/secret/y",
            // Several in a row, and one before the first named segment.
            "/ok/;/%20/;x/secret/y",
            "/;/ok/secret/y",
            "/%20/ok/secret/y",
            // An encoded slash or backslash that a server decodes into a
            // separator, alone or next to another.
            "/ok/%2F/secret/y",
            "/ok/%2f%2F/secret/y",
            "/ok%2F/secret/y",
            "/ok/%2Fsecret/y",
            "/ok/%5C/secret/y",
            "/ok/%5c;x/secret/y",
            // A trailing `;` on the last segment, and a last segment of
            // parameters only: the trailing slash it is.
            "/ok/secret;",
            "/ok/secret%3B",
            "/ok/secret/;",
            "/ok/secret/;x",
            "/ok/secret/%20",
        ] {
            assert!(
                refused_by("/ok/secret/**", raw),
                "{raw}: {:?}",
                read_to_refuse(raw)
            );
        }
        // The reviewer's paths for a deny rule with stars before its
        // fixed part.
        for raw in [
            "/repos/acme/w/;/hooks",
            "/repos/acme/w/%20/hooks",
            "/repos/acme/w/;x/hooks/1",
            "/repos/acme;x/w/%3B/hooks",
        ] {
            assert!(refused_by("/repos/*/*/hooks/**", raw), "{raw}");
        }
        // A rule for the bare path: a last segment left empty is its
        // trailing slash.
        for raw in ["/ok;", "/ok/;", "/ok/%20", "/ok/;x/", "/ok/%3B;/"] {
            assert!(refused_by("/ok", raw), "{raw}: {:?}", read_to_refuse(raw));
        }
        // Never more than the segments a server could read.
        assert!(!refused_by("/ok/secret/**", "/ok/x;/secret/y"));
        assert!(!refused_by("/ok/secret/**", "/ok/x%20/y/secret"));
    }

    #[test]
    fn a_segment_left_empty_is_read_collapsed_to_allow_too() {
        let r = readings("/ok/;x/y").unwrap();
        assert_eq!(r[0], segs("/ok/;x/y"));
        assert!(r.contains(&segs("/ok/y")), "{r:?}");
        let allow = warden_policy::requests::pattern("/ok/*/y").unwrap();
        assert!(
            !r.iter().all(|s| matches(&allow, s, false)),
            "a rule for a segment between never allows a path a server reads without one"
        );
        assert_eq!(readings("/").unwrap(), vec![segs("/")]);
        assert_eq!(readings("/;").unwrap(), vec![segs("/;"), segs("/")]);
        assert_eq!(readings("/a/b/").unwrap(), vec![segs("/a/b/")]);
    }

    #[test]
    fn a_separator_or_dot_segment_a_reading_could_make_is_refused_outright() {
        for raw in [
            "/ok/\\/secret/y",
            "/ok/\tx/secret/y",
            "/ok/%09/secret/y",
            "/ok/x%09/secret/y",
            "/ok/%00/secret/y",
            "/ok/%0A/secret/y",
            "/ok/%7F/secret/y",
            "/ok/.%20/secret/y",
            "/ok/%2E%20/secret/y",
            "/ok/..%20/secret/y",
            "/ok/.;x/secret/y",
            "/ok/..%3B/secret/y",
            "/ok/.../secret/y",
            "/ok/.%20;x/secret/y",
        ] {
            assert_eq!(read_to_refuse(raw), None, "{raw}");
        }
        // Dot segments behind an encoded slash, once decoded.
        for raw in ["/ok/%2F..%2Fsecret", "/ok/x%5C.%5Csecret"] {
            let path = crate::secrets::normalise_path(raw, false).unwrap();
            assert!(readings(&path).is_err(), "{raw}");
        }
    }

    #[test]
    fn a_format_suffix_is_read_dropped_at_the_first_and_last_dot_to_refuse() {
        let r = |p: &str| refusal_readings(&readings(p).unwrap());
        let got = r("/repos/a/w/hooks.tar.gz");
        assert_eq!(got[0], segs("/repos/a/w/hooks.tar.gz"));
        assert!(got.contains(&segs("/repos/a/w/hooks")), "{got:?}");
        assert!(got.contains(&segs("/repos/a/w/hooks.tar")), "{got:?}");
        assert!(r("/repos/a/w/hooks.json/").contains(&segs("/repos/a/w/hooks/")));
        assert!(r("/a/hooks.json;x=1").contains(&segs("/a/hooks")));
        assert!(r("/a/hooks.json.").contains(&segs("/a/hooks")));
        // A dot that starts the segment names no format; a middle
        // segment's dots are the path's own.
        assert_eq!(r("/a/.well-known"), vec![segs("/a/.well-known")]);
        assert_eq!(r("/w.git/info"), vec![segs("/w.git/info")]);
        // Bounded however many dots there are: the path, and two cuts.
        assert_eq!(r(&format!("/a/x{}", ".y".repeat(500))).len(), 3);
    }

    #[test]
    fn a_query_is_read_every_way_a_server_may_split_and_decode_it() {
        let r = query_readings("service=git%2Dreceive%2dpack&x");
        assert!(r
            .iter()
            .all(|pairs| pairs.contains(&("service".into(), Some("git-receive-pack".into())))));
        let r = query_readings("a=1;service=git-receive-pack");
        assert!(r[0].contains(&("a".into(), Some("1;service=git-receive-pack".into()))));
        assert!(r[2].contains(&("service".into(), Some("git-receive-pack".into()))));
        let r = query_readings("q=a+b");
        assert!(r[1].contains(&("q".into(), Some("a b".into()))));
    }
}

//! One request rule as people write it, read and checked: the methods, the
//! host, the path glob, the query's conditions and the JSON-RPC methods,
//! with what to do with a request that matches (allow, deny, ask). Parsing
//! and validation only; `warden_egress::requests` reads requests and
//! decides.

use crate::DomainRule;
use percent_encoding::{percent_decode_str, percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};

/// What a matching rule does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestAction {
    Allow,
    Deny,
    Ask,
}

impl RequestAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestAction::Allow => "allow",
            RequestAction::Deny => "deny",
            RequestAction::Ask => "ask",
        }
    }
}

/// One condition on the query: the key is present (`key`), or present
/// with a value the glob matches (`key=value`, `*` any run of bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryCondition {
    pub key: String,
    pub value: Option<String>,
}

/// A rule over the requests to one host (or a host and its subdomains):
/// every condition it states must hold for a request to match it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRule {
    pub action: RequestAction,
    /// Upper case; empty is any method.
    pub methods: Vec<String>,
    /// The host, as an allowlist entry writes it.
    pub domain: DomainRule,
    /// Path globs, normalised as request paths are (see `path`): `*`
    /// within one segment, `**` any number of whole segments. A request
    /// matches when one of them matches.
    pub paths: Vec<String>,
    /// Conditions on the query, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<QueryCondition>,
    /// JSON-RPC methods (`tools/list`, `tools/call:NAME` for one tool,
    /// `*` any run of bytes): when given, the rule matches a request whose
    /// body's JSON-RPC messages it names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rpc: Vec<String>,
    /// The rule as written, for messages and events.
    pub source: String,
}

/// Why a request rule was refused. The message names the entry, never the
/// option it was given to: each door says that.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?}: {why}; write METHODS NAME/PATH, e.g. 'GET,HEAD api.github.com/repos/**'")]
pub struct RuleError {
    pub entry: String,
    pub why: String,
}

/// HTTP methods are tokens (RFC 9110): a rule naming anything else could
/// never match and is a mistake.
fn is_method(m: &str) -> bool {
    !m.is_empty()
        && m.bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
}

impl RequestRule {
    /// Does every request this rule matches also match `wider`? Judged
    /// by what each states, conservatively (a glob inside another is seen
    /// only as a prefix below a `/**`): the same destination, methods among
    /// its methods, each path below one of its paths, every query condition
    /// it states, and JSON-RPC methods among its own. Used to hold a
    /// caller's allow or ask rule under the owner's: never wider.
    pub fn within(&self, wider: &RequestRule) -> bool {
        let path_within = |p: &String| {
            wider.paths.iter().any(|w| {
                w == p
                    || w.strip_suffix("**")
                        .is_some_and(|prefix| prefix.ends_with('/') && p.starts_with(prefix))
            })
        };
        self.domain.same_destinations(&wider.domain)
            && (wider.methods.is_empty()
                || (!self.methods.is_empty()
                    && self.methods.iter().all(|m| wider.methods.contains(m))))
            && self.paths.iter().all(path_within)
            && wider.query.iter().all(|q| self.query.contains(q))
            && (wider.rpc.is_empty()
                || (!self.rpc.is_empty() && self.rpc.iter().all(|r| wider.rpc.contains(r))))
    }

    /// Parse `METHODS NAME[/PATH][?QUERY] [rpc:M1,M2]` (METHODS a comma
    /// list or `*`; no path is `/**`), e.g. `GET,HEAD
    /// api.github.com/repos/**` or `POST mcp.test/mcp rpc:tools/list`.
    pub fn parse(action: RequestAction, entry: &str) -> Result<RequestRule, RuleError> {
        let bad = |why: String| RuleError {
            entry: entry.to_string(),
            why,
        };
        let mut words = entry.split_whitespace();
        let (Some(methods), Some(target)) = (words.next(), words.next()) else {
            return Err(bad("a rule is the methods, then the host and path".into()));
        };
        let rpc = match words.next() {
            None => Vec::new(),
            Some(w) => match w.strip_prefix("rpc:") {
                Some(list) => list.split(',').map(str::to_string).collect(),
                None => return Err(bad(format!("{w:?} is neither a path nor rpc:METHODS"))),
            },
        };
        if let Some(extra) = words.next() {
            return Err(bad(format!("{extra:?} is one word too many")));
        }
        let methods = if methods == "*" {
            Vec::new()
        } else {
            methods.split(',').map(str::to_string).collect()
        };
        let (host, rest) = match target.find(['/', '?']) {
            Some(at) => (&target[..at], &target[at..]),
            None => (target, ""),
        };
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let domain = DomainRule::parse(host).map_err(|e| bad(format!("the host: {e}")))?;
        let path = if path.is_empty() { "/**" } else { path };
        let query = match query {
            Some(q) => q
                .split('&')
                .map(|c| match c.split_once('=') {
                    Some((k, v)) => QueryCondition {
                        key: k.to_string(),
                        value: Some(v.to_string()),
                    },
                    None => QueryCondition {
                        key: c.to_string(),
                        value: None,
                    },
                })
                .collect(),
            None => Vec::new(),
        };
        RequestRule {
            action,
            methods,
            domain,
            paths: vec![path.to_string()],
            query,
            rpc,
            source: entry.trim().to_string(),
        }
        .checked()
    }

    /// The rule with its methods in upper case and its paths normalised,
    /// or why it cannot stand (a profile's or an API body's rule is built
    /// from its parts and checked here too).
    pub fn checked(mut self) -> Result<RequestRule, RuleError> {
        let bad = |why: String| RuleError {
            entry: self.source.clone(),
            why,
        };
        for m in &mut self.methods {
            *m = m.to_ascii_uppercase();
            if m == "*" || !is_method(m) {
                return Err(bad(format!(
                    "{m:?} is not an HTTP method (write * alone for any method)"
                )));
            }
        }
        if self.paths.is_empty() {
            self.paths.push("/**".into());
        }
        for p in &mut self.paths {
            *p = pattern(p).map_err(|why| bad(format!("the path {p:?}: {why}")))?;
        }
        for c in &self.query {
            if c.key.is_empty() || c.key.contains(['#', '&']) {
                return Err(bad(format!("the query condition {:?} names no key", c.key)));
            }
        }
        if self.rpc.iter().any(|m| m.is_empty()) {
            return Err(bad("an empty JSON-RPC method".into()));
        }
        Ok(self)
    }

    /// Whether the rule matches one method, one host (no subdomains) and
    /// one path, with no wildcard, each query condition a key with one
    /// value and each JSON-RPC method one label, none with a star: the
    /// only shape a rule made from a request (a grant, which states the
    /// values and calls it was asked about) may have.
    pub fn is_literal(&self) -> bool {
        matches!(self.methods.as_slice(), [m] if is_method(m))
            && !self.domain.subdomains
            && matches!(self.paths.as_slice(), [p] if !has_wildcard(p))
            && self
                .query
                .iter()
                .all(|c| !c.key.contains('*') && c.value.as_ref().is_some_and(|v| !v.contains('*')))
            && self.rpc.iter().all(|m| !m.contains('*'))
    }

    /// Whether the rule is for `name` on `port`.
    pub fn is_for(&self, name: &str, port: u16) -> bool {
        self.names(name) && self.domain.allows_port(port)
    }

    /// Whether the rule is for `name`, on whichever of its ports.
    pub fn names(&self, name: &str) -> bool {
        let d = &self.domain;
        let name = name.strip_suffix('.').unwrap_or(name);
        name.eq_ignore_ascii_case(&d.name)
            || (d.subdomains
                && name.len() > d.name.len()
                && name[name.len() - d.name.len()..].eq_ignore_ascii_case(&d.name)
                && name.as_bytes()[name.len() - d.name.len() - 1] == b'.')
    }
}

/// `path` (a request's normalised path) as a path glob that matches it
/// and nothing else: each `*` written `\*`, which the matcher reads as a
/// star itself. A request path never holds a backslash (the proxy
/// refuses one), so nothing else of it can be read as rule syntax.
pub fn literal_path(path: &str) -> String {
    path.replace('*', "\\*")
}

/// Whether the glob `p` has a wildcard: a `*` not written `\*`.
pub fn has_wildcard(p: &str) -> bool {
    let b = p.as_bytes();
    (0..b.len()).any(|i| b[i] == b'*' && (i == 0 || b[i - 1] != b'\\'))
}

/// Bytes an escape keeps standing for: all but RFC 3986's unreserved
/// characters, whose escapes mean the character itself.
const KEPT_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Why a path's escapes cannot be read one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscapeError {
    /// A `%` that starts no escape.
    Bad,
    /// An escape of a byte the caller refuses.
    Refused(u8),
    /// A character no rule can be written for, raw or escaped
    /// ([`not_a_character`]).
    NotACharacter,
}

/// Whether `bytes` (a path's, its escapes decoded) hold what is not a
/// character a rule can name: a C1 control (U+0080 to U+009F, which a
/// terminal reads as commands), a non-character (U+FDD0 to U+FDEF and
/// every U+xFFFE, U+xFFFF), or an encoding UTF-8 forbids (a surrogate, an
/// overlong form, a code point past U+10FFFF), which decoders read
/// differently (an overlong `/` was the classic way past a path check).
/// Bytes that are not UTF-8 at all (a Latin-1 `%E9`) are left alone: a
/// rule carries them as escapes and every reader sees the same byte.
pub fn not_a_character(bytes: &[u8]) -> bool {
    let forbidden_pair = bytes.windows(2).any(|w| {
        matches!(
            (w[0], w[1]),
            (0xC0 | 0xC1 | 0xF5..=0xFF, 0x80..=0xBF)
                | (0xE0, 0x80..=0x9F)
                | (0xED, 0xA0..=0xBF)
                | (0xF0, 0x80..=0x8F)
                | (0xF4, 0x90..=0xBF)
        )
    });
    forbidden_pair
        || bytes.utf8_chunks().any(|chunk| {
            chunk.valid().chars().any(|c| {
                let n = u32::from(c);
                (0x80..=0x9F).contains(&n) || (0xFDD0..=0xFDEF).contains(&n) || n & 0xFFFE == 0xFFFE
            })
        })
}

/// Whether a request's query holds, raw or escaped, what no rule can name
/// ([`not_a_character`]): a rule's query condition, and a grant of one,
/// could not be written for it.
pub fn query_not_a_character(query: &str) -> bool {
    let bytes: Vec<u8> = percent_decode_str(query).collect();
    not_a_character(&bytes)
}

/// `path` with every byte outside ASCII percent-encoded (upper case). A
/// request line holds ASCII (RFC 9112); a client that sends `é` raw means
/// what `%C3%A9` means, and servers decode both to the same bytes, so
/// rules and requests are read in the one, escaped, spelling: a rule
/// written either way matches both, and nothing sandbox-chosen beyond
/// ASCII is forwarded, recorded or written into a rule raw.
fn ascii_only(path: &str) -> std::borrow::Cow<'_, str> {
    if path.is_ascii() {
        return path.into();
    }
    let mut out = String::with_capacity(path.len() * 3);
    for &b in path.as_bytes() {
        if b.is_ascii() {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.into()
}

/// `path`'s percent-escapes as the proxy forwards them and the rules read
/// them: every byte outside ASCII escaped ([`ascii_only`]), an escape of
/// an unreserved character decoded, every other one in upper case; the
/// rest of the text as written. An escape of a byte `refused` names is
/// refused, and so is what is not a character ([`not_a_character`]). The
/// proxy's normaliser and a rule's path both go through here, so a rule
/// is read exactly as the path it is matched against.
pub fn normalise_escapes(path: &str, refused: impl Fn(u8) -> bool) -> Result<String, EscapeError> {
    let path = ascii_only(path);
    let mut out = String::with_capacity(path.len());
    let mut rest = &*path;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        // The run of escapes that starts here, decoded and encoded again
        // as a whole (so a multi-byte character stays one).
        let run = rest.as_bytes()[at..]
            .chunks(3)
            .take_while(|c| {
                c.len() == 3 && c[0] == b'%' && c[1..].iter().all(u8::is_ascii_hexdigit)
            })
            .count()
            * 3;
        if run == 0 {
            return Err(EscapeError::Bad);
        }
        let bytes: Vec<u8> = percent_decode_str(&rest[at..at + run]).collect();
        if let Some(b) = bytes.iter().copied().find(|b| refused(*b)) {
            return Err(EscapeError::Refused(b));
        }
        if not_a_character(&bytes) {
            return Err(EscapeError::NotACharacter);
        }
        out.extend(percent_encode(&bytes, KEPT_ESCAPED));
        rest = &rest[at + run..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A rule's path glob normalised as request paths are: unreserved escapes
/// decoded, other escapes in upper case, empty segments dropped; refused
/// when it is not absolute or holds a dot segment, a backslash other than
/// the one of `\*` (a literal star, see [`literal_path`]), a control
/// character or a bad escape (it could never match a normalised path).
pub fn pattern(p: &str) -> Result<String, String> {
    if !p.starts_with('/') {
        return Err("a path starts with /".into());
    }
    let stray_backslash = p
        .match_indices('\\')
        .any(|(at, _)| p.as_bytes().get(at + 1) != Some(&b'*'));
    if stray_backslash || p.chars().any(|c| c.is_control() || c == '#' || c == '?') {
        return Err(
            "a backslash (other than \\* for a literal star), a control character, # or ? in the path"
                .into(),
        );
    }
    let out = normalise_escapes(p, |_| false).map_err(|e| match e {
        EscapeError::NotACharacter => {
            "a C1 control, a non-character or a byte sequence UTF-8 forbids (raw or escaped): no request path holds one"
        }
        _ => "a % that starts no escape",
    })?;
    let segments: Vec<&str> = out.split('/').skip(1).collect();
    if segments.iter().any(|s| *s == "." || *s == "..") {
        return Err("a dot segment: paths are matched after . and .. are resolved".into());
    }
    let trailing = out.len() > 1 && out.ends_with('/');
    let kept: Vec<&str> = segments.into_iter().filter(|s| !s.is_empty()).collect();
    let mut p = format!("/{}", kept.join("/"));
    if trailing && !kept.is_empty() {
        p.push('/');
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_path_is_read_in_the_escaped_spelling_requests_are_and_refuses_what_none_holds() {
        assert_eq!(pattern("/caf\u{e9}/**").unwrap(), "/caf%C3%A9/**");
        assert_eq!(pattern("/caf%c3%a9/**").unwrap(), "/caf%C3%A9/**");
        for p in [
            "/x\u{9b}31m",
            "/x%C2%9B",
            "/a\u{fffe}",
            "/a%ED%A0%80",
            "/a%C0%AF",
            "/a\u{85}",
        ] {
            assert!(pattern(p).is_err(), "{p:?}");
        }
        assert!(RequestRule::parse(RequestAction::Allow, "GET api.test/x\u{9b}31m").is_err());
    }

    #[test]
    fn a_rule_is_within_another_only_when_every_request_it_matches_is() {
        let r = |s: &str| RequestRule::parse(RequestAction::Allow, s).unwrap();
        let owner = r("GET,HEAD api.test:8443/repos/**");
        for inside in [
            "GET api.test:8443/repos/**",
            "HEAD api.test:8443/repos/acme/x",
            "GET api.test:8443/repos/acme/**?ref=main",
        ] {
            assert!(r(inside).within(&owner), "{inside}");
        }
        for wider in [
            "POST api.test:8443/repos/**",
            "* api.test:8443/repos/**",
            "GET api.test:8443/**",
            "GET api.test:8443/reposx",
            "GET api.test/repos/**",
            "GET other.test:8443/repos/**",
            "GET .api.test:8443/repos/**",
        ] {
            assert!(!r(wider).within(&owner), "{wider}");
        }
        let rpc = r("POST mcp.test/mcp rpc:tools/list,tools/call:search");
        assert!(r("POST mcp.test/mcp rpc:tools/list").within(&rpc));
        assert!(!r("POST mcp.test/mcp").within(&rpc));
        assert!(!r("POST mcp.test/mcp rpc:tools/call:*").within(&rpc));
    }

    #[test]
    fn the_cli_form_reads_methods_host_path_query_and_rpc() {
        let r =
            RequestRule::parse(RequestAction::Allow, "GET,head api.github.com/repos/**").unwrap();
        assert_eq!(r.methods, ["GET", "HEAD"]);
        assert_eq!(r.domain.name, "api.github.com");
        assert_eq!(r.paths, ["/repos/**"]);
        let r = RequestRule::parse(
            RequestAction::Deny,
            "* .github.com/**/info/refs?service=git-receive-pack",
        )
        .unwrap();
        assert!(r.methods.is_empty());
        assert!(r.domain.subdomains);
        assert_eq!(
            r.query,
            [QueryCondition {
                key: "service".into(),
                value: Some("git-receive-pack".into())
            }]
        );
        let r = RequestRule::parse(
            RequestAction::Allow,
            "POST mcp.test:8443/mcp rpc:tools/list,tools/call:search",
        )
        .unwrap();
        assert_eq!(r.rpc, ["tools/list", "tools/call:search"]);
        assert_eq!(r.domain.port, Some(8443));
        let r = RequestRule::parse(RequestAction::Allow, "* registry.npmjs.org").unwrap();
        assert_eq!(r.paths, ["/**"]);
        assert!(r.is_for("registry.npmjs.org", 443));
        assert!(r.is_for("Registry.NPMJS.org.", 443));
        assert!(!r.is_for("registry.npmjs.org", 8443));
        assert!(!r.is_for("xregistry.npmjs.org", 443));
    }

    #[test]
    fn a_rule_that_could_not_mean_what_it_says_is_refused() {
        for bad in [
            "",
            "GET",
            "GET http://a.test/x",
            "G+T a.test/x",
            "GET,* a.test/x",
            "GET a.test/x extra",
            "GET a.test/x rpc:",
            "GET a.test/../x",
            "GET a.test/a%2",
            "GET a.test/x?=v",
            "GET /x",
        ] {
            assert!(
                RequestRule::parse(RequestAction::Allow, bad).is_err(),
                "{bad:?}"
            );
        }
        let e = RequestRule::parse(RequestAction::Allow, "G+T a.test/x").unwrap_err();
        assert!(
            !e.to_string().contains("--"),
            "no flag below the doors: {e}"
        );
    }

    #[test]
    fn patterns_are_normalised_as_paths_are_and_dot_segments_refused() {
        assert_eq!(pattern("/repos/%61cme//w/").unwrap(), "/repos/acme/w/");
        assert_eq!(pattern("/a%2fb").unwrap(), "/a%2Fb");
        assert_eq!(pattern("/%c3%A9t%C3%a9").unwrap(), "/%C3%A9t%C3%A9");
        assert_eq!(pattern("/a%7e%41:@!").unwrap(), "/a~A:@!");
        assert_eq!(pattern("/a/\\*\\*").unwrap(), "/a/\\*\\*");
        for bad in [
            "x", "/a/../b", "/a/./b", "/a\\b", "/a\\", "/a%zz", "/a?b", "/a#b",
        ] {
            assert!(pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_literal_rule_names_one_method_host_and_path_without_a_wildcard() {
        let r = |s: &str| RequestRule::parse(RequestAction::Allow, s).unwrap();
        for literal in [
            "GET forge.test/issues/1",
            "DELETE forge.test:8443/issues/\\*\\*",
            "PUT forge.test/a\\*b/",
        ] {
            assert!(r(literal).is_literal(), "{literal}");
        }
        for wide in [
            "* forge.test/issues/1",
            "GET,HEAD forge.test/issues/1",
            "GET .forge.test/issues/1",
            "GET forge.test/issues/*",
            "GET forge.test/issues/**",
            "GET forge.test/issues/\\**",
            "GET forge.test",
            "GET forge.test/issues?x",
            "GET forge.test/issues?x=a*",
            "POST forge.test/mcp rpc:tools/*",
            "POST forge.test/mcp rpc:tools/call:\\*",
        ] {
            assert!(!r(wide).is_literal(), "{wide}");
        }
        for stated in [
            "GET forge.test/issues?x=1",
            "POST forge.test/mcp rpc:tools/list",
            "POST forge.test/mcp?a=b rpc:tools/call:search,tools/list",
        ] {
            assert!(r(stated).is_literal(), "{stated}");
        }
        assert_eq!(literal_path("/a/**/*b"), "/a/\\*\\*/\\*b");
        assert!(!has_wildcard(&literal_path("/a/**/*b")));
    }
}

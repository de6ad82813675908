//! The methods a server may take a request as, besides its own: a
//! method-override header, a `_method` query key, and a `_method` field
//! of its body (Rails' Rack::MethodOverride, Laravel and Symfony read a
//! form's; Laravel a JSON body's too; each only when the request is a
//! POST, which is not relied on here). The rules decide a request by the
//! most refused of these methods. Reading only: what the body holds comes
//! from the terminator's bounded read, never from here.

use super::form::{charset_certain, json_members, multipart_fields, Kind};
use crate::requests::{field_values_by, keys};

/// Headers by which a client asks a server to take a request as another
/// method. A CGI server (PHP's, Rack's `HTTP_*` variables) names a header
/// by its name upper-cased with `-` made `_`, so each is read in any case
/// and with `_` for any `-` (`X_HTTP_METHOD_OVERRIDE`).
const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Headers by which a server may take a request as one for another path,
/// which the rules, deciding the request's own path, would never see:
/// IIS URL Rewrite and ASP.NET (`X-Original-URL`, `X-Rewrite-URL`),
/// Symfony and Zend before their fixes for exactly this, and gateways
/// that rebuild the path from a forwarded prefix (`X-Forwarded-Prefix`,
/// `X-Forwarded-Path`). Read as the method overrides are (any case, `_`
/// for `-`).
const PATH_OVERRIDES: &[&str] = &[
    "x-original-url",
    "x-rewrite-url",
    "x-override-url",
    "x-forwarded-prefix",
    "x-forwarded-path",
];

/// The fields that name another method, in a query or a body: Rails',
/// Laravel's and Symfony's `_method`, and the override headers' names
/// (ASP.NET Core's form field is configurable; clients send these).
const FIELDS: &[&str] = &[
    "_method",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// What every spelling of a field in [`FIELDS`] holds.
const NEEDLE: &str = "method";

/// Whether `key` (decoded) names another method as some server reads
/// it: any case (`keys::same`), and as PHP names its request variables
/// (`keys::php_name`: leading spaces dropped, ` ` and `.` made `_`, an
/// unclosed `[` too: `.method` and `[method` are `_method` to Laravel and
/// Symfony). An array (`_method[]`) is no method to any of them.
fn is_field(key: &str) -> bool {
    let php = keys::php_name(key).filter(|(_, array)| !array);
    FIELDS
        .iter()
        .any(|f| keys::same(key, f) || php.as_ref().is_some_and(|(name, _)| keys::same(name, f)))
}

/// Whether a header named `name` is a method override as a CGI server
/// reads its name.
fn is_override(name: &str) -> bool {
    is_one_of(name, METHOD_OVERRIDES)
}

/// The name of the first header of `parts` that may make a server take
/// it as a request for another path ([`PATH_OVERRIDES`]), as it was sent.
pub(super) fn path_override(parts: &http::request::Parts) -> Option<String> {
    parts
        .headers
        .keys()
        .find(|name| is_one_of(name.as_str(), PATH_OVERRIDES))
        .map(|name| name.as_str().to_string())
}

/// Whether a header named `name` is one of `headers` as a CGI server
/// reads its name (upper-cased, `-` made `_`).
fn is_one_of(name: &str, headers: &[&str]) -> bool {
    headers.iter().any(|h| {
        name.len() == h.len()
            && name
                .bytes()
                .zip(h.bytes())
                .all(|(n, h)| n.eq_ignore_ascii_case(&h) || (n == b'_' && h == b'-'))
    })
}

/// `parts`'s own method, then each other one its headers and query ask it
/// to be taken as (upper-cased, each once).
pub(super) fn named(parts: &http::request::Parts) -> Vec<String> {
    let mut out = vec![parts.method.as_str().to_string()];
    let headers = parts
        .headers
        .iter()
        .filter(|(name, _)| is_override(name.as_str()))
        .filter_map(|(_, v)| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::to_string);
    let query = field_values_by(parts.uri.query().unwrap_or(""), NEEDLE, is_field);
    add(&mut out, headers.chain(query));
    out
}

/// Add each of `more` (trimmed, upper-cased) to `out` that is not there.
pub(super) fn add(out: &mut Vec<String>, more: impl IntoIterator<Item = String>) {
    for m in more {
        let m = m.trim().to_ascii_uppercase();
        if !m.is_empty() && !out.contains(&m) {
            out.push(m);
        }
    }
}

/// The methods `body` (read whole) names in `_method` when read as each
/// of `kinds`; `None` when it cannot be read for certain: one in a
/// charset read otherwise than UTF-8 (`charset_certain`), JSON that does
/// not parse, a `_method` that is not a string of letters, a multipart
/// body that mentions the field in a way the parser does not read as it.
pub(super) async fn in_body(
    parts: &http::request::Parts,
    kinds: &[Kind],
    body: &[u8],
) -> Option<Vec<String>> {
    if !charset_certain(parts, body) {
        return None;
    }
    let mut out = Vec::new();
    for kind in kinds {
        match kind {
            Kind::Form => out.extend(field_values_by(
                &String::from_utf8_lossy(body),
                NEEDLE,
                is_field,
            )),
            // A `_method` that is not a string is read differently by
            // each framework: uncertain.
            Kind::Json => {
                for (k, v) in json_members(body)? {
                    if is_field(&k) {
                        out.push(v.as_str()?.to_string());
                    }
                }
            }
            Kind::Multipart => out.extend(
                multipart_fields(parts, body, mentions)
                    .await?
                    .into_iter()
                    .filter(|(k, _)| is_field(k))
                    .map(|(_, v)| v),
            ),
        }
    }
    // A value a server would not take as a method as it stands (a line
    // break, a boundary that another parser ends elsewhere) is read
    // differently by another: uncertain.
    out.iter()
        .all(|m| m.trim().bytes().all(|b| b.is_ascii_alphabetic()))
        .then_some(out)
}

/// How many times `body` may spell a field of [`FIELDS`]: `method` (any
/// case, its bytes written plain or percent-escaped, as an RFC 2231 name
/// may) after `_`, `-`, `.` or `[`.
fn mentions(body: &[u8]) -> usize {
    let decoded: Vec<u8> = percent_encoding::percent_decode(body).collect();
    let lower = decoded.to_ascii_lowercase();
    lower
        .windows(NEEDLE.len() + 1)
        .filter(|w| w[1..] == *NEEDLE.as_bytes() && matches!(w[0], b'_' | b'-' | b'.' | b'['))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::ruled::form::body_kinds;

    fn parts(req: http::Request<()>) -> http::request::Parts {
        req.into_parts().0
    }

    #[test]
    fn the_headers_and_the_query_name_methods_each_once_after_the_requests_own() {
        let p = parts(
            http::Request::post("/x?_method=delete&%5Fmethod=PUT")
                .header("x-http-method-override", "PATCH, delete")
                .body(())
                .unwrap(),
        );
        assert_eq!(named(&p), ["POST", "PATCH", "DELETE", "PUT"]);
    }

    /// CGI servers (PHP's, Rack's `HTTP_*`) name a header by its name
    /// upper-cased with `-` made `_`: `X_HTTP_METHOD_OVERRIDE` is the same
    /// variable as `X-HTTP-Method-Override` there.
    #[test]
    fn an_override_header_is_read_with_underscores_for_hyphens_as_cgi_reads_it() {
        let p = parts(
            http::Request::post("/x")
                .header("X_HTTP_METHOD_OVERRIDE", "DELETE")
                .header("x_http-method", "put")
                .header("X-Method_Override", "PATCH")
                .header("x_http_method_overrides", "TRACE")
                .header("x-http-methodoverride", "CONNECT")
                .body(())
                .unwrap(),
        );
        assert_eq!(named(&p), ["POST", "DELETE", "PUT", "PATCH"]);
    }

    #[test]
    fn a_body_is_read_for_its_method_when_a_server_would_read_it() {
        let kinds = |ct: Option<&str>, enc: Option<&str>| {
            let mut b = http::Request::post("/x");
            if let Some(ct) = ct {
                b = b.header("content-type", ct);
            }
            if let Some(enc) = enc {
                b = b.header("content-encoding", enc);
            }
            body_kinds(&parts(b.body(()).unwrap()))
        };
        assert_eq!(kinds(None, None), Some(vec![Kind::Form]));
        assert_eq!(
            kinds(
                Some("Application/X-WWW-Form-Urlencoded; charset=utf-8"),
                None
            ),
            Some(vec![Kind::Form])
        );
        assert_eq!(
            kinds(Some("multipart/form-data; boundary=x"), None),
            Some(vec![Kind::Multipart])
        );
        assert_eq!(
            kinds(Some("application/vnd.api+json"), None),
            Some(vec![Kind::Json])
        );
        assert_eq!(kinds(Some("application/octet-stream"), None), None);
        // As the frameworks match them: Laravel's isJson, Rack's `,`
        // split and any multipart, an empty type as none.
        for json in [
            "text/json",
            "Application/X-JSON",
            "text/plain; x=/json",
            "application/problem+json; charset=utf-8",
        ] {
            assert_eq!(kinds(Some(json), None), Some(vec![Kind::Json]), "{json}");
        }
        assert_eq!(
            kinds(Some("text/plain, application/x-www-form-urlencoded"), None),
            Some(vec![Kind::Form])
        );
        assert_eq!(
            kinds(Some("application/x-www-form-urlencoded text/plain"), None),
            Some(vec![Kind::Form])
        );
        assert_eq!(kinds(Some(""), None), Some(vec![Kind::Form]));
        assert_eq!(
            kinds(Some("Multipart/Related; boundary=x"), None),
            Some(vec![Kind::Multipart])
        );
        assert_eq!(kinds(Some("text/plain; charset=utf-8"), None), None);
        assert_eq!(kinds(Some("application/json"), Some("gzip")), Some(vec![]));
    }

    #[tokio::test]
    async fn a_bodys_method_field_is_read_as_a_form_json_or_multipart() {
        let p = parts(http::Request::post("/x").body(()).unwrap());
        let form = in_body(&p, &[Kind::Form], b"a=1&_Method=delete").await;
        assert_eq!(form, Some(vec!["delete".to_string()]));
        let json = in_body(&p, &[Kind::Json], br#"{"_method": "DELETE"}"#).await;
        assert_eq!(json, Some(vec!["DELETE".to_string()]));
        let mp = parts(
            http::Request::post("/x")
                .header("content-type", "multipart/form-data; boundary=XyZ")
                .body(())
                .unwrap(),
        );
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XyZ--\r\n";
        assert_eq!(
            in_body(&mp, &[Kind::Multipart], body).await,
            Some(vec!["DELETE".to_string()])
        );
        let plain = b"--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--XyZ--\r\n";
        assert_eq!(in_body(&mp, &[Kind::Multipart], plain).await, Some(vec![]));
        // It names the field in a way the parser does not read: uncertain.
        let odd = b"--XyZ\r\nContent-Disposition: form-data; name*=UTF-8''%5Fmethod\r\n\r\nDELETE\r\n--XyZ--\r\n";
        assert_eq!(in_body(&mp, &[Kind::Multipart], odd).await, None);
    }

    #[tokio::test]
    async fn a_field_php_or_a_header_name_makes_the_method_field_is_read_as_it() {
        let p = parts(
            http::Request::post("/x?.method=put&%5Bmethod=patch&x=.method")
                .body(())
                .unwrap(),
        );
        assert_eq!(named(&p), ["POST", "PUT", "PATCH"]);
        for body in [
            &b".method=DELETE"[..],
            b"+.method=DELETE",
            b"%2Emethod=DELETE",
            b"[method=DELETE",
            b"X-HTTP-Method-Override=DELETE",
            b"x-method-override=DELETE",
        ] {
            assert_eq!(
                in_body(&p, &[Kind::Form], body).await,
                Some(vec!["DELETE".to_string()]),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // An array or another name is no method.
        assert_eq!(
            in_body(&p, &[Kind::Form], b"_method[]=x&method=y&a_method=z").await,
            Some(vec![])
        );
        let mp = parts(
            http::Request::post("/x")
                .header("content-type", "multipart/form-data; boundary=XyZ")
                .body(())
                .unwrap(),
        );
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\".method\"\r\n\r\nDELETE\r\n--XyZ--\r\n";
        assert_eq!(
            in_body(&mp, &[Kind::Multipart], body).await,
            Some(vec!["DELETE".to_string()])
        );
        // Mentioned in a file as a name could spell it: not certain.
        let file =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nx.method()\r\n--XyZ--\r\n";
        assert_eq!(in_body(&mp, &[Kind::Multipart], file).await, None);
    }

    #[tokio::test]
    async fn json_serde_cannot_read_is_uncertain_and_every_duplicate_counts() {
        let p = parts(http::Request::post("/x").body(()).unwrap());
        let deep = format!(
            r#"{{"_method":"DELETE","d":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for unread in [
            &br#"{"_method":"DELETE","n":1e400}"#[..],
            deep.as_bytes(),
            br#"{"_method":"DELETE",}"#,
            b"\xef\xbb\xbf{\"_method\":\"DELETE\"}",
            br#"{"_method":["DELETE"]}"#,
            br#"{"_method":"DEL\nETE"}"#,
            // Not JSON at all, though the type says so.
            b"_method=DELETE",
        ] {
            assert_eq!(
                in_body(&p, &[Kind::Json], unread).await,
                None,
                "{}",
                String::from_utf8_lossy(unread)
            );
        }
        assert_eq!(
            in_body(
                &p,
                &[Kind::Json],
                br#"{"_method":"DELETE","_METHOD":"POST","_method":"PUT"}"#
            )
            .await,
            Some(vec!["DELETE".into(), "POST".into(), "PUT".into()])
        );
        assert_eq!(
            in_body(&p, &[Kind::Json], br#"{"\u005fmethod":"delete"}"#).await,
            Some(vec!["delete".into()])
        );
        // Nested, or not an object: no framework reads a method there.
        assert_eq!(
            in_body(&p, &[Kind::Json], br#"{"a":{"_method":"DELETE"}}"#).await,
            Some(vec![])
        );
        assert_eq!(
            in_body(&p, &[Kind::Json], br#"[{"_method":"DELETE"}]"#).await,
            Some(vec![])
        );
    }

    #[tokio::test]
    async fn a_multipart_body_is_certain_only_when_its_one_boundary_reads_every_mention() {
        let mp = |ct: &str| {
            parts(
                http::Request::post("/x")
                    .header("content-type", ct)
                    .body(())
                    .unwrap(),
            )
        };
        let field = |name: &str| {
            format!("--XyZ\r\nContent-Disposition: form-data; {name}\r\n\r\nDELETE\r\n--XyZ--\r\n")
        };
        let named = field("name=\"_method\"");
        let mixed = mp("multipart/mixed; boundary=XyZ");
        assert_eq!(
            in_body(&mixed, &[Kind::Multipart], named.as_bytes()).await,
            Some(vec!["DELETE".to_string()])
        );
        let two = mp("multipart/form-data; boundary=XyZ; boundary=Q");
        assert_eq!(
            in_body(&two, &[Kind::Multipart], named.as_bytes()).await,
            None
        );
        let form = mp("multipart/form-data; boundary=XyZ");
        for odd in [
            field("name*=UTF-8''_%6Dethod"),
            field("name*0=\"_me\"; name*1=\"thod\""),
            // Read as a field once, mentioned again in a file.
            format!("{}\r\n--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n_method=DELETE\r\n--XyZ--\r\n", named.trim_end_matches("--XyZ--\r\n").trim_end_matches("\r\n")),
        ] {
            assert_eq!(in_body(&form, &[Kind::Multipart], odd.as_bytes()).await, None, "{odd}");
        }
        // A second Content-Disposition: parsers keep different ones.
        let twice = "--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nDELETE\r\n--XyZ--\r\n";
        assert_eq!(
            in_body(&form, &[Kind::Multipart], twice.as_bytes()).await,
            None
        );
        // `name*` in a file's content is not a part's name; a file's own
        // name in RFC 2231's way is not a field's name either.
        let text = "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nchar *name*;\r\n--XyZ--\r\n";
        assert_eq!(
            in_body(&form, &[Kind::Multipart], text.as_bytes()).await,
            Some(vec![])
        );
        let file = "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename*=UTF-8''a.txt\r\n\r\nx\r\n--XyZ--\r\n";
        assert_eq!(
            in_body(&form, &[Kind::Multipart], file.as_bytes()).await,
            Some(vec![])
        );
    }

    /// A `_method` in a body whose charset is read otherwise than UTF-8
    /// (UTF-16 spells it with NULs between, UTF-7 as `+AF8-method`) may
    /// name any method.
    #[tokio::test]
    async fn a_bodys_method_field_in_a_charset_not_read_as_utf8_is_uncertain() {
        let form = |ct: &str| {
            parts(
                http::Request::post("/x")
                    .header("content-type", ct)
                    .body(())
                    .unwrap(),
            )
        };
        let le: Vec<u8> = "_method=DELETE"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        let p = form("application/x-www-form-urlencoded; charset=utf-16le");
        assert_eq!(in_body(&p, &[Kind::Form], &le).await, None);
        let p = form("application/x-www-form-urlencoded; charset=utf-7");
        assert_eq!(
            in_body(&p, &[Kind::Form], b"+AF8-method=DELETE").await,
            None
        );
        let p = form("application/json; charset=utf-32");
        assert_eq!(in_body(&p, &[Kind::Json], br#"{"a":1}"#).await, None);
        let p = form("application/x-www-form-urlencoded; charset=utf-8");
        assert_eq!(
            in_body(&p, &[Kind::Form], b"_method=delete").await,
            Some(vec!["delete".to_string()])
        );
    }
}

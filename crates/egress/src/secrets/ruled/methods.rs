//! The methods a server may take a request as, besides its own: a
//! method-override header, a `_method` query key, and a `_method` field
//! of its body (Rails' Rack::MethodOverride, Laravel and Symfony read a
//! form's; Laravel a JSON body's too; each only when the request is a
//! POST, which is not relied on here). The rules decide a request by the
//! most refused of these methods. Reading only: what the body holds comes
//! from the terminator's bounded read, never from here.

use crate::requests::field_values;

/// Headers by which a client asks a server to take a request as another
/// method.
const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// The field that names another method, in a query or a body.
const FIELD: &str = "_method";

/// `parts`'s own method, then each other one its headers and query ask it
/// to be taken as (upper-cased, each once).
pub(super) fn named(parts: &http::request::Parts) -> Vec<String> {
    let mut out = vec![parts.method.as_str().to_string()];
    let headers = METHOD_OVERRIDES
        .iter()
        .flat_map(|h| parts.headers.get_all(*h).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::to_string);
    let query = field_values(parts.uri.query().unwrap_or(""), FIELD);
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

/// How a body that may carry `_method` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `application/x-www-form-urlencoded`, or no content type at all
    /// (which Rack reads as a form).
    Form,
    /// `multipart/form-data`, with its boundary.
    Multipart,
    /// `application/json` or `…+json`.
    Json,
}

/// What `parts` says its body is, where a server may read `_method` in
/// it: each content type it names (a request naming two is read as
/// both); `None` for a body no such server reads a field of, and
/// `Some(vec![])` for one it may read in a way this cannot (a content
/// coding), which is then taken to name any method.
pub(super) fn body_kinds(parts: &http::request::Parts) -> Option<Vec<Kind>> {
    let types: Vec<String> = parts
        .headers
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase())
        .collect();
    let kinds: Vec<Kind> = if types.is_empty() {
        vec![Kind::Form]
    } else {
        types
            .iter()
            .filter_map(|t| {
                let essence = t.split(';').next().unwrap_or("").trim();
                match essence {
                    "application/x-www-form-urlencoded" => Some(Kind::Form),
                    "multipart/form-data" => Some(Kind::Multipart),
                    "application/json" => Some(Kind::Json),
                    e if e.starts_with("application/") && e.ends_with("+json") => Some(Kind::Json),
                    _ => None,
                }
            })
            .collect()
    };
    if kinds.is_empty() {
        return None;
    }
    let coded = parts
        .headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    Some(if coded { Vec::new() } else { kinds })
}

/// The methods `body` (read whole) names in `_method` when read as each
/// of `kinds`; `None` when it cannot be read for certain (a multipart body
/// that mentions the field but does not parse as one that names it).
pub(super) async fn in_body(
    parts: &http::request::Parts,
    kinds: &[Kind],
    body: &[u8],
) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for kind in kinds {
        match kind {
            Kind::Form => out.extend(field_values(&String::from_utf8_lossy(body), FIELD)),
            Kind::Json => out.extend(in_json(body)),
            Kind::Multipart => out.extend(in_multipart(parts, body).await?),
        }
    }
    Some(out)
}

/// A JSON object's `_method` (any case of the key) when it is a string.
fn in_json(body: &[u8]) -> Vec<String> {
    let Ok(serde_json::Value::Object(o)) = serde_json::from_slice(body) else {
        return Vec::new();
    };
    o.iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(FIELD))
        .filter_map(|(_, v)| v.as_str().map(str::to_string))
        .collect()
}

/// A multipart body's `_method` fields' values, by `multer`. A body that
/// does not mention the field at all (nor its escape, `%5F`, as an RFC
/// 2231 name writes it) names no method; one that mentions it but is not
/// read by the parser as naming it is not certain, and `None`.
async fn in_multipart(parts: &http::request::Parts, body: &[u8]) -> Option<Vec<String>> {
    let lower = body.to_ascii_lowercase();
    let mentions = |needle: &[u8]| lower.windows(needle.len()).any(|w| w == needle);
    if !mentions(b"_method") && !mentions(b"%5fmethod") {
        return Some(Vec::new());
    }
    let boundary = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| multer::parse_boundary(t).ok())?;
    let data = bytes::Bytes::copy_from_slice(body);
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(data) });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut out = Vec::new();
    loop {
        match form.next_field().await {
            Ok(Some(field)) => {
                if field.name().is_some_and(|n| n.eq_ignore_ascii_case(FIELD)) {
                    out.push(field.text().await.ok()?);
                }
            }
            Ok(None) => break,
            Err(_) => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

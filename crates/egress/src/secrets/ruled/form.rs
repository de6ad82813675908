//! What a request's body gives of fields, as servers read them: a form,
//! a multipart body's fields, a JSON object's top-level members. The one
//! reader behind both uses of a body's fields: the method a `_method`
//! field names (`methods`) and the parameters a server merges with the
//! query's (`params`). Reading only, of a body the terminator read whole
//! within its limit; deciding is the rules'.

use crate::requests::{keys, path, Pairs, Params};

/// How a body that may carry fields is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A form: `application/x-www-form-urlencoded` (or a type that starts
    /// so, which Symfony takes), or no content type at all or an empty
    /// one (which Rack reads as a form).
    Form,
    /// Any `multipart/*` with a boundary (Rack parses `mixed` and
    /// `related` as it parses `form-data`).
    Multipart,
    /// Any type whose subtype holds `json` (`text/json`,
    /// `application/x-json`, `…+json`), or a header that holds `/json` or
    /// `+json` anywhere (Laravel's `isJson`).
    Json,
}

/// Each content type `parts` names, as the frameworks take them apart:
/// every header, each split at `,` (Rack and PHP keep the first part,
/// others may keep another), trimmed, in its own case.
fn content_types(parts: &http::request::Parts) -> Vec<String> {
    parts
        .headers
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|t| t.trim().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// How one content type may be read, each way a framework
/// reads it: a type can be read as more than one kind.
fn kinds_of(t: &str, out: &mut Vec<Kind>) {
    let t = t.to_ascii_lowercase();
    // PHP cuts the essence at `;`, `,` or a space; Rack at `;` or `,`.
    let essence = t.split([';', ' ', '\t']).next().unwrap_or("").trim();
    let mut add = |k: Kind| {
        if !out.contains(&k) {
            out.push(k);
        }
    };
    if essence.is_empty() || essence.starts_with("application/x-www-form-urlencoded") {
        add(Kind::Form);
    }
    if essence.starts_with("multipart/") {
        add(Kind::Multipart);
    }
    let subtype_json = essence
        .split_once('/')
        .is_some_and(|(_, sub)| sub.contains("json"));
    if subtype_json || t.contains("/json") || t.contains("+json") {
        add(Kind::Json);
    }
}

/// What `parts` says its body is, where a server may read fields in it
/// (`_method`, or parameters it merges with the query's): each kind any content type it names may be read as (a request
/// naming two is read as both); `None` for a body no such server reads a
/// field of, and `Some(vec![])` for one it may read in a way this cannot
/// (a content coding), which is then taken to hold any field.
pub(crate) fn body_kinds(parts: &http::request::Parts) -> Option<Vec<Kind>> {
    let types = content_types(parts);
    let mut kinds: Vec<Kind> = Vec::new();
    if types.is_empty() {
        kinds.push(Kind::Form);
    }
    for t in &types {
        kinds_of(t, &mut kinds);
    }
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

/// How a charset a request declares for its body is read, by name (in
/// any case). Only UTF-8 is read for certain whatever the body holds:
/// the readers here read bytes as UTF-8. A single-byte charset whose
/// first 128 codes are ASCII's reads an ASCII body as UTF-8 does (and a
/// percent escape of an ASCII byte), but gives a byte past them another
/// character than UTF-8 (`%E9` is `é` in Latin-1, no character in
/// UTF-8; `.NET`'s ASCII reads it as `?`), so it is certain only for a
/// body that has none. Any other name (UTF-16 and UTF-32, which spell
/// `admin` with NULs between; UTF-7, whose `+AF8-` is `_`; Shift_JIS,
/// whose `0x5C` is `¥`; a name not known) may read the body as any text
/// at all: ASP.NET Core's `FormReader`, Tomcat's `getParameter` and
/// Spring decode a form with the charset it declares.
const CHARSETS: &[(&str, Charset)] = &[
    ("utf-8", Charset::Utf8),
    ("utf8", Charset::Utf8),
    ("us-ascii", Charset::AsciiOnly),
    ("ascii", Charset::AsciiOnly),
    ("iso-8859-1", Charset::AsciiOnly),
    ("iso8859-1", Charset::AsciiOnly),
    ("iso_8859-1", Charset::AsciiOnly),
    ("latin1", Charset::AsciiOnly),
    ("l1", Charset::AsciiOnly),
    ("windows-1252", Charset::AsciiOnly),
    ("cp1252", Charset::AsciiOnly),
];

/// How far a body in a declared charset is read for certain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Charset {
    /// Whatever it holds.
    Utf8,
    /// When it holds only ASCII, escaped or not.
    AsciiOnly,
}

/// Each charset the request's content types declare, as any server may
/// find one: every `charset` in every Content-Type header, in any case,
/// wherever it stands (after a `;`, a space or a `,`), its value
/// unquoted; `None` for a value no reader here can name for certain (a
/// quoted string with an escape, an empty one, `charset` with no `=`).
fn charsets(headers: &http::HeaderMap) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for v in headers.get_all(http::header::CONTENT_TYPE) {
        let lower = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
        let mut rest = lower.as_str();
        while let Some(at) = rest.find("charset") {
            rest = &rest[at + "charset".len()..];
            let after = rest.trim_start();
            let Some(value) = after.strip_prefix('=') else {
                out.push(None);
                continue;
            };
            let value = value.trim_start();
            let name = match value.strip_prefix('"') {
                Some(q) => q.split('"').next().filter(|n| !n.contains('\\')),
                None => value.split([';', ',', ' ', '\t']).next(),
            };
            out.push(
                name.map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
            );
        }
    }
    out
}

/// Whether `body` reads as the same text in every charset `parts`
/// declares as it does in UTF-8, the only way the readers here read it:
/// see [`CHARSETS`]. A request that declares none is read as UTF-8.
pub(crate) fn charset_certain(parts: &http::request::Parts, body: &[u8]) -> bool {
    certain_in(&parts.headers, body)
}

/// Whether `body` reads as UTF-8 reads it in each charset `headers`
/// declare.
fn certain_in(headers: &http::HeaderMap, body: &[u8]) -> bool {
    let mut ascii_only = false;
    for name in charsets(headers) {
        let class = name.and_then(|n| {
            CHARSETS
                .iter()
                .find(|(known, _)| *known == n)
                .map(|(_, c)| *c)
        });
        match class {
            Some(Charset::Utf8) => {}
            Some(Charset::AsciiOnly) => ascii_only = true,
            None => return false,
        }
    }
    !ascii_only || (body.is_ascii() && percent_encoding::percent_decode(body).all(|b| b.is_ascii()))
}

/// Whether `text` may spell a part's name in a way `multer` does not
/// read: an RFC 2231 `name*` (`name*0=_me; name*1=thod` splits the
/// field's name across two; `filename*` is not one). Asked of the whole
/// body first (cheap, and wider), then of each part's header.
fn extended_name(body: &[u8]) -> bool {
    let lower = body.to_ascii_lowercase();
    lower
        .windows(5)
        .enumerate()
        .any(|(i, w)| w == b"name*" && (i == 0 || !lower[i - 1].is_ascii_alphanumeric()))
}

/// The one boundary every multipart type `parts` names gives; `None`
/// when none does or two differ (servers pick different ones).
fn boundary(parts: &http::request::Parts) -> Option<String> {
    let mut found: Option<String> = None;
    for t in content_types(parts)
        .iter()
        .filter(|t| t.to_ascii_lowercase().starts_with("multipart/"))
    {
        for param in t.split(';').skip(1) {
            let Some((k, v)) = param.split_once('=') else {
                continue;
            };
            if !k.trim().eq_ignore_ascii_case("boundary") {
                continue;
            }
            let v = v.trim().trim_matches('"').to_string();
            match &found {
                Some(b) if *b != v => return None,
                _ => found = Some(v),
            }
        }
    }
    found
}

/// A JSON document's top-level members, each of a key given twice kept
/// (parsers keep the first or the last); empty for a document that is
/// not an object (no framework reads a field there); `None` when it is
/// not JSON serde reads (a number out of range, nesting past its limit:
/// PHP reads both).
pub(crate) fn json_members(body: &[u8]) -> Option<Vec<(String, serde_json::Value)>> {
    serde_json::from_slice::<Top>(body).ok().map(|Top(m)| m)
}

/// A JSON document's top-level members, every one kept.
struct Top(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Top {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Top, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Top;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
                let mut found = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: serde_json::Value = map.next_value()?;
                    found.push((key, value));
                }
                Ok(Top(found))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Top(Vec::new()))
            }
            fn visit_str<E>(self, _: &str) -> Result<Top, E> {
                Ok(Top(Vec::new()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
                Ok(Top(Vec::new()))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
                Ok(Top(Vec::new()))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
                Ok(Top(Vec::new()))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
                Ok(Top(Vec::new()))
            }
            fn visit_unit<E>(self) -> Result<Top, E> {
                Ok(Top(Vec::new()))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A multipart body's fields (name, value), by `multer`, where certain.
/// `mentions` counts how many times a body (or a part's name) may spell
/// a field the caller looks for. A body that mentions none nor may spell
/// a name in RFC 2231's way holds none of them: no field is returned.
/// One that does is certain only when the parser, with the one boundary
/// the request names, reads at least as many mentions in the parts'
/// names as the body holds (a mention in a value or a file may be a name
/// to another parser), no part's header names it otherwise and no
/// part's charset reads its value otherwise than UTF-8; `None`
/// otherwise.
pub(crate) async fn multipart_fields(
    parts: &http::request::Parts,
    body: &[u8],
    mentions: impl Fn(&[u8]) -> usize,
) -> Option<Vec<(String, String)>> {
    let said = mentions(body);
    if said == 0 && !extended_name(body) {
        return Some(Vec::new());
    }
    // The boundary is read here, not by `multer::parse_boundary`, which
    // knows only `form-data`.
    let boundary = boundary(parts)?;
    let data = bytes::Bytes::copy_from_slice(body);
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(data) });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut out = Vec::new();
    let mut named = 0;
    loop {
        match form.next_field().await {
            Ok(Some(field)) => {
                // A part's name as another parser may read it: from a
                // second Content-Disposition, or RFC 2231's parameters.
                let said = field
                    .headers()
                    .get_all(http::header::CONTENT_DISPOSITION)
                    .iter()
                    .collect::<Vec<_>>();
                if said.len() > 1 || said.iter().any(|v| extended_name(v.as_bytes())) {
                    return None;
                }
                let Some(name) = field.name().map(str::to_string) else {
                    continue;
                };
                named += mentions(name.as_bytes());
                // A part's own charset: Tomcat reads its value so (Java's
                // `UTF-16` big-endian without a mark, where `multer`'s
                // reads little-endian; `UTF-32`, which `multer` reads as
                // UTF-8).
                let declared = field.headers().clone();
                let value = field.bytes().await.ok()?;
                if !certain_in(&declared, &value) {
                    return None;
                }
                out.push((name, String::from_utf8_lossy(&value).into_owned()));
            }
            Ok(None) => break,
            Err(_) => return None,
        }
    }
    (named >= said).then_some(out)
}

/// How many times `text` may spell one of `keys` as a field's name: each
/// key and the text percent-decoded, case-folded (`keys::fold`), with
/// ` `, `.` and `[` made `_` (as PHP names a variable) and `\` dropped (a
/// quoted name's escapes), counted where it stands.
fn spelled(text: &[u8], keys: &[String]) -> usize {
    let norm = |b: &[u8]| -> String {
        let decoded: Vec<u8> = percent_encoding::percent_decode(b).collect();
        keys::fold(&String::from_utf8_lossy(&decoded))
            .chars()
            .filter(|c| *c != '\\')
            .map(|c| if matches!(c, ' ' | '.' | '[') { '_' } else { c })
            .collect()
    };
    let text = norm(text);
    keys.iter()
        .map(|k| norm(k.as_bytes()))
        .filter(|k| !k.is_empty())
        .map(|k| text.matches(k.as_str()).count())
        .sum()
}

/// The parameters `body` (read whole) gives when read as each of `kinds`
/// (each reading of each kind one reading), where a rule's conditions
/// name `keys`: a form as a query is read, a multipart body's fields, a
/// JSON object's top-level members (a string as it stands, a number,
/// `true` or `false` as written, `null` as no value, an array as each
/// of its items, an object as its JSON text). [`Params::Unknown`] when
/// it cannot be read for certain: a coded body (no kinds), one in a
/// charset read otherwise than UTF-8 ([`charset_certain`]), JSON that
/// does not parse, a multipart body that mentions a key in a way its
/// parser does not read as a name.
pub(crate) async fn params(
    parts: &http::request::Parts,
    kinds: &[Kind],
    body: &[u8],
    keys: &[String],
) -> Params {
    if kinds.is_empty() || !charset_certain(parts, body) {
        return Params::Unknown;
    }
    let mut readings: Vec<Pairs> = Vec::new();
    for kind in kinds {
        match kind {
            Kind::Form => readings.extend(path::query_readings(&String::from_utf8_lossy(body))),
            Kind::Json => match json_members(body) {
                Some(members) => readings.push(
                    members
                        .into_iter()
                        .flat_map(|(k, v)| json_values(v).into_iter().map(move |v| (k.clone(), v)))
                        .collect(),
                ),
                None => return Params::Unknown,
            },
            Kind::Multipart => match multipart_fields(parts, body, |t| spelled(t, keys)).await {
                Some(fields) => {
                    readings.push(fields.into_iter().map(|(k, v)| (k, Some(v))).collect())
                }
                None => return Params::Unknown,
            },
        }
    }
    Params::Read(readings)
}

/// The values a JSON member gives a parameter, as frameworks read it.
fn json_values(v: serde_json::Value) -> Vec<Option<String>> {
    use serde_json::Value;
    match v {
        Value::String(s) => vec![Some(s)],
        Value::Null => vec![None],
        Value::Array(items) if items.is_empty() => vec![None],
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::String(s) => Some(s),
                Value::Null => None,
                other => Some(other.to_string()),
            })
            .collect(),
        other => vec![Some(other.to_string())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(ct: &str) -> http::request::Parts {
        http::Request::post("/x")
            .header("content-type", ct)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn keys() -> Vec<String> {
        vec!["admin".to_string()]
    }

    /// Every pair of every reading: what a condition is matched on.
    fn pairs(p: &Params) -> Vec<(String, Option<String>)> {
        match p {
            Params::Read(r) => r.iter().flatten().cloned().collect(),
            other => panic!("{other:?}"),
        }
    }

    fn has(p: &Params, k: &str, v: &str) -> bool {
        pairs(p)
            .iter()
            .any(|(pk, pv)| pk == k && pv.as_deref() == Some(v))
    }

    #[tokio::test]
    async fn a_bodys_parameters_are_read_as_a_form_json_or_multipart() {
        let p = parts("application/x-www-form-urlencoded");
        let f = params(&p, &[Kind::Form], b"a=1&admin=1", &keys()).await;
        assert!(has(&f, "admin", "1"), "{f:?}");
        let j = params(
            &p,
            &[Kind::Json],
            br#"{"admin":1,"flag":true,"list":["x",2],"n":null,"o":{"a":1}}"#,
            &keys(),
        )
        .await;
        assert!(has(&j, "admin", "1") && has(&j, "flag", "true"), "{j:?}");
        assert!(has(&j, "list", "x") && has(&j, "list", "2"), "{j:?}");
        assert!(has(&j, "o", r#"{"a":1}"#), "{j:?}");
        assert!(pairs(&j).contains(&("n".into(), None)), "{j:?}");
        let mp = parts("multipart/form-data; boundary=XyZ");
        let body =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"admin\"\r\n\r\n1\r\n--XyZ--\r\n";
        let m = params(&mp, &[Kind::Multipart], body, &keys()).await;
        assert!(has(&m, "admin", "1"), "{m:?}");
    }

    /// What cannot be read for certain may hold any parameter: a coded
    /// body, JSON serde cannot read, a multipart body whose parser reads
    /// fewer names spelling the key than the body mentions, or one that
    /// names a part in RFC 2231's way.
    #[tokio::test]
    async fn a_body_not_read_for_certain_may_give_any_parameter() {
        let p = parts("application/json");
        assert_eq!(params(&p, &[], b"admin=1", &keys()).await, Params::Unknown);
        for json in [&b"{\"admin\":1,}"[..], b"admin=1", br#"{"n":1e400}"#] {
            assert_eq!(
                params(&p, &[Kind::Json], json, &keys()).await,
                Params::Unknown,
                "{}",
                String::from_utf8_lossy(json)
            );
        }
        let mp = parts("multipart/form-data; boundary=XyZ");
        for odd in [
            // Mentioned in a value: another parser may read it as a name.
            "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nadmin=1\r\n--XyZ--\r\n",
            // A name escaped, percent-coded or in RFC 2231's way.
            "--XyZ\r\nContent-Disposition: form-data; name*=UTF-8''%61dmin\r\n\r\n1\r\n--XyZ--\r\n",
            "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"ADM\u{131}N\"\r\n\r\n1\r\n--XyZ--\r\n",
            // Not the boundary the request names.
            "--Q\r\nContent-Disposition: form-data; name=\"admin\"\r\n\r\n1\r\n--Q--\r\n",
        ] {
            assert_eq!(
                params(&mp, &[Kind::Multipart], odd.as_bytes(), &keys()).await,
                Params::Unknown,
                "{odd}"
            );
        }
        // A body that mentions no key gives no parameter a rule looks at.
        let plain =
            "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nhello\r\n--XyZ--\r\n";
        assert_eq!(
            params(&mp, &[Kind::Multipart], plain.as_bytes(), &keys()).await,
            Params::Read(vec![vec![]])
        );
    }

    /// `admin=1` in UTF-16, as ASP.NET Core and Tomcat read a form that
    /// declares it.
    fn utf16le(text: &str) -> Vec<u8> {
        text.encode_utf16().flat_map(u16::to_le_bytes).collect()
    }

    /// A body in a charset read otherwise than UTF-8 may hold any
    /// parameter, whatever kind it is read as and however the charset is
    /// spelled: UTF-16 and UTF-32 (NULs between the letters), UTF-7
    /// (`+AGE-` is `a`), a name not known, one given twice, one after a
    /// space or a comma, quoted, or with no value.
    #[tokio::test]
    async fn a_body_in_a_charset_not_read_as_utf8_may_give_any_parameter() {
        let le = utf16le("admin=1");
        let be: Vec<u8> = "admin=1"
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        for (ct, body) in [
            (
                "application/x-www-form-urlencoded; charset=utf-16le",
                &le[..],
            ),
            (
                "application/x-www-form-urlencoded; charset=UTF-16BE",
                &be[..],
            ),
            (
                "application/x-www-form-urlencoded;charset=\"utf-16\"",
                &le[..],
            ),
            ("application/x-www-form-urlencoded; charset=utf-32", &le[..]),
            (
                "application/x-www-form-urlencoded; charset=utf-7",
                b"+AGE-dmin=1",
            ),
            (
                "application/x-www-form-urlencoded; charset=x-unheard-of",
                b"admin=1",
            ),
            (
                "application/x-www-form-urlencoded; charset=utf-8; charset=utf-16le",
                &le[..],
            ),
            (
                "application/x-www-form-urlencoded charset=utf-16le",
                &le[..],
            ),
            (
                "application/x-www-form-urlencoded, text/plain;charset=utf-16le",
                &le[..],
            ),
            (
                "application/x-www-form-urlencoded; Charset = utf-16le",
                &le[..],
            ),
            (
                "application/x-www-form-urlencoded; charset=\"utf\\-16\"",
                &le[..],
            ),
            ("application/x-www-form-urlencoded; charset=", &le[..]),
            ("application/x-www-form-urlencoded; charset", &le[..]),
        ] {
            let p = parts(ct);
            assert_eq!(
                params(&p, &[Kind::Form], body, &keys()).await,
                Params::Unknown,
                "{ct}"
            );
        }
        let json = parts("application/json; charset=utf-16le");
        let body = utf16le(r#"{"admin":1}"#);
        assert_eq!(
            params(&json, &[Kind::Json], &body, &keys()).await,
            Params::Unknown
        );
        let mp = parts("multipart/form-data; boundary=XyZ");
        for charset in ["utf-32", "utf-16", "x-unheard-of"] {
            let body = format!(
                "--XyZ\r\nContent-Disposition: form-data; name=\"admin\"\r\nContent-Type: text/plain; charset={charset}\r\n\r\n\0\0\01\r\n--XyZ--\r\n"
            );
            assert_eq!(
                params(&mp, &[Kind::Multipart], body.as_bytes(), &keys()).await,
                Params::Unknown,
                "{charset}"
            );
        }
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"admin\"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n1\r\n--XyZ--\r\n";
        let m = params(&mp, &[Kind::Multipart], body.as_bytes(), &keys()).await;
        assert!(has(&m, "admin", "1"), "{m:?}");
        let mp = parts("multipart/form-data; boundary=XyZ; charset=utf-16le");
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n1\r\n--XyZ--\r\n";
        assert_eq!(
            params(&mp, &[Kind::Multipart], body, &keys()).await,
            Params::Unknown
        );
    }

    /// UTF-8 (any case, quoted or not) reads a body as it is read here;
    /// Latin-1, Windows-1252 and US-ASCII do too for a body of ASCII
    /// only, and not for one with a byte past it, plain or escaped
    /// (`%E9` is `é` in Latin-1).
    #[tokio::test]
    async fn a_body_in_utf8_or_an_ascii_only_body_in_latin1_is_read() {
        for ct in [
            "application/x-www-form-urlencoded; charset=utf-8",
            "application/x-www-form-urlencoded; charset=\"UTF-8\"",
            "application/x-www-form-urlencoded; charset=iso-8859-1",
            "application/x-www-form-urlencoded; charset=windows-1252",
            "application/x-www-form-urlencoded; charset=US-ASCII",
        ] {
            let f = params(&parts(ct), &[Kind::Form], b"a=1&admin=%31", &keys()).await;
            assert!(has(&f, "admin", "1"), "{ct}: {f:?}");
        }
        let utf8 = parts("application/x-www-form-urlencoded; charset=utf-8");
        let f = params(&utf8, &[Kind::Form], "admin=\u{e9}".as_bytes(), &keys()).await;
        assert!(has(&f, "admin", "\u{e9}"), "{f:?}");
        let latin1 = parts("application/x-www-form-urlencoded; charset=latin1");
        for body in [&b"admin=%E9"[..], b"admin=\xe9"] {
            assert_eq!(
                params(&latin1, &[Kind::Form], body, &keys()).await,
                Params::Unknown,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}

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

/// `body` as a server reads it that takes a form with no declared charset
/// as ISO-8859-1, each byte (plain or percent-escaped) the character of
/// its code: Tomcat's `getParameter` (the servlet specification's
/// default, which Spring's `@RequestParam` reads through) and Jetty before
/// 10, where ASP.NET Core, PHP, Rails and Flask read UTF-8. Given back as
/// UTF-8 that the readers here read as that server does (a byte past
/// ASCII written as its character, an escaped one as its character's
/// escapes: `%DF` is `%C3%9F`, `ß`); `None` for a body both read alike,
/// ASCII only, plain and escaped.
fn latin1_reading(body: &[u8]) -> Option<Vec<u8>> {
    if body.is_ascii() && percent_encoding::percent_decode(body).all(|b| b.is_ascii()) {
        return None;
    }
    let hex = |b: Option<&u8>| (*b? as char).to_digit(16);
    let mut out = Vec::with_capacity(body.len() + body.len() / 2);
    let mut utf8 = [0u8; 2];
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        let escaped = match (b, hex(body.get(i + 1)), hex(body.get(i + 2))) {
            (b'%', Some(h), Some(l)) => Some((h * 16 + l) as u8),
            _ => None,
        };
        match escaped {
            Some(code) if code >= 0x80 => {
                for u in char::from(code).encode_utf8(&mut utf8).bytes() {
                    out.extend_from_slice(format!("%{u:02X}").as_bytes());
                }
                i += 3;
            }
            Some(_) => {
                out.extend_from_slice(&body[i..i + 3]);
                i += 3;
            }
            None if b >= 0x80 => {
                out.extend_from_slice(char::from(b).encode_utf8(&mut utf8).as_bytes());
                i += 1;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// The keys of each reading, in order: what two readings of one body must
/// agree on to be read for certain.
fn keys_of(readings: &[Pairs]) -> Vec<Vec<&str>> {
    readings
        .iter()
        .map(|r| r.iter().map(|(k, _)| k.as_str()).collect())
        .collect()
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
/// charset read otherwise than UTF-8 ([`charset_certain`]), a form or a
/// multipart body that declares no charset and whose keys read otherwise
/// in Latin-1 ([`latin1_reading`]; one whose keys read alike is read
/// both ways, each a reading), JSON that does not parse, a multipart
/// body that mentions a key in a way its parser does not read as a name.
pub(crate) async fn params(
    parts: &http::request::Parts,
    kinds: &[Kind],
    body: &[u8],
    keys: &[String],
) -> Params {
    if kinds.is_empty() || !charset_certain(parts, body) {
        return Params::Unknown;
    }
    // No charset declared, and a byte past ASCII: read as UTF-8 here and as
    // Latin-1 by another server (see `latin1_reading`).
    let latin1 = if charsets(&parts.headers).is_empty() {
        latin1_reading(body)
    } else {
        None
    };
    let mut readings: Vec<Pairs> = Vec::new();
    for kind in kinds {
        let read = match kind {
            Kind::Form => form_readings(body, latin1.as_deref()),
            Kind::Json => json_readings(body),
            Kind::Multipart => multipart_readings(parts, body, latin1.as_deref(), keys).await,
        };
        match read {
            Some(r) => readings.extend(r),
            None => return Params::Unknown,
        }
    }
    Params::Read(readings)
}

/// A form's readings (see `path::query_readings`), in UTF-8 and, where it
/// is given, in Latin-1 too; `None` when the two give different keys (a
/// value read two ways is two readings; a key is where a server would
/// find a parameter the rules never saw).
fn form_readings(body: &[u8], latin1: Option<&[u8]>) -> Option<Vec<Pairs>> {
    let mut readings = path::query_readings(&String::from_utf8_lossy(body));
    if let Some(other) = latin1 {
        let other = path::query_readings(&String::from_utf8_lossy(other));
        if keys_of(&readings) != keys_of(&other) {
            return None;
        }
        readings.extend(other);
    }
    Some(readings)
}

/// A JSON object's top-level members as one reading; `None` for JSON
/// serde does not read. JSON is UTF-8 (RFC 8259): no Latin-1 reading.
fn json_readings(body: &[u8]) -> Option<Vec<Pairs>> {
    let members = json_members(body)?;
    Some(vec![members
        .into_iter()
        .flat_map(|(k, v)| json_values(v).into_iter().map(move |v| (k.clone(), v)))
        .collect()])
}

/// A multipart body's fields as one reading, and, where `latin1` is
/// given (the request declares no charset, which is what its parts'
/// names are read in), the fields of that reading too; `None` when either
/// is not read for certain or the two name different fields.
async fn multipart_readings(
    parts: &http::request::Parts,
    body: &[u8],
    latin1: Option<&[u8]>,
    keys: &[String],
) -> Option<Vec<Pairs>> {
    let read = |fields: Vec<(String, String)>| -> Pairs {
        fields.into_iter().map(|(k, v)| (k, Some(v))).collect()
    };
    let mut readings = vec![read(
        multipart_fields(parts, body, |t| spelled(t, keys)).await?,
    )];
    if let Some(other) = latin1 {
        let other = read(multipart_fields(parts, other, |t| spelled(t, keys)).await?);
        if keys_of(&readings) != keys_of(std::slice::from_ref(&other)) {
            return None;
        }
        readings.push(other);
    }
    Some(readings)
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
mod tests;

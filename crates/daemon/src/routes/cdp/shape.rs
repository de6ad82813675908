//! What the daemon passes on of a sandbox's DevTools discovery answers.
//! Those answers come from inside the sandbox: code there can kill its
//! Chromium and answer on 127.0.0.1:9222 itself. The daemon turns each
//! `webSocketDebuggerUrl` into a URL of its own that the client opens
//! with its token, so the sandbox's text is never put into it: the URL
//! must name exactly `/devtools/(browser|page)/ID` (ID hex digits and
//! `-`; no dot segment, percent-escape, query or fragment), and the
//! daemon's URL is built from that kind and ID alone. Anything else is
//! refused with [`REFUSED`] and the reason. Of the other fields, only
//! those a client reads are kept: the browser's version strings, a
//! target's id and type in the same strict shape, and its title, page
//! URL and description as text (what the page says, never a URL the
//! daemon makes or vouches for). `devtoolsFrontendUrl`, `faviconUrl` and
//! whatever else is dropped.

use serde_json::{Map, Value};

/// The reason code of a debugger URL that is not passed on.
pub const REFUSED: &str = "devtools_url_refused";

/// The endpoint kinds Chromium names in its debugger URLs: every target
/// (page, iframe, worker) is under `page`, the browser under `browser`.
pub const KINDS: &[&str] = &["browser", "page"];

/// The longest target id taken (Chromium's are 32 hex digits, or a
/// 36-character GUID for the browser).
const MAX_ID: usize = 64;

/// Fields of `/json/version` passed on (strings only), besides the
/// debugger URL.
const VERSION_FIELDS: &[&str] = &[
    "Browser",
    "Protocol-Version",
    "User-Agent",
    "V8-Version",
    "WebKit-Version",
    "Android-Package",
];

/// Fields of a `/json/list` target passed on as text: what the page says
/// of itself.
const TEXT_FIELDS: &[&str] = &["title", "url", "description"];

/// Fields of a `/json/list` target passed on only in the strict id shape.
const ID_FIELDS: &[&str] = &["id", "parentId"];

/// The longest text field passed on.
const MAX_TEXT: usize = 8 << 10;

/// Whether `id` is a DevTools target id as Chromium spells them.
pub fn is_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// Whether `kind` and `id` name a DevTools endpoint.
pub fn is_endpoint(kind: &str, id: &str) -> bool {
    KINDS.contains(&kind) && is_id(id)
}

/// The kind and id `url` names, or why it is refused.
pub fn endpoint(url: &str) -> Result<(&str, &str), String> {
    let Some(rest) = url.strip_prefix("ws://") else {
        return Err("it is not a ws:// URL".into());
    };
    let Some(slash) = rest.find('/') else {
        return Err("it has no path".into());
    };
    let path = &rest[slash..];
    if let Some(c) = path.chars().find(|c| matches!(c, '?' | '#' | '%' | '\\')) {
        return Err(format!("its path holds {c:?}"));
    }
    let mut parts = path.split('/').skip(1);
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("devtools"), Some(kind), Some(id), None) if is_endpoint(kind, id) => Ok((kind, id)),
        _ => Err("its path is not /devtools/browser/ID or /devtools/page/ID".into()),
    }
}

/// Why a debugger URL is refused, in words for the client: the daemon's
/// own (`why`), never the sandbox's text.
pub fn refusal(why: &str) -> String {
    format!(
        "the sandbox's browser answered a debugger URL that is not passed on: {why} (only ws://.../devtools/browser/ID or /devtools/page/ID, ID hex digits and '-', is taken)"
    )
}

/// This daemon's URL for endpoint `kind`/`id` of sandbox `id_path` (one
/// path segment already), on `host`.
fn ours(host: &str, id_path: &str, kind: &str, id: &str) -> String {
    format!("ws://{host}/v1/sandboxes/{id_path}/desktop/cdp/devtools/{kind}/{id}")
}

/// `/json/version` as passed on: its version strings, and its debugger
/// URL pointed at this daemon, or why that URL is refused.
pub fn version(v: &Value, id_path: &str, host: &str) -> Result<Value, String> {
    let Some(obj) = v.as_object() else {
        return Err("the sandbox's browser answered /json/version with no object".into());
    };
    let mut out = Map::new();
    for k in VERSION_FIELDS {
        if let Some(s) = text(obj, k) {
            out.insert((*k).into(), s);
        }
    }
    let url = obj
        .get("webSocketDebuggerUrl")
        .and_then(Value::as_str)
        .ok_or_else(|| "the sandbox's browser answered no webSocketDebuggerUrl".to_string())?;
    let (kind, tid) = endpoint(url).map_err(|why| refusal(&why))?;
    out.insert(
        "webSocketDebuggerUrl".into(),
        ours(host, id_path, kind, tid).into(),
    );
    Ok(Value::Object(out))
}

/// One `/json/list` target as passed on; a debugger URL that is refused
/// is left out, and `wardenRefused` says why.
pub fn target(v: &Value, id_path: &str, host: &str) -> Value {
    let Some(obj) = v.as_object() else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    for k in TEXT_FIELDS {
        if let Some(s) = text(obj, k) {
            out.insert((*k).into(), s);
        }
    }
    for k in ID_FIELDS {
        if let Some(s) = obj.get(*k).and_then(Value::as_str).filter(|s| is_id(s)) {
            out.insert((*k).into(), s.into());
        }
    }
    if let Some(t) = obj.get("type").and_then(Value::as_str).filter(|t| {
        !t.is_empty() && t.len() <= 32 && t.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    }) {
        out.insert("type".into(), t.into());
    }
    if let Some(a) = obj.get("attached").and_then(Value::as_bool) {
        out.insert("attached".into(), a.into());
    }
    if let Some(url) = obj.get("webSocketDebuggerUrl").and_then(Value::as_str) {
        match endpoint(url) {
            Ok((kind, tid)) => {
                out.insert(
                    "webSocketDebuggerUrl".into(),
                    ours(host, id_path, kind, tid).into(),
                );
            }
            Err(why) => {
                out.insert(
                    "wardenRefused".into(),
                    serde_json::json!({ "code": REFUSED, "message": refusal(&why) }),
                );
            }
        }
    }
    Value::Object(out)
}

/// The string field `k` of `obj`, cut to [`MAX_TEXT`] bytes.
fn text(obj: &Map<String, Value>, k: &str) -> Option<Value> {
    let s = obj.get(k)?.as_str()?;
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(s[..end].into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_browser_or_page_endpoint_of_hex_and_dashes_is_taken() {
        assert_eq!(
            endpoint("ws://127.0.0.1:9222/devtools/browser/1b2c-3d4e"),
            Ok(("browser", "1b2c-3d4e"))
        );
        assert_eq!(
            endpoint("ws://localhost/devtools/page/ABCDEF0123"),
            Ok(("page", "ABCDEF0123"))
        );
        for bad in [
            "ws://h/devtools/../../../../other/pty?shell=id",
            "ws://h/devtools/%2e%2e/x",
            "ws://h/devtools/page/../../x",
            "ws://h/devtools/page/AB/../../x",
            "ws://h/devtools/page/AB?x",
            "ws://h/devtools/page/AB#x",
            "ws://h/devtools/page/A%42",
            "ws://h/devtools/page\\..\\x",
            "ws://h/devtools/./page/AB",
            "ws://h/devtools/worker/AB",
            "ws://h/devtools/page/",
            "ws://h/devtools/page/xyz",
            "ws://h/devtools/page/AB/",
            "wss://h/devtools/page/AB",
            "ws://h",
            "",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_version_answer_keeps_only_its_strings_and_the_daemons_url() {
        let v = serde_json::json!({
            "Browser": "Chrome/140",
            "webSocketDebuggerUrl": "ws://127.0.0.1:9222/devtools/browser/1b2c-3d",
            "devtoolsFrontendUrl": "/devtools/inspector.html",
            "extra": "http://elsewhere/",
        });
        let out = version(&v, "my%20box", "127.0.0.1:8080").unwrap();
        assert_eq!(
            out,
            serde_json::json!({
                "Browser": "Chrome/140",
                "webSocketDebuggerUrl": "ws://127.0.0.1:8080/v1/sandboxes/my%20box/desktop/cdp/devtools/browser/1b2c-3d",
            })
        );
        let bent = serde_json::json!({"webSocketDebuggerUrl": "ws://h/devtools/../../x/pty"});
        let why = version(&bent, "a", "h").unwrap_err();
        assert!(why.contains("/devtools/browser/ID"), "{why}");
    }

    #[test]
    fn a_target_whose_url_is_bent_is_listed_without_it_and_says_why() {
        let t = serde_json::json!({
            "id": "../x", "type": "page\"", "title": "T", "url": "https://e.example/",
            "faviconUrl": "http://x/", "webSocketDebuggerUrl": "ws://h/devtools/page/AB?x",
        });
        let out = target(&t, "a", "h");
        assert_eq!(out["title"], "T");
        assert_eq!(out["url"], "https://e.example/");
        assert!(out.get("id").is_none() && out.get("type").is_none());
        assert!(out.get("faviconUrl").is_none());
        assert!(out.get("webSocketDebuggerUrl").is_none());
        assert_eq!(out["wardenRefused"]["code"], REFUSED);
    }
}

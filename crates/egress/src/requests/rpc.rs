//! The JSON-RPC methods a request's body calls (remote MCP servers speak
//! JSON-RPC over HTTP): what rules with `rpc` conditions are matched on.
//! The body is read only as far as [`MAX_RPC_BODY`]; one that is larger,
//! or that is not JSON-RPC, has no methods anyone can name, so a rule
//! that needs them allows nothing and denies (or asks about) everything.

use super::keys;

/// How much of a body is read for its JSON-RPC methods: an MCP call is a
/// few hundred bytes; a larger one is decided as unreadable, never read
/// further (the proxy's memory budget pays for what is held).
pub const MAX_RPC_BODY: usize = 64 * 1024;

/// The label of each JSON-RPC message in `body` (a message or a batch):
/// its `method`, followed by `:NAME` when its `params` carry a string
/// `name` (`tools/call:search`, so that one tool can be named). `None`
/// when the body is not JSON-RPC (or a message names no method).
pub fn labels(body: &[u8]) -> Option<Vec<String>> {
    // Some servers match keys ignoring case (Go's encoding/json does, by
    // Unicode's folding, the last one winning): `"METHOD"` beside
    // `"method"`, `"param\u017f"` beside `"params"`, or `"Name"` in a
    // tool call's params, would be read there as what this reading never
    // saw. A body with such a key is not JSON-RPC here.
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    if ambiguous_keys(&value) {
        return None;
    }
    // Read again from the bytes, derived: a key given twice in the same
    // case is an error there (the value above kept only the last).
    let messages = match serde_json::from_slice::<Messages>(body).ok()? {
        Messages::Batch(b) if !b.is_empty() => b,
        Messages::Batch(_) => return None,
        Messages::One(m) => vec![m],
    };
    Some(
        messages
            .into_iter()
            .map(|m| match m.params {
                Some(Params::Named { name }) => (m.method, name),
                _ => (m.method, None),
            })
            .map(|(method, name)| match name {
                Some(serde_json::Value::String(name)) => format!("{method}:{name}"),
                _ => method,
            })
            .collect(),
    )
}

/// The keys JSON-RPC and a tool call are read by.
const KEYS: &[&str] = &["jsonrpc", "id", "method", "params", "name"];

/// Whether a message (or a batch's), or its params, has a key another
/// decoder could take for one this reading uses: two keys one key to a
/// decoder that ignores case (Unicode's simple folding, as Go's
/// `encoding/json` does: `paramſ` is `params` there), or one of [`KEYS`]
/// spelled otherwise, or so once cut at a NUL (a decoder keeping keys as
/// C strings). Lone surrogates and bytes that are not UTF-8 never get
/// here: serde refuses them.
fn ambiguous_keys(v: &serde_json::Value) -> bool {
    let object = |m: &serde_json::Map<String, serde_json::Value>| {
        let mut seen = std::collections::HashSet::new();
        m.keys().any(|k| {
            let mut readings = vec![keys::fold(k)];
            if let Some(cut) = keys::cut_at_nul(k) {
                readings.push(keys::fold(cut));
            }
            readings.into_iter().any(|f| {
                let another = KEYS.iter().any(|w| k != w && f == *w);
                another || !seen.insert(f)
            })
        })
    };
    let message = |m: &serde_json::Value| {
        m.as_object().is_some_and(|o| {
            object(o)
                || o.get("params")
                    .and_then(serde_json::Value::as_object)
                    .is_some_and(object)
        })
    };
    match v {
        serde_json::Value::Array(batch) => batch.iter().any(message),
        other => message(other),
    }
}

/// A body as JSON-RPC: one message or a batch. Derived, so that a key
/// given twice (`"method"` twice, which parsers read as the first or the
/// last) is an error, not a guess.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Messages {
    One(Message),
    Batch(Vec<Message>),
}

#[derive(serde::Deserialize)]
struct Message {
    method: String,
    params: Option<Params>,
}

/// Named parameters (a tool call's `name` among them) or positional ones.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Params {
    Named { name: Option<serde_json::Value> },
    // Read only to tell an array from an object.
    Positional(#[allow(dead_code)] Vec<serde::de::IgnoredAny>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_of_a_batch_is_labelled_and_anything_else_is_unreadable() {
        assert_eq!(
            labels(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Some(vec!["tools/list".into()])
        );
        assert_eq!(
            labels(br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{}}},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#),
            Some(vec!["tools/call:search".into(), "notifications/initialized".into()])
        );
        for bad in [
            &b"[]"[..],
            b"{}",
            b"not json",
            br#"[{"method":"a"},{"id":1}]"#,
            br#"{"method":3}"#,
        ] {
            assert_eq!(labels(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        // A key given twice is read as the first by some parsers and the
        // last by others: unreadable.
        assert_eq!(
            labels(br#"{"method":"tools/list","method":"tools/call"}"#),
            None
        );
        assert_eq!(
            labels(br#"{"method":"tools/call","params":{"name":"a","name":"b"}}"#),
            None
        );
    }

    #[test]
    fn keys_another_reader_could_take_in_another_case_make_a_body_unreadable() {
        for body in [
            &br#"{"method":"tools/list","METHOD":"tools/call"}"#[..],
            br#"{"Method":"tools/call"}"#,
            br#"{"method":"tools/call","params":{"name":"search","Name":"delete_repo"}}"#,
            br#"{"method":"tools/call","params":{"NAME":"delete_repo"}}"#,
            br#"[{"method":"tools/list"},{"method":"tools/call","Params":{"name":"x"}}]"#,
            br#"{"method":"tools/list","id":1,"ID":2}"#,
        ] {
            assert_eq!(labels(body), None, "{}", String::from_utf8_lossy(body));
        }
        // Other keys in any case are the server's business.
        assert_eq!(
            labels(br#"{"method":"tools/call","params":{"name":"search","Arguments":{"Q":1}}}"#),
            Some(vec!["tools/call:search".to_string()])
        );
    }

    #[test]
    fn keys_a_decoder_folds_or_cuts_to_a_read_key_make_a_body_unreadable() {
        // Go's encoding/json matches a key by Unicode simple folding, the
        // last match winning: `paramſ` (U+017F) is `params` there, and
        // with it the tool actually called. Every letter that folds to an
        // ASCII one (`ſ` s, `K` k, `ı` and `İ` i), at each level read, and
        // a key a C decoder cuts at NUL, is another reading of the call.
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{}},"param\u017f":{"name":"delete_repo","arguments":{}}}"#,
            r#"{"method":"tools/list","id":1,"\u0130D":2}"#,
            r#"{"method":"tools/call","params":{"name":"search","name\u0000":"delete_repo"}}"#,
            r#"{"method":"tools/list","method\u0000x":"tools/call"}"#,
            r#"{"method":"tools/list","\u0131d":1,"id":2}"#,
            r#"{"method":"tools/list","jsonrpc":"2.0","j\u017fonrpc":"1.0"}"#,
            r#"[{"method":"tools/list"},{"method":"tools/call","param\u017f":{"name":"x"}}]"#,
            r#"{"method":"tools/call","params":{"name":"search","NAME\u0000":"delete_repo"}}"#,
            r#"{"method":"tools/call","params":{"name":"search"},"\u212Aey":1,"key":2}"#,
        ] {
            assert_eq!(labels(body.as_bytes()), None, "{body}");
        }
        // A lone surrogate, which decoders replace, keep or refuse, is
        // refused by serde: unreadable too.
        for body in [
            r#"{"method":"tools/list","\ud800":1}"#,
            r#"{"method":"tools/call","params":{"name":"search\udc00"}}"#,
        ] {
            assert_eq!(labels(body.as_bytes()), None, "{body}");
        }
        // A letter that folds to no ASCII one is another key altogether.
        assert_eq!(
            labels(
                r#"{"method":"tools/call","params":{"name":"search","n\u00e4me":"x","p\u0430rams":1}}"#
                    .as_bytes()
            ),
            Some(vec!["tools/call:search".to_string()])
        );
    }
}

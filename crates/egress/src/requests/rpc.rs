//! The JSON-RPC methods a request's body calls (remote MCP servers speak
//! JSON-RPC over HTTP): what rules with `rpc` conditions are matched on.
//! The body is read only as far as [`MAX_RPC_BODY`]; one that is larger,
//! or that is not JSON-RPC, has no methods anyone can name, so a rule
//! that needs them allows nothing and denies (or asks about) everything.

/// How much of a body is read for its JSON-RPC methods: an MCP call is a
/// few hundred bytes; a larger one is decided as unreadable, never read
/// further (the proxy's memory budget pays for what is held).
pub const MAX_RPC_BODY: usize = 64 * 1024;

/// The label of each JSON-RPC message in `body` (a message or a batch):
/// its `method`, followed by `:NAME` when its `params` carry a string
/// `name` (`tools/call:search`, so that one tool can be named). `None`
/// when the body is not JSON-RPC (or a message names no method).
pub fn labels(body: &[u8]) -> Option<Vec<String>> {
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
}

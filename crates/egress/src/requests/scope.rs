//! What one ask is about: everything the request it holds was decided on
//! (its method, name, port and path, the values of the query keys the
//! asking rule looked at, and the JSON-RPC call of each message asked
//! about). A question shows it, an answer for the run covers exactly it,
//! and an "always" keeps the one request rule that states all of it: a
//! grant never lets through a request the asking rule would have asked
//! about with another tool, another value or another method. This module
//! only says what a scope is and writes its rule; the terminator asks.

use super::Request;
use warden_policy::requests::{literal_path, QueryCondition, RequestAction, RequestRule};

/// The request an ask was about, as an answer covers it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AskScope {
    pub method: String,
    pub name: String,
    pub port: u16,
    /// The normalised path (what the upstream gets).
    pub path: String,
    /// Each `(key, value)` of the query, under every way a server may
    /// read it, whose key may be read as one an asking rule's condition
    /// names (a key without `=` has the value ""): sorted, each once.
    pub query: Vec<(String, String)>,
    /// The label (`tools/call:search`) of each JSON-RPC message asked
    /// about: sorted, each once.
    pub rpc: Vec<String>,
    /// The body was to be read for its JSON-RPC calls and could not be:
    /// nobody can say what it calls, so no answer covers another.
    pub unread_body: bool,
    /// The body gives a parameter whose key may be read as one an asking
    /// rule's condition names, or may give any (it could not be read):
    /// the scope states only the query, so no answer covers another
    /// request (whose body may give another value).
    pub body_params: bool,
}

impl AskScope {
    /// The scope of `req`, whose messages `asked` (each label, `None` for
    /// a request decided whole, and the ask rule that held it) an ask
    /// rule holds; `queries` are its query's readings.
    pub(super) fn of(
        req: &Request<'_>,
        asked: &[(Option<&str>, &RequestRule)],
        queries: &[Vec<(String, Option<String>)>],
    ) -> AskScope {
        let mut rpc: Vec<String> = asked
            .iter()
            .filter_map(|(label, _)| label.map(str::to_string))
            .collect();
        rpc.sort();
        rpc.dedup();
        let looked_at: Vec<String> = asked
            .iter()
            .flat_map(|(_, r)| &r.query)
            .map(|c| folded(&c.key))
            .collect();
        let mut query: Vec<(String, String)> = queries
            .iter()
            .flatten()
            .filter(|(k, _)| {
                let k = folded(k);
                looked_at.iter().any(|c| k.contains(c.as_str()))
            })
            .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()))
            .collect();
        query.sort();
        query.dedup();
        let body_params = match req.params {
            super::Params::None => false,
            super::Params::Unknown => !looked_at.is_empty(),
            super::Params::Read(readings) => readings.iter().flatten().any(|(k, _)| {
                let k = folded(k);
                looked_at.iter().any(|c| k.contains(c.as_str()))
            }),
        };
        AskScope {
            method: req.method.to_string(),
            name: req.name.to_string(),
            port: req.port,
            path: req.path.to_string(),
            query,
            rpc,
            unread_body: matches!(req.rpc, super::Rpc::Unreadable)
                && asked.iter().any(|(_, r)| !r.rpc.is_empty()),
            body_params,
        }
    }

    /// `req` as the rule that would allow it alone states it, when no
    /// rule decides the messages `labels` (or the request, when it has
    /// none): their JSON-RPC calls, and no query value (no rule looked
    /// at one).
    pub(super) fn unruled(req: &Request<'_>, labels: &[&str]) -> AskScope {
        let mut rpc: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        rpc.sort();
        rpc.dedup();
        AskScope {
            method: req.method.to_string(),
            name: req.name.to_string(),
            port: req.port,
            path: req.path.to_string(),
            query: Vec::new(),
            rpc,
            unread_body: matches!(req.rpc, super::Rpc::Unreadable),
            body_params: false,
        }
    }

    /// Whether an answer may cover more than this one request: the
    /// request has one method (not "any method an unread body may
    /// name"), a body that was read whenever a rule needed it, and no
    /// parameter in its body that an asking rule's condition looks at.
    pub fn repeatable(&self) -> bool {
        is_token(&self.method) && !self.unread_body && !self.body_params
    }

    /// The request rule that allows this scope and nothing wider: the
    /// method, name and path as literals, a condition `key=value` for
    /// each query pair, `rpc:` with each label. `None` when it cannot be
    /// written so (a method or path that is not one request's, a query
    /// key read with two values, a key, value or label with a character
    /// the rule syntax reads), checked by reading the rule back.
    pub fn entry(&self) -> Option<String> {
        if !self.repeatable() {
            return None;
        }
        let mut entry = format!(
            "{} {}{}",
            self.method,
            crate::decision::domain_entry(&self.name, self.port),
            literal_path(&self.path)
        );
        let keys: Vec<&str> = self.query.iter().map(|(k, _)| k.as_str()).collect();
        let one_value_each = keys.windows(2).all(|w| w[0] != w[1]);
        let plain = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || PLAIN.contains(&b))
        };
        if !self.query.is_empty() {
            if !one_value_each
                || self
                    .query
                    .iter()
                    .any(|(k, v)| k.is_empty() || !plain(k) || !plain(v))
            {
                return None;
            }
            let conditions: Vec<String> =
                self.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
            entry.push('?');
            entry.push_str(&conditions.join("&"));
        }
        if !self.rpc.is_empty() {
            let label_ok = |l: &String| {
                !l.is_empty()
                    && !l
                        .chars()
                        .any(|c| c.is_whitespace() || c.is_control() || ",*\\".contains(c))
            };
            if !self.rpc.iter().all(label_ok) {
                return None;
            }
            entry.push_str(" rpc:");
            entry.push_str(&self.rpc.join(","));
        }
        let rule = RequestRule::parse(RequestAction::Allow, &entry).ok()?;
        self.is(&rule).then_some(entry)
    }

    /// Whether `rule` states exactly this scope: one method, this name
    /// and port, this path as a literal, a condition with its value for
    /// each query pair and no other, each label and no other.
    pub fn is(&self, rule: &RequestRule) -> bool {
        let mut conditions: Vec<(String, String)> = Vec::with_capacity(rule.query.len());
        for QueryCondition { key, value } in &rule.query {
            let Some(v) = value else {
                return false;
            };
            conditions.push((key.clone(), v.clone()));
        }
        conditions.sort();
        let mut rpc = rule.rpc.clone();
        rpc.sort();
        self.repeatable()
            && rule.is_literal()
            && rule.methods == [self.method.as_str()]
            && rule.domain.name == self.name
            && rule.domain.allows_port(self.port)
            && rule.paths == [literal_path(&self.path)]
            && conditions == self.query
            && rpc == self.rpc
    }
}

/// Bytes besides letters and digits that a grant's query key or value
/// may hold: none of them is rule syntax (`&`, `=`, `*`, `?`, `#`, `\`,
/// space) or read another way by a server (`%`, `+`, `;`).
const PLAIN: &[u8] = b"-._~:@!$'()/[]";

/// HTTP methods are tokens: what a grant's method must be.
fn is_token(m: &str) -> bool {
    !m.is_empty()
        && m.bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
}

/// `key` as loosely as any server may read it: each character case-folded
/// (upper then lower case, so `ſ` is `s` and the Kelvin sign `k`), and
/// only letters and digits kept (`debug[]`, ` debug` and `de.bug` are
/// all `debug`). A query key is in a scope when this reading of it holds
/// this reading of a condition's key: wider than any server, so a grant
/// is never keyed on less than what a server may take for the key.
fn folded(key: &str) -> String {
    key.chars()
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_alphanumeric())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::{Params, Rpc};

    fn rule(s: &str) -> RequestRule {
        RequestRule::parse(RequestAction::Ask, s).unwrap()
    }

    fn scope(
        path: &str,
        query: Option<&str>,
        rpc: &Rpc,
        asked: &[(Option<&str>, &str)],
    ) -> AskScope {
        let rules: Vec<RequestRule> = asked.iter().map(|(_, r)| rule(r)).collect();
        let asked: Vec<(Option<&str>, &RequestRule)> = asked
            .iter()
            .zip(&rules)
            .map(|((l, _), r)| (*l, r))
            .collect();
        let req = Request {
            name: "mcp.test",
            port: 18443,
            method: "POST",
            path,
            query,
            rpc,
            params: &Params::None,
        };
        AskScope::of(
            &req,
            &asked,
            &super::super::path::query_readings(query.unwrap_or("")),
        )
    }

    /// The rule an "always" keeps states the tool and the values asked
    /// about, and is read back by the same parser as that very scope.
    #[test]
    fn a_grant_states_the_json_rpc_call_and_query_values_it_was_asked_about() {
        let rpc = Rpc::Labels(vec!["tools/call:search".into()]);
        let s = scope(
            "/mcp",
            None,
            &rpc,
            &[(
                Some("tools/call:search"),
                "POST mcp.test:18443/mcp rpc:tools/call:*",
            )],
        );
        let entry = s.entry().unwrap();
        assert_eq!(entry, "POST mcp.test:18443/mcp rpc:tools/call:search");
        assert!(s.is(&RequestRule::parse(RequestAction::Allow, &entry).unwrap()));
        let s = scope(
            "/ok",
            Some("action=read&page=2"),
            &Rpc::NoBody,
            &[(None, "POST mcp.test:18443/ok?action=*")],
        );
        assert_eq!(
            s.entry().as_deref(),
            Some("POST mcp.test:18443/ok?action=read")
        );
    }

    /// Nothing broader than the request is ever written: a key read with
    /// two values, a key spelled to be read as the condition's, a label
    /// or value with rule syntax, an unread body, any method.
    #[test]
    fn a_scope_that_no_literal_rule_states_keeps_no_grant() {
        let ask = "POST mcp.test:18443/ok?action=*";
        for q in [
            "action=read&action=delete",
            "action=a+b",
            "action=a*",
            "action=a%26b",
            "action=r;x",
        ] {
            let s = scope("/ok", Some(q), &Rpc::NoBody, &[(None, ask)]);
            assert_eq!(s.entry(), None, "{q}");
        }
        let s = scope(
            "/ok",
            Some("action=read&Action[]=delete"),
            &Rpc::NoBody,
            &[(None, ask)],
        );
        assert!(s.query.iter().any(|(_, v)| v == "delete"), "{s:?}");
        for label in [
            "tools/call:a*",
            "tools/call:a,tools/call:b",
            "tools/call:a b",
        ] {
            let rpc = Rpc::Labels(vec![label.into()]);
            let s = scope(
                "/mcp",
                None,
                &rpc,
                &[(Some(label), "POST mcp.test:18443/mcp rpc:tools/call:*")],
            );
            assert_eq!(s.entry(), None, "{label}");
        }
        let s = scope(
            "/mcp",
            None,
            &Rpc::Unreadable,
            &[(None, "POST mcp.test:18443/mcp rpc:tools/call:*")],
        );
        assert!(!s.repeatable() && s.entry().is_none(), "{s:?}");
    }

    /// A grant is the scope itself: another tool, value or method, or a
    /// grant without the asked call's condition, is not it.
    #[test]
    fn a_grant_is_only_the_scope_it_states() {
        let rpc = Rpc::Labels(vec!["tools/call:delete_repo".into()]);
        let s = scope(
            "/mcp",
            None,
            &rpc,
            &[(
                Some("tools/call:delete_repo"),
                "POST mcp.test:18443/mcp rpc:tools/call:*",
            )],
        );
        for grant in [
            "POST mcp.test:18443/mcp",
            "POST mcp.test:18443/mcp rpc:tools/call:search",
            "POST mcp.test:18443/mcp rpc:tools/call:search,tools/call:delete_repo",
            "POST mcp.test:18443/mcp rpc:tools/call:*",
            "PUT mcp.test:18443/mcp rpc:tools/call:delete_repo",
        ] {
            let r = RequestRule::parse(RequestAction::Allow, grant).unwrap();
            assert!(!s.is(&r), "{grant}");
        }
        let r = RequestRule::parse(
            RequestAction::Allow,
            "POST mcp.test:18443/mcp rpc:tools/call:delete_repo",
        )
        .unwrap();
        assert!(s.is(&r));
    }
}

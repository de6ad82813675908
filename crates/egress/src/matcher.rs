//! The allowlist as a trie of labels, read from the top-level domain down,
//! so that a lookup costs one hash probe per label of the name asked about,
//! whatever the size of the list (100,000 names included).

use std::collections::HashMap;
use warden_policy::{normalize_name, DomainRule};

/// Which rule allowed a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match<'a> {
    pub rule: &'a DomainRule,
}

#[derive(Debug, Default)]
struct Node {
    children: HashMap<Box<str>, Node>,
    /// Rules for exactly this name.
    exact: Vec<usize>,
    /// Rules for this name and everything below it.
    subtree: Vec<usize>,
}

/// A compiled allowlist.
#[derive(Debug, Default)]
pub struct Matcher {
    rules: Vec<DomainRule>,
    root: Node,
}

impl Matcher {
    pub fn new(rules: Vec<DomainRule>) -> Matcher {
        let mut root = Node::default();
        for (i, rule) in rules.iter().enumerate() {
            let mut node = &mut root;
            for label in rule.name.rsplit('.') {
                node = node.children.entry(label.into()).or_default();
            }
            if rule.subdomains {
                node.subtree.push(i);
            } else {
                node.exact.push(i);
            }
        }
        Matcher { rules, root }
    }

    pub fn rules(&self) -> &[DomainRule] {
        &self.rules
    }

    /// The most specific rule that allows `name` on `port`, if any. `name`
    /// is compared case-insensitively and without a trailing dot; a name
    /// that is not a valid host name matches nothing.
    pub fn allows(&self, name: &str, port: u16) -> Option<Match<'_>> {
        self.lookup(name, |r| r.allows_port(port))
    }

    /// Whether a rule of the owner's (not a caller's, see
    /// [`DomainRule::caller`]) allows `name` on `port`: only then do the
    /// owner's pinned addresses and local ranges serve the connection.
    /// Asked only when the rule that matched is a caller's.
    pub fn owner_allows(&self, name: &str, port: u16) -> bool {
        self.lookup(name, |r| !r.caller && r.allows_port(port))
            .is_some()
    }

    /// Whether any rule, for any name, allows `port`: when none does, no
    /// connection on that port can be allowed, whatever name it carries.
    pub fn any_allows_port(&self, port: u16) -> bool {
        self.rules.iter().any(|r| r.allows_port(port))
    }

    /// The most specific rule that allows `name` on any port (for DNS: a
    /// name is resolved when some rule could allow a connection to it).
    pub fn allows_name(&self, name: &str) -> Option<Match<'_>> {
        self.lookup(name, |_| true)
    }

    fn lookup(&self, name: &str, fits: impl Fn(&DomainRule) -> bool) -> Option<Match<'_>> {
        let name = normalize_name(name).ok()?;
        let labels: Vec<&str> = name.rsplit('.').collect();
        let mut node = &self.root;
        let mut best: Option<usize> = None;
        for (depth, label) in labels.iter().enumerate() {
            let Some(next) = node.children.get(*label) else {
                break;
            };
            node = next;
            if let Some(i) = node.subtree.iter().copied().find(|i| fits(&self.rules[*i])) {
                best = Some(i);
            }
            if depth + 1 == labels.len() {
                if let Some(i) = node.exact.iter().copied().find(|i| fits(&self.rules[*i])) {
                    best = Some(i);
                }
            }
        }
        best.map(|i| Match {
            rule: &self.rules[i],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(entries: &[&str]) -> Matcher {
        Matcher::new(
            entries
                .iter()
                .map(|e| DomainRule::parse(e).unwrap())
                .collect(),
        )
    }

    #[test]
    fn exact_names_match_only_themselves() {
        let m = matcher(&["example.com"]);
        assert!(m.allows("example.com", 443).is_some());
        assert!(m.allows("EXAMPLE.com.", 80).is_some());
        assert!(m.allows("api.example.com", 443).is_none());
        assert!(m.allows("example.com.evil.net", 443).is_none());
        assert!(m.allows("notexample.com", 443).is_none());
        assert!(m.allows("com", 443).is_none());
    }

    #[test]
    fn subdomain_rules_cover_the_name_and_everything_below() {
        let m = matcher(&[".example.com", "*.other.org"]);
        for name in [
            "example.com",
            "a.example.com",
            "a.b.c.example.com",
            "x.other.org",
            "other.org",
        ] {
            assert!(m.allows(name, 443).is_some(), "{name}");
        }
        assert!(m.allows("badexample.com", 443).is_none());
        assert!(m.allows("example.com.attacker.io", 443).is_none());
    }

    #[test]
    fn ports_are_part_of_the_rule() {
        let m = matcher(&["git.example.com:22", "example.com"]);
        assert!(m.allows("git.example.com", 22).is_some());
        assert!(m.allows("git.example.com", 443).is_none());
        assert!(m.allows("example.com", 22).is_none());
        assert!(m.allows("example.com", 8080).is_none());
        assert_eq!(
            m.allows_name("git.example.com").unwrap().rule.source,
            "git.example.com:22"
        );
    }

    #[test]
    fn the_most_specific_rule_is_reported() {
        let m = matcher(&[".example.com", "api.example.com"]);
        assert_eq!(
            m.allows("api.example.com", 443).unwrap().rule.source,
            "api.example.com"
        );
        assert_eq!(
            m.allows("www.example.com", 443).unwrap().rule.source,
            ".example.com"
        );
    }

    #[test]
    fn invalid_names_match_nothing() {
        let m = matcher(&[".example.com"]);
        for name in [
            "",
            ".",
            "a..example.com",
            "exa mple.com",
            "*.example.com",
            "\u{0}example.com",
        ] {
            assert!(m.allows(name, 443).is_none(), "{name:?}");
        }
    }

    #[test]
    fn a_hundred_thousand_names_are_matched_by_lookup_not_scan() {
        let rules: Vec<DomainRule> = (0..100_000)
            .map(|i| DomainRule::parse(&format!(".host{i}.example{}.com", i % 100)).unwrap())
            .collect();
        let m = Matcher::new(rules);
        assert!(m.allows("www.host99999.example99.com", 443).is_some());
        assert!(m.allows("host5.example5.com", 443).is_some());
        assert!(m.allows("host5.example6.com", 443).is_none());
        // The work of a lookup is bounded by the labels of the name: the
        // deepest path in the trie is as long as the longest rule.
        fn depth(n: &Node) -> usize {
            1 + n.children.values().map(depth).max().unwrap_or(0)
        }
        assert_eq!(depth(&m.root), 4);
    }
}

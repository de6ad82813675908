//! The rule table made runnable, and only as much of it as a text needs.
//!
//! A short text (a command line, an event's detail, a request's head) is
//! judged first by its literals: a rule whose literals
//! ([`Rule::needs`](crate::Rule)) it holds none of cannot match it, and is
//! neither compiled nor run. A long text (a file's piece, a body) goes
//! through a set of every rule in one pass, as it always did: there one
//! pass beats a pass per candidate rule, and the set's compilation is paid
//! once by the long-lived process that scans. Either way a rule's own
//! expression is compiled at the first text that needs it, once per
//! process.
//!
//! Compiling the whole table at once cost a few milliseconds in a release
//! build (its bounded repetitions, `{36,251}` and the like, become
//! hundreds of automaton states), and every `warden run` paid it at its
//! first recorded command line, which almost never holds a credential's
//! literal.

use crate::rules::RULES;
use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use regex::bytes::{Regex, RegexSet};
use std::sync::{LazyLock, OnceLock};

/// From this length on a text is judged by the set of every rule rather
/// than by its literals.
pub(crate) const SET_FROM: usize = 16 << 10;

/// A set of rules, by index in [`RULES`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Rules(u64);

// One bit per rule.
const _: () = assert!(!RULES.is_empty() && RULES.len() <= 64);

impl Rules {
    const ALL: Rules = Rules(u64::MAX >> (64 - RULES.len()));

    pub(crate) fn contains(self, rule: usize) -> bool {
        self.0 & (1 << rule) != 0
    }
}

/// The rules that could match `bytes`.
pub(crate) fn rules_for(bytes: &[u8]) -> Rules {
    if bytes.len() < SET_FROM {
        candidates(bytes)
    } else {
        matching(bytes)
    }
}

/// Every rule's literals in one automaton; a literal's index gives its
/// rule through `rule_of`.
struct Literals {
    automaton: AhoCorasick,
    rule_of: Vec<usize>,
}

static LITERALS: LazyLock<Option<Literals>> = LazyLock::new(|| {
    let (rule_of, literals): (Vec<usize>, Vec<&str>) = RULES
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.needs.iter().map(move |n| (i, *n)))
        .unzip();
    let automaton = AhoCorasick::builder()
        .ascii_case_insensitive(true)
        // Every literal where it stands (overlapping search), so that one
        // rule's literal never hides another's.
        .match_kind(MatchKind::Standard)
        // The cheapest to build (tens of microseconds, against about twice
        // that for a DFA), and short texts are what it searches.
        .kind(Some(AhoCorasickKind::ContiguousNFA))
        .build(literals)
        .ok()?;
    Some(Literals { automaton, rule_of })
});

/// The rules whose literals `bytes` holds, ignoring ASCII case. Should
/// the automaton not build, every rule is a candidate (slower, never a
/// credential let through).
fn candidates(bytes: &[u8]) -> Rules {
    let Some(lit) = LITERALS.as_ref() else {
        return Rules::ALL;
    };
    let mut found = 0;
    for m in lit.automaton.find_overlapping_iter(bytes) {
        found |= 1 << lit.rule_of[m.pattern().as_usize()];
        if found == Rules::ALL.0 {
            break;
        }
    }
    Rules(found)
}

static SET: LazyLock<Option<RegexSet>> =
    LazyLock::new(|| RegexSet::new(RULES.iter().map(|r| r.pattern)).ok());

/// The rules that match `bytes`, by the set of them all. Should the set
/// not compile, every rule is tried (slower, never a credential let
/// through).
fn matching(bytes: &[u8]) -> Rules {
    let Some(set) = SET.as_ref() else {
        return Rules::ALL;
    };
    Rules(set.matches(bytes).iter().fold(0, |found, i| found | 1 << i))
}

static EXPRESSIONS: [OnceLock<Option<Regex>>; RULES.len()] =
    [const { OnceLock::new() }; RULES.len()];

/// Rule `rule`'s expression, compiled at its first use. `None` only if
/// the pattern does not compile, which the tests rule out for the table.
pub(crate) fn expression(rule: usize) -> Option<&'static Regex> {
    EXPRESSIONS
        .get(rule)?
        .get_or_init(|| Regex::new(RULES.get(rule)?.pattern).ok())
        .as_ref()
}

#[cfg(test)]
mod tests {
    //! The prefilter is only sound if every match of a rule holds one of
    //! its literals: each rule's pattern is parsed (as the regex crate
    //! parses it) and walked to show that, so a pattern changed without
    //! its literals fails here rather than letting a credential through.

    use super::*;
    use regex_syntax::hir::{Class, Hir, HirKind};
    use std::collections::BTreeSet;

    /// Past this many strings a sub-expression is treated as open.
    const MAX_STRINGS: usize = 256;

    type Strings = BTreeSet<Vec<u8>>;

    /// Every string `hir` can match, lowercased, when they are few.
    fn exact(hir: &Hir) -> Option<Strings> {
        match hir.kind() {
            HirKind::Empty | HirKind::Look(_) => Some([Vec::new()].into()),
            HirKind::Literal(l) => Some([l.0.to_ascii_lowercase()].into()),
            HirKind::Class(Class::Bytes(c)) => {
                let bytes: Vec<u8> = c.iter().flat_map(|r| r.start()..=r.end()).collect();
                (bytes.len() <= 16)
                    .then(|| bytes.iter().map(|b| vec![b.to_ascii_lowercase()]).collect())
            }
            HirKind::Class(Class::Unicode(c)) => {
                let chars: Vec<char> = c.iter().flat_map(|r| r.start()..=r.end()).collect();
                (chars.len() <= 16).then(|| {
                    chars
                        .iter()
                        .map(|ch| ch.to_string().to_ascii_lowercase().into_bytes())
                        .collect()
                })
            }
            HirKind::Capture(c) => exact(&c.sub),
            HirKind::Repetition(r) => {
                let sub = exact(&r.sub)?;
                match (r.min, r.max) {
                    (0, Some(1)) => Some(sub.into_iter().chain([Vec::new()]).collect()),
                    (min, Some(max)) if min == max && min <= 8 => {
                        (0..min).try_fold([Vec::new()].into(), |acc, _| product(&acc, &sub))
                    }
                    _ => None,
                }
            }
            HirKind::Concat(hs) => hs
                .iter()
                .try_fold([Vec::new()].into(), |acc, h| product(&acc, &exact(h)?)),
            HirKind::Alternation(hs) => {
                let mut all = Strings::new();
                for h in hs {
                    all.extend(exact(h)?);
                }
                (all.len() <= MAX_STRINGS).then_some(all)
            }
        }
    }

    fn product(a: &Strings, b: &Strings) -> Option<Strings> {
        if a.len() * b.len() > MAX_STRINGS {
            return None;
        }
        Some(
            a.iter()
                .flat_map(|x| b.iter().map(move |y| [x.as_slice(), y].concat()))
                .collect(),
        )
    }

    fn holds_one(s: &[u8], needs: &[&str]) -> bool {
        needs.iter().any(|n| {
            let n = n.to_ascii_lowercase();
            s.windows(n.len()).any(|w| w == n.as_bytes())
        })
    }

    fn all_hold_one(strings: &Strings, needs: &[&str]) -> bool {
        !strings.is_empty() && strings.iter().all(|s| holds_one(s, needs))
    }

    /// Whether every match of `hir` holds one of `needs`.
    fn covered(hir: &Hir, needs: &[&str]) -> bool {
        if exact(hir).is_some_and(|s| all_hold_one(&s, needs)) {
            return true;
        }
        match hir.kind() {
            HirKind::Capture(c) => covered(&c.sub, needs),
            HirKind::Repetition(r) => r.min >= 1 && covered(&r.sub, needs),
            HirKind::Alternation(hs) => hs.iter().all(|h| covered(h, needs)),
            HirKind::Concat(hs) => {
                // A match holds a match of each part, and of each run of
                // consecutive parts whose strings are few, side by side.
                hs.iter().any(|h| covered(h, needs))
                    || (0..hs.len()).any(|i| {
                        let mut run: Option<Strings> = Some([Vec::new()].into());
                        hs[i..].iter().any(|h| {
                            run = run.take().and_then(|r| product(&r, &exact(h)?));
                            run.as_ref().is_some_and(|r| all_hold_one(r, needs))
                        })
                    })
            }
            _ => false,
        }
    }

    fn parse(pattern: &str) -> Hir {
        regex_syntax::ParserBuilder::new()
            .utf8(false)
            .build()
            .parse(pattern)
            .unwrap_or_else(|e| panic!("{pattern}: {e}"))
    }

    #[test]
    fn every_match_of_every_rule_holds_one_of_its_literals() {
        for rule in RULES {
            assert!(
                !rule.needs.is_empty() && rule.needs.iter().all(|n| !n.is_empty()),
                "{}: no empty literal",
                rule.id
            );
            // Written as the walk compares them.
            assert!(
                rule.needs.iter().all(|n| *n == n.to_ascii_lowercase()),
                "{}: literals in lower case",
                rule.id
            );
            assert!(
                covered(&parse(rule.pattern), rule.needs),
                "{}: a match can hold none of {:?}",
                rule.id,
                rule.needs
            );
        }
    }

    #[test]
    fn the_literal_proof_rejects_literals_a_match_can_lack() {
        // The walk above is no formality: for each rule, a literal its
        // matches need not hold, or all but one of its literals, fail it.
        for rule in RULES {
            let hir = parse(rule.pattern);
            assert!(!covered(&hir, &["zq#"]), "{}", rule.id);
            if rule.needs.len() > 1 {
                assert!(!covered(&hir, &rule.needs[1..]), "{}", rule.id);
            }
        }
        assert!(!covered(&parse(r"(?-u)\bx(?:key)?y"), &["key"]));
        assert!(!covered(&parse(r"(?-u)(?:token|passwd)="), &["token"]));
        assert!(covered(
            &parse(r"(?-u)(?i)api[_-]?key"),
            &["API_KEY", "api-key", "apikey"]
        ));
    }

    #[test]
    fn every_rule_compiles() {
        for (i, rule) in RULES.iter().enumerate() {
            assert!(expression(i).is_some(), "{} compiles", rule.id);
        }
        assert!(SET.is_some(), "the set of every rule compiles");
        assert!(LITERALS.is_some(), "the literals' automaton builds");
    }

    fn index(id: &str) -> usize {
        RULES.iter().position(|r| r.id == id).unwrap_or(usize::MAX)
    }

    #[test]
    fn ordinary_command_lines_hold_no_rules_literal() {
        // What `warden run` records for these compiles no expression.
        for line in [
            "true",
            "npm install --no-audit",
            "cargo build --release -p warden-cli",
            "python3 -m pytest -q tests/",
            "sh -c make test",
            "git commit -m fix",
        ] {
            assert_eq!(candidates(line.as_bytes()), Rules(0), "{line}");
        }
        let bearer = ["Authorization: Bear", "er abc"].concat();
        assert!(candidates(bearer.as_bytes()).contains(index("authorization")));
        // Ignoring case: a superset of what the (case-sensitive) rule matches.
        assert!(candidates(b"xx aKiA").contains(index("aws-access-key-id")));
    }

    #[test]
    fn a_value_is_found_alike_in_a_short_text_and_in_a_long_one() {
        // Short texts go by their literals, long ones by the set.
        let values = [
            ["Authorization: Bearer ", "q8Xz2LmN4vB7cK1pR9sT3wY6"].concat(),
            ["AKIA", "IOSFODNN7EXAMPLE"].concat(),
            ["DB_PASSWORD=", "Xk29fLq0zPw7"].concat(),
            ["https://alice:", "s3cr3tPass@git.example.com/r.git"].concat(),
            ["ghp_", "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"].concat(),
        ];
        for v in values {
            let short = format!("x {v} y");
            let long = format!("{}{short}", ".\n".repeat(SET_FROM));
            let (a, b) = (crate::scan(short.as_bytes()), crate::scan(long.as_bytes()));
            assert_eq!(a.len(), 1, "{v}");
            assert_eq!(b.len(), 1, "{v}");
            assert_eq!((&a[0].rule, &a[0].hash), (&b[0].rule, &b[0].hash), "{v}");
        }
    }
}

//! The profile file's text as a person writes it: YAML parsed with the
//! line and column of every value (its values are then read by the field
//! table, in [`crate::read`]), every problem of its YAML said at its place
//! in warden's words, and presets (a name's group of domains). Nothing here
//! declares an option, merges or resolves.

use serde::de::Deserializer;
use serde::Deserialize;
use std::fmt;

use crate::fields::FIELDS;

/// A position in a file, 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A value together with where it was written.
#[derive(Debug, Clone)]
pub struct At<T> {
    pub value: T,
    pub pos: Pos,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for At<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = serde_saphyr::Spanned::<T>::deserialize(d)?;
        Ok(At {
            value: s.value,
            pos: Pos {
                line: s.referenced.line(),
                column: s.referenced.column(),
            },
        })
    }
}

/// Map keys compared by their text alone, so that a map's keys stay unique
/// while each keeps its position.
impl<T: PartialEq> PartialEq for At<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}
impl<T: Eq> Eq for At<T> {}
impl<T: Ord> PartialOrd for At<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: Ord> Ord for At<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.value.cmp(&other.value)
    }
}

/// How the workspace is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceMode {
    /// The directory itself, read-write.
    Direct,
    /// A copy-on-write layer over the directory: changes are kept for `warden diff` and `warden commit`.
    Overlay,
}

/// A preset: a named group of domains, and the request rules for them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresetFile {
    /// What the group is for.
    pub description: Option<At<String>>,
    /// The group's names, written as in `egress.domains`.
    #[serde(default)]
    pub domains: Vec<At<String>>,
    /// Request rules, written as in `egress.allow_requests`.
    #[serde(default)]
    pub allow_requests: Vec<At<String>>,
    /// Written as in `egress.deny_requests`.
    #[serde(default)]
    pub deny_requests: Vec<At<String>>,
    /// Written as in `egress.ask_requests`.
    #[serde(default)]
    pub ask_requests: Vec<At<String>>,
}

/// The JSON Schema of profile files, made from the field table (see
/// [`crate::schema`]).
pub fn profile_schema() -> String {
    crate::schema::profile_schema()
}

fn deref_schema(schema: &serde_json::Value, mut ptr: String) -> String {
    // Bounded: a schema of refs that point at each other is not followed forever.
    for _ in 0..16 {
        let Some(node) = schema.pointer(&ptr) else {
            break;
        };
        if let Some(target) = node.get("$ref").and_then(|r| r.as_str()) {
            ptr = target.trim_start_matches('#').to_string();
        } else if let Some(i) = node
            .get("anyOf")
            .and_then(|a| a.as_array())
            .and_then(|alts| {
                alts.iter().position(|a| {
                    a.get("$ref").is_some()
                        || a.get("properties").is_some()
                        || a.get("additionalProperties").is_some_and(|v| v.is_object())
                })
            })
        {
            ptr = format!("{ptr}/anyOf/{i}");
        } else {
            break;
        }
    }
    ptr
}

/// Every key a profile can hold, by the schema: the properties of each
/// section, and of a map of objects (`secrets`) the map itself and, below
/// `*`, the objects' properties.
pub fn schema_keys(schema: &serde_json::Value) -> Vec<String> {
    fn walk(schema: &serde_json::Value, ptr: String, prefix: &str, out: &mut Vec<String>) {
        let object = deref_schema(schema, ptr);
        let Some(props) = schema
            .pointer(&format!("{object}/properties"))
            .and_then(|p| p.as_object())
        else {
            return;
        };
        let has_properties = |p: &str| schema.pointer(&format!("{p}/properties")).is_some();
        for name in props.keys() {
            let key = format!("{prefix}{name}");
            let here = format!("{object}/properties/{name}");
            let target = deref_schema(schema, here.clone());
            let items = deref_schema(schema, format!("{target}/additionalProperties"));
            if has_properties(&target) {
                walk(schema, here, &format!("{key}."), out);
            } else if has_properties(&items) {
                out.push(key.clone());
                walk(schema, items, &format!("{key}.*."), out);
            } else {
                out.push(key);
            }
        }
    }
    let mut out = Vec::new();
    walk(schema, String::new(), "", &mut out);
    out
}

/// Why a file could not be read as a profile or preset: the message and
/// where in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct ParseError {
    pub pos: Pos,
    pub message: String,
}

/// Read a preset file's text.
pub fn parse_preset(text: &str) -> Result<PresetFile, ParseError> {
    parse(text)
}

fn parse<T: for<'de> Deserialize<'de> + Default>(text: &str) -> Result<T, ParseError> {
    if text.trim().is_empty() {
        return Ok(T::default());
    }
    serde_saphyr::from_str::<Option<T>>(text)
        .map(Option::unwrap_or_default)
        .map_err(|e| yaml_error(&e))
}

/// A YAML parser's error as a finding at its place.
pub(crate) fn yaml_error(e: &serde_saphyr::Error) -> ParseError {
    use serde_saphyr::MessageFormatter;
    let pos = e
        .location()
        .map(|l| Pos {
            line: l.line(),
            column: l.column(),
        })
        .unwrap_or(Pos { line: 1, column: 1 });
    let raw = serde_saphyr::DefaultMessageFormatter.format_message(e);
    let raw: String = raw.chars().filter(|c| !c.is_control()).collect();
    ParseError {
        pos,
        message: explain_serde_message(&raw),
    }
}

/// serde names an unknown key and the expected ones; turn that into a
/// sentence with the nearest known key.
fn explain_serde_message(raw: &str) -> String {
    if let Some(rest) = raw.strip_prefix("duplicate mapping key: ") {
        let key = rest.split(',').next().unwrap_or(rest).trim();
        return format!("`{key}` is given twice in this section; keep one");
    }
    for (said, ours) in [
        (
            "expected mapping start",
            "expected a section of `key: value` entries here",
        ),
        (
            "expected sequence start",
            "expected a list here, such as [a, b] or lines that start with `- `",
        ),
        ("expected string scalar", "expected text here"),
        ("invalid boolean", "expected true or false"),
    ] {
        if raw.starts_with(said) {
            return ours.to_string();
        }
    }
    if let Some(rest) = raw.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            let found = match found {
                "sequence" => "a list".to_string(),
                "map" => "a section".to_string(),
                "unit value" | "null" => "nothing".to_string(),
                other => other
                    .replace("string ", "the text ")
                    .replace("integer ", "the number "),
            };
            return format!("expected {expected}, not {found}");
        }
    }
    for (prefix, what) in [
        ("unknown field `", "unknown key"),
        ("unknown variant `", "unknown value"),
    ] {
        let Some(rest) = raw.strip_prefix(prefix) else {
            continue;
        };
        let Some((name, tail)) = rest.split_once('`') else {
            continue;
        };
        let expected: Vec<&str> = tail
            .trim_start_matches(',')
            .trim()
            .trim_start_matches("expected one of")
            .trim_start_matches("expected")
            .split(',')
            .map(|s| s.trim().trim_matches('`'))
            .filter(|s| !s.is_empty() && !s.starts_with("there are no"))
            .collect();
        let mut msg = format!("{what} `{name}`");
        let best = match what {
            "unknown key" => elsewhere(name),
            _ => None,
        }
        .or_else(|| suggest(name, expected.iter().copied()));
        if let Some(best) = best {
            msg.push_str(&format!("; did you mean `{best}`?"));
        }
        if !expected.is_empty() {
            msg.push_str(&format!(" (known: {})", expected.join(", ")));
        }
        return msg;
    }
    raw.to_string()
}

/// The full key of a field whose key ends in `name`, or whose flag `name`
/// spells (`allow_domain`, `tmp-size`): a key written in the wrong section,
/// or a flag written as a key.
pub(crate) fn elsewhere(name: &str) -> Option<&'static str> {
    let as_flag = format!("--{}", name.replace('_', "-"));
    FIELDS.iter().find_map(|i| {
        let key = i.profile_key?;
        (key.rsplit('.').next() == Some(name) || i.flag == Some(as_flag.as_str())).then_some(key)
    })
}

/// The closest of `candidates` to `word`, when it is close enough to be a
/// likely typo.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| {
            (
                strsim::damerau_levenshtein(word, c),
                strsim::jaro_winkler(word, c),
                c,
            )
        })
        .filter(|(dist, score, _)| *score >= 0.8 || (*dist <= 2 && word.len() > 2))
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)))
        .map(|(_, _, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finding of a profile's text, `line:column: message`.
    fn findings(text: &str) -> Vec<String> {
        crate::read::read_profile_text(text)
            .1
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn err(text: &str) -> String {
        findings(text).into_iter().next().unwrap_or_default()
    }

    #[test]
    fn every_shape_error_is_found_at_its_place_and_the_rest_of_the_file_is_kept() {
        let text = "name: x\nresources:\n  memory: 4G\n  memory: 8G\n  pids:\n    lots\n\
egress:\n  domains: [a.com]\n  bogus: 1\n  ask: maybe\n";
        let (read, errors) = crate::read::read_profile_text(text);
        let mut found: Vec<(u64, String)> = errors
            .iter()
            .map(|e| (e.pos.line, e.message.clone()))
            .collect();
        found.sort();
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(
            found[0].0 == 4 && found[0].1.contains("given twice"),
            "{found:?}"
        );
        assert!(
            found[1].0 == 6 && found[1].1.contains("whole number"),
            "{found:?}"
        );
        assert!(
            found[2].0 == 9 && found[2].1.contains("unknown key `bogus`"),
            "{found:?}"
        );
        assert!(
            found[3].0 == 10 && found[3].1.contains("true or false"),
            "{found:?}"
        );
        // What had no error is read, at its own line.
        let domains = crate::read::profile_domains("egress:\n  domains: [a.com]\n").unwrap();
        assert_eq!(domains[0].value, "a.com");
        assert_eq!(read.name.map(|n| n.value).as_deref(), Some("x"));
        assert_eq!(read.layer.texts(crate::Field::AllowDomain), ["a.com"]);
    }

    #[test]
    fn a_file_that_cannot_be_mended_stops_with_what_was_found() {
        let (_, errors) = crate::read::parse_profile_tree("egress: [a\n");
        assert!(!errors.is_empty() && errors.len() <= crate::read::MAX_FINDINGS);
    }

    #[test]
    fn values_keep_their_line_and_column() {
        let d =
            crate::read::profile_domains("name: x\negress:\n  domains: [a.com, .b.org]\n").unwrap();
        assert_eq!(d[1].value, ".b.org");
        assert_eq!(
            d[1].pos,
            Pos {
                line: 3,
                column: 20
            }
        );
    }

    #[test]
    fn unknown_key_is_rejected_with_a_suggestion() {
        assert_eq!(
            err("name: x\negress:\n  domain: [a.com]\n"),
            "3:3: unknown key `domain`; did you mean `domains`? (known: presets, domains, allow_requests, deny_requests, ask_requests, allow_http, hosts, allow_cidrs, host_ports, secret_plain_ports, publish, learn, ask, upstream_ca, log, idle_timeout)"
        );
        assert!(err("resourses: {}\n")
            .starts_with("1:1: unknown key `resourses`; did you mean `resources`?"));
    }

    #[test]
    fn a_key_in_the_wrong_section_or_a_flag_as_a_key_is_pointed_to_its_place() {
        assert!(
            err("memory: 4G\n")
                .starts_with("1:1: unknown key `memory`; did you mean `resources.memory`?"),
            "{}",
            err("memory: 4G\n")
        );
        assert!(err("allow_domain: [a.com]\n")
            .starts_with("1:1: unknown key `allow_domain`; did you mean `egress.domains`?"));
        assert!(err("egress:\n  tmp-size: 1G\n")
            .starts_with("2:3: unknown key `tmp-size`; did you mean `filesystem.tmp_size`?"));
    }

    #[test]
    fn a_size_with_a_space_is_refused_where_it_stands() {
        assert_eq!(
            err("resources:\n  memory: 4 GB\n"),
            "2:11: size \"4 GB\" is not valid: use a number with an optional unit K, M, G or T (e.g. 512M, 4G)"
        );
    }

    #[test]
    fn negative_numbers_are_refused() {
        assert_eq!(
            err("resources:\n  pids: -5\n"),
            "2:9: -5 is negative; write a number of zero or more"
        );
        assert!(err("resources: { cpus: -1 }\n").starts_with("1:20: -1 cores"));
    }

    #[test]
    fn a_bad_workspace_mode_is_refused_with_a_suggestion() {
        assert!(err("filesystem:\n  mode: overlai\n")
            .starts_with("2:9: unknown value `overlai`; did you mean `overlay`?"));
    }

    #[test]
    fn broken_yaml_names_its_place() {
        assert!(
            err("name: [x\n").starts_with("1:7:"),
            "{}",
            err("name: [x\n")
        );
        assert_eq!(
            err("name: a\nname: b\n"),
            "2:1: `name` is given twice in this section; keep one"
        );
    }

    #[test]
    fn an_empty_file_is_an_empty_profile() {
        for text in ["", "# only a comment\n"] {
            let (read, errors) = crate::read::read_profile_text(text);
            assert!(errors.is_empty() && read.name.is_none() && read.layer.slots.is_empty());
        }
    }
}

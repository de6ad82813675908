//! Volumes the daemon's owner declares in its configuration (`e2b:
//! volumes:`): host directories an E2B client mounts by name with
//! `volume_mounts`, within the trust rules. The owner names the
//! directory, whether it may be written and which tokens may mount it; a
//! caller names only the volume. Nobody but the owner creates, deletes or
//! lists them (they are not the caller's: `Volume.list` shows the
//! caller's own), and a token the owner did not list is answered as for
//! a volume that does not exist.
//!
//! ```yaml
//! e2b:
//!   listen: 127.0.0.1:49999
//!   volumes:
//!     datasets: {path: /srv/datasets, tokens: ["*"]}          # every token, read-only
//!     scratch:  {path: /srv/scratch, writable: true, tokens: [ci, 3f2a9c01b7d4]}
//! ```
//!
//! `tokens` lists token IDs (`warden token ls`), names of tokens the
//! owner made, or `"*"` for every token; when it is left out no token may
//! mount the volume (only the owner, on its socket): a directory of the
//! host reaches the host, and a token made later for another purpose must
//! not gain it unless the owner says so. A name is free text and not
//! unique, so it is matched only on a token the owner made: a token made
//! by a token (over the API) is never taken for a listed name, and may
//! not be given one ([`listed_name`]); a child holds a volume only when
//! its own ID is listed, or every token's is. A token's secret
//! (`wdn_...`) is refused as an entry: it would put the secret in the
//! configuration, and is not how a token is named.
//! A writable volume is written as the daemon's own volumes are: through
//! an overlay whose writes are held within the sandbox's disk limit and
//! merged into the directory when the sandbox stops.
//!
//! The rule for a volume's name, the door's own volumes' and the declared
//! ones' alike, is here ([`invalid_name`]), below [`super::volumes`].

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::auth::Caller;

/// The longest name of a volume.
pub(super) const MAX_NAME: usize = 63;

/// Why `name` cannot name a volume; `None` when it can. A name is never
/// a path (the directory is under a random ID), and is kept plain so
/// that it reads the same in every message and list.
pub(super) fn invalid_name(name: &str) -> Option<String> {
    let shown: String = name.chars().take(MAX_NAME + 1).collect();
    if name.is_empty() || name.len() > MAX_NAME {
        return Some(format!(
            "volume name {shown:?}: a name is 1 to {MAX_NAME} characters"
        ));
    }
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !plain || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some(format!(
            "volume name {shown:?}: a name is letters, digits, '-' and '_', starting with a letter or digit (never a path)"
        ));
    }
    None
}

/// What every token may be listed as.
pub const EVERY_TOKEN: &str = "*";

/// `e2b:` of the daemon's configuration: an address (as before), or
/// `{listen, volumes, interpreter_start_within}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section {
    /// Serve the E2B-compatible API here.
    pub listen: Option<SocketAddr>,
    pub volumes: Volumes,
    /// How long the code interpreter's server may take to listen before
    /// its start gives up (`None`: the door's default; see
    /// [`super::interpreter`]).
    pub interpreter_start_within: Option<Duration>,
}

/// The declared volumes, by name.
pub type Volumes = BTreeMap<String, Declared>;

/// One declared volume.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// The host directory (made canonical when the configuration is
    /// read).
    pub path: PathBuf,
    /// Whether a sandbox may write it (read-only unless said).
    #[serde(default)]
    pub writable: bool,
    /// Token names or IDs that may mount it, or `"*"`; none when left out.
    #[serde(default)]
    pub tokens: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Full {
    #[serde(default)]
    listen: Option<SocketAddr>,
    #[serde(default)]
    volumes: Volumes,
    #[serde(default, deserialize_with = "period")]
    interpreter_start_within: Option<Duration>,
}

/// A period above zero, such as `90s` or `3m`.
fn period<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text: String = Deserialize::deserialize(d)?;
    match warden_policy::parse_duration(&text) {
        Ok(p) if !p.is_zero() => Ok(Some(p)),
        _ => Err(de::Error::custom(format!(
            "e2b: interpreter_start_within: {text:?} is not a period above zero, such as 90s or 3m"
        ))),
    }
}

impl<'de> Deserialize<'de> for Section {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Section;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an address such as 127.0.0.1:49999, or {listen: ADDR, volumes: {NAME: {path, writable, tokens}}, interpreter_start_within: PERIOD}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Section, E> {
                let listen = v.parse().map_err(|_| {
                    E::custom(format!(
                        "e2b: {v:?} is not an address such as 127.0.0.1:49999"
                    ))
                })?;
                Ok(Section {
                    listen: Some(listen),
                    volumes: Volumes::new(),
                    interpreter_start_within: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Section, A::Error> {
                let full = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Section {
                    listen: full.listen,
                    volumes: full.volumes,
                    interpreter_start_within: full.interpreter_start_within,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Host directories a writable volume may never be: the system's own, and
/// the places that hold every user's files.
const NEVER_WRITABLE: &[(&str, bool)] = &[
    ("/etc", true),
    ("/usr", true),
    ("/bin", true),
    ("/sbin", true),
    ("/lib", true),
    ("/lib32", true),
    ("/lib64", true),
    ("/libx32", true),
    ("/boot", true),
    ("/proc", true),
    ("/sys", true),
    ("/dev", true),
    ("/run", true),
    ("/var", false),
    ("/home", false),
    ("/root", false),
    ("/opt", false),
    ("/srv", false),
    ("/tmp", false),
];

/// Check the declared volumes and make their paths canonical; what does
/// not hold is said with the volume's name.
pub fn check(volumes: &mut Volumes) -> Result<(), String> {
    for (name, v) in volumes.iter_mut() {
        if let Some(why) = invalid_name(name) {
            return Err(format!("e2b.volumes: {why}"));
        }
        let at = |why: String| format!("e2b.volumes.{name}: {why}");
        if !v.path.is_absolute() {
            return Err(at(format!(
                "path {}: an absolute path of a host directory",
                v.path.display()
            )));
        }
        let real = std::fs::canonicalize(&v.path)
            .map_err(|e| at(format!("path {}: {e}", v.path.display())))?;
        if !real.is_dir() {
            return Err(at(format!("path {}: not a directory", real.display())));
        }
        if real == Path::new("/") {
            return Err(at(
                "path /: the host's root would expose every host file".into()
            ));
        }
        if v.writable {
            if let Some((dir, _)) = NEVER_WRITABLE
                .iter()
                .find(|(d, below)| real == Path::new(d) || (*below && real.starts_with(d)))
            {
                return Err(at(format!(
                    "path {}: {dir} is the host's own and is never writable by a sandbox; declare a directory of its own, such as /srv/NAME",
                    real.display()
                )));
            }
        }
        if let Some(t) = v.tokens.iter().find(|t| t.is_empty()) {
            return Err(at(format!("tokens: {t:?} is not a token's name or ID")));
        }
        if v.tokens.iter().any(|t| t.starts_with("wdn_")) {
            return Err(at(
                "tokens: an entry is a token's secret (wdn_...), which no configuration should hold; list the token's ID (warden token ls) or the name of a token the owner made".into(),
            ));
        }
        v.path = real;
    }
    Ok(())
}

/// Why a declared volume may not be where the daemon keeps its own state
/// (its tokens, its sandboxes), or hold it.
pub fn overlaps_state(volumes: &Volumes, state_dir: &Path) -> Option<String> {
    let state = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    volumes
        .iter()
        .find(|(_, v)| v.path.starts_with(&state) || state.starts_with(&v.path))
        .map(|(name, v)| {
            format!(
                "e2b.volumes.{name}: path {} holds or is within the daemon's state {}, which no sandbox may see",
                v.path.display(),
                state.display()
            )
        })
}

/// Whether `caller` may mount `v`: listed by its ID, or by its name
/// when the owner made it (`owner_made`: a token made by a token is never
/// taken for a listed name, which it could have chosen itself).
pub fn may_mount(caller: &Caller, owner_made: bool, v: &Declared) -> bool {
    match caller {
        Caller::Owner => true,
        Caller::Token(t) => v
            .tokens
            .iter()
            .any(|n| n == EVERY_TOKEN || *n == t.id || (owner_made && *n == t.name)),
    }
}

/// Whether a sandbox of token `id` may still have host directory `host`
/// mounted as a declared volume, writable if `writable`: a volume the
/// owner declares now at that path, listing that token, and writable if
/// the mount is (for a start or a copy that re-checks what was granted
/// at create). `name` is the token's name when the owner made it, `None`
/// otherwise (see [`may_mount`]).
pub fn still_declared(
    volumes: &Volumes,
    id: &str,
    name: Option<&str>,
    host: &std::path::Path,
    writable: bool,
) -> bool {
    volumes.values().any(|v| {
        v.path == host
            && (v.writable || !writable)
            && v.tokens
                .iter()
                .any(|n| n == EVERY_TOKEN || n == id || Some(n.as_str()) == name)
    })
}

/// The declared volume `name`, when `caller` may mount it.
pub fn find<'a>(
    volumes: &'a Volumes,
    caller: &Caller,
    owner_made: bool,
    name: &str,
) -> Option<&'a Declared> {
    volumes
        .get(name)
        .filter(|v| may_mount(caller, owner_made, v))
}

/// The declared volume that lists `token_name` by name, if one does: a
/// name only the owner may give a token.
pub fn listed_name<'a>(volumes: &'a Volumes, token_name: &str) -> Option<&'a str> {
    volumes
        .iter()
        .find(|(_, v)| v.tokens.iter().any(|n| n != EVERY_TOKEN && n == token_name))
        .map(|(name, _)| name.as_str())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn read(text: &str) -> Result<Section, String> {
        serde_saphyr::from_str::<Section>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn the_e2b_section_is_an_address_or_a_map_with_volumes() {
        let s = read("127.0.0.1:49999").unwrap();
        assert_eq!(s.listen, Some("127.0.0.1:49999".parse().unwrap()));
        let s =
            read("listen: 127.0.0.1:1\nvolumes:\n  data: {path: /srv/d, tokens: [ci]}\n").unwrap();
        assert_eq!(s.volumes["data"].tokens, vec!["ci".to_string()]);
        assert!(!s.volumes["data"].writable);
        assert!(read("volumes:\n  data: {path: /srv/d, mode: rw}\n").is_err());
        assert!(read("listen: 127.0.0.1:1\nother: 1\n").is_err());
        assert!(read("not an address").is_err());
    }

    #[test]
    fn a_listed_name_is_matched_only_on_a_token_the_owner_made() {
        let (row, _) = crate::auth::new_token("ci", &[], None);
        let id = row.id.clone();
        let caller = Caller::Token(row);
        let by_name = Declared {
            path: PathBuf::from("/srv/d"),
            writable: true,
            tokens: vec!["ci".into()],
        };
        assert!(may_mount(&caller, true, &by_name));
        assert!(!may_mount(&caller, false, &by_name), "a child named ci");
        let by_id = Declared {
            tokens: vec![id],
            ..by_name.clone()
        };
        assert!(may_mount(&caller, false, &by_id));
        let vols = Volumes::from([("scratch".to_string(), by_name)]);
        assert_eq!(listed_name(&vols, "ci"), Some("scratch"));
        assert_eq!(listed_name(&vols, "other"), None);
        let dir = tempfile::tempdir().unwrap();
        let mut secret = Volumes::from([(
            "s".to_string(),
            Declared {
                path: dir.path().to_path_buf(),
                writable: false,
                tokens: vec!["wdn_3f2a9c01b7d4_c2VjcmV0".into()],
            },
        )]);
        assert!(check(&mut secret).unwrap_err().contains("secret"));
    }

    #[test]
    fn the_interpreters_start_period_is_a_period_above_zero_and_left_out_by_default() {
        assert_eq!(read("127.0.0.1:1").unwrap().interpreter_start_within, None);
        let s = read("listen: 127.0.0.1:1\ninterpreter_start_within: 90s\n").unwrap();
        assert_eq!(s.interpreter_start_within, Some(Duration::from_secs(90)));
        for bad in ["0s", "soon", "-5s"] {
            let e = read(&format!("interpreter_start_within: {bad}\n")).unwrap_err();
            assert!(e.contains("interpreter_start_within"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_declared_volume_is_a_real_directory_never_the_root_or_a_system_one_when_writable() {
        let dir = tempfile::tempdir().unwrap();
        let ok = Declared {
            path: dir.path().to_path_buf(),
            writable: true,
            tokens: vec![],
        };
        let mut vols = Volumes::from([("data".to_string(), ok.clone())]);
        check(&mut vols).unwrap();
        for (name, path, writable) in [
            ("a/b", dir.path().to_path_buf(), false),
            ("..", dir.path().to_path_buf(), false),
            ("root", PathBuf::from("/"), false),
            ("rel", PathBuf::from("srv/x"), false),
            ("gone", dir.path().join("missing"), false),
            ("etc", PathBuf::from("/etc"), true),
            ("usr", PathBuf::from("/usr/share"), true),
            ("home", PathBuf::from("/home"), true),
        ] {
            let mut vols = Volumes::from([(
                name.to_string(),
                Declared {
                    path,
                    writable,
                    tokens: vec![],
                },
            )]);
            assert!(check(&mut vols).is_err(), "{name} was accepted");
        }
        assert!(overlaps_state(&vols, dir.path()).is_some());
        assert!(overlaps_state(&vols, &dir.path().join("state")).is_some());
        assert!(overlaps_state(&vols, Path::new("/var/lib/elsewhere")).is_none());
    }
}

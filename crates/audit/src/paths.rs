//! Paths in events, kept byte for byte.
//!
//! A Linux path is bytes, not text: a workspace or a changed file may have
//! a name that is not UTF-8, which JSON strings cannot carry. The encoding:
//! - a path that is UTF-8 is a JSON string, as it always was;
//! - any other path is an object `{"hex": "...", "lossy": "..."}`: `hex`
//!   holds every byte of the path (two lower-case hex digits each) and is
//!   what a reader decodes; `lossy` is the same path with each invalid
//!   sequence shown as U+FFFD, for a person to read.
//!
//! So no path is ever lost, altered or merged with another, and every
//! line written before this encoding reads back unchanged.

use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// One path, as the log stores it.
struct Stored<'a>(&'a Path);

impl Serialize for Stored<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.to_str() {
            Some(text) => s.serialize_str(text),
            None => {
                let bytes = self.0.as_os_str().as_bytes();
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("hex", &hex(bytes))?;
                map.serialize_entry("lossy", &String::from_utf8_lossy(bytes))?;
                map.end()
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Read {
    Text(String),
    Bytes { hex: String },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn read<'de, D: Deserializer<'de>>(r: Read) -> Result<PathBuf, D::Error> {
    match r {
        Read::Text(t) => Ok(PathBuf::from(t)),
        Read::Bytes { hex } => unhex(&hex)
            .map(|b| PathBuf::from(OsString::from_vec(b)))
            .ok_or_else(|| de::Error::custom(format!("{hex:?} is not a path's bytes in hex"))),
    }
}

/// `#[serde(with = "crate::paths::one")]` for `PathBuf`.
pub mod one {
    use super::*;

    pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        Stored(p).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        read::<D>(Read::deserialize(d)?)
    }
}

/// `#[serde(with = "crate::paths::optional")]` for `Option<PathBuf>`.
pub mod optional {
    use super::*;

    pub fn serialize<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.serialize_some(&Stored(p)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        Option::<Read>::deserialize(d)?.map(read::<D>).transpose()
    }
}

/// `#[serde(with = "crate::paths::many")]` for `Vec<PathBuf>`.
pub mod many {
    use super::*;
    use serde::ser::SerializeSeq;

    pub fn serialize<S: Serializer>(ps: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(ps.len()))?;
        for p in ps {
            seq.serialize_element(&Stored(p))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        Vec::<Read>::deserialize(d)?
            .into_iter()
            .map(read::<D>)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct T {
        #[serde(with = "optional")]
        w: Option<PathBuf>,
        #[serde(with = "many")]
        ps: Vec<PathBuf>,
    }

    #[test]
    fn a_path_that_is_not_utf8_round_trips_byte_for_byte() {
        let odd = PathBuf::from(OsString::from_vec(b"/tmp/caf\xe9/\xff\\x".to_vec()));
        let t = T {
            w: Some(odd.clone()),
            ps: vec![PathBuf::from("plain"), odd],
        };
        let text = serde_json::to_string(&t).unwrap();
        assert!(
            text.contains(r#""hex":"2f746d702f636166e92fff5c78""#),
            "{text}"
        );
        assert!(
            text.contains(r#""lossy":"/tmp/caf\ufffd/\ufffd\\x""#) || text.contains("caf\u{fffd}"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), t);
    }

    #[test]
    fn a_utf8_path_is_the_plain_string_it_always_was() {
        let t = T {
            w: Some(PathBuf::from("/home/a b/ü")),
            ps: vec![],
        };
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(text, r#"{"w":"/home/a b/ü","ps":[]}"#);
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), t);
        let none = serde_json::from_str::<T>(r#"{"w":null,"ps":[]}"#).unwrap();
        assert_eq!(none.w, None);
    }
}

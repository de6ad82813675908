//! How paths travel in JSON. Names on Linux are bytes; JSON strings are
//! Unicode. A path that is valid UTF-8 is written as a string; one that is
//! not is written as `{"bytes": [..]}` (the raw bytes), so that nothing is
//! lost. Change lists add a lossy `path` beside it for people (see
//! [`crate::Change`]).

pub(crate) mod path {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::path::{Path, PathBuf};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Text(String),
        Bytes { bytes: Vec<u8> },
    }

    pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        match p.to_str() {
            Some(t) => Wire::Text(t.to_string()),
            None => Wire::Bytes {
                bytes: crate::store::path_bytes(p).to_vec(),
            },
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(match Wire::deserialize(d)? {
            Wire::Text(t) => PathBuf::from(t),
            Wire::Bytes { bytes } => crate::store::path_from_bytes(bytes),
        })
    }
}

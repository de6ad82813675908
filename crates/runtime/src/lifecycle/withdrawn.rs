//! The writable volumes a running token's sandbox holds that the owner no
//! longer grants it: recorded in the sandbox's directory by whoever reads
//! the grants (the daemon, each time it reads its configuration), read by
//! the sandbox's supervisor when it stops, which then holds back what the
//! sandbox wrote there rather than merging it into the owner's directory
//! (kept under the state's `held-back/`, a `volume_held_back` event with
//! the reason [`NOT_GRANTED`]).
//!
//! A start and a copy check the grant themselves
//! ([`super::granted`]); this record carries the check to the one write
//! that happens later without anyone asking: the merge at the stop (of a
//! sandbox running, or paused with its memory, when the grant went).

use std::path::{Path, PathBuf};

use crate::state::{read_json, write_json, StateError};

/// The record's file, in a sandbox's directory.
pub const WITHDRAWN: &str = "volumes-withdrawn.json";

/// The reason code of what a merge held back because its volume is no
/// longer granted.
pub const NOT_GRANTED: &str = "not_granted";

/// What the supervisor holds back at the stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withdrawn {
    /// These volume directories (as the spec names them).
    These(Vec<PathBuf>),
    /// Every volume: the record is there but cannot be read, so nothing
    /// is merged on a grant nobody could check.
    All,
}

/// Record that the writable volumes `hosts` of the sandbox in `dir` are no
/// longer granted; with none, any earlier record is removed (the owner
/// granted them again).
pub fn record(dir: &Path, hosts: &[PathBuf]) -> Result<(), StateError> {
    let file = dir.join(WITHDRAWN);
    if hosts.is_empty() {
        return match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StateError::Write {
                path: file,
                source: e,
            }),
            _ => Ok(()),
        };
    }
    write_json(&file, &hosts)
}

/// What the record in the sandbox's directory `dir` withholds.
pub fn read(dir: &Path) -> Withdrawn {
    let file = dir.join(WITHDRAWN);
    match std::fs::symlink_metadata(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Withdrawn::These(Vec::new()),
        _ => match read_json::<Vec<PathBuf>>(&file) {
            Ok(hosts) => Withdrawn::These(hosts),
            Err(_) => Withdrawn::All,
        },
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_an_unreadable_one_withholds_every_volume() {
        let dir = std::env::temp_dir().join(format!("withdrawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read(&dir), Withdrawn::These(vec![]));
        record(&dir, &[PathBuf::from("/srv/vol")]).unwrap();
        assert_eq!(
            read(&dir),
            Withdrawn::These(vec![PathBuf::from("/srv/vol")])
        );
        std::fs::write(dir.join(WITHDRAWN), b"{not json").unwrap();
        assert_eq!(read(&dir), Withdrawn::All);
        record(&dir, &[]).unwrap();
        assert_eq!(read(&dir), Withdrawn::These(vec![]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The code interpreter's pinned wheels, kept by the daemon alone: an
//! owner-only directory of its state (`e2b/code-interpreter/`), which no
//! sandbox sees. The setup sandbox hands what it fetched back on its
//! standard output; each file is checked against the lock before it is
//! kept. A sandbox gets the wheels on its interpreter's standard input
//! (one line per wheel: the file's name and its bytes in base64), read
//! from the store and checked again as they are sent; the server inside
//! checks the bytes it received once more and unpacks those very bytes.
//! So no sandbox can delete, replace or add a wheel that another one runs:
//! there is no shared copy to write.

use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why the store could not give or keep the wheels.
#[derive(Debug, thiserror::Error)]
pub enum WheelsError {
    #[error("{name} is not in the daemon's store of the code interpreter's packages")]
    Missing { name: String },
    #[error("{name} in the daemon's store is not the pinned file (its SHA-256 differs)")]
    Altered { name: String },
    #[error("cannot read or write {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the packages fetched lack {0}")]
    NotFetched(String),
    #[error("the fetched {name} is not the pinned file (its SHA-256 differs)")]
    FetchedAltered { name: String },
    #[error("the fetch's output does not read: {0}")]
    Unreadable(String),
}

/// One pinned wheel: its file name and SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub name: String,
    pub sha256: String,
}

/// The pins of `lock` (one `NAME SHA256` a line; `#` comments). A name
/// is a plain file name: the lock is warden's own, but a name is never
/// joined to a path without being one.
pub fn pins(lock: &str) -> Vec<Pin> {
    lock.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (name, sha) = l.split_once(char::is_whitespace)?;
            let plain = !name.is_empty()
                && !name.starts_with('.')
                && !name.contains('/')
                && name.ends_with(".whl");
            plain.then(|| Pin {
                name: name.to_string(),
                sha256: sha.trim().to_ascii_lowercase(),
            })
        })
        .collect()
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The store under the daemon's state directory `state`.
pub fn dir(state: &Path) -> PathBuf {
    state.join("e2b").join("code-interpreter")
}

/// Every pinned wheel from the store, each checked against its pin, as
/// the lines the server reads on its standard input.
pub fn bundle(store: &Path, pins: &[Pin]) -> Result<String, WheelsError> {
    let mut out = String::new();
    for pin in pins {
        let path = store.join(&pin.name);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(WheelsError::Missing {
                    name: pin.name.clone(),
                })
            }
            Err(source) => return Err(WheelsError::Io { path, source }),
        };
        // The bytes checked are the bytes sent: never read twice.
        if hex_sha256(&bytes) != pin.sha256 {
            return Err(WheelsError::Altered {
                name: pin.name.clone(),
            });
        }
        out.push_str(&pin.name);
        out.push(' ');
        base64::engine::general_purpose::STANDARD.encode_string(&bytes, &mut out);
        out.push('\n');
    }
    Ok(out)
}

/// Keep the wheels the setup sandbox wrote (`output`: the same lines as
/// [`bundle`]), every one checked against its pin first: all of them, or
/// nothing is kept.
pub fn keep_fetched(store: &Path, pins: &[Pin], output: &[u8]) -> Result<(), WheelsError> {
    let text = std::str::from_utf8(output)
        .map_err(|_| WheelsError::Unreadable("it is not text".into()))?;
    let mut got: Vec<(&Pin, Vec<u8>)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (name, b64) = line
            .split_once(' ')
            .ok_or_else(|| WheelsError::Unreadable("a line is not `NAME BASE64`".into()))?;
        // A name not pinned is not kept, whatever it holds.
        let Some(pin) = pins.iter().find(|p| p.name == name) else {
            continue;
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| WheelsError::Unreadable(format!("{name}: {e}")))?;
        if hex_sha256(&bytes) != pin.sha256 {
            return Err(WheelsError::FetchedAltered {
                name: pin.name.clone(),
            });
        }
        got.push((pin, bytes));
    }
    if let Some(lacking) = pins
        .iter()
        .find(|p| !got.iter().any(|(g, _)| g.name == p.name))
    {
        return Err(WheelsError::NotFetched(lacking.name.clone()));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(store)
        .map_err(|source| WheelsError::Io {
            path: store.to_path_buf(),
            source,
        })?;
    for (pin, bytes) in got {
        write_new(&store.join(&pin.name), &bytes)?;
    }
    Ok(())
}

/// Write `bytes` to `path` whole or not at all (a temporary file renamed
/// over it), owner-only.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), WheelsError> {
    let io = |source| WheelsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("partial");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(name: &str, bytes: &[u8]) -> String {
        format!(
            "{name} {}\n",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    }

    #[test]
    fn only_pinned_bytes_are_kept_and_only_they_are_sent() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let good = b"the pinned wheel".as_slice();
        let pins = pins(&format!(
            "# lock\na-1.0-py3-none-any.whl {}\n",
            hex_sha256(good)
        ));
        assert_eq!(pins.len(), 1);
        // Altered bytes: nothing kept.
        let bad = line("a-1.0-py3-none-any.whl", b"a wheel of someone else's");
        assert!(matches!(
            keep_fetched(&store, &pins, bad.as_bytes()),
            Err(WheelsError::FetchedAltered { .. })
        ));
        assert!(!store.join("a-1.0-py3-none-any.whl").exists());
        // Missing: nothing kept.
        assert!(matches!(
            keep_fetched(&store, &pins, b"other-1.0-py3-none-any.whl AAAA\n"),
            Err(WheelsError::NotFetched(_))
        ));
        // The pinned bytes: kept, owner-only, and sent.
        keep_fetched(
            &store,
            &pins,
            line("a-1.0-py3-none-any.whl", good).as_bytes(),
        )
        .unwrap();
        let kept = store.join("a-1.0-py3-none-any.whl");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            bundle(&store, &pins).unwrap(),
            line("a-1.0-py3-none-any.whl", good)
        );
        // A file changed in the store is never sent.
        std::fs::write(&kept, b"changed").unwrap();
        assert!(matches!(
            bundle(&store, &pins),
            Err(WheelsError::Altered { .. })
        ));
    }

    #[test]
    fn a_lock_name_that_is_not_a_plain_wheel_file_is_no_pin() {
        let p = pins("../x.whl 00\n.hidden.whl 00\nsub/a.whl 00\nok-1-py3-none-any.whl AB\n");
        assert_eq!(
            p,
            vec![Pin {
                name: "ok-1-py3-none-any.whl".into(),
                sha256: "ab".into()
            }]
        );
    }

    #[test]
    fn the_shipped_lock_pins_every_line() {
        let lock = include_str!("wheels.lock");
        let lines = lock
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        let pins = pins(lock);
        assert_eq!(pins.len(), lines);
        assert!(pins.iter().all(|p| p.sha256.len() == 64));
    }
}

//! The daemon's records, in one SQLite database (WAL) in the state
//! directory: the sandboxes it created (with their labels), the commands
//! it started in them and how they ended, its tokens (hashed), and the
//! envd access tokens of the sandboxes the E2B door made (kept whole: a
//! signed file URL is checked against them; each stands for one token's
//! power over one sandbox, and goes with the sandbox). The
//! sandboxes themselves live in the runtime's store and their supervisors;
//! these records are what the daemon adds, and they survive its restarts.
//!
//! One file per table: [`sandboxes`], [`pool`], [`execs`], [`tokens`],
//! [`e2b_keys`]; [`schema`] makes and upgrades the tables.

use rusqlite::Connection;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

mod e2b_keys;
mod execs;
mod pool;
mod sandboxes;
mod schema;
mod tokens;

pub use e2b_keys::{E2bKey, E2B_TOMBSTONE_MS};
pub use execs::{ExecRole, ExecRow};
pub use sandboxes::SandboxRow;
pub use tokens::TokenRow;

use schema::{add_missing_columns, SCHEMA};

/// Whether a record (a token, an envd key, a sandbox's record) made with
/// identity `uid` at `made_ms` is of `sb`, and not of an earlier sandbox
/// of its name: the identities must be the same. A record made before
/// warden kept identities has none; it is of `sb` if it is not older than
/// `sb` (a name holds one sandbox at a time, so a record made while `sb`
/// existed was made for `sb`).
pub fn made_for(sb: &warden_workspace::Sandbox, uid: Option<&str>, made_ms: u64) -> bool {
    use subtle::ConstantTimeEq;
    match uid {
        Some(uid) => uid.as_bytes().ct_eq(sb.uid().as_bytes()).into(),
        None => made_ms >= sb.created_ms(),
    }
}

/// Why the database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("cannot open the daemon's database {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot make the daemon's database {path} owner-only")]
    Protect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the daemon's database failed to {what}")]
    Query {
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
}

fn wal_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

fn q(what: &'static str) -> impl FnOnce(rusqlite::Error) -> DbError {
    move |source| DbError::Query { what, source }
}

pub struct Db {
    conn: Connection,
}

impl Db {
    pub fn open(path: &Path) -> Result<Db, DbError> {
        let open = |source| DbError::Open {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(open)?;
        // Owner-only: it keeps the envd access tokens whole. SQLite gives
        // its journal files the database file's permissions.
        for file in [
            path.to_path_buf(),
            wal_file(path, "-wal"),
            wal_file(path, "-shm"),
        ] {
            if file.exists() {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).map_err(
                    |source| DbError::Protect {
                        path: file.clone(),
                        source,
                    },
                )?;
            }
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open)?;
        conn.execute_batch(SCHEMA).map_err(open)?;
        add_missing_columns(&conn).map_err(open)?;
        Ok(Db { conn })
    }
}

/// A token's row for the tests of each table.
#[cfg(test)]
fn token_for_test(id: &str, sandbox: Option<&str>) -> TokenRow {
    TokenRow {
        id: id.into(),
        name: id.into(),
        hash: "0".repeat(64),
        scopes: vec!["exec".into()],
        sandbox: sandbox.map(str::to_string),
        created_ms: 1,
        revoked: false,
        max_sandboxes: None,
        max_memory: None,
        max_pids: None,
        sandbox_uid: sandbox.map(|_| "u1".to_string()),
    }
}

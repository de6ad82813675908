//! The daemon's records, in one SQLite database (WAL) in the state
//! directory: the sandboxes it created (with their labels), the commands
//! it started in them and how they ended, its tokens (hashed), and the
//! envd access tokens of the sandboxes the E2B door made (kept whole: a
//! signed file URL is checked against them; each stands for one token's
//! power over one sandbox, and goes with the sandbox). The
//! sandboxes themselves live in the runtime's store and their supervisors;
//! these records are what the daemon adds, and they survive its restarts.

use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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

/// How long an ended envd access token is recognised (as its hash).
pub const E2B_TOMBSTONE_MS: i64 = 7 * 24 * 3600 * 1000;

fn key_hash(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn wal_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

fn q(what: &'static str) -> impl FnOnce(rusqlite::Error) -> DbError {
    move |source| DbError::Query { what, source }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sandboxes (
    id TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL,
    labels TEXT NOT NULL,
    profile TEXT,
    token TEXT,
    gone INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS execs (
    id TEXT PRIMARY KEY,
    sandbox TEXT NOT NULL,
    runtime_exec INTEGER NOT NULL,
    supervisor_pid INTEGER NOT NULL,
    argv TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    tty INTEGER NOT NULL,
    exit_status INTEGER,
    exit_signal INTEGER,
    finished_ms INTEGER
);
CREATE INDEX IF NOT EXISTS execs_by_sandbox ON execs (sandbox);
CREATE TABLE IF NOT EXISTS pool (
    id TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    hash TEXT NOT NULL,
    scopes TEXT NOT NULL,
    sandbox TEXT,
    created_ms INTEGER NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0,
    max_sandboxes INTEGER,
    max_memory INTEGER,
    sandbox_uid TEXT,
    max_pids INTEGER
);
CREATE TABLE IF NOT EXISTS e2b_keys (
    sandbox TEXT NOT NULL,
    token TEXT NOT NULL,
    key TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    gone INTEGER NOT NULL DEFAULT 0,
    uid TEXT,
    PRIMARY KEY (sandbox, token)
);
";

/// Columns added to a table after its first release: a database made
/// before them gets them when it is opened (`CREATE TABLE IF NOT EXISTS`
/// leaves an existing table as it was).
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("tokens", "sandbox_uid", "TEXT"),
    ("e2b_keys", "uid", "TEXT"),
    ("sandboxes", "stopped_ms", "INTEGER"),
    ("tokens", "max_pids", "INTEGER"),
    ("execs", "holder", "TEXT"),
    ("execs", "role", "TEXT"),
    ("tokens", "parent", "TEXT"),
];

/// Add the columns of [`ADDED_COLUMNS`] that `conn`'s tables lack.
fn add_missing_columns(conn: &Connection) -> rusqlite::Result<()> {
    for (table, column, decl) in ADDED_COLUMNS {
        let mut st = conn.prepare(&format!("PRAGMA table_info({table})"))?;
        let names = st
            .query_map([], |r| r.get::<_, String>(1))?
            .collect::<Result<Vec<_>, _>>()?;
        if !names.iter().any(|n| n == column) {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
        }
    }
    Ok(())
}

/// A sandbox the daemon created.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRow {
    pub id: String,
    pub created_ms: u64,
    pub labels: BTreeMap<String, String>,
    pub profile: Option<String>,
    /// The token that created it.
    pub token: Option<String>,
}

/// A command the daemon started.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecRow {
    pub id: String,
    pub sandbox: String,
    /// The supervisor's number for it (and the supervisor's PID: numbers
    /// start again with each start of the sandbox).
    pub runtime_exec: u64,
    pub supervisor_pid: u32,
    pub argv: Vec<String>,
    pub started_ms: u64,
    pub tty: bool,
    pub exit_status: Option<i32>,
    pub exit_signal: Option<i32>,
    pub finished_ms: Option<u64>,
    /// Whose place among the long-lived answers it holds while it runs
    /// ([`crate::leases::Lease::holder`]): taken again for it when a
    /// restarted daemon adopts it. `None`: the owner's, or none.
    pub holder: Option<String>,
    /// What the daemon started it as, when it is one of the daemon's own
    /// (a caller's command has none). Only the daemon writes it, in its
    /// own records: nothing a sandbox or a token sends sets it.
    pub role: Option<ExecRole>,
}

/// What a command of the daemon's own is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecRole {
    /// The E2B door's code interpreter server ([`crate::e2b::interpreter`]).
    E2bInterpreter,
}

impl ExecRole {
    fn as_str(self) -> &'static str {
        match self {
            ExecRole::E2bInterpreter => "e2b-interpreter",
        }
    }

    fn parse(s: &str) -> Option<ExecRole> {
        [ExecRole::E2bInterpreter]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

impl ExecRow {
    /// A command that has just started (now) and not yet ended: the one
    /// row every door that starts a command records.
    pub fn started(
        id: String,
        sandbox: String,
        runtime_exec: u64,
        supervisor_pid: u32,
        argv: Vec<String>,
        tty: bool,
    ) -> ExecRow {
        ExecRow {
            id,
            sandbox,
            runtime_exec,
            supervisor_pid,
            argv,
            started_ms: warden_runtime::state::now_ms(),
            tty,
            exit_status: None,
            exit_signal: None,
            finished_ms: None,
            holder: None,
            role: None,
        }
    }
}

/// A token, without its secret.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    /// SHA-256 of the secret, hex.
    pub hash: String,
    pub scopes: Vec<String>,
    /// A per-sandbox token: good for this sandbox's data API only.
    pub sandbox: Option<String>,
    pub created_ms: u64,
    pub revoked: bool,
    /// Quotas: sandboxes it may have at once, and their memory limits
    /// together (bytes).
    pub max_sandboxes: Option<u64>,
    pub max_memory: Option<u64>,
    /// Quota: the processes and threads of its sandboxes together (each
    /// at its `resources.pids`); never 0 (kept small: a token's row is in
    /// every caller).
    pub max_pids: Option<std::num::NonZeroU64>,
    /// The identity ([`warden_workspace::Sandbox::uid`]) of the sandbox a
    /// per-sandbox token was made for: it is good for that sandbox only,
    /// not for a later one given the same name. `None` in tokens made
    /// before warden recorded it (see [`crate::auth::made_for`]).
    pub sandbox_uid: Option<String>,
}

/// An envd access token: what `token` may do to `sandbox`, through the
/// E2B door, by `key` (sent as `X-Access-Token`, or signing a file URL).
#[derive(Debug, Clone, PartialEq)]
pub struct E2bKey {
    pub sandbox: String,
    pub token: String,
    pub key: String,
    /// The identity of the sandbox it was made for (`None`: made before
    /// warden recorded it).
    pub uid: Option<String>,
    pub created_ms: u64,
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

    pub fn insert_sandbox(&self, row: &SandboxRow) -> Result<(), DbError> {
        let labels = serde_json::to_string(&row.labels).unwrap_or_else(|_| "{}".into());
        self.conn
            .execute(
                "INSERT OR REPLACE INTO sandboxes (id, created_ms, labels, profile, token, gone) VALUES (?1, ?2, ?3, ?4, ?5, 0)",
                params![row.id, row.created_ms as i64, labels, row.profile, row.token],
            )
            .map_err(q("record a sandbox"))?;
        Ok(())
    }

    pub fn sandbox(&self, id: &str) -> Result<Option<SandboxRow>, DbError> {
        self.conn
            .query_row(
                "SELECT id, created_ms, labels, profile, token FROM sandboxes WHERE id = ?1 AND gone = 0",
                params![id],
                sandbox_row,
            )
            .optional()
            .map_err(q("read a sandbox"))
    }

    /// The sandboxes a token made that still exist.
    pub fn sandboxes_of_token(&self, token: &str) -> Result<Vec<SandboxRow>, DbError> {
        Ok(self
            .sandboxes()?
            .into_iter()
            .filter(|r| r.token.as_deref() == Some(token))
            .collect())
    }

    pub fn sandboxes(&self) -> Result<Vec<SandboxRow>, DbError> {
        let mut st = self
            .conn
            .prepare("SELECT id, created_ms, labels, profile, token FROM sandboxes WHERE gone = 0 ORDER BY created_ms")
            .map_err(q("list sandboxes"))?;
        let rows = st
            .query_map([], sandbox_row)
            .map_err(q("list sandboxes"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(q("list sandboxes"))?;
        Ok(rows)
    }

    /// Forget a removed sandbox, its commands and its envd access tokens,
    /// and revoke the tokens made for it alone: a credential ends with its
    /// sandbox.
    pub fn remove_sandbox(&self, id: &str) -> Result<(), DbError> {
        self.remove_e2b_keys(id)?;
        self.conn
            .execute(
                "UPDATE tokens SET revoked = 1 WHERE sandbox = ?1 AND revoked = 0",
                params![id],
            )
            .map_err(q("revoke a removed sandbox's tokens"))?;
        self.conn
            .execute("DELETE FROM execs WHERE sandbox = ?1", params![id])
            .map_err(q("remove a sandbox's commands"))?;
        self.conn
            .execute("DELETE FROM sandboxes WHERE id = ?1", params![id])
            .map_err(q("remove a sandbox"))?;
        Ok(())
    }

    /// Since when the retention sweep has seen sandbox `id` stopped
    /// (see [`crate::retention`]).
    pub fn stopped_since(&self, id: &str) -> Result<Option<u64>, DbError> {
        self.conn
            .query_row(
                "SELECT stopped_ms FROM sandboxes WHERE id = ?1",
                params![id],
                |r| r.get::<_, Option<i64>>(0),
            )
            .optional()
            .map(|v| v.flatten().map(|ms| ms as u64))
            .map_err(q("read when a sandbox stopped"))
    }

    /// Record when sandbox `id` was first seen stopped (`None`: running
    /// again).
    pub fn set_stopped(&self, id: &str, ms: Option<u64>) -> Result<(), DbError> {
        self.conn
            .execute(
                "UPDATE sandboxes SET stopped_ms = ?2 WHERE id = ?1",
                params![id, ms.map(|m| m as i64)],
            )
            .map_err(q("record when a sandbox stopped"))?;
        Ok(())
    }

    /// A started sandbox waiting in the pool of `profile`: nobody's yet.
    pub fn insert_pooled(&self, id: &str, profile: &str) -> Result<(), DbError> {
        self.conn
            .execute(
                "INSERT INTO pool (id, profile, created_ms) VALUES (?1, ?2, ?3)",
                params![id, profile, warden_runtime::state::now_ms() as i64],
            )
            .map_err(q("record a pooled sandbox"))?;
        Ok(())
    }

    /// The pooled sandboxes of `profile` (all with `None`), oldest first.
    pub fn pooled(&self, profile: Option<&str>) -> Result<Vec<(String, String)>, DbError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, profile FROM pool WHERE ?1 IS NULL OR profile = ?1 ORDER BY created_ms",
            )
            .map_err(q("list pooled sandboxes"))?;
        let rows = st
            .query_map(params![profile], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(q("list pooled sandboxes"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(q("list pooled sandboxes"))?;
        Ok(rows)
    }

    pub fn is_pooled(&self, id: &str) -> Result<bool, DbError> {
        self.conn
            .query_row("SELECT 1 FROM pool WHERE id = ?1", params![id], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .map_err(q("look for a pooled sandbox"))
    }

    /// Take `id` out of the pool: true for exactly one caller, whatever
    /// the race.
    pub fn take_pooled(&self, id: &str) -> Result<bool, DbError> {
        self.conn
            .execute("DELETE FROM pool WHERE id = ?1", params![id])
            .map(|n| n == 1)
            .map_err(q("take a pooled sandbox"))
    }

    pub fn insert_exec(&self, row: &ExecRow) -> Result<(), DbError> {
        let argv = serde_json::to_string(&row.argv).unwrap_or_else(|_| "[]".into());
        self.conn
            .execute(
                "INSERT INTO execs (id, sandbox, runtime_exec, supervisor_pid, argv, started_ms, tty, holder, role) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    row.id,
                    row.sandbox,
                    row.runtime_exec as i64,
                    row.supervisor_pid,
                    argv,
                    row.started_ms as i64,
                    row.tty,
                    row.holder,
                    row.role.map(ExecRole::as_str)
                ],
            )
            .map_err(q("record a command"))?;
        Ok(())
    }

    pub fn finish_exec(
        &self,
        id: &str,
        status: i32,
        signal: Option<i32>,
        finished_ms: u64,
    ) -> Result<(), DbError> {
        self.conn
            .execute(
                "UPDATE execs SET exit_status = ?2, exit_signal = ?3, finished_ms = ?4 WHERE id = ?1 AND exit_status IS NULL",
                params![id, status, signal, finished_ms as i64],
            )
            .map_err(q("record a command's end"))?;
        Ok(())
    }

    pub fn exec(&self, id: &str) -> Result<Option<ExecRow>, DbError> {
        self.conn
            .query_row(
                "SELECT id, sandbox, runtime_exec, supervisor_pid, argv, started_ms, tty, exit_status, exit_signal, finished_ms, holder, role FROM execs WHERE id = ?1",
                params![id],
                exec_row,
            )
            .optional()
            .map_err(q("read a command"))
    }

    /// Commands still running as far as the records say.
    pub fn unfinished_execs(&self) -> Result<Vec<ExecRow>, DbError> {
        let mut st = self
            .conn
            .prepare("SELECT id, sandbox, runtime_exec, supervisor_pid, argv, started_ms, tty, exit_status, exit_signal, finished_ms, holder, role FROM execs WHERE exit_status IS NULL")
            .map_err(q("list commands"))?;
        let rows = st
            .query_map([], exec_row)
            .map_err(q("list commands"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(q("list commands"))?;
        Ok(rows)
    }

    pub fn execs_of(&self, sandbox: &str) -> Result<Vec<ExecRow>, DbError> {
        let mut st = self
            .conn
            .prepare("SELECT id, sandbox, runtime_exec, supervisor_pid, argv, started_ms, tty, exit_status, exit_signal, finished_ms, holder, role FROM execs WHERE sandbox = ?1 ORDER BY started_ms")
            .map_err(q("list commands"))?;
        let rows = st
            .query_map(params![sandbox], exec_row)
            .map_err(q("list commands"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(q("list commands"))?;
        Ok(rows)
    }

    pub fn insert_token(&self, row: &TokenRow) -> Result<(), DbError> {
        self.insert_token_by(row, None)
    }

    /// Record a token made by the token `parent` over the API (`None`:
    /// by the owner). Kept in the table's `parent` column, not in
    /// [`TokenRow`] (a token's row is in every caller): revoking a token
    /// revokes every token it made, and theirs ([`Db::revoke_token`]);
    /// its children's quotas are carved out of its own
    /// ([`crate::quota::bounds_of`]). Tokens recorded before warden kept
    /// makers have none, as the owner's.
    pub fn insert_token_by(&self, row: &TokenRow, parent: Option<&str>) -> Result<(), DbError> {
        self.conn
            .execute(
                "INSERT INTO tokens (id, name, hash, scopes, sandbox, created_ms, revoked, max_sandboxes, max_memory, sandbox_uid, max_pids, parent) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, ?11)",
                params![
                    row.id,
                    row.name,
                    row.hash,
                    row.scopes.join(" "),
                    row.sandbox,
                    row.created_ms as i64,
                    row.max_sandboxes.map(|v| v as i64),
                    row.max_memory.map(|v| v as i64),
                    row.sandbox_uid,
                    row.max_pids.map(|v| v.get() as i64),
                    parent
                ],
            )
            .map_err(q("record a token"))?;
        Ok(())
    }

    pub fn token(&self, id: &str) -> Result<Option<TokenRow>, DbError> {
        self.conn
            .query_row(
                "SELECT id, name, hash, scopes, sandbox, created_ms, revoked, max_sandboxes, max_memory, sandbox_uid, max_pids FROM tokens WHERE id = ?1",
                params![id],
                token_row,
            )
            .optional()
            .map_err(q("read a token"))
    }

    /// The token that made `id` over the API, if one did.
    pub fn maker_of(&self, id: &str) -> Result<Option<String>, DbError> {
        self.conn
            .query_row(
                "SELECT parent FROM tokens WHERE id = ?1",
                params![id],
                |r| r.get::<_, Option<String>>(0),
            )
            .optional()
            .map(Option::flatten)
            .map_err(q("read a token's maker"))
    }

    /// The tokens `id` made over the API that are not revoked.
    pub fn children_of(&self, id: &str) -> Result<Vec<TokenRow>, DbError> {
        let mut st = self
            .conn
            .prepare("SELECT id, name, hash, scopes, sandbox, created_ms, revoked, max_sandboxes, max_memory, sandbox_uid, max_pids FROM tokens WHERE parent = ?1 AND revoked = 0")
            .map_err(q("list a token's children"))?;
        let rows = st
            .query_map(params![id], token_row)
            .map_err(q("list a token's children"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(q("list a token's children"))?;
        Ok(rows)
    }

    pub fn tokens(&self) -> Result<Vec<TokenRow>, DbError> {
        let mut st = self
            .conn
            .prepare("SELECT id, name, hash, scopes, sandbox, created_ms, revoked, max_sandboxes, max_memory, sandbox_uid, max_pids FROM tokens ORDER BY created_ms")
            .map_err(q("list tokens"))?;
        let rows = st
            .query_map([], token_row)
            .map_err(q("list tokens"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(q("list tokens"))?;
        Ok(rows)
    }

    /// The envd access token of `token` for sandbox `sandbox`, if it was
    /// given one (for the sandbox of that name it was made for: compare
    /// its `uid` with the sandbox's before handing it out again).
    pub fn e2b_key(&self, sandbox: &str, token: &str) -> Result<Option<E2bKey>, DbError> {
        self.conn
            .query_row(
                "SELECT sandbox, token, key, uid, created_ms FROM e2b_keys WHERE sandbox = ?1 AND token = ?2 AND gone = 0",
                params![sandbox, token],
                e2b_key_row,
            )
            .optional()
            .map_err(q("read an envd access token"))
    }

    /// Keep `key` as the envd access token of `token` for the sandbox
    /// `sandbox` whose identity is `uid`, unless it has one already; the
    /// one it has after. A key kept for an ended sandbox, or for another
    /// sandbox that had the name before, is replaced.
    pub fn insert_e2b_key(
        &self,
        sandbox: &str,
        uid: &str,
        token: &str,
        key: &str,
    ) -> Result<String, DbError> {
        self.conn
            .execute(
                "INSERT INTO e2b_keys (sandbox, token, key, created_ms, uid) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (sandbox, token) DO UPDATE SET key = excluded.key, created_ms = excluded.created_ms, gone = 0, uid = excluded.uid WHERE e2b_keys.gone = 1 OR e2b_keys.uid IS NOT excluded.uid",
                params![sandbox, token, key, warden_runtime::state::now_ms() as i64, uid],
            )
            .map_err(q("record an envd access token"))?;
        Ok(self
            .e2b_key(sandbox, token)?
            .map(|k| k.key)
            .unwrap_or_else(|| key.to_string()))
    }

    /// The envd access tokens, as (sandbox, token id, key): of `sandbox`
    /// only, or of every sandbox.
    pub fn e2b_keys(&self, sandbox: Option<&str>) -> Result<Vec<E2bKey>, DbError> {
        let mut st = self
            .conn
            .prepare("SELECT sandbox, token, key, uid, created_ms FROM e2b_keys WHERE gone = 0 AND (?1 IS NULL OR sandbox = ?1)")
            .map_err(q("list envd access tokens"))?;
        let rows = st
            .query_map(params![sandbox], e2b_key_row)
            .map_err(q("list envd access tokens"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(q("list envd access tokens"))?;
        Ok(rows)
    }

    /// End the envd access tokens of `sandbox`: each is kept only as its
    /// hash, for a while, so that a client still holding one is told the
    /// sandbox is gone (as E2B tells it) rather than that its token is
    /// wrong. Tombstones older than [`E2B_TOMBSTONE_MS`] are dropped.
    pub fn remove_e2b_keys(&self, sandbox: &str) -> Result<(), DbError> {
        let now = warden_runtime::state::now_ms() as i64;
        for k in self.e2b_keys(Some(sandbox))? {
            self.conn
                .execute(
                    "UPDATE e2b_keys SET key = ?3, gone = 1, created_ms = ?4 WHERE sandbox = ?1 AND token = ?2",
                    params![k.sandbox, k.token, key_hash(&k.key), now],
                )
                .map_err(q("end a sandbox's envd access tokens"))?;
        }
        self.conn
            .execute(
                "DELETE FROM e2b_keys WHERE gone = 1 AND created_ms < ?1",
                params![now - E2B_TOMBSTONE_MS],
            )
            .map_err(q("drop old envd access tokens"))?;
        Ok(())
    }

    /// Whether `key` was an envd access token of `sandbox` that ended.
    pub fn was_e2b_key(&self, sandbox: &str, key: &str) -> Result<bool, DbError> {
        let mut st = self
            .conn
            .prepare("SELECT key FROM e2b_keys WHERE gone = 1 AND sandbox = ?1")
            .map_err(q("read ended envd access tokens"))?;
        let hashes = st
            .query_map(params![sandbox], |r| r.get::<_, String>(0))
            .map_err(q("read ended envd access tokens"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(q("read ended envd access tokens"))?;
        let given = key_hash(key);
        Ok(hashes.iter().any(|h| h == &given))
    }

    /// Revoke a token by its id or name, and every token it made over the
    /// API and theirs, in one transaction (a token check that follows
    /// sees them all revoked, none half); whether one was.
    pub fn revoke_token(&self, id_or_name: &str) -> Result<bool, DbError> {
        self.revoke_token_within(id_or_name, None)
    }

    /// [`Db::revoke_token`] for a token `by`: only one of `by`'s
    /// descendants (made by it, or by one it made, ...) is found, never
    /// `by` itself, its maker, a sibling or a token the owner made.
    pub fn revoke_token_within(&self, id_or_name: &str, by: Option<&str>) -> Result<bool, DbError> {
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(q("revoke a token"))?;
        let n = tx
            .execute(
                "WITH RECURSIVE
                   mine(id) AS (SELECT id FROM tokens WHERE parent = ?2
                                UNION SELECT t.id FROM tokens t JOIN mine ON t.parent = mine.id),
                   target(id) AS (SELECT id FROM tokens
                                  WHERE (id = ?1 OR name = ?1) AND revoked = 0
                                    AND (?2 IS NULL OR id IN (SELECT id FROM mine))),
                   family(id) AS (SELECT id FROM target
                                  UNION SELECT t.id FROM tokens t JOIN family ON t.parent = family.id)
                 UPDATE tokens SET revoked = 1
                 WHERE id IN (SELECT id FROM family) AND revoked = 0",
                params![id_or_name, by],
            )
            .map_err(q("revoke a token"))?;
        tx.commit().map_err(q("revoke a token"))?;
        Ok(n > 0)
    }
}

fn sandbox_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SandboxRow> {
    let labels: String = r.get(2)?;
    Ok(SandboxRow {
        id: r.get(0)?,
        created_ms: r.get::<_, i64>(1)? as u64,
        labels: serde_json::from_str(&labels).unwrap_or_default(),
        profile: r.get(3)?,
        token: r.get(4)?,
    })
}

fn exec_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ExecRow> {
    let argv: String = r.get(4)?;
    Ok(ExecRow {
        id: r.get(0)?,
        sandbox: r.get(1)?,
        runtime_exec: r.get::<_, i64>(2)? as u64,
        supervisor_pid: r.get(3)?,
        argv: serde_json::from_str(&argv).unwrap_or_default(),
        started_ms: r.get::<_, i64>(5)? as u64,
        tty: r.get(6)?,
        exit_status: r.get(7)?,
        exit_signal: r.get(8)?,
        finished_ms: r.get::<_, Option<i64>>(9)?.map(|v| v as u64),
        holder: r.get(10)?,
        role: r
            .get::<_, Option<String>>(11)?
            .as_deref()
            .and_then(ExecRole::parse),
    })
}

fn e2b_key_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<E2bKey> {
    Ok(E2bKey {
        sandbox: r.get(0)?,
        token: r.get(1)?,
        key: r.get(2)?,
        uid: r.get(3)?,
        created_ms: r.get::<_, i64>(4)? as u64,
    })
}

fn token_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TokenRow> {
    let scopes: String = r.get(3)?;
    Ok(TokenRow {
        id: r.get(0)?,
        name: r.get(1)?,
        hash: r.get(2)?,
        scopes: scopes.split_whitespace().map(str::to_string).collect(),
        sandbox: r.get(4)?,
        created_ms: r.get::<_, i64>(5)? as u64,
        revoked: r.get::<_, i64>(6)? != 0,
        max_sandboxes: r.get::<_, Option<i64>>(7)?.map(|v| v as u64),
        max_memory: r.get::<_, Option<i64>>(8)?.map(|v| v as u64),
        sandbox_uid: r.get(9)?,
        max_pids: r
            .get::<_, Option<i64>>(10)?
            .and_then(|v| std::num::NonZeroU64::new(v as u64)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.db");
        {
            let db = Db::open(&path).unwrap();
            let mut labels = BTreeMap::new();
            labels.insert("team".to_string(), "a".to_string());
            db.insert_sandbox(&SandboxRow {
                id: "sb-1".into(),
                created_ms: 5,
                labels,
                profile: None,
                token: None,
            })
            .unwrap();
            db.insert_exec(&ExecRow {
                id: "ex-1".into(),
                sandbox: "sb-1".into(),
                runtime_exec: 1,
                supervisor_pid: 42,
                argv: vec!["true".into()],
                started_ms: 6,
                tty: false,
                exit_status: None,
                exit_signal: None,
                finished_ms: None,
                holder: Some("token:t-1".into()),
                role: Some(ExecRole::E2bInterpreter),
            })
            .unwrap();
        }
        let db = Db::open(&path).unwrap();
        assert_eq!(db.sandboxes().unwrap()[0].labels["team"], "a");
        let unfinished = db.unfinished_execs().unwrap();
        assert_eq!(unfinished.len(), 1);
        // Whose place it holds and what the daemon started it as outlive
        // the daemon, for the one that adopts it.
        assert_eq!(unfinished[0].holder.as_deref(), Some("token:t-1"));
        assert_eq!(unfinished[0].role, Some(ExecRole::E2bInterpreter));
        db.finish_exec("ex-1", 3, None, 9).unwrap();
        assert_eq!(db.exec("ex-1").unwrap().unwrap().exit_status, Some(3));
        assert!(db.unfinished_execs().unwrap().is_empty());
        db.remove_sandbox("sb-1").unwrap();
        assert!(db.exec("ex-1").unwrap().is_none());
    }

    fn token(id: &str, sandbox: Option<&str>) -> TokenRow {
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

    #[test]
    fn revoking_a_token_revokes_its_descendants_and_a_token_revokes_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("daemon.db")).unwrap();
        let made =
            |id: &str, parent: Option<&str>| db.insert_token_by(&token(id, None), parent).unwrap();
        made("maker", None);
        made("c1", Some("maker"));
        made("c2", Some("maker"));
        made("g1", Some("c1"));
        made("other", None);
        assert_eq!(db.maker_of("g1").unwrap().as_deref(), Some("c1"));
        assert_eq!(db.maker_of("maker").unwrap(), None);
        assert_eq!(db.children_of("maker").unwrap().len(), 2);
        let revoked = |id: &str| db.token(id).unwrap().unwrap().revoked;
        // A child reaches neither its sibling, its maker, itself nor the
        // owner's other token; its own child it does.
        for id in ["c2", "maker", "c1", "other"] {
            assert!(!db.revoke_token_within(id, Some("c1")).unwrap(), "{id}");
            assert!(!revoked(id), "{id}");
        }
        // The owner revokes the maker: its children and theirs go with it.
        assert!(db.revoke_token("maker").unwrap());
        for id in ["maker", "c1", "c2", "g1"] {
            assert!(revoked(id), "{id}");
        }
        assert!(!revoked("other"));
    }

    #[test]
    fn a_database_made_before_sandbox_identities_gains_them_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.db");
        {
            // The tables as they were before identities were recorded.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE tokens (id TEXT PRIMARY KEY, name TEXT NOT NULL, hash TEXT NOT NULL, scopes TEXT NOT NULL, sandbox TEXT, created_ms INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0, max_sandboxes INTEGER, max_memory INTEGER);
                 CREATE TABLE e2b_keys (sandbox TEXT NOT NULL, token TEXT NOT NULL, key TEXT NOT NULL, created_ms INTEGER NOT NULL, gone INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (sandbox, token));
                 INSERT INTO tokens (id, name, hash, scopes, sandbox, created_ms) VALUES ('old', 'old', 'h', 'exec', 'sb-a', 7);
                 INSERT INTO e2b_keys (sandbox, token, key, created_ms) VALUES ('sb-a', 'old', 'k0', 7);",
            )
            .unwrap();
        }
        let db = Db::open(&path).unwrap();
        let old = db.token("old").unwrap().unwrap();
        assert_eq!((old.sandbox_uid, old.max_pids), (None, None));
        let key = db.e2b_key("sb-a", "old").unwrap().unwrap();
        assert_eq!((key.uid, key.created_ms), (None, 7));
        db.insert_token(&token("new", Some("sb-a"))).unwrap();
        assert_eq!(
            db.token("new").unwrap().unwrap().sandbox_uid.as_deref(),
            Some("u1")
        );
        // Opening it again adds nothing twice.
        drop(db);
        Db::open(&path).unwrap();
    }

    #[test]
    fn removing_a_sandbox_revokes_the_tokens_made_for_it_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("daemon.db")).unwrap();
        db.insert_token(&token("mine", Some("sb-a"))).unwrap();
        db.insert_token(&token("other", Some("sb-b"))).unwrap();
        db.insert_token(&token("general", None)).unwrap();
        db.remove_sandbox("sb-a").unwrap();
        assert!(db.token("mine").unwrap().unwrap().revoked);
        assert!(!db.token("other").unwrap().unwrap().revoked);
        assert!(!db.token("general").unwrap().unwrap().revoked);
    }

    #[test]
    fn a_key_kept_for_an_earlier_sandbox_of_the_name_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("daemon.db")).unwrap();
        assert_eq!(db.insert_e2b_key("sb-a", "u1", "tok", "k1").unwrap(), "k1");
        // The sandbox was removed where the daemon did not see it, and
        // another took its name.
        assert_eq!(db.insert_e2b_key("sb-a", "u2", "tok", "k2").unwrap(), "k2");
        let kept = db.e2b_keys(Some("sb-a")).unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].uid.as_deref(), Some("u2"));
    }

    #[test]
    fn an_envd_access_token_is_kept_once_owner_only_and_goes_with_its_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.db");
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let db = Db::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the database keeps keys whole: owner-only");
        assert_eq!(db.insert_e2b_key("sb-a", "u1", "tok", "k1").unwrap(), "k1");
        // A second create or connect of the same token keeps the first.
        assert_eq!(db.insert_e2b_key("sb-a", "u1", "tok", "k2").unwrap(), "k1");
        db.insert_e2b_key("sb-a", "u1", "other", "k3").unwrap();
        db.insert_e2b_key("sb-b", "u2", "tok", "k4").unwrap();
        assert_eq!(db.e2b_keys(Some("sb-a")).unwrap().len(), 2);
        assert_eq!(db.e2b_keys(None).unwrap().len(), 3);
        db.remove_sandbox("sb-a").unwrap();
        assert!(db.e2b_key("sb-a", "tok").unwrap().is_none());
        assert_eq!(db.e2b_keys(None).unwrap()[0].key, "k4");
        // An ended one is recognised, by its hash only, and checks nothing.
        assert!(db.was_e2b_key("sb-a", "k1").unwrap());
        assert!(!db.was_e2b_key("sb-a", "k4").unwrap());
        assert!(!db.was_e2b_key("sb-b", "k1").unwrap());
        db.remove_e2b_keys("sb-b").unwrap();
        assert!(db.e2b_keys(None).unwrap().is_empty());
        assert!(db.was_e2b_key("sb-b", "k4").unwrap());
        // A later sandbox of the same name gets a key of its own.
        assert_eq!(db.insert_e2b_key("sb-a", "u3", "tok", "k5").unwrap(), "k5");
    }
}

//! The tables, and the columns added to them since their first release.

use rusqlite::Connection;

pub(super) const SCHEMA: &str = "
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
    ("sandboxes", "uid", "TEXT"),
    ("pool", "uid", "TEXT"),
];

/// Add the columns of [`ADDED_COLUMNS`] that `conn`'s tables lack.
pub(super) fn add_missing_columns(conn: &Connection) -> rusqlite::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::super::token_for_test as token;
    use super::super::Db;
    use rusqlite::Connection;

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
}

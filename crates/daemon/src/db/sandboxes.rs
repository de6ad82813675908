//! The sandboxes the daemon created, with their labels, the token that
//! made each, and since when the retention sweep has seen each stopped.

use rusqlite::{params, OptionalExtension};
use std::collections::BTreeMap;

use super::{q, Db, DbError};

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

impl Db {
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
}

pub(super) fn sandbox_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SandboxRow> {
    let labels: String = r.get(2)?;
    Ok(SandboxRow {
        id: r.get(0)?,
        created_ms: r.get::<_, i64>(1)? as u64,
        labels: serde_json::from_str(&labels).unwrap_or_default(),
        profile: r.get(3)?,
        token: r.get(4)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::token_for_test as token;
    use super::super::Db;

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
}

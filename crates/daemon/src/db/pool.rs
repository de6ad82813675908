//! The warm pool: started sandboxes waiting for a caller, nobody's yet.

use rusqlite::{params, OptionalExtension};

use super::{q, Db, DbError};

impl Db {
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
}

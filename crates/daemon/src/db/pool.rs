//! The warm pool: started sandboxes waiting for a caller, nobody's yet.
//! An entry is of one sandbox, by its identity ([`Sandbox::uid`]), as a
//! sandbox's record is: a sandbox that took a pooled one's name (removed
//! behind the daemon's back) is not pooled, never handed to a claimant
//! nor hidden from its owner.

use rusqlite::{params, OptionalExtension};
use warden_workspace::Sandbox;

use super::{q, Db, DbError};

impl Db {
    /// Started sandbox `sb` waiting in the pool of `profile`: nobody's yet.
    pub fn insert_pooled(&self, sb: &Sandbox, profile: &str) -> Result<(), DbError> {
        self.conn
            .execute(
                "INSERT INTO pool (id, profile, created_ms, uid) VALUES (?1, ?2, ?3, ?4)",
                params![
                    sb.name(),
                    profile,
                    warden_runtime::state::now_ms() as i64,
                    sb.uid()
                ],
            )
            .map_err(q("record a pooled sandbox"))?;
        Ok(())
    }

    /// Whether `sb` itself is in the pool: an entry under its name made
    /// for an earlier sandbox of that name is not its (an entry made
    /// before the pool kept identities is held to its time).
    pub fn is_pooled_sandbox(&self, sb: &Sandbox) -> Result<bool, DbError> {
        let entry = self
            .conn
            .query_row(
                "SELECT uid, created_ms FROM pool WHERE id = ?1",
                params![sb.name()],
                |r| Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()
            .map_err(q("look for a pooled sandbox"))?;
        Ok(entry.is_some_and(|(uid, made)| super::made_for(sb, uid.as_deref(), made as u64)))
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

#[cfg(test)]
mod tests {
    use super::super::Db;

    #[test]
    fn a_pool_entry_is_of_the_sandbox_pooled_and_not_of_a_later_one_of_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("daemon.db")).unwrap();
        let store = warden_workspace::Store::open(dir.path().join("state")).unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let opts = warden_workspace::CreateOptions::new(ws);
        let pooled = store.create("sb-1", &opts).unwrap();
        db.insert_pooled(&pooled, "small").unwrap();
        assert!(db.is_pooled_sandbox(&pooled).unwrap());
        store.remove("sb-1").unwrap();
        let owners = store.create("sb-1", &opts).unwrap();
        assert!(!db.is_pooled_sandbox(&owners).unwrap());
    }
}

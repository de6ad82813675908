//! The sandboxes the daemon created, with their labels, the token that
//! made each, and since when the retention sweep has seen each stopped.
//!
//! A record is of one sandbox, by the identity that sandbox was made with
//! ([`Sandbox::uid`]), never of its name: a name is free again once its
//! sandbox is removed, by the daemon or behind its back (`warden rm`), and
//! whoever takes it next (the owner at the command line, another token, a
//! copy, a pool) inherits nothing of the record. [`Db::record_of`] is the
//! one read by sandbox; a record that is not of the sandbox holding its
//! name now is ignored, and [`Db::forget_stale`] drops it.

use rusqlite::{params, OptionalExtension};
use std::collections::BTreeMap;
use warden_workspace::Sandbox;

use super::{made_for, q, Db, DbError};

/// A sandbox the daemon created.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRow {
    pub id: String,
    pub created_ms: u64,
    pub labels: BTreeMap<String, String>,
    pub profile: Option<String>,
    /// The token that created it.
    pub token: Option<String>,
    /// The identity of the sandbox it is of ([`Sandbox::uid`]); `None` in
    /// a record made before the daemon kept it.
    pub uid: Option<String>,
}

impl SandboxRow {
    /// A new record of `sb`, made now, bound to its identity.
    pub fn of(
        sb: &Sandbox,
        labels: BTreeMap<String, String>,
        profile: Option<String>,
        token: Option<String>,
    ) -> SandboxRow {
        SandboxRow {
            id: sb.name().to_string(),
            created_ms: warden_runtime::state::now_ms(),
            labels,
            profile,
            token,
            uid: Some(sb.uid()),
        }
    }

    /// Whether this record is of `sb`, and not of an earlier sandbox that
    /// had its name.
    pub fn is_of(&self, sb: &Sandbox) -> bool {
        self.id == sb.name() && made_for(sb, self.uid.as_deref(), self.created_ms)
    }
}

impl Db {
    pub fn insert_sandbox(&self, row: &SandboxRow) -> Result<(), DbError> {
        let labels = serde_json::to_string(&row.labels).unwrap_or_else(|_| "{}".into());
        self.conn
            .execute(
                "INSERT OR REPLACE INTO sandboxes (id, created_ms, labels, profile, token, gone, uid) VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)",
                params![row.id, row.created_ms as i64, labels, row.profile, row.token, row.uid],
            )
            .map_err(q("record a sandbox"))?;
        Ok(())
    }

    /// The record of `sb`: none when the record kept under its name is of
    /// an earlier sandbox of that name.
    pub fn record_of(&self, sb: &Sandbox) -> Result<Option<SandboxRow>, DbError> {
        Ok(self.named(sb.name())?.filter(|r| r.is_of(sb)))
    }

    /// The record kept under name `id`, of whichever sandbox: for what
    /// acts on the record alone once its sandbox is gone.
    fn named(&self, id: &str) -> Result<Option<SandboxRow>, DbError> {
        self.conn
            .query_row(
                "SELECT id, created_ms, labels, profile, token, uid FROM sandboxes WHERE id = ?1 AND gone = 0",
                params![id],
                sandbox_row,
            )
            .optional()
            .map_err(q("read a sandbox"))
    }

    /// Drop what is kept under `sb`'s name of an earlier sandbox of that
    /// name (removed behind the daemon's back): its record and the
    /// commands started before `sb` was made. Whether there was one.
    /// The tokens made for that sandbox are already refused (they are
    /// bound to its identity, [`super::TokenRow::sandbox_uid`]); those
    /// made for `sb` are left.
    pub fn forget_stale(&self, sb: &Sandbox) -> Result<bool, DbError> {
        let Some(row) = self.named(sb.name())? else {
            return Ok(false);
        };
        if row.is_of(sb) {
            return Ok(false);
        }
        self.conn
            .execute(
                "DELETE FROM execs WHERE sandbox = ?1 AND started_ms < ?2",
                params![sb.name(), sb.created_ms() as i64],
            )
            .map_err(q("remove an earlier sandbox's commands"))?;
        self.conn
            .execute("DELETE FROM sandboxes WHERE id = ?1", params![sb.name()])
            .map_err(q("remove an earlier sandbox's record"))?;
        Ok(true)
    }

    /// The records of the sandboxes a token made, whether or not each is
    /// still there (pair them with the store, as `App::records` does).
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
            .prepare("SELECT id, created_ms, labels, profile, token, uid FROM sandboxes WHERE gone = 0 ORDER BY created_ms")
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
        uid: r.get(5)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::token_for_test as token;
    use super::super::Db;
    use super::SandboxRow;

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
    fn a_record_is_of_the_sandbox_it_was_made_with_and_not_of_a_later_one_of_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("daemon.db")).unwrap();
        let store = warden_workspace::Store::open(dir.path().join("state")).unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let opts = warden_workspace::CreateOptions::new(ws);
        let first = store.create("sb", &opts).unwrap();
        let row = SandboxRow::of(&first, Default::default(), None, Some("tok".into()));
        db.insert_sandbox(&row).unwrap();
        db.insert_exec(&crate::db::ExecRow::started(
            "e1".into(),
            "sb".into(),
            1,
            1,
            vec!["true".into()],
            false,
        ))
        .unwrap();
        assert_eq!(db.record_of(&first).unwrap(), Some(row.clone()));
        assert!(!db.forget_stale(&first).unwrap());
        store.remove("sb").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let second = store.create("sb", &opts).unwrap();
        // Even a record made after the second sandbox by the clock (a
        // clock stepped back) is the first's: identities, not times.
        let later = SandboxRow {
            created_ms: second.created_ms() + 60_000,
            ..row
        };
        db.insert_sandbox(&later).unwrap();
        assert_eq!(db.record_of(&second).unwrap(), None);
        assert!(db.forget_stale(&second).unwrap());
        assert!(db.sandboxes().unwrap().is_empty());
        assert!(db.execs_of("sb").unwrap().is_empty());
    }
}

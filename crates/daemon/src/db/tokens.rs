//! The tokens (hashed), who made each, and their revocation with
//! everything they made.

use rusqlite::{params, OptionalExtension};

use super::{q, Db, DbError};

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

impl Db {
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
    use super::super::token_for_test as token;
    use super::super::Db;

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
}

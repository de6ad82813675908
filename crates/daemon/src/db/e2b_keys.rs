//! The envd access tokens of the sandboxes the E2B door made, kept whole
//! while their sandbox lives and as their hash for a while after.

use rusqlite::{params, OptionalExtension};

use super::{q, Db, DbError};

/// How long an ended envd access token is recognised (as its hash).
pub const E2B_TOMBSTONE_MS: i64 = 7 * 24 * 3600 * 1000;

fn key_hash(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

impl Db {
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

#[cfg(test)]
mod tests {
    use super::super::Db;
    use std::os::unix::fs::PermissionsExt;

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

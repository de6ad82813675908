//! The commands the daemon started and how they ended.

use rusqlite::{params, OptionalExtension};

use super::{q, Db, DbError};

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

impl Db {
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

#[cfg(test)]
mod tests {
    use super::super::{Db, SandboxRow};
    use super::*;
    use std::collections::BTreeMap;

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
                uid: Some("u1".into()),
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
}

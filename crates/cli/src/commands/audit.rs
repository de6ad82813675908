//! `warden audit`: verify, show, list and prune audit logs; and how this
//! door words an event's reason (the flag that would change a decision),
//! for the lines of `audit show`, `--net-log` and the end of a run.

use super::{audit_dir, sandboxes};
use anyhow::Context;
use clap::Subcommand;
use std::path::PathBuf;
use warden_audit::chain::{Record, Verdict};
use warden_audit::{Event, EventKind};
use warden_policy::{parse_duration, Field};

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Check that each log's records are intact, complete and in order;
    /// names the first bad record. A log whose writer never closed it (still
    /// running, or killed) is "intact, unfinished". Exit 1 when any log was
    /// tampered with
    Verify {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Print a log readably, each record with its number (#N, as `verify`
    /// names them): a FILE, a run's id (as `audit list` shows it), a named
    /// sandbox, or --last (the newest run's log)
    Show {
        #[arg(value_name = "FILE|RUN|SANDBOX", required_unless_present = "last")]
        target: Option<String>,
        /// The newest run's log in warden's state directory
        #[arg(long, conflicts_with = "target")]
        last: bool,
        /// Only what was refused (denied connections, blocked secrets,
        /// refused commits)
        #[arg(long)]
        denied: bool,
        /// Only records since this long ago (e.g. 10m, 2h) or since this
        /// time (e.g. 2026-11-22T10:00:00Z)
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Print the records as they are stored (JSON lines)
        #[arg(long)]
        json: bool,
    },
    /// List the audit logs of past runs (in warden's state directory),
    /// newest first: each log, how the run ended, how much it refused, its
    /// command
    List {
        /// Only the N newest runs
        #[arg(long, value_name = "N")]
        last: Option<usize>,
        /// Only runs that refused something
        #[arg(long)]
        denied: bool,
        /// Only runs that ended with a status other than 0, or with no
        /// end recorded
        #[arg(long)]
        failed: bool,
        /// Only runs started since this long ago (e.g. 10m, 2h) or since
        /// this time (e.g. 2026-11-22T10:00:00Z)
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// One JSON object per run (log, run, started_ms, command, exit,
        /// denied)
        #[arg(long)]
        json: bool,
    },
    /// Remove the audit logs of past runs older than a duration (in
    /// warden's state directory; logs chosen with --audit-log are yours)
    Prune {
        /// e.g. 30d, 12h
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        older_than: std::time::Duration,
    },
}

pub fn audit(cmd: AuditCommand) -> anyhow::Result<u8> {
    match cmd {
        AuditCommand::Verify { files } => verify(&files),
        AuditCommand::Show {
            target,
            last,
            denied,
            since,
            json,
        } => show(target.as_deref(), last, denied, since.as_deref(), json),
        AuditCommand::Prune { older_than } => prune(older_than),
        AuditCommand::List {
            last,
            denied,
            failed,
            since,
            json,
        } => list(&ListFilter {
            last,
            denied,
            failed,
            since_ms: since.as_deref().map(parse_since).transpose()?,
            json,
        }),
    }
}

/// `audit verify`: one line per log; 1 when any was tampered with.
fn verify(files: &[PathBuf]) -> anyhow::Result<u8> {
    let mut all_ok = true;
    for f in files {
        match warden_audit::chain::verify(f)? {
            Verdict::Intact { records, head } => println!(
                "{}: intact, {records} records{}",
                warden_workspace::printable_path(f),
                if head {
                    ", ending where its head file says"
                } else {
                    " (no head file: a cut end could not be told)"
                }
            ),
            Verdict::Unfinished { last_seq, .. } => println!(
                "{}: intact, unfinished ({})",
                warden_workspace::printable_path(f),
                match last_seq {
                    Some(n) => format!("writer stopped at record #{n}"),
                    None => "writer stopped before its first record".into(),
                }
            ),
            Verdict::Broken { line, why } => {
                all_ok = false;
                println!(
                    "{}:{line}: TAMPERED at record #{}: {why}",
                    warden_workspace::printable_path(f),
                    line.saturating_sub(1)
                );
            }
        }
    }
    Ok(if all_ok { 0 } else { 1 })
}

/// `audit show`: a log's records, each with its number, filtered by
/// `--denied` and `--since`, as lines or as stored.
fn show(
    target: Option<&str>,
    last: bool,
    denied: bool,
    since: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let since_ms = since.map(parse_since).transpose()?;
    let file = log_of(target, last)?;
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read audit log {}", file.display()))?;
    for (i, line) in text.lines().enumerate() {
        let record = match Record::parse(line) {
            Ok(r) => r,
            Err(e) => {
                // A record this warden cannot read (damaged, or of a
                // newer kind) is named and passed over; the rest of
                // the log is still worth reading.
                eprintln!(
                    "warden: {}:{}: not a record this warden reads ({e}); skipped",
                    warden_workspace::printable_path(&file),
                    i + 1
                );
                continue;
            }
        };
        let event = &record.event;
        if denied && !event.is_denial() {
            continue;
        }
        if since_ms.is_some_and(|s| event.ts_ms < s) {
            continue;
        }
        if json {
            // The record's own bytes (a reader can hash them), with any
            // control or format character an older warden wrote raw shown
            // as an escape: the same JSON.
            println!("{}", warden_audit::json::escape_line(line));
        } else {
            println!(
                "#{:<5} {}",
                record.seq,
                sandboxes::printable(&describe(event))
            );
        }
    }
    Ok(0)
}

/// `audit prune`: remove the state directory's logs (and their head
/// files) last written before `older_than` ago.
fn prune(older_than: std::time::Duration) -> anyhow::Result<u8> {
    let dir = audit_dir()?;
    let cutoff = std::time::SystemTime::now()
        .checked_sub(older_than)
        .unwrap_or(std::time::UNIX_EPOCH);
    let mut removed = 0usize;
    let entries = match std::fs::read_dir(&dir) {
        Ok(rd) => rd.filter_map(|e| e.ok()).collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    for e in entries {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < cutoff);
        if old {
            std::fs::remove_file(&p).with_context(|| format!("cannot remove {}", p.display()))?;
            let _ = std::fs::remove_file(warden_audit::chain::head_path(&p));
            removed += 1;
        }
    }
    println!(
        "removed {removed} audit log(s) older than {}",
        humantime::format_duration(older_than)
    );
    Ok(0)
}

/// `audit list`: each run's log with its command, its exit and how many
/// decisions it refused.
/// What `audit list` shows.
struct ListFilter {
    last: Option<usize>,
    denied: bool,
    failed: bool,
    since_ms: Option<u64>,
    json: bool,
}

fn list(f: &ListFilter) -> anyhow::Result<u8> {
    let mut runs: Vec<(PathBuf, Summary)> = run_logs()?
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let events: Vec<Event> = text
                .lines()
                .filter_map(|l| Record::parse(l).ok())
                .map(|r| r.event)
                .collect();
            let summary = Summary::of(&events);
            (p, summary)
        })
        .filter(|(_, s)| !f.denied || s.denied > 0)
        .filter(|(_, s)| !f.failed || s.exit != Some(0))
        .filter(|(_, s)| f.since_ms.is_none_or(|t| s.started_ms >= t))
        .collect();
    // Newest first; a log's name begins with its second, its first
    // record says the millisecond.
    runs.sort_by(|a, b| (b.1.started_ms, &b.0).cmp(&(a.1.started_ms, &a.0)));
    runs.truncate(f.last.unwrap_or(usize::MAX));
    for (p, summary) in runs {
        if f.json {
            let run = p.file_stem().map(|s| s.to_string_lossy().into_owned());
            let v = serde_json::json!({
                "log": p,
                "run": run,
                "started_ms": summary.started_ms,
                "command": summary.argv,
                "exit": summary.exit,
                "denied": summary.denied,
            });
            println!("{}", warden_audit::json::to_string(&v)?);
            continue;
        }
        let command = sandboxes::printable(&summary.command);
        println!(
            "{}  {}, {} denied  {command}",
            warden_workspace::printable_path(&p),
            summary.status,
            summary.denied
        );
    }
    Ok(0)
}

/// A run's line in `audit list`, read from its log's events.
struct Summary {
    /// The command the run was created with.
    command: String,
    argv: Vec<String>,
    /// When its first record was written.
    started_ms: u64,
    /// Its exit status, when one was recorded.
    exit: Option<i32>,
    /// How it ended, or that no end was recorded.
    status: String,
    /// How many decisions it refused.
    denied: u64,
}

impl Summary {
    fn of(events: &[Event]) -> Self {
        let argv = events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::Created { command, .. } => Some(command.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let command = argv.join(" ");
        let exit = events.iter().rev().find_map(|e| match &e.kind {
            EventKind::Exited { status, .. } => Some(*status),
            _ => None,
        });
        let status = exit.map_or_else(|| "no exit recorded".into(), |s| format!("exit {s}"));
        let started_ms = events.first().map_or(0, |e| e.ts_ms);
        // Denials counted past the old decision log's bound count
        // for what they number.
        let denied: u64 = events
            .iter()
            .map(|e| match e.kind {
                EventKind::ConnectionsNotRecorded { denied, .. } => denied,
                EventKind::ConnectionsAggregated {
                    allowed: false,
                    count,
                    ..
                } => count,
                EventKind::SecretsAggregated {
                    action: warden_audit::SecretAction::Blocked,
                    count,
                    ..
                } => count,
                _ => u64::from(e.is_denial()),
            })
            .sum();
        Summary {
            command,
            argv,
            started_ms,
            exit,
            status,
            denied,
        }
    }
}

/// The runs' logs in the state directory, oldest first (their names
/// begin with the time).
fn run_logs() -> anyhow::Result<Vec<PathBuf>> {
    let dir = audit_dir()?;
    let mut logs: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    logs.sort();
    Ok(logs)
}

/// `--since`: a duration before now, or a point in time.
pub fn parse_since(w: &str) -> anyhow::Result<u64> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    if let Ok(d) = parse_duration(w) {
        return Ok(now_ms.saturating_sub(d.as_millis() as u64));
    }
    let t = humantime::parse_rfc3339_weak(w).map_err(|_| {
        anyhow::anyhow!(
            "--since {w:?} is neither a duration (10m, 2h) nor a time (2026-11-22T10:00:00Z)"
        )
    })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0))
}

/// The log `audit show` reads: a path, a run's id (its log in the state
/// directory is `TIME-ID.jsonl`), a named sandbox's log, or the newest run.
fn log_of(target: Option<&str>, last: bool) -> anyhow::Result<PathBuf> {
    if last {
        return run_logs()?.pop().context(
            "no run has an audit log in warden's state directory yet (`warden audit list` lists them)",
        );
    }
    let Some(t) = target else {
        anyhow::bail!("give a log: FILE, a run's id, a sandbox's name, or --last");
    };
    let path = PathBuf::from(t);
    if path.is_file() || t.contains('/') {
        return Ok(path);
    }
    if let Some(p) = run_logs()?.into_iter().find(|p| {
        p.file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s == t || s.ends_with(&format!("-{t}")))
    }) {
        return Ok(p);
    }
    if let Ok(sb) = super::state_dir()
        .and_then(sandboxes::store)
        .and_then(|s| Ok(s.get(t)?))
    {
        return Ok(sb.dir().join("audit.jsonl"));
    }
    anyhow::bail!(
        "{t:?} is no audit log file, run id or sandbox name: `warden audit list` lists the runs, `warden ls` the sandboxes"
    )
}

/// What would change a decision, in this door's words: the option's flag
/// with the entries that would allow it. Below the doors the proxy says
/// what happened and names the option only as a field; here it becomes a
/// flag (the daemon says a JSON path, a profile says a key).
pub fn remedy(field: Field, entries: &[String]) -> Option<String> {
    let flag = field.flag()?;
    let them = if entries.len() > 1 { "them" } else { "it" };
    Some(match (entries, field.ty()) {
        ([], "bool") => format!("`{flag}` would allow {them}"),
        ([], "size") => format!("a larger `{flag}` would allow {them}"),
        ([], _) => format!("see `{flag}`"),
        (entries, _) => {
            let spelled: Vec<String> = entries
                .iter()
                .map(|e| {
                    if e.contains(' ') {
                        format!("{flag} '{e}'")
                    } else {
                        format!("{flag} {e}")
                    }
                })
                .collect();
            format!("`{}` would allow {them}", spelled.join(" "))
        }
    })
}

/// What would have allowed a refusal, in the CLI's words.
fn word(key: &str, entries: &[String]) -> Option<String> {
    remedy(Field::from_profile_key(key)?, entries)
}

/// An event's line as the CLI shows it: its description, and for a denial
/// the flag that would allow it.
pub fn describe_kind(kind: &warden_audit::EventKind) -> String {
    kind.describe_with(word)
}

/// [`describe_kind`] after the event's time and sandbox.
pub fn describe(event: &warden_audit::Event) -> String {
    event.describe_with(word)
}

/// An end-of-run notice in this door's words.
pub fn notice(n: &warden_runtime::events::Notice) -> String {
    use warden_runtime::events::Notice;
    match n {
        Notice::Said(line) => line.clone(),
        Notice::Denied(d) => {
            let more = match d.more {
                0 => String::new(),
                n => format!(" (and {n} more)"),
            };
            let remedy = d
                .field
                .and_then(|f| remedy(f, &d.entries))
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            format!(
                "egress denied: {}: {}{remedy}{more}",
                d.what.join(", "),
                d.why
            )
        }
    }
}

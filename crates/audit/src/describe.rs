//! An event as one line a person reads: time, sandbox, what happened.
//! Refusals and losses are in capitals (`DENY`, `BLOCKED`, `DEGRADED`,
//! `LOST`) so that they stand out in a long log. The line may hold what the
//! sandbox sent (names, paths): a front door that prints it to a terminal
//! escapes control characters first.

use crate::{Event, EventKind, SecretAction, StopReason, VmCut};

impl Event {
    /// One readable line: RFC 3339 time, sandbox, what happened.
    pub fn describe(&self) -> String {
        let ts = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.ts_ms),
        );
        format!("{ts} {} {}", self.sandbox, describe_kind(&self.kind))
    }
}

impl Event {
    /// [`Event::describe`], followed in parentheses by a door's words for
    /// what would have allowed a refusal ([`EventKind::describe_with`]).
    pub fn describe_with(&self, word: impl Fn(&str, &[String]) -> Option<String>) -> String {
        let line = self.describe();
        match self.kind.remedy(word) {
            Some(r) => format!("{line} ({r})"),
            None => line,
        }
    }
}

impl EventKind {
    /// What happened, as [`Event::describe`] says it after the time and
    /// the sandbox.
    pub fn describe(&self) -> String {
        describe_kind(self)
    }

    /// What happened, followed in parentheses by what would have allowed
    /// it when it is a refusal whose reason names an option: `word` gets
    /// the option by its profile key and the entries that would (none
    /// where the option is a switch or a size) and says it in its door's
    /// words (a flag, a JSON path), or nothing.
    pub fn describe_with(&self, word: impl Fn(&str, &[String]) -> Option<String>) -> String {
        match self.remedy(word) {
            Some(r) => format!("{} ({r})", self.describe()),
            None => self.describe(),
        }
    }

    /// A door's words ([`EventKind::describe_with`]) for what would have
    /// allowed a refused connection, if its reason names an option.
    pub fn remedy(&self, word: impl Fn(&str, &[String]) -> Option<String>) -> Option<String> {
        let EventKind::Connection {
            allowed: false,
            reason: Some(reason),
            ..
        } = self
        else {
            return None;
        };
        let entries: Vec<String> = reason.allow.iter().map(|a| a.value.clone()).collect();
        word(reason.field()?, &entries)
    }
}

/// When an aggregation window began.
fn kind_window(since_ms: u64) -> String {
    humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(since_ms),
    )
    .to_string()
}

/// What happened, by the group of kinds it belongs to. Every kind is named here, so that a new
/// one cannot go without its sentence.
fn describe_kind(kind: &EventKind) -> String {
    match kind {
        EventKind::Created { .. }
        | EventKind::Degraded { .. }
        | EventKind::Started { .. }
        | EventKind::ExecStarted { .. }
        | EventKind::ExecExited { .. }
        | EventKind::Workspace { .. }
        | EventKind::ApiDenied { .. }
        | EventKind::TtlChanged { .. }
        | EventKind::Paused { .. }
        | EventKind::Resumed { .. }
        | EventKind::Stopping { .. }
        | EventKind::EventsDropped { .. }
        | EventKind::EventsOverBudget { .. }
        | EventKind::CacheLeftOut { .. }
        | EventKind::Exited { .. } => describe_life(kind),
        EventKind::VolumeHeldBack {
            volume,
            reason,
            entries,
            paths,
            kept,
        } => describe_held_back(volume, reason, *entries, paths, kept.as_deref()),
        EventKind::ExecOutputCut { .. } | EventKind::VmCutOff { .. } => describe_cut(kind),
        EventKind::Connection { .. }
        | EventKind::ConnectionClosed { .. }
        | EventKind::ConnectionsNotRecorded { .. }
        | EventKind::EgressChanged { .. }
        | EventKind::Ask { .. }
        | EventKind::AskAnswered { .. }
        | EventKind::ConnectionsAggregated { .. } => describe_traffic(kind),
        EventKind::Secret { .. } | EventKind::SecretsAggregated { .. } => describe_secret(kind),
        EventKind::ExecRefused { .. } | EventKind::ExecRefusedAggregated { .. } => {
            describe_refused_program(kind)
        }
    }
}

/// A program a rule refused, once or counted.
fn describe_refused_program(kind: &EventKind) -> String {
    let named = |program: &Option<std::path::PathBuf>, none: &str| {
        program
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| none.into())
    };
    match kind {
        EventKind::ExecRefused { program, rule, by } => format!(
            "REFUSED exec of {} ({rule}, enforced by {by})",
            named(program, "an unnamed file")
        ),
        EventKind::ExecRefusedAggregated {
            program,
            rule,
            count,
            since_ms,
        } => format!(
            "REFUSED exec of {} ({rule}) {count} more times since {} (counted)",
            named(program, "programs past the window's bound"),
            kind_window(*since_ms)
        ),
        // Routed here by `describe_kind` only for the kinds above.
        other => other.name().to_string(),
    }
}

/// What the microVM backend's relay cut, and which of its bounds was passed.
fn describe_cut(kind: &EventKind) -> String {
    match kind {
        EventKind::ExecOutputCut { exec, stalled_ms } => format!(
            "exec {exec} OUTPUT CUT: its caller took nothing of it for {}; what it writes from now on is dropped (the process runs on)",
            span(*stalled_ms)
        ),
        EventKind::VmCutOff {
            cause: VmCut::UnaskedAnswers { answers, bound },
        } => format!(
            "VM CUT OFF: its guest sent {answers} answers about its shares that nobody asked for (the host holds at most {bound}); the sandbox ends"
        ),
        EventKind::VmCutOff {
            cause: VmCut::GuestStalled { stalled_ms },
        } => format!(
            "VM CUT OFF: its guest took nothing from its channel for {}; the sandbox ends",
            span(*stalled_ms)
        ),
        // Routed here by `describe_kind` only for the kinds above.
        other => other.name().to_string(),
    }
}

/// A duration in whole seconds where it is one, else in milliseconds.
fn span(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// A sandbox's and its commands' life, its workspace and the calls made about it.
/// A volume's merge held back what the owner's configuration reads.
fn describe_held_back(
    volume: &std::path::Path,
    reason: &str,
    entries: u64,
    paths: &[std::path::PathBuf],
    kept: Option<&std::path::Path>,
) -> String {
    let one = entries == 1;
    format!(
        "HELD BACK ({reason}): {entries} {} the sandbox wrote into the volume {} {} not merged, since the owner's configuration reads {} or a file below {}: {}; {}",
        if one { "entry" } else { "entries" },
        volume.display(),
        if one { "was" } else { "were" },
        if one { "it" } else { "them" },
        if one { "it" } else { "them" },
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        match kept {
            Some(k) => format!("kept for the owner in {}", k.display()),
            None => "not kept".to_string(),
        }
    )
}

fn describe_life(kind: &EventKind) -> String {
    match kind {
        EventKind::Created {
            command,
            workspace,
            rootless,
            cgroup: _,
        } => format!(
            "created: {}{}{}",
            command.join(" "),
            workspace
                .as_ref()
                .map(|w| format!(" (workspace {})", w.display()))
                .unwrap_or_default(),
            if *rootless { ", rootless" } else { "" }
        ),
        EventKind::Degraded { layer, lost } => format!("DEGRADED {layer}: {lost}"),
        EventKind::Started { pid } => format!("started (init pid {pid})"),
        EventKind::ExecStarted {
            exec,
            argv,
            pid,
            tty,
        } => format!(
            "exec {exec} started: {} (pid {pid}{})",
            argv.join(" "),
            if *tty { ", tty" } else { "" }
        ),
        EventKind::ExecExited {
            exec,
            status,
            signal,
            duration_ms,
        } => format!(
            "exec {exec} exited with status {status}{} after {duration_ms} ms",
            signal.map(|s| format!(" (signal {s})")).unwrap_or_default()
        ),
        EventKind::Workspace {
            action,
            name,
            paths,
            detail,
        } => format!(
            "workspace {} {name}{}{}",
            action.as_str(),
            if paths.is_empty() {
                String::new()
            } else {
                format!(" ({} paths)", paths.len())
            },
            detail
                .lines()
                .next()
                .filter(|d| !d.is_empty())
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ),
        EventKind::ApiDenied {
            method,
            route,
            token,
            reason,
        } => format!(
            "API call denied: {method} {route} by {}: {reason}",
            token
                .as_deref()
                .map(|t| format!("token {t}"))
                .unwrap_or_else(|| "an unknown caller".into())
        ),
        EventKind::TtlChanged { deadline_ms: None } => "time to live removed".to_string(),
        EventKind::Paused { by, freezer } => {
            format!("paused by {by}: its processes are frozen in place ({freezer})")
        }
        EventKind::Resumed { by, paused_ms } => {
            format!("resumed by {by} after {paused_ms} ms paused")
        }
        EventKind::TtlChanged {
            deadline_ms: Some(d),
        } => format!(
            "time to live changed: stops at {}",
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(*d)
            )
        ),
        EventKind::Stopping { reason } => format!(
            "stopping: {}",
            match reason {
                StopReason::Requested => "requested",
                StopReason::Ttl => "its time to live ran out",
                StopReason::Timeout => "the timeout was reached",
                StopReason::SupervisorLost => "its supervisor was lost",
                StopReason::StateRemoved => "its state directory was removed",
            }
        ),
        EventKind::EventsDropped { count } => {
            format!("LOST {count} events before this one (a sink fell behind)")
        }
        EventKind::EventsOverBudget {
            budget_bytes,
            of,
            protocol,
            allowed,
            count,
            ..
        } => format!(
            "OVER BUDGET: {count} {of}{}{} events only counted (the sandbox's events reached their budget of {} KiB in the log)",
            protocol.map(|p| format!(" {}", p.as_str())).unwrap_or_default(),
            match allowed {
                Some(true) => " allowed",
                Some(false) => " denied",
                None => "",
            },
            budget_bytes >> 10
        ),
        EventKind::CacheLeftOut { files, limit_bytes } => format!(
            "CACHE FULL: {files} {} written to the profile's caches {} not kept (the caches' bound is the sandbox's `resources.disk`, {} MiB)",
            if *files == 1 { "file" } else { "files" },
            if *files == 1 { "was" } else { "were" },
            limit_bytes >> 20
        ),
        EventKind::Exited {
            status,
            reason,
            signal,
            duration_ms,
            peaks: _,
        } => format!(
            "exited with status {status} ({}{}) after {duration_ms} ms",
            reason.as_str(),
            signal.map(|s| format!(", signal {s}")).unwrap_or_default()
        ),
        // Routed here by `describe_kind` only for the kinds above.
        other => other.name().to_string(),
    }
}

/// Connections, the allowlist and the questions asked about it.
fn describe_traffic(kind: &EventKind) -> String {
    match kind {
        EventKind::Connection {
            protocol,
            conn,
            name,
            port,
            original_destination,
            allowed,
            rule,
            detail,
            bytes_out,
            bytes_in,
            duration_ms: _,
            reason: _,
        } => {
            let port = if *protocol == crate::Protocol::Dns {
                String::new()
            } else {
                format!(":{port}")
            };
            // Without a name, the address asked for (which holds its port).
            let destination = match (name, original_destination) {
                (Some(name), _) => format!("{name}{port}"),
                (None, Some(asked)) => asked.clone(),
                (None, None) => format!("-{port}"),
            };
            let rule = rule
                .as_deref()
                .filter(|_| *allowed)
                .map(|r| format!(" (rule {r})"))
                .unwrap_or_default();
            format!(
                "{} {} {destination}{rule} {detail}{}{}",
                if *allowed { "allow" } else { "DENY" },
                protocol.as_str(),
                bytes(*bytes_out, *bytes_in),
                conn.map(|c| format!(" [conn {c}]")).unwrap_or_default(),
            )
        }
        EventKind::ConnectionClosed {
            conn,
            name,
            port,
            bytes_out,
            bytes_in,
            duration_ms,
        } => format!(
            "closed {}:{port} after {duration_ms} ms{} [conn {conn}]",
            name.as_deref().unwrap_or("-"),
            bytes(*bytes_out, *bytes_in),
        ),
        EventKind::ConnectionsNotRecorded { allowed, denied } => format!(
            "{allowed} allowed and {denied} denied connections past the log's bound (counted only)"
        ),
        EventKind::EgressChanged {
            added,
            removed,
            by,
            closed,
        } => {
            let mut parts = Vec::new();
            if !added.is_empty() {
                parts.push(format!("added {}", added.join(", ")));
            }
            if !removed.is_empty() {
                parts.push(format!("removed {}", removed.join(", ")));
            }
            if parts.is_empty() {
                parts.push("no change".into());
            }
            let cut = match closed {
                0 => String::new(),
                n => format!("; {n} open connection(s) cut"),
            };
            format!("allowlist changed by {by}: {}{cut}", parts.join("; "))
        }
        EventKind::Ask {
            question,
            protocol,
            name,
            port,
            ..
        } => format!("ask {question}: may {protocol} {name}:{port} go? (waiting for an answer)"),
        EventKind::AskAnswered {
            question,
            name,
            port,
            decision,
            by,
        } => format!("ask {question} about {name}:{port} answered {decision} by {by}"),
        EventKind::ConnectionsAggregated {
            protocol,
            name,
            allowed,
            count,
            since_ms,
            detail,
            reason: _,
        } => format!(
            "{} {} {} {count} more times since {} (counted, not written one by one){}",
            if *allowed { "allow" } else { "DENY" },
            protocol.as_str(),
            name.as_deref().unwrap_or("(other names)"),
            kind_window(*since_ms),
            after_colon(detail)
        ),
        // Routed here by `describe_kind` only for the kinds above.
        other => other.name().to_string(),
    }
}

/// A secret's substitutions and refusals.
fn describe_secret(kind: &EventKind) -> String {
    match kind {
        EventKind::Secret {
            name,
            host,
            action,
            detail,
            reason: _,
        } => format!(
            "secret {name} {} ({host}){}",
            secret_word(*action),
            after_colon(detail)
        ),
        EventKind::SecretsAggregated {
            name,
            host,
            action,
            count,
            since_ms,
            reason: _,
        } => format!(
            "secret {name} {} for {host} {count} more times since {} (counted)",
            secret_word(*action),
            kind_window(*since_ms)
        ),
        // Routed here by `describe_kind` only for the kinds above.
        other => other.name().to_string(),
    }
}

/// What was done with a secret; a refusal in capitals.
fn secret_word(action: SecretAction) -> &'static str {
    match action {
        SecretAction::Blocked => "BLOCKED",
        other => other.as_str(),
    }
}

/// `: detail`, or nothing when there is no detail.
fn after_colon(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

/// `, N bytes out, M in` when anything moved.
fn bytes(out: u64, inn: u64) -> String {
    if out + inn > 0 {
        format!(", {out} bytes out, {inn} in")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    fn at(kind: EventKind) -> String {
        Event {
            ts_ms: 1_700_000_000_123,
            sandbox: "sb".into(),
            kind,
        }
        .describe()
    }

    #[test]
    fn a_denied_connection_reads_as_a_denial_with_its_destination() {
        let line = at(EventKind::Connection {
            protocol: Protocol::Tls,
            conn: None,
            name: Some("evil.example".into()),
            port: 443,
            original_destination: Some("198.18.0.3:443".into()),
            allowed: false,
            rule: None,
            detail: "not in the allowlist".into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: None,
        });
        assert_eq!(
            line,
            "2023-11-14T22:13:20.123Z sb DENY tls evil.example:443 not in the allowlist"
        );
    }

    #[test]
    fn a_connection_without_a_name_reads_as_the_address_it_asked_for_once() {
        let line = at(EventKind::Connection {
            protocol: Protocol::Tcp,
            conn: None,
            name: None,
            port: 80,
            original_destination: Some("93.184.216.34:80".into()),
            allowed: false,
            rule: None,
            detail: "raw TCP is not allowed".into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: None,
        });
        assert!(
            line.ends_with("DENY tcp 93.184.216.34:80 raw TCP is not allowed"),
            "{line}"
        );
    }

    #[test]
    fn an_allowed_connection_names_its_rule_and_the_number_its_close_repeats() {
        let line = at(EventKind::Connection {
            protocol: Protocol::Dns,
            conn: Some(7),
            name: Some("pypi.org".into()),
            port: 53,
            original_destination: None,
            allowed: true,
            rule: Some("pypi.org".into()),
            detail: "resolved".into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: None,
        });
        assert!(line.ends_with("allow dns pypi.org (rule pypi.org) resolved [conn 7]"));
        let closed = at(EventKind::ConnectionClosed {
            conn: 7,
            name: Some("pypi.org".into()),
            port: 443,
            bytes_out: 10,
            bytes_in: 20,
            duration_ms: 5,
        });
        assert!(closed.ends_with("closed pypi.org:443 after 5 ms, 10 bytes out, 20 in [conn 7]"));
    }

    #[test]
    fn new_kinds_read_as_sentences() {
        assert!(at(EventKind::ExecStarted {
            exec: 2,
            argv: vec!["make".into(), "test".into()],
            pid: 40,
            tty: true
        })
        .ends_with("exec 2 started: make test (pid 40, tty)"));
        assert!(at(EventKind::ExecExited {
            exec: 2,
            status: 137,
            signal: Some(9),
            duration_ms: 12
        })
        .ends_with("exec 2 exited with status 137 (signal 9) after 12 ms"));
        assert!(at(EventKind::Stopping {
            reason: StopReason::Ttl
        })
        .ends_with("stopping: its time to live ran out"));
        assert!(at(EventKind::EventsDropped { count: 3 }).contains("LOST 3 events"));
        assert!(at(EventKind::Secret {
            name: "GITHUB_TOKEN".into(),
            host: "evil.example".into(),
            action: SecretAction::Blocked,
            detail: "placeholder sent to a host the secret is not for".into(),
            reason: None,
        })
        .contains("secret GITHUB_TOKEN BLOCKED (evil.example): placeholder"));
    }

    #[test]
    fn the_vm_relays_cuts_read_as_what_was_cut_and_why() {
        assert!(at(EventKind::ExecOutputCut {
            exec: 4,
            stalled_ms: 5000
        })
        .ends_with("exec 4 OUTPUT CUT: its caller took nothing of it for 5 s; what it writes from now on is dropped (the process runs on)"));
        let line = at(EventKind::VmCutOff {
            cause: VmCut::UnaskedAnswers {
                answers: 5,
                bound: 4,
            },
        });
        assert!(
            line.ends_with("sb VM CUT OFF: its guest sent 5 answers about its shares that nobody asked for (the host holds at most 4); the sandbox ends"),
            "{line}"
        );
        assert!(at(EventKind::VmCutOff {
            cause: VmCut::GuestStalled { stalled_ms: 30_000 },
        })
        .ends_with(
            "VM CUT OFF: its guest took nothing from its channel for 30 s; the sandbox ends"
        ));
    }
}

//! How long what a sandbox (or a caller) chooses may be in an event. Names
//! asked for, request paths, details that quote them, command lines, the
//! paths of a commit: each is the chooser's, and a record that copies it
//! whole lets the chooser pick the size of every line of the host's log
//! (a 60 KB request path made a 120 KB line). So every such string is cut
//! at a length fit for its kind, and what was cut is said in its place:
//! `…[N bytes cut, sha256:H]`, with the hash of the whole (redacted) text,
//! so that two cut strings can still be told apart or matched.
//!
//! A string is redacted (`warden-detect`) before it is cut: a credential
//! cut in half would no longer have the shape redaction knows, and half of
//! it would reach the log. A cut string is at most its kind's length,
//! marker included, so bounding again changes nothing (a record read back
//! and written again is the same bytes).

use crate::{Event, EventKind, Reason};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// A name asked for (DNS, SNI, `Host`): DNS's own bound.
pub const NAME_BYTES: usize = 253;
/// A detail, a reason, a rule or an entry in words (they quote request
/// paths).
pub const TEXT_BYTES: usize = 1024;
/// A path of a commit.
pub const PATH_BYTES: usize = 512;
/// One element of a command line.
pub const ARG_BYTES: usize = 1024;
/// A command line in all: elements past it are counted, not kept.
pub const ARGV_BYTES: usize = 8192;
/// Entries of a list (a commit's paths, allowlist changes, a name's
/// addresses) kept; past it the rest is counted in one last entry.
pub const LIST_ENTRIES: usize = 256;

/// `event` with every chosen string within its bound: borrowed as it is
/// when nothing is too long (the common case costs only the length checks).
pub fn bounded_event(event: &Event) -> Cow<'_, Event> {
    if fits(&event.kind) && event.sandbox.len() <= NAME_BYTES {
        return Cow::Borrowed(event);
    }
    let mut e = event.clone();
    cut(&mut e.sandbox, NAME_BYTES, false);
    bound(&mut e.kind);
    Cow::Owned(e)
}

/// `kind` with every chosen string within its bound.
pub fn bounded(mut kind: EventKind) -> EventKind {
    if !fits(&kind) {
        bound(&mut kind);
    }
    kind
}

/// Cut `s` to at most `limit` bytes (marker included) when it is longer,
/// redacting it first when `redact`.
fn cut(s: &mut String, limit: usize, redact: bool) {
    if s.len() <= limit {
        return;
    }
    if redact {
        if let Cow::Owned(r) = warden_detect::redact(s) {
            *s = r;
        }
        if s.len() <= limit {
            return;
        }
    }
    let mut keep = room(s.len(), limit);
    while keep > 0 && !s.is_char_boundary(keep) {
        keep -= 1;
    }
    let marker = marker(s.as_bytes(), keep);
    s.truncate(keep);
    s.push_str(&marker);
}

/// How many bytes of a `len`-byte text cut to `limit` are kept: the
/// marker's room is taken with the longest count it could state.
fn room(len: usize, limit: usize) -> usize {
    let longest = format!("…[{len} bytes cut, sha256:0123456789abcdef]").len();
    limit.saturating_sub(longest).min(len)
}

/// What stands for the part of `whole` past its first `keep` bytes.
fn marker(whole: &[u8], keep: usize) -> String {
    let hash = Sha256::digest(whole);
    let hex: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("…[{} bytes cut, sha256:{hex}]", whole.len() - keep)
}

fn cut_opt(s: &mut Option<String>, limit: usize, redact: bool) {
    if let Some(s) = s {
        cut(s, limit, redact);
    }
}

fn cut_path(p: &mut PathBuf) {
    let bytes = p.as_os_str().as_bytes();
    if bytes.len() <= PATH_BYTES {
        return;
    }
    let keep = room(bytes.len(), PATH_BYTES);
    let marker = marker(bytes, keep);
    let mut v = bytes[..keep].to_vec();
    v.extend_from_slice(marker.as_bytes());
    *p = PathBuf::from(OsString::from_vec(v));
}

/// Keep at most [`LIST_ENTRIES`] of `list`, the last one saying how many
/// more there were.
fn cut_list<T>(list: &mut Vec<T>, more: impl FnOnce(usize) -> T) {
    if list.len() > LIST_ENTRIES {
        let dropped = list.len() - (LIST_ENTRIES - 1);
        list.truncate(LIST_ENTRIES - 1);
        list.push(more(dropped));
    }
}

/// A command line within [`ARG_BYTES`] an element and [`ARGV_BYTES`] in
/// all; redacted as a whole first (an option's value is told by the
/// option before it).
fn cut_argv(argv: &mut Vec<String>) {
    if argv_fits(argv) {
        return;
    }
    *argv = warden_detect::redact_argv(argv);
    let mut total = 0;
    let mut kept = 0;
    for arg in argv.iter_mut() {
        cut(arg, ARG_BYTES, false);
        if total + arg.len() > ARGV_BYTES {
            break;
        }
        total += arg.len();
        kept += 1;
    }
    if kept < argv.len() {
        let rest: usize = argv[kept..].iter().map(String::len).sum();
        let more = argv.len() - kept;
        argv.truncate(kept);
        argv.push(format!("…[{more} more arguments, {rest} bytes, cut]"));
    }
}

fn argv_fits(argv: &[String]) -> bool {
    argv.iter().all(|a| a.len() <= ARG_BYTES)
        && argv.iter().map(String::len).sum::<usize>() <= ARGV_BYTES
}

fn reason_fits(r: &Option<Box<Reason>>) -> bool {
    r.as_ref().is_none_or(|r| {
        r.code.len() <= NAME_BYTES
            && r.field.as_ref().is_none_or(|f| f.len() <= NAME_BYTES)
            && r.addresses.len() <= LIST_ENTRIES
            && r.addresses.iter().all(|a| a.len() <= NAME_BYTES)
            && r.allow
                .as_ref()
                .is_none_or(|a| a.field.len() <= NAME_BYTES && a.value.len() <= TEXT_BYTES)
    })
}

fn cut_reason(r: &mut Option<Box<Reason>>) {
    if let Some(r) = r {
        cut(&mut r.code, NAME_BYTES, false);
        cut_opt(&mut r.field, NAME_BYTES, false);
        cut_list(&mut r.addresses, |n| format!("…[{n} more addresses]"));
        for a in &mut r.addresses {
            cut(a, NAME_BYTES, false);
        }
        if let Some(a) = &mut r.allow {
            cut(&mut a.field, NAME_BYTES, false);
            cut(&mut a.value, TEXT_BYTES, true);
        }
    }
}

fn short(s: &str, limit: usize) -> bool {
    s.len() <= limit
}

fn short_opt(s: &Option<String>, limit: usize) -> bool {
    s.as_ref().is_none_or(|s| s.len() <= limit)
}

/// Whether every chosen string of `kind` is within its bound already.
fn fits(kind: &EventKind) -> bool {
    use EventKind as K;
    match kind {
        K::Created { command, .. } => argv_fits(command),
        K::Degraded { layer, lost } => short(layer, NAME_BYTES) && short(lost, TEXT_BYTES),
        K::ExecStarted { argv, .. } => argv_fits(argv),
        K::Connection {
            name,
            original_destination,
            rule,
            detail,
            reason,
            ..
        } => {
            short_opt(name, NAME_BYTES)
                && short_opt(original_destination, NAME_BYTES)
                && short_opt(rule, TEXT_BYTES)
                && short(detail, TEXT_BYTES)
                && reason_fits(reason)
        }
        K::ConnectionClosed { name, .. } => short_opt(name, NAME_BYTES),
        K::Workspace {
            name,
            paths,
            detail,
            ..
        } => {
            short(name, NAME_BYTES)
                && paths.len() <= LIST_ENTRIES
                && paths.iter().all(|p| p.as_os_str().len() <= PATH_BYTES)
                && short(detail, TEXT_BYTES)
        }
        K::Secret {
            name, host, detail, ..
        } => short(name, NAME_BYTES) && short(host, NAME_BYTES) && short(detail, TEXT_BYTES),
        K::ApiDenied {
            method,
            route,
            token,
            reason,
        } => {
            short(method, NAME_BYTES)
                && short(route, TEXT_BYTES)
                && short_opt(token, NAME_BYTES)
                && short(reason, TEXT_BYTES)
        }
        K::Paused { by, freezer } => short(by, NAME_BYTES) && short(freezer, NAME_BYTES),
        K::Resumed { by, .. } => short(by, NAME_BYTES),
        K::EgressChanged {
            added, removed, by, ..
        } => {
            added.len() <= LIST_ENTRIES
                && removed.len() <= LIST_ENTRIES
                && added.iter().chain(removed).all(|e| e.len() <= TEXT_BYTES)
                && short(by, NAME_BYTES)
        }
        K::Ask {
            question,
            protocol,
            name,
            ..
        } => short(question, NAME_BYTES) && short(protocol, NAME_BYTES) && short(name, NAME_BYTES),
        K::AskAnswered {
            question,
            name,
            decision,
            by,
            ..
        } => {
            short(question, NAME_BYTES)
                && short(name, NAME_BYTES)
                && short(decision, NAME_BYTES)
                && short(by, NAME_BYTES)
        }
        K::ConnectionsAggregated {
            name,
            detail,
            reason,
            ..
        } => short_opt(name, NAME_BYTES) && short(detail, TEXT_BYTES) && reason_fits(reason),
        K::SecretsAggregated { name, host, .. } => {
            short(name, NAME_BYTES) && short(host, NAME_BYTES)
        }
        K::EventsOverBudget { of, .. } => short(of, NAME_BYTES),
        K::Started { .. }
        | K::ExecExited { .. }
        | K::ConnectionsNotRecorded { .. }
        | K::Stopping { .. }
        | K::TtlChanged { .. }
        | K::EventsDropped { .. }
        | K::CacheLeftOut { .. }
        | K::Exited { .. } => true,
    }
}

/// Cut every chosen string of `kind` to its bound.
fn bound(kind: &mut EventKind) {
    use EventKind as K;
    match kind {
        K::Created { command, .. } => cut_argv(command),
        K::Degraded { layer, lost } => {
            cut(layer, NAME_BYTES, false);
            cut(lost, TEXT_BYTES, true);
        }
        K::ExecStarted { argv, .. } => cut_argv(argv),
        K::Connection {
            name,
            original_destination,
            rule,
            detail,
            reason,
            ..
        } => {
            cut_opt(name, NAME_BYTES, false);
            cut_opt(original_destination, NAME_BYTES, false);
            cut_opt(rule, TEXT_BYTES, true);
            cut(detail, TEXT_BYTES, true);
            cut_reason(reason);
        }
        K::ConnectionClosed { name, .. } => cut_opt(name, NAME_BYTES, false),
        K::Workspace {
            name,
            paths,
            detail,
            ..
        } => {
            cut(name, NAME_BYTES, false);
            cut_list(paths, |n| PathBuf::from(format!("…[{n} more paths]")));
            paths.iter_mut().for_each(cut_path);
            cut(detail, TEXT_BYTES, true);
        }
        K::Secret {
            name, host, detail, ..
        } => {
            cut(name, NAME_BYTES, false);
            cut(host, NAME_BYTES, false);
            cut(detail, TEXT_BYTES, true);
        }
        K::ApiDenied {
            method,
            route,
            token,
            reason,
        } => {
            cut(method, NAME_BYTES, false);
            cut(route, TEXT_BYTES, true);
            cut_opt(token, NAME_BYTES, false);
            cut(reason, TEXT_BYTES, true);
        }
        K::Paused { by, freezer } => {
            cut(by, NAME_BYTES, false);
            cut(freezer, NAME_BYTES, false);
        }
        K::Resumed { by, .. } => cut(by, NAME_BYTES, false),
        K::EgressChanged {
            added, removed, by, ..
        } => {
            for list in [&mut *added, &mut *removed] {
                cut_list(list, |n| format!("…[{n} more entries]"));
                for e in list.iter_mut() {
                    cut(e, TEXT_BYTES, true);
                }
            }
            cut(by, NAME_BYTES, false);
        }
        K::Ask {
            question,
            protocol,
            name,
            ..
        } => {
            cut(question, NAME_BYTES, false);
            cut(protocol, NAME_BYTES, false);
            cut(name, NAME_BYTES, false);
        }
        K::AskAnswered {
            question,
            name,
            decision,
            by,
            ..
        } => {
            cut(question, NAME_BYTES, false);
            cut(name, NAME_BYTES, false);
            cut(decision, NAME_BYTES, false);
            cut(by, NAME_BYTES, false);
        }
        K::ConnectionsAggregated {
            name,
            detail,
            reason,
            ..
        } => {
            cut_opt(name, NAME_BYTES, false);
            cut(detail, TEXT_BYTES, true);
            cut_reason(reason);
        }
        K::SecretsAggregated { name, host, .. } => {
            cut(name, NAME_BYTES, false);
            cut(host, NAME_BYTES, false);
        }
        K::EventsOverBudget { of, .. } => cut(of, NAME_BYTES, false),
        K::Started { .. }
        | K::ExecExited { .. }
        | K::ConnectionsNotRecorded { .. }
        | K::Stopping { .. }
        | K::TtlChanged { .. }
        | K::EventsDropped { .. }
        | K::CacheLeftOut { .. }
        | K::Exited { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Protocol;

    fn request(path: &str) -> EventKind {
        EventKind::Connection {
            protocol: Protocol::Request,
            conn: None,
            name: Some("api.test".into()),
            port: 443,
            original_destination: None,
            allowed: false,
            rule: None,
            detail: format!("no request rule for api.test allows GET api.test{path}"),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: None,
        }
    }

    #[test]
    fn a_long_request_path_is_cut_with_a_marker_and_bounding_again_changes_nothing() {
        let path = format!("/nope/{}", "x".repeat(60_000));
        let once = bounded(request(&path));
        let EventKind::Connection { detail, .. } = &once else {
            panic!("{once:?}");
        };
        assert!(detail.len() <= TEXT_BYTES, "{}", detail.len());
        assert!(detail.starts_with("no request rule for api.test allows GET api.test/nope/xxx"));
        assert!(detail.contains(" bytes cut, sha256:"), "{detail}");
        assert_eq!(bounded(once.clone()), once);
        // Another path of the same length is told apart by its hash.
        let other = bounded(request(&format!("/nope/{}y", "x".repeat(59_999))));
        assert_ne!(other, once);
    }

    #[test]
    fn a_credential_cut_in_half_is_redacted_before_it_is_cut() {
        let token = ["ghp_", "q8Xz2LmN4vB7cK1pR9sT3wY6aB0dE5fG7hJ2"].concat();
        // The token straddles the cut.
        let path = format!("/{}{token}{}", "a".repeat(990), "b".repeat(5000));
        let EventKind::Connection { detail, .. } = bounded(request(&path)) else {
            panic!();
        };
        assert!(!detail.contains(&token[..12]), "{detail}");
    }

    #[test]
    fn a_name_is_cut_at_dns_length_and_a_command_line_at_its_bounds() {
        let mut e = request("/x");
        if let EventKind::Connection { name, .. } = &mut e {
            *name = Some("a".repeat(5000));
        }
        let EventKind::Connection { name: Some(n), .. } = bounded(e) else {
            panic!();
        };
        assert!(n.len() <= NAME_BYTES);
        let argv: Vec<String> = (0..100)
            .map(|i| format!("{i}{}", "z".repeat(4000)))
            .collect();
        let EventKind::ExecStarted { argv, .. } = bounded(EventKind::ExecStarted {
            exec: 1,
            argv,
            pid: 1,
            tty: false,
        }) else {
            panic!();
        };
        assert!(argv.iter().map(String::len).sum::<usize>() <= ARGV_BYTES + 100);
        assert!(argv.iter().all(|a| a.len() <= ARG_BYTES));
        assert!(argv.last().unwrap().contains("more arguments"), "{argv:?}");
    }

    #[test]
    fn a_commits_paths_are_cut_and_counted() {
        let paths: Vec<PathBuf> = (0..1000)
            .map(|i| PathBuf::from(format!("/w/{i}/{}", "p".repeat(900))))
            .collect();
        let EventKind::Workspace { paths, .. } = bounded(EventKind::Workspace {
            action: crate::WorkspaceAction::Commit,
            name: "s".into(),
            paths,
            detail: String::new(),
        }) else {
            panic!();
        };
        assert_eq!(paths.len(), LIST_ENTRIES);
        assert!(paths.iter().all(|p| p.as_os_str().len() <= PATH_BYTES));
        assert_eq!(
            paths.last().unwrap(),
            &PathBuf::from(format!("…[{} more paths]", 1000 - LIST_ENTRIES + 1))
        );
    }
}

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

use crate::{Event, EventKind};
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

/// Every chosen string of an event kind, each with its bound, handed to
/// `$v`: one list for both the check ([`Fits`], on `&EventKind`) and the
/// cut ([`Cut`], on `&mut EventKind`), so the two can never disagree on a
/// field or its bound. `$($mut)?` is how the reason's fields are borrowed.
macro_rules! walk {
    ($kind:expr, $v:expr $(, $mut:ident)?) => {{
        use EventKind as K;
        let v = $v;
        match $kind {
            K::Created { command, .. } => v.argv(command),
            K::Degraded { layer, lost } => {
                v.text(layer, NAME_BYTES, false);
                v.text(lost, TEXT_BYTES, true);
            }
            K::ExecStarted { argv, .. } => v.argv(argv),
            K::Connection {
                name,
                original_destination,
                rule,
                detail,
                reason,
                ..
            } => {
                v.opt(name, NAME_BYTES, false);
                v.opt(original_destination, NAME_BYTES, false);
                v.opt(rule, TEXT_BYTES, true);
                v.text(detail, TEXT_BYTES, true);
                walk!(@reason reason, v $(, $mut)?);
            }
            K::ConnectionClosed { name, .. } => v.opt(name, NAME_BYTES, false),
            K::VolumeHeldBack { paths, .. } => v.paths(paths),
            K::Workspace {
                name,
                paths,
                detail,
                ..
            } => {
                v.text(name, NAME_BYTES, false);
                v.paths(paths);
                v.text(detail, TEXT_BYTES, true);
            }
            K::Secret {
                name,
                host,
                detail,
                reason,
                ..
            } => {
                v.text(name, NAME_BYTES, false);
                v.text(host, NAME_BYTES, false);
                v.text(detail, TEXT_BYTES, true);
                walk!(@reason reason, v $(, $mut)?);
            }
            K::ApiDenied {
                method,
                route,
                token,
                reason,
            } => {
                v.text(method, NAME_BYTES, false);
                v.text(route, TEXT_BYTES, true);
                v.opt(token, NAME_BYTES, false);
                v.text(reason, TEXT_BYTES, true);
            }
            K::Paused { by, freezer } => {
                v.text(by, NAME_BYTES, false);
                v.text(freezer, NAME_BYTES, false);
            }
            K::Resumed { by, .. } => v.text(by, NAME_BYTES, false),
            K::EgressChanged {
                added, removed, by, ..
            } => {
                v.list(added, "entries", TEXT_BYTES, true);
                v.list(removed, "entries", TEXT_BYTES, true);
                v.text(by, NAME_BYTES, false);
            }
            K::Ask {
                question,
                protocol,
                name,
                ..
            } => {
                v.text(question, NAME_BYTES, false);
                v.text(protocol, NAME_BYTES, false);
                v.text(name, NAME_BYTES, false);
            }
            K::AskAnswered {
                question,
                name,
                decision,
                by,
                ..
            } => {
                v.text(question, NAME_BYTES, false);
                v.text(name, NAME_BYTES, false);
                v.text(decision, NAME_BYTES, false);
                v.text(by, NAME_BYTES, false);
            }
            K::ConnectionsAggregated {
                name,
                detail,
                reason,
                ..
            } => {
                v.opt(name, NAME_BYTES, false);
                v.text(detail, TEXT_BYTES, true);
                walk!(@reason reason, v $(, $mut)?);
            }
            K::SecretsAggregated {
                name, host, reason, ..
            } => {
                v.text(name, NAME_BYTES, false);
                v.text(host, NAME_BYTES, false);
                walk!(@reason reason, v $(, $mut)?);
            }
            K::EventsOverBudget { of, .. } => v.text(of, NAME_BYTES, false),
            // The program's path is the kernel's, at most PATH_MAX.
            K::ExecRefused { rule, by, .. } => {
                v.text(rule, NAME_BYTES, false);
                v.text(by, NAME_BYTES, false);
            }
            K::ExecRefusedAggregated { rule, .. } => v.text(rule, NAME_BYTES, false),
            K::Started { .. }
            | K::ExecExited { .. }
            | K::ConnectionsNotRecorded { .. }
            | K::Stopping { .. }
            | K::TtlChanged { .. }
            | K::EventsDropped { .. }
            | K::CacheLeftOut { .. }
            | K::ExecOutputCut { .. }
            | K::VmCutOff { .. }
            | K::Exited { .. } => {}
        }
    }};
    (@reason $reason:expr, $v:expr $(, $mut:ident)?) => {
        if let Some(r) = $reason {
            $v.text(&$($mut)? r.code, NAME_BYTES, false);
            $v.opt(&$($mut)? r.field, NAME_BYTES, false);
            $v.list(&$($mut)? r.addresses, "addresses", NAME_BYTES, false);
            if let Some(a) = &$($mut)? r.allow {
                $v.text(&$($mut)? a.field, NAME_BYTES, false);
                $v.text(&$($mut)? a.value, TEXT_BYTES, true);
            }
        }
    };
}

/// The walk that checks: is every chosen string within its bound?
struct Fits(bool);

impl Fits {
    fn text(&mut self, s: &str, limit: usize, _redact: bool) {
        self.0 &= s.len() <= limit;
    }

    fn opt(&mut self, s: &Option<String>, limit: usize, redact: bool) {
        if let Some(s) = s {
            self.text(s, limit, redact);
        }
    }

    fn list(&mut self, list: &[String], _what: &str, limit: usize, redact: bool) {
        self.0 &= list.len() <= LIST_ENTRIES;
        for s in list {
            self.text(s, limit, redact);
        }
    }

    fn paths(&mut self, paths: &[PathBuf]) {
        self.0 &=
            paths.len() <= LIST_ENTRIES && paths.iter().all(|p| p.as_os_str().len() <= PATH_BYTES);
    }

    fn argv(&mut self, argv: &[String]) {
        self.0 &= argv_fits(argv);
    }
}

/// The walk that cuts every chosen string to its bound.
struct Cut;

impl Cut {
    fn text(&mut self, s: &mut String, limit: usize, redact: bool) {
        cut(s, limit, redact);
    }

    fn opt(&mut self, s: &mut Option<String>, limit: usize, redact: bool) {
        cut_opt(s, limit, redact);
    }

    fn list(&mut self, list: &mut Vec<String>, what: &str, limit: usize, redact: bool) {
        cut_list(list, |n| format!("…[{n} more {what}]"));
        for s in list.iter_mut() {
            cut(s, limit, redact);
        }
    }

    fn paths(&mut self, paths: &mut Vec<PathBuf>) {
        cut_list(paths, |n| PathBuf::from(format!("…[{n} more paths]")));
        paths.iter_mut().for_each(cut_path);
    }

    fn argv(&mut self, argv: &mut Vec<String>) {
        cut_argv(argv);
    }
}

/// Whether every chosen string of `kind` is within its bound already.
fn fits(kind: &EventKind) -> bool {
    let mut check = Fits(true);
    walk!(kind, &mut check);
    check.0
}

/// Cut every chosen string of `kind` to its bound.
fn bound(kind: &mut EventKind) {
    walk!(kind, &mut Cut, mut);
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

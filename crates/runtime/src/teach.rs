//! What a run's egress would have needed: the names it was denied for want
//! of a rule, and the names a person approved when asked, each as the
//! `--allow-domain` entry that allows it, so that the summary at exit is
//! lines to paste into a profile (or flags to pass) that make the same run
//! pass without denials or questions.
//!
//! Only denials an allowlist entry cures are taught: no entry for the name
//! (or its port), or a person's "deny". The quota, a secret's rule, a
//! non-public address or a name pinned to the host have their own remedy,
//! which the denial's reason names (see the bus's `egress denied` lines).

use warden_egress::decision::{Decision, Protocol, Reason};
use warden_policy::DEFAULT_PORTS;

/// Entries kept at most per list; the rest are counted.
const MAX_ENTRIES: usize = 64;

/// The rules the run would have needed, in the order first met.
#[derive(Debug, Default)]
pub struct Needed {
    /// Each entry, and whether only a DNS query asked for it (a name
    /// resolved on its way to a port of its own needs no entry of its
    /// own beside `name:port`).
    denied: Vec<(String, bool)>,
    approved: Vec<(String, bool)>,
    /// What learning mode allowed (`--egress-learn`).
    learned: Vec<(String, bool)>,
    more: usize,
    /// Request rules: those that would allow what request rules refused
    /// for want of a rule (or a person denied), and those a person
    /// allowed when an ask rule asked.
    refused_requests: Vec<String>,
    approved_requests: Vec<String>,
    more_requests: usize,
}

/// The `--allow-domain` entry that allows `name` on `port` (`None`: any of
/// the default ports, the entry without a port).
fn entry(name: &str, port: Option<u16>) -> String {
    match port {
        Some(p) if !DEFAULT_PORTS.contains(&p) => format!("{name}:{p}"),
        _ => name.to_string(),
    }
}

/// Whether an allowlist entry would have allowed what `d` denied: the
/// proxy says so in its cause (no rule, a person's no, nobody to ask, a
/// name pinned to the host), never in words to match.
fn cured_by_an_entry(d: &Decision) -> bool {
    d.reason
        .as_ref()
        .is_some_and(|c| c.field == Some(warden_policy::Field::AllowDomain))
}

/// The reason of `d`, when it has one.
fn reason_of(d: &Decision) -> Option<Reason> {
    d.reason.as_ref().map(|c| c.reason)
}

impl Needed {
    /// Hear one decision of the proxy.
    pub fn note(&mut self, d: &Decision) {
        if d.protocol == Protocol::Request {
            self.note_request(d);
            return;
        }
        let Some(name) = d.name.as_deref().filter(|n| !n.is_empty()) else {
            return;
        };
        let dns = d.protocol == Protocol::Dns;
        let asked = matches!(
            reason_of(d),
            Some(
                Reason::AskedOnce
                    | Reason::AskedForRun
                    | Reason::AskedAlways
                    | Reason::AskedAlwaysByCaller
            )
        );
        let learned = reason_of(d) == Some(Reason::Learned);
        let list = if d.allowed && learned {
            &mut self.learned
        } else if d.allowed && asked {
            &mut self.approved
        } else if !d.allowed && cured_by_an_entry(d) {
            &mut self.denied
        } else {
            return;
        };
        let e = entry(name, (!dns).then_some(d.port));
        let with_port = format!("{name}:");
        if dns {
            // Any entry for the name answers its queries.
            if list
                .iter()
                .any(|(x, _)| *x == e || x.starts_with(&with_port))
            {
                return;
            }
        } else {
            if let Some(slot) = list.iter_mut().find(|(x, _)| *x == e) {
                slot.1 = false;
                return;
            }
            // The query that led here needs no entry of its own.
            list.retain(|(x, dns_only)| !(*dns_only && x == name));
        }
        if list.len() >= MAX_ENTRIES {
            self.more += 1;
            return;
        }
        list.push((e, dns));
    }

    /// A request decided by its name's request rules: the rule that would
    /// allow it, which the proxy names in its cause, when one would.
    fn note_request(&mut self, d: &Decision) {
        let Some(cause) = d.reason.as_ref() else {
            return;
        };
        let Some(entry) = cause.entry.clone() else {
            return;
        };
        let list = match cause.reason {
            Reason::RequestAskedOnce | Reason::RequestAskedForRun | Reason::RequestAskedAlways
                if d.allowed =>
            {
                &mut self.approved_requests
            }
            _ if !d.allowed && cause.field == Some(warden_policy::Field::AllowRequest) => {
                &mut self.refused_requests
            }
            _ => return,
        };
        if list.contains(&entry) {
            return;
        }
        if list.len() >= MAX_ENTRIES {
            self.more_requests += 1;
            return;
        }
        list.push(entry);
    }

    /// The request rules that would allow what request rules refused,
    /// then those approved when asked, in the order first met.
    pub fn requests(&self) -> (&[String], &[String]) {
        (&self.refused_requests, &self.approved_requests)
    }

    /// The entries learning mode allowed (`--egress-learn`), in the order
    /// first met.
    pub fn learned(&self) -> Vec<String> {
        self.learned.iter().map(|(e, _)| e.clone()).collect()
    }

    /// The lines for the person at exit: for the names denied, then for
    /// those approved, the profile lines and the flags that allow them.
    pub fn notices(&self) -> Vec<String> {
        let mut out = Vec::new();
        let more = if self.more > 0 {
            format!(" ({} more not listed)", self.more)
        } else {
            String::new()
        };
        for (list, what) in [
            (
                &self.learned,
                "egress learning mode ended: to allow what this run needed",
            ),
            (&self.denied, "to allow what this run was denied"),
            (
                &self.approved,
                "to allow what was approved when asked without asking again",
            ),
        ] {
            if list.is_empty() {
                continue;
            }
            let list: Vec<String> = list.iter().map(|(e, _)| e.clone()).collect();
            out.push(format!(
                "{what}{more}, add to the profile:\n{}\nor pass: {}",
                profile_lines(&list),
                flags(&list)
            ));
        }
        let more = if self.more_requests > 0 {
            format!(" ({} more not listed)", self.more_requests)
        } else {
            String::new()
        };
        for (list, what) in [
            (
                &self.refused_requests,
                "to allow the requests this run was refused",
            ),
            (
                &self.approved_requests,
                "to allow the requests approved when asked without asking again",
            ),
        ] {
            if list.is_empty() {
                continue;
            }
            out.push(format!(
                "{what}{more}, add to the profile:\n{}\nor pass: {}",
                request_lines(list),
                request_flags(list)
            ));
        }
        out
    }
}

/// `egress.domains` lines of a profile (YAML; each entry quoted), spelled
/// by the field table's key.
pub fn profile_lines(entries: &[String]) -> String {
    warden_policy::edit::list_lines(warden_policy::Field::AllowDomain, entries)
}

/// `egress.allow_requests` lines of a profile (YAML; each rule quoted).
pub fn request_lines(rules: &[String]) -> String {
    warden_policy::edit::list_lines(warden_policy::Field::AllowRequest, rules)
}

/// The same rules as flags of `warden run`, each quoted for a shell (a
/// rule holds a space and may hold `*`); a rule holding a quote (a path
/// the sandbox chose) is quoted with the quote escaped.
pub fn request_flags(rules: &[String]) -> String {
    let flag = warden_policy::Field::AllowRequest;
    rules
        .iter()
        .map(|e| format!("{flag} '{}'", e.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why the learned profile fragment could not be written.
#[derive(Debug, thiserror::Error)]
pub enum LearnFileError {
    #[error("cannot read {path}")]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a profile that holds only learned names ({why}); give a new file")]
    NotLearned {
        path: std::path::PathBuf,
        why: String,
    },
    #[error("cannot write {path}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The names a learned-profile file at `path` holds; none when it does not
/// exist. A file warden did not write (its first line says so) is
/// refused, so that learning never rewrites a profile a person wrote.
pub fn read_learned(path: &std::path::Path) -> Result<Vec<String>, LearnFileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(LearnFileError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let not = |why: String| LearnFileError::NotLearned {
        path: path.to_path_buf(),
        why,
    };
    if !text.starts_with(LEARNED_MARK) {
        return Err(not("warden did not write it".into()));
    }
    let domains = warden_policy::read::profile_domains(&text)
        .map_err(|e| not(format!("{}: {}", e.pos, e.message)))?;
    Ok(domains.into_iter().map(|d| d.value).collect())
}

/// The first line of a learned-profile file.
const LEARNED_MARK: &str = "# Written by warden run --egress-learn";

/// Write `entries` (with what the file held) to the learned-profile file
/// at `path`, whole; returns every entry it now holds.
pub fn write_learned(
    path: &std::path::Path,
    entries: &[String],
) -> Result<Vec<String>, LearnFileError> {
    let mut all = read_learned(path)?;
    for e in entries {
        if !all.contains(e) {
            all.push(e.clone());
        }
    }
    let text = format!(
        "{LEARNED_MARK}: the names its runs needed.\n# Review them, then take them with `extends: [{}]` or --profile.\ndescription: {}\n{}\n",
        path.display(),
        serde_json::Value::from("names learned by warden's egress learning mode"),
        profile_lines(&all)
    );
    let write = |source| LearnFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    // A profile like one written by hand (readable, the owner's to edit),
    // or the file's own mode when it is there already.
    let mode = std::fs::metadata(path).map_or(0o644, |m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o7777
    });
    warden_protocol::replace_file(path, text.as_bytes(), mode).map_err(write)?;
    Ok(all)
}

/// The same entries as flags of `warden run`, ready to paste on its
/// command line: the end-of-run summary is only ever `warden run`'s (see
/// [`crate::run_once`]), so it says the command line's words, taken from
/// the table; backticks around each (as another door's message would
/// have) would run as a command when pasted into a shell.
pub fn flags(entries: &[String]) -> String {
    // A field's `Display` is its flag (its key, had it none).
    let flag = warden_policy::Field::AllowDomain;
    entries
        .iter()
        .map(|e| format!("{flag} {e}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(
        protocol: Protocol,
        name: &str,
        port: u16,
        allowed: bool,
        rule: Option<&str>,
        reason: Reason,
    ) -> Decision {
        Decision {
            protocol,
            name: Some(name.into()),
            port,
            original_destination: None,
            allowed,
            rule: rule.map(str::to_string),
            detail: reason.doc().into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: Some(warden_egress::decision::Cause::new(reason)),
        }
    }

    #[test]
    fn refused_and_approved_requests_become_request_rules_to_paste() {
        use warden_egress::decision::Cause;
        let mut n = Needed::default();
        let req = |allowed: bool, cause: Cause| Decision {
            reason: Some(cause),
            ..d(
                Protocol::Request,
                "forge.test",
                443,
                allowed,
                None,
                Reason::RequestDenied,
            )
        };
        n.note(&req(
            false,
            Cause::with_entry(Reason::NoRequestRule, "POST forge.test/issues"),
        ));
        n.note(&req(
            false,
            Cause::with_entry(Reason::NoRequestRule, "POST forge.test/issues"),
        ));
        // A deny rule's refusal is the owner's word: nothing proposed.
        n.note(&req(false, Cause::new(Reason::RequestDenied)));
        n.note(&req(
            true,
            Cause::with_entry(Reason::RequestAskedOnce, "PUT forge.test:8443/it's"),
        ));
        let (refused, approved) = n.requests();
        assert_eq!(refused, ["POST forge.test/issues"]);
        assert_eq!(approved, ["PUT forge.test:8443/it's"]);
        let said = n.notices().join("\n");
        assert!(
            said.contains("allow_requests: [\"POST forge.test/issues\"]"),
            "{said}"
        );
        assert!(
            said.contains("--allow-request 'POST forge.test/issues'"),
            "{said}"
        );
        assert!(
            said.contains("--allow-request 'PUT forge.test:8443/it'\\''s'"),
            "{said}"
        );
    }

    #[test]
    fn denials_an_entry_cures_become_entries_and_other_denials_do_not() {
        let mut n = Needed::default();
        n.note(&d(
            Protocol::Dns,
            "pypi.org",
            53,
            false,
            None,
            Reason::NotAllowed,
        ));
        n.note(&d(
            Protocol::Dns,
            "git.example.com",
            53,
            false,
            None,
            Reason::NotAllowed,
        ));
        n.note(&d(
            Protocol::Dns,
            "tunnel.example.com",
            53,
            false,
            None,
            Reason::RecordType,
        ));
        n.note(&d(
            Protocol::Tls,
            "pypi.org",
            443,
            false,
            None,
            Reason::NotAllowed,
        ));
        n.note(&d(
            Protocol::Tls,
            "git.example.com",
            8443,
            false,
            None,
            Reason::NotAllowed,
        ));
        n.note(&d(
            Protocol::Tls,
            "big.example.com",
            443,
            false,
            None,
            Reason::QuotaUsedUp,
        ));
        n.note(&d(
            Protocol::Tls,
            "asked.example.com",
            443,
            true,
            Some(warden_egress::proxy::ASK_FOR_RUN),
            Reason::AskedForRun,
        ));
        let lines = n.notices();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].contains("domains: [\"pypi.org\", \"git.example.com:8443\"]"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].ends_with("--allow-domain pypi.org --allow-domain git.example.com:8443"),
            "{}",
            lines[0]
        );
        assert!(!lines[0].contains("big.example.com"));
        assert!(!lines[0].contains("tunnel.example.com"));
        assert!(lines[1].contains("asked.example.com"), "{}", lines[1]);
    }

    #[test]
    fn what_learning_allowed_is_its_own_list_first() {
        let mut n = Needed::default();
        n.note(&d(
            Protocol::Dns,
            "api.example.com",
            53,
            true,
            Some(warden_egress::proxy::LEARNED),
            Reason::Learned,
        ));
        n.note(&d(
            Protocol::Tls,
            "api.example.com",
            443,
            true,
            Some(warden_egress::proxy::LEARNED),
            Reason::Learned,
        ));
        n.note(&d(
            Protocol::Tls,
            "x.example.com",
            9443,
            true,
            Some(warden_egress::proxy::LEARNED),
            Reason::Learned,
        ));
        let lines = n.notices();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("egress learning mode ended"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains(r#"domains: ["api.example.com", "x.example.com:9443"]"#),
            "{}",
            lines[0]
        );
    }
}

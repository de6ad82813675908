//! The allowlist changed while the proxy runs, and what a narrowing does to
//! what is already open.
//!
//! This module owns the registry of allowed connections still open (each
//! by the name and port it was allowed for, with a handle that cuts it),
//! and [`EgressControl`], through which a supervisor adds and removes
//! entries. A change swaps the whole matcher at once, so a decision reads
//! one list or the other, never half of each. Removing entries cuts every
//! open connection that one of them covered and that nothing left allows
//! (no remaining entry, no answer "for this run", no host service), drops
//! "for this run" answers they covered, and from then on the resolver
//! answers those names NXDOMAIN (it reads the same matcher). A connection
//! allowed before a narrowing but registered after it is judged again
//! against the new list (the narrowing's epoch tells which), so none slips
//! between the decision and its registration. It never parses entries
//! (the policy crate does, for every door alike).

use super::{Arrival, Shared};
use crate::decision::Reason;
use crate::matcher::Matcher;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;
use warden_policy::DomainRule;

/// The rule a connection allowed once by a person is recorded with: no
/// entry stands behind it, so a narrowing never cuts it.
pub(super) const ASK_ONCE: &str = "asked: allowed once";

/// Why the allowlist was not changed (nothing was).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("{entry:?} is not on the sandbox's allowlist, so it cannot be removed (entries are removed as they were written, e.g. .example.com or example.com:22)")]
    NotListed { index: usize, entry: String },
    #[error("the proxy's allowlist is unusable (a thread panicked while changing it)")]
    Unusable,
}

impl ChangeError {
    /// Its stable code.
    pub fn reason(&self) -> crate::decision::Reason {
        match self {
            ChangeError::NotListed { .. } => crate::decision::Reason::NotListed,
            ChangeError::Unusable => crate::decision::Reason::ProxyUnusable,
        }
    }
}

/// What a change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressChange {
    /// Entries that were not on the list and now are, as written.
    pub added: Vec<String>,
    /// Entries taken off the list, as written.
    pub removed: Vec<String>,
    /// The list as it is now.
    pub rules: Vec<DomainRule>,
    /// Open connections cut because their name was removed.
    pub closed: usize,
}

struct LiveConn {
    name: String,
    port: u16,
    /// Allowed once by a person: no entry stands behind it.
    once: bool,
    cut: watch::Sender<bool>,
}

/// Allowed connections still open.
#[derive(Default)]
pub(super) struct Live {
    conns: HashMap<u64, LiveConn>,
    next: u64,
    /// Narrowings so far.
    epoch: u64,
}

/// Narrowings so far (read when a connection arrives).
pub(super) fn epoch(shared: &Shared) -> u64 {
    shared.live.lock().map(|l| l.epoch).unwrap_or(u64::MAX)
}

/// Whether `name:port` is allowed by `matcher`, an answer for the run, or
/// as a host service.
fn still_allowed(shared: &Shared, matcher: &Matcher, name: &str, port: u16) -> bool {
    matcher.allows(name, port).is_some()
        || shared.is_host_service(name, port)
        || shared
            .granted
            .lock()
            .is_ok_and(|g| g.contains_key(&(name.to_string(), port)))
}

/// An allowed connection in the registry; leaves it when dropped.
pub(super) struct Registration {
    shared: Arc<Shared>,
    id: u64,
    cut: watch::Receiver<bool>,
}

impl Registration {
    /// Resolves when the connection's name has been removed from the
    /// allowlist: the connection is to end now.
    pub(super) async fn cut(&mut self) {
        // An error (the sender gone) only happens once the entry has left
        // the registry: cut as well, failing closed.
        let _ = self.cut.wait_for(|v| *v).await;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut live) = self.shared.live.lock() {
            live.conns.remove(&self.id);
        }
    }
}

/// Put an allowed connection to `name:port` in the registry, or refuse it
/// when a narrowing since it arrived took away what allowed it.
pub(super) fn register(
    shared: &Arc<Shared>,
    at: &Arrival,
    name: &str,
    port: u16,
    rule: &str,
) -> Result<Registration, (Reason, String)> {
    let once = rule == ASK_ONCE;
    let mut live = shared.live.lock().map_err(|_| {
        (
            Reason::ProxyUnusable,
            "the proxy's registry of open connections is unusable".to_string(),
        )
    })?;
    if live.epoch != at.epoch && !once && !still_allowed(shared, &shared.matcher(), name, port) {
        return Err((
            Reason::Removed,
            format!("{name} was removed from the allowlist while the connection was being decided"),
        ));
    }
    let (tx, rx) = watch::channel(false);
    let id = live.next;
    live.next += 1;
    live.conns.insert(
        id,
        LiveConn {
            name: name.to_string(),
            port,
            once,
            cut: tx,
        },
    );
    Ok(Registration {
        shared: shared.clone(),
        id,
        cut: rx,
    })
}

/// Two entries that allow the same thing (however each was written).
fn same(a: &DomainRule, b: &DomainRule) -> bool {
    a.name == b.name && a.subdomains == b.subdomains && a.port == b.port
}

/// Reads and changes a running proxy's allowlist.
#[derive(Clone)]
pub struct EgressControl {
    shared: Arc<Shared>,
}

impl EgressControl {
    pub(super) fn new(shared: Arc<Shared>) -> EgressControl {
        EgressControl { shared }
    }

    /// The list as it is now.
    pub fn rules(&self) -> Vec<DomainRule> {
        self.shared.matcher().rules().to_vec()
    }

    /// Take `remove` off the list, then put `add` on it (entries already on
    /// it are left as they are), and cut every open connection that a
    /// removed entry covered and nothing left allows. An entry of `remove`
    /// that is not on the list changes nothing at all.
    pub fn change(
        &self,
        add: &[DomainRule],
        remove: &[DomainRule],
    ) -> Result<EgressChange, ChangeError> {
        let shared = &self.shared;
        // The registry first, then the matcher: the order `register` takes
        // them in.
        let mut live = shared.live.lock().map_err(|_| ChangeError::Unusable)?;
        let mut rules = shared.matcher().rules().to_vec();
        for (index, r) in remove.iter().enumerate() {
            if !rules.iter().any(|x| same(x, r)) {
                return Err(ChangeError::NotListed {
                    index,
                    entry: r.source.clone(),
                });
            }
        }
        let mut removed = Vec::new();
        for r in remove {
            rules.retain(|x| !same(x, r));
            if !removed.contains(&r.source) {
                removed.push(r.source.clone());
            }
        }
        let mut added = Vec::new();
        for r in add {
            match rules.iter_mut().find(|x| same(x, r)) {
                // A caller's entry the owner gives again becomes the
                // owner's (the other way round, it stays the owner's).
                Some(x) if x.caller && !r.caller => {
                    *x = r.clone();
                    added.push(r.source.clone());
                }
                Some(_) => {}
                None => {
                    rules.push(r.clone());
                    added.push(r.source.clone());
                }
            }
        }
        let matcher = Arc::new(Matcher::new(rules.clone()));
        {
            let mut m = shared.matcher.write().map_err(|_| ChangeError::Unusable)?;
            *m = matcher.clone();
        }
        let mut closed = 0;
        if !remove.is_empty() {
            live.epoch += 1;
            let gone = Matcher::new(remove.to_vec());
            if let Ok(mut g) = shared.granted.lock() {
                g.retain(|(name, port), _| gone.allows(name, *port).is_none());
            }
            let cut: Vec<u64> = live
                .conns
                .iter()
                .filter(|(_, c)| {
                    !c.once
                        && gone.allows(&c.name, c.port).is_some()
                        && !still_allowed(shared, &matcher, &c.name, c.port)
                })
                .map(|(id, _)| *id)
                .collect();
            for id in cut {
                if let Some(c) = live.conns.remove(&id) {
                    let _ = c.cut.send(true);
                    closed += 1;
                }
            }
        }
        Ok(EgressChange {
            added,
            removed,
            rules,
            closed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Deaf;
    use crate::proxy::{Hooks, Proxy};
    use std::os::fd::OwnedFd;
    use std::time::Instant;

    fn rule(e: &str) -> DomainRule {
        DomainRule::parse(e).unwrap()
    }

    /// A proxy serving sockets nobody connects to: its registry and
    /// allowlist are what these tests drive.
    fn proxy(domains: &[&str]) -> Proxy {
        let tcp = OwnedFd::from(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let dns = OwnedFd::from(std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
        let spec = warden_policy::EgressSpec {
            domains: domains.iter().map(|d| rule(d)).collect(),
            allow_http: false,
            hosts: Vec::new(),
            cidrs: Vec::new(),
            host_ports: Vec::new(),
            ask: false,
            log: false,
            quota: None,
            idle_timeout: std::time::Duration::from_secs(60),
            secrets: Vec::new(),
            secret_rules: Vec::new(),
            upstream_ca: Vec::new(),
            learn: false,
            requests: Vec::new(),
            secret_plain_ports: Vec::new(),
        };
        let hooks = Hooks {
            observer: Arc::new(Deaf),
            asker: None,
            terminator: None,
            test: Default::default(),
        };
        Proxy::start(&spec, tcp, dns, hooks).unwrap()
    }

    fn arrival(shared: &Shared) -> Arrival {
        Arrival {
            start: Instant::now(),
            epoch: epoch(shared),
            original: None,
            port: 443,
        }
    }

    fn is_cut(r: &Registration) -> bool {
        *r.cut.borrow()
    }

    #[test]
    fn a_removal_cuts_the_connections_its_entry_allowed_and_no_other() {
        let p = proxy(&[".example.com", "keep.example.org"]);
        let s = &p.shared;
        let at = arrival(s);
        let api = register(s, &at, "api.example.com", 443, ".example.com").unwrap();
        let keep = register(s, &at, "keep.example.org", 443, "keep.example.org").unwrap();
        let once = register(s, &at, "api.example.com", 8443, ASK_ONCE).unwrap();
        let change = p.control().change(&[], &[rule(".example.com")]).unwrap();
        assert_eq!(change.closed, 1);
        assert_eq!(change.removed, vec![".example.com".to_string()]);
        assert!(is_cut(&api));
        assert!(
            !is_cut(&keep),
            "a connection no removed entry allowed was cut"
        );
        assert!(!is_cut(&once), "a connection a person allowed once was cut");
        assert!(s.matcher().allows("api.example.com", 443).is_none());
        assert!(s.matcher().allows("keep.example.org", 443).is_some());
    }

    #[test]
    fn a_name_another_entry_still_allows_keeps_its_connection() {
        let p = proxy(&[".example.com", "api.example.com"]);
        let s = &p.shared;
        let api = register(s, &arrival(s), "api.example.com", 443, "api.example.com").unwrap();
        let www = register(s, &arrival(s), "www.example.com", 443, ".example.com").unwrap();
        let change = p.control().change(&[], &[rule("*.example.com")]).unwrap();
        assert_eq!(change.closed, 1);
        assert!(!is_cut(&api), "api.example.com is still on the list");
        assert!(is_cut(&www));
    }

    #[test]
    fn a_connection_allowed_before_a_removal_and_registered_after_it_is_refused() {
        let p = proxy(&["gone.example.com", "stays.example.com"]);
        let s = &p.shared;
        let before = arrival(s);
        p.control()
            .change(&[], &[rule("gone.example.com")])
            .unwrap();
        let late = register(s, &before, "gone.example.com", 443, "gone.example.com");
        assert!(late.is_err(), "a removed name's connection slipped in");
        assert!(register(s, &before, "stays.example.com", 443, "stays.example.com").is_ok());
        assert!(register(s, &before, "gone.example.com", 443, ASK_ONCE).is_ok());
    }

    #[test]
    fn a_removal_of_an_entry_not_listed_changes_nothing() {
        let p = proxy(&["a.example.com"]);
        let s = &p.shared;
        let a = register(s, &arrival(s), "a.example.com", 443, "a.example.com").unwrap();
        let err = p
            .control()
            .change(
                &[rule("b.example.com")],
                &[rule("a.example.com"), rule("c.example.com")],
            )
            .unwrap_err();
        assert_eq!(
            err,
            ChangeError::NotListed {
                index: 1,
                entry: "c.example.com".into()
            }
        );
        assert!(!is_cut(&a));
        let now: Vec<String> = p.control().rules().into_iter().map(|r| r.source).collect();
        assert_eq!(now, vec!["a.example.com".to_string()]);
        assert_eq!(epoch(s), 0);
    }

    #[test]
    fn an_entry_added_again_is_no_change_and_a_port_entry_is_its_own() {
        let p = proxy(&["a.example.com"]);
        let change = p
            .control()
            .change(&[rule("A.example.com."), rule("a.example.com:22")], &[])
            .unwrap();
        assert_eq!(change.added, vec!["a.example.com:22".to_string()]);
        assert_eq!(change.rules.len(), 2);
        assert!(p.shared.matcher().allows("a.example.com", 22).is_some());
    }
}

//! Set-up the egress suite shares: a real proxy started on loopback from
//! a spec, an observer that hears every decision it makes, and a read
//! that a test's servers and clients both use.

use std::io::Read;
use std::net::{IpAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_egress::decision::{Decision, Observer};
use warden_egress::proxy::{Hooks, Proxy};
use warden_egress::secrets::Terminator;
use warden_policy::{DomainRule, EgressSpec};

/// Hears every decision.
#[derive(Default)]
pub struct Heard(pub Mutex<Vec<Decision>>);

impl Observer for Heard {
    fn decision(&self, _: Option<u64>, d: &Decision) {
        self.0.lock().unwrap().push(d.clone());
    }
    fn closed(&self, _: u64, _: &Decision) {}
}

/// A spec that allows `domains` only, over TLS only, each name of
/// `hosts` pinned by the owner to its address; nothing else asked of it.
pub fn spec(domains: Vec<DomainRule>, hosts: &[(&str, &str)]) -> EgressSpec {
    EgressSpec {
        domains,
        allow_http: false,
        hosts: hosts
            .iter()
            .map(|(name, ip)| (name.to_string(), ip.parse::<IpAddr>().unwrap()))
            .collect(),
        cidrs: Vec::new(),
        host_ports: Vec::new(),
        ask: false,
        log: false,
        quota: None,
        idle_timeout: Duration::from_secs(60),
        secrets: Vec::new(),
        secret_rules: Vec::new(),
        upstream_ca: Vec::new(),
        learn: false,
        requests: Vec::new(),
        secret_plain_ports: Vec::new(),
    }
}

/// A proxy on loopback from `spec`, terminating TLS with `terminator`
/// when there is one: it, its port and what it decided.
pub fn start(spec: &EgressSpec, terminator: Option<Terminator>) -> (Proxy, u16, Arc<Heard>) {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = tcp.local_addr().unwrap().port();
    let dns = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let heard = Arc::new(Heard::default());
    let hooks = Hooks {
        observer: heard.clone(),
        asker: None,
        terminator,
        test: Default::default(),
    };
    let p = Proxy::start(spec, OwnedFd::from(tcp), OwnedFd::from(dns), hooks).unwrap();
    (p, at, heard)
}

/// What `conn` sends next, added to `buf`: false once it has closed or
/// failed.
pub fn read_more(conn: &mut impl Read, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match conn.read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

//! What the runtime plugs into a process sandbox as it starts: the egress
//! proxy (its thread started here, after the sandbox's clone, so that the
//! clone happens single-threaded; its runtime only at the sandbox's first
//! connection or DNS question), published ports, and for a long-lived
//! sandbox the spawn channel of its init.

use crate::events::Bus;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use warden_egress::proxy::{Asker, EgressControl, Hooks, Proxy};
use warden_egress::publish::Publisher;
use warden_jail::{Network, Pid};
use warden_policy::{NetworkSpec, SandboxSpec};

/// The sandbox's network services and, once it runs, its spawn channel.
pub struct Wiring {
    egress: Option<warden_policy::EgressSpec>,
    bus: Arc<Bus>,
    proxy: Option<Proxy>,
    publisher: Option<Publisher>,
    /// Set by the jail for a long-lived sandbox.
    pub service: Option<(OwnedFd, Pid)>,
    /// Called with the spawn channel the moment the sandbox runs.
    on_service: Option<Box<dyn FnMut(OwnedFd, Pid) + Send>>,
    /// With `--ask` and no terminal (a detached supervisor): who answers.
    asker: Option<Arc<dyn Asker>>,
    /// The running proxy's allowlist, for live changes.
    control: Arc<Mutex<Option<EgressControl>>>,
}

impl Wiring {
    pub fn new(spec: &SandboxSpec, bus: Arc<Bus>) -> Wiring {
        Wiring {
            egress: match &spec.network {
                NetworkSpec::Egress(e) => Some(e.clone()),
                NetworkSpec::LoopbackOnly => None,
            },
            bus,
            proxy: None,
            publisher: None,
            service: None,
            on_service: None,
            asker: None,
            control: Arc::new(Mutex::new(None)),
        }
    }

    /// With `--ask`, have `asker` answer when the jail has no terminal to
    /// ask on.
    pub fn set_asker(&mut self, asker: Arc<dyn Asker>) {
        self.asker = Some(asker);
    }

    /// Where the running proxy's allowlist control appears once it runs.
    pub fn egress_control(&self) -> Arc<Mutex<Option<EgressControl>>> {
        self.control.clone()
    }

    /// Hand the spawn channel to `f` as soon as the sandbox runs (the
    /// supervisor's control server starts then).
    pub fn on_service(&mut self, f: impl FnMut(OwnedFd, Pid) + Send + 'static) {
        self.on_service = Some(Box::new(f));
    }
}

impl warden_jail::Attach for Wiring {
    fn network(&mut self, network: Network) -> Result<(), String> {
        // Decisions come from the proxy's thread: the bus queues them for
        // a writer of its own, started at the first decision
        // (`Bus::observer`), so a sandbox that never uses the network never
        // starts it.
        if let (Some((tcp, dns)), Some(spec)) = (network.egress, &self.egress) {
            let proxy = Proxy::start(
                spec,
                tcp,
                dns,
                Hooks {
                    observer: self.bus.observer(),
                    asker: match network.asker {
                        Some(a) => Some(a),
                        None if spec.ask => self.asker.clone(),
                        None => None,
                    },
                    terminator: network.terminator,
                },
            )
            .map_err(|e| {
                format!(
                    "cannot start the egress proxy: {}",
                    warden_jail::chain_str(&e)
                )
            })?;
            if let Ok(mut c) = self.control.lock() {
                *c = Some(proxy.control());
            }
            self.proxy = Some(proxy);
        }
        if let (false, Some(source)) = (network.published.is_empty(), network.sockets) {
            let publisher = Publisher::start_to(network.published, source, network.publish_to)
                .map_err(|e| {
                    format!(
                        "cannot serve the published ports: {}",
                        warden_jail::chain_str(&e)
                    )
                })?;
            self.publisher = Some(publisher);
        }
        Ok(())
    }

    fn service(&mut self, channel: OwnedFd, init: Pid) {
        match self.on_service.as_mut() {
            Some(f) => f(channel, init),
            None => self.service = Some((channel, init)),
        }
    }

    fn stopping(&mut self) {
        if let Some(p) = self.publisher.take() {
            p.stop();
        }
        if let Ok(mut c) = self.control.lock() {
            *c = None;
        }
        if let Some(p) = self.proxy.take() {
            p.stop();
        }
    }
}

impl Drop for Wiring {
    fn drop(&mut self) {
        warden_jail::Attach::stopping(self);
    }
}

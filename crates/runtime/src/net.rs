//! What the runtime plugs into a sandbox as it starts: the secret
//! terminator (made from the values the jail reads after the clone), the
//! egress proxy (its thread started here, after the sandbox's clone, so
//! that the clone happens single-threaded; its runtime only at the
//! sandbox's first connection or DNS question), the terminal's ask desk,
//! published ports, and for a long-lived sandbox the spawn channel of its
//! init.

use crate::events::Bus;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use warden_egress::ask::Asker;
use warden_egress::proxy::{EgressControl, Hooks, Proxy};
use warden_egress::publish::Publisher;
use warden_egress::secrets::{Secret, Terminator};
use warden_jail::secrets::{Keeper, KeeperError, SecretValue};
use warden_jail::{Desk, Network, Pid};
use warden_policy::{NetworkSpec, SandboxSpec};

/// The sandbox's network services and, once it runs, its spawn channel.
pub struct Wiring {
    egress: Option<warden_policy::EgressSpec>,
    bus: Arc<Bus>,
    proxy: Option<Proxy>,
    publisher: Option<Publisher>,
    /// With secrets: what substitutes them towards their hosts, made once
    /// the jail has read their values; the proxy takes it.
    terminator: Option<Terminator>,
    /// Set by the jail for a long-lived sandbox.
    pub service: Option<(OwnedFd, Pid)>,
    /// Called with the spawn channel the moment the sandbox runs.
    on_service: Option<Box<dyn FnMut(OwnedFd, Pid) + Send>>,
    /// With `--ask` and no terminal (a detached supervisor): who answers.
    asker: Option<Arc<dyn Asker>>,
    /// The running proxy's allowlist, for live changes.
    control: Arc<Mutex<Option<EgressControl>>>,
    /// Programs the exec allowlist refuses, asked about on the terminal's
    /// desk once there is one.
    programs: Option<Arc<crate::ask_programs::TerminalPrograms>>,
    /// The owner's catalogue and warden's state, if there is one: what the
    /// writable volumes' merges at the stop leave alone (the owner's files,
    /// as they are then: [`crate::owners_files::OwnersFence`]).
    owner: Option<(warden_policy::compose::Catalog, Option<std::path::PathBuf>)>,
    /// The sandbox's directory, whose record of volumes no longer granted
    /// is read at the stop ([`crate::lifecycle::withdrawn`]).
    withdrawn: Option<std::path::PathBuf>,
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
            terminator: None,
            service: None,
            on_service: None,
            asker: None,
            control: Arc::new(Mutex::new(None)),
            programs: None,
            owner: None,
            withdrawn: None,
        }
    }

    /// Fence the writable volumes' merges at the stop with the owner's
    /// files of `catalog` and of the state `state` (if the run has one),
    /// computed then.
    pub fn fence_volumes(
        &mut self,
        catalog: warden_policy::compose::Catalog,
        state: Option<&std::path::Path>,
    ) {
        self.owner = Some((catalog, state.map(std::path::Path::to_path_buf)));
    }

    /// Hold back, besides, all of each volume the sandbox's directory
    /// `dir` records as no longer granted when the stop comes
    /// ([`crate::lifecycle::withdrawn`]).
    pub fn withhold_withdrawn(&mut self, dir: &std::path::Path) {
        self.withdrawn = Some(dir.to_path_buf());
    }

    /// With `--ask`, have `asker` answer when the jail has no terminal to
    /// ask on.
    pub fn set_asker(&mut self, asker: Arc<dyn Asker>) {
        self.asker = Some(asker);
    }

    /// With `--ask` at a terminal, ask there about the programs the exec
    /// allowlist refuses too.
    pub fn ask_programs(&mut self, programs: Arc<crate::ask_programs::TerminalPrograms>) {
        self.programs = Some(programs);
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

impl Keeper for Wiring {
    fn placeholder(&mut self) -> Result<String, KeeperError> {
        Ok(warden_egress::secrets::placeholder()?)
    }

    fn keep(&mut self, values: Vec<SecretValue>) -> Result<String, KeeperError> {
        let Some(spec) = &self.egress else {
            return Err("secrets need egress (the proxy substitutes them)".into());
        };
        let secrets = values
            .into_iter()
            .map(|mut v| {
                let value = std::mem::take(&mut v.value);
                Secret::new(
                    v.spec.name.clone(),
                    std::mem::take(&mut v.placeholder),
                    value,
                    v.spec.hosts.clone(),
                    v.spec.in_bodies,
                )
            })
            .collect();
        let terminator = Terminator::new(secrets, &spec.upstream_ca)?
            .with_rules(spec.secret_rules.clone())
            .with_requests(spec.requests.clone());
        let ca = terminator.ca_pem().to_string();
        self.terminator = Some(terminator);
        Ok(ca)
    }
}

impl warden_jail::Attach for Wiring {
    fn network(&mut self, network: Network) -> Result<Option<Box<dyn Desk>>, String> {
        let mut desk: Option<Box<dyn Desk>> = None;
        // Decisions come from the proxy's thread: the bus queues them for
        // a writer of its own, started at the first decision
        // (`Bus::observer`), so a sandbox that never uses the network never
        // starts it.
        if let (Some((tcp, dns)), Some(spec)) = (network.egress, &self.egress) {
            // --ask needs a person at a terminal the jail relays; without
            // one, whoever the caller set answers (a detached supervisor's
            // clients), or names on no list are denied (and the log says
            // why).
            // Ask rules hold single requests for the same desk.
            let asks_requests = self.terminator.as_ref().is_some_and(|t| t.asks_requests());
            let asks = spec.ask || asks_requests;
            let asker: Option<Arc<dyn Asker>> = if asks && network.terminal {
                let (asker, d) = crate::ask::pair()
                    .map_err(|e| format!("cannot create the pipe of `egress.ask`: {e}"))?;
                desk = Some(Box::new(d));
                let asker: Arc<dyn Asker> = Arc::new(asker);
                if let (true, Some(p)) = (spec.ask, &self.programs) {
                    p.set_asker(asker.clone());
                }
                Some(asker)
            } else if asks {
                self.asker.clone()
            } else {
                None
            };
            let request_asker = if asks_requests { asker.clone() } else { None };
            let proxy = Proxy::start(
                spec,
                tcp,
                dns,
                Hooks {
                    observer: self.bus.observer(),
                    asker: if spec.ask { asker } else { None },
                    terminator: self.terminator.take().map(|t| t.with_asker(request_asker)),
                    test: warden_policy::TestHooks::current().clone(),
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
        Ok(desk)
    }

    fn service(&mut self, channel: OwnedFd, init: Pid) {
        match self.on_service.as_mut() {
            Some(f) => f(channel, init),
            None => self.service = Some((channel, init)),
        }
    }

    fn fence(&self) -> Option<Box<dyn warden_jail::cache::Fence>> {
        let (catalog, state) = self.owner.as_ref()?;
        let fence = crate::owners_files::OwnersFence::now(catalog, state.as_deref());
        Some(Box::new(match &self.withdrawn {
            Some(dir) => fence.withholding(crate::lifecycle::withdrawn::read(dir)),
            None => fence,
        }))
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

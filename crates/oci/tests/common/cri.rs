//! A node as kubelet sees it, without kubelet: the distribution's
//! containerd with its CRI plugin on (private root, state, socket and
//! configuration in a temporary directory), the distribution's CNI
//! plugins (a bridge with host-local addresses), a pause image and a
//! busybox image built here as OCI layouts (no registry is reachable),
//! and the CRI's runtime service called over gRPC as kubelet calls it.
//! Two runtime handlers: `runc` (the control) and `warden` (the runc shim
//! with `BinaryName` = warden-oci).
//!
//! One node serves every test that holds it ([`node`]); the last one to
//! let go stops it and removes what it made (pods, containerd, shims,
//! the bridge, the cgroups, the directory).

use super::cri_api as api;
use super::{text, BUSYBOX};
use api::runtime_service_client::RuntimeServiceClient;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

pub const PAUSE: &str = "localhost/warden-test/pause:1";
pub const BUSYBOX_IMAGE: &str = "localhost/warden-test/busybox:1";

/// The two runtime handlers the node offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handler {
    Runc,
    Warden,
}

impl Handler {
    pub fn name(self) -> &'static str {
        match self {
            Handler::Runc => "runc",
            Handler::Warden => "warden",
        }
    }
}

pub struct Node {
    pub dir: tempfile::TempDir,
    child: Mutex<Child>,
    rt: tokio::runtime::Runtime,
    channel: Channel,
    /// The CNI bridge on the host.
    pub bridge: String,
    /// Every pod's cgroups are under this parent, in each hierarchy.
    pub cgroup_parent: String,
    pods: std::sync::atomic::AtomicUsize,
}

static NODE: Mutex<Weak<Node>> = Mutex::new(Weak::new());

/// The shared node, started by the first test that asks; `None` (with
/// the reason printed) where this host cannot run one.
pub fn node() -> Option<Arc<Node>> {
    if !can_run() {
        return None;
    }
    let mut held = NODE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = held.upgrade() {
        return Some(n);
    }
    let n = Arc::new(Node::start(Setup::Suite));
    *held = Arc::downgrade(&n);
    Some(n)
}

fn can_run() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: containerd's CRI plugin needs root");
        return false;
    }
    if !Path::new(BUSYBOX).exists() {
        eprintln!("SKIPPED: no {BUSYBOX} (install busybox-static) to build the images");
        return false;
    }
    if let Some(tool) = super::missing_tool(&[
        "containerd",
        "ctr",
        "containerd-shim-runc-v2",
        "runc",
        "tar",
        "sha256sum",
    ]) {
        eprintln!("SKIPPED: {tool} is not installed (apt-get install containerd runc)");
        return false;
    }
    for plugin in ["bridge", "host-local", "loopback"] {
        if !Path::new(CNI_BIN).join(plugin).exists() {
            eprintln!(
                "SKIPPED: no CNI plugin {CNI_BIN}/{plugin} (apt-get install containernetworking-plugins)"
            );
            return false;
        }
    }
    true
}

/// A node of its own configured as `docs/kubernetes.md` says, for the
/// test that follows that page (not shared: its configuration differs).
pub fn docs_node() -> Option<Node> {
    can_run().then(|| Node::start(Setup::Docs))
}

/// How a node is configured.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// The suite's: [`config`], a bridge without a gateway.
    Suite,
    /// `docs/kubernetes.md`'s: [`docs_config`] and its bridge.
    Docs,
}

/// Where the distribution's package puts the CNI plugins.
const CNI_BIN: &str = "/usr/lib/cni";

impl Node {
    fn start(setup: Setup) -> Node {
        // A short path: a warden container's control socket is beneath it
        // (`Root/k8s.io/sandboxes/NAME/control.sock`), within the 108
        // bytes of a socket's address.
        let dir = tempfile::Builder::new()
            .prefix("wc")
            .tempdir_in("/tmp")
            .unwrap();
        let p = dir.path().to_path_buf();
        let id = std::process::id();
        let docs = setup == Setup::Docs;
        let bridge = format!("{}{}", if docs { "wdoc" } else { "wcri" }, id % 100_000);
        let cgroup_parent = format!("/warden-cri-{}{id}", if docs { "docs-" } else { "" });
        // A subnet of its own per test process (another engineer's run of
        // this suite may be up at the same time).
        let subnet = format!("10.{}.{}.0/24", if docs { 214 } else { 213 }, id % 250);
        std::fs::create_dir_all(p.join("cni")).unwrap();
        let conflist = if docs {
            docs_conflist(&bridge, &subnet, &p)
        } else {
            serde_json::json!({
                "cniVersion": "0.4.0",
                "name": format!("warden-test-{id}"),
                "plugins": [{
                    "type": "bridge",
                    "bridge": bridge,
                    // No gateway and no masquerade: the pods reach only
                    // each other, and the host's forwarding is not touched.
                    "isGateway": false,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": subnet}]],
                        "dataDir": p.join("ipam"),
                    },
                }],
            })
        };
        std::fs::write(p.join("cni/10-warden-test.conflist"), conflist.to_string()).unwrap();
        let config = if docs { docs_config(&p) } else { config(&p) };
        std::fs::write(p.join("config.toml"), config).unwrap();
        std::fs::create_dir_all(p.join("config/warden/profiles")).unwrap();
        std::fs::create_dir_all(p.join("secrets")).unwrap();
        let log = std::fs::File::create(p.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(p.join("config.toml"))
            // The node's catalogue of profiles and secrets directory, as
            // its operator sets them (warden-oci inherits containerd's
            // environment through the shim).
            .env("XDG_CONFIG_HOME", p.join("config"))
            .env("WARDEN_OCI_SECRETS_DIR", p.join("secrets"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let sock = p.join("c.sock");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !sock.exists() {
            assert!(
                Instant::now() < deadline,
                "containerd did not start: {}",
                std::fs::read_to_string(p.join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // The socket's file is there from containerd's bind; until it
        // listens, a connection is refused: asked again until the deadline.
        let channel = loop {
            match rt.block_on(connect(sock.clone())) {
                Ok(c) => break c,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "containerd did not answer on its socket: {e}: {}",
                        std::fs::read_to_string(p.join("containerd.log")).unwrap_or_default()
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        let node = Node {
            dir,
            child: Mutex::new(child),
            rt,
            channel,
            bridge,
            cgroup_parent,
            pods: Default::default(),
        };
        node.wait_ready();
        let images = node.dir.path().join("images");
        let pause = if docs {
            docs_pause()
        } else {
            PAUSE.to_string()
        };
        for (name, entry) in [
            (pause.as_str(), vec!["/bin/pause"]),
            (BUSYBOX_IMAGE, vec!["/bin/sh"]),
        ] {
            let tar = build_image(&images, name, &entry);
            let tar = tar.to_string_lossy().into_owned();
            // The docs' node keeps containerd's default snapshotter.
            let args: &[&str] = if docs {
                &["images", "import", &tar]
            } else {
                &["images", "import", "--snapshotter", "native", &tar]
            };
            let o = node.ctr(args);
            assert!(
                o.status.success(),
                "import {name}: {} {}",
                text(&o.stdout),
                text(&o.stderr)
            );
        }
        node
    }

    /// The CRI answers Status with its runtime and network ready.
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let st = self
                .call(|mut c| async move { c.status(api::StatusRequest { verbose: false }).await });
            let ready = st.as_ref().is_ok_and(|s| {
                s.status
                    .as_ref()
                    .is_some_and(|s| s.conditions.iter().all(|c| c.status))
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the CRI plugin is not ready: {st:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// `ctr` in the CRI's namespace.
    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("--address")
            .arg(self.dir.path().join("c.sock"))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// warden-oci's state root (the runc shim's `Root` option).
    pub fn warden_root(&self) -> PathBuf {
        self.dir.path().join("wo")
    }

    /// Put a profile in the node's catalogue (`warden.dev/profile=NAME`).
    pub fn node_profile(&self, name: &str, yaml: &str) {
        let path = self
            .dir
            .path()
            .join("config/warden/profiles")
            .join(format!("{name}.yaml"));
        std::fs::write(path, yaml).unwrap();
    }

    /// One call of the runtime service.
    pub fn call<T, F>(
        &self,
        f: impl FnOnce(RuntimeServiceClient<Channel>) -> F,
    ) -> Result<T, tonic::Status>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = RuntimeServiceClient::new(self.channel.clone());
        self.rt
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(120), f(client))
                    .await
                    .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer in 120 s")))
            })
            .map(tonic::Response::into_inner)
    }

    /// RunPodSandbox with `handler`, as kubelet asks for a pod: its own
    /// network namespace (CNI), its log directory, its cgroup parent.
    pub fn run_pod(&self, handler: Handler, annotations: &[(&str, &str)]) -> Pod<'_> {
        self.try_run_pod(handler, annotations)
            .unwrap_or_else(|e| panic!("RunPodSandbox ({handler:?}): {e}\n{}", self.tail()))
    }

    /// RunPodSandbox, or the error kubelet would show in the pod's events.
    pub fn try_run_pod(
        &self,
        handler: Handler,
        annotations: &[(&str, &str)],
    ) -> Result<Pod<'_>, tonic::Status> {
        let n = self.pods.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let uid = format!("{}-{n}", std::process::id());
        let name = format!("pod{n}");
        let logs = self.dir.path().join("pods").join(&uid);
        std::fs::create_dir_all(&logs).unwrap();
        let config = api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: name.clone(),
                uid: uid.clone(),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: name.clone(),
            log_directory: logs.to_string_lossy().into_owned(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            labels: HashMap::from([("warden-test".to_string(), "cri".to_string())]),
            linux: Some(api::LinuxPodSandboxConfig {
                cgroup_parent: format!("{}/pod{uid}", self.cgroup_parent),
                security_context: Some(api::LinuxSandboxSecurityContext {
                    namespace_options: Some(api::NamespaceOption {
                        network: api::NamespaceMode::Pod as i32,
                        pid: api::NamespaceMode::Container as i32,
                        ipc: api::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: handler.name().into(),
        };
        let id = self
            .call(|mut c| async move { c.run_pod_sandbox(req).await })?
            .pod_sandbox_id;
        Ok(Pod {
            node: self,
            id,
            config,
            logs,
            removed: false,
        })
    }

    /// The end of containerd's log, for a failure's message.
    pub fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // What a test left (it failed half-way): the pods go through the
        // CRI first, as kubelet would remove them.
        if let Ok(list) = self.call(|mut c| async move {
            c.list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
                .await
        }) {
            for p in list.items {
                let id = p.id.clone();
                let _ = self.call(|mut c| async move {
                    c.stop_pod_sandbox(api::StopPodSandboxRequest { pod_sandbox_id: id })
                        .await
                });
                let _ = self.call(|mut c| async move {
                    c.remove_pod_sandbox(api::RemovePodSandboxRequest {
                        pod_sandbox_id: p.id,
                    })
                    .await
                });
            }
        }
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        // Processes started for this node only (its shims and whatever a
        // failed test left): found by this node's directory in their
        // command line or their executable's arguments.
        for pid in processes_naming(self.dir.path()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for m in mounts_under(self.dir.path()).iter().rev() {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        for dir in cgroup_dirs(&self.cgroup_parent) {
            remove_cgroup_tree(&dir);
        }
        let _ = Command::new("ip")
            .args(["link", "delete", &self.bridge])
            .stderr(Stdio::null())
            .status();
    }
}

/// `deploy/kubernetes/containerd-config.toml`, as operators install it.
const SNIPPET: &str = include_str!("../../../../deploy/kubernetes/containerd-config.toml");

/// The CRI plugin's configuration: both handlers, the pod annotations
/// warden reads let through, the host's facts (no `CAP_SYS_RESOURCE`:
/// `restrict_oom_score_adj`; no registry: the pause image is local).
fn config(p: &Path) -> String {
    let bin = super::bin();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  stats_collect_period = 1
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
{warden}"#,
        root = p.join("root").display(),
        state = p.join("state").display(),
        sock = p.join("c.sock").display(),
        pause = PAUSE,
        cni_bin = CNI_BIN,
        cni = p.join("cni").display(),
        // The `warden` handler is the snippet a node's operator installs,
        // with this build's binary and a state root of the test's own.
        warden = SNIPPET
            .replace("/usr/local/bin/warden-oci", bin)
            .replace("/run/warden-oci", &p.join("wo").to_string_lossy()),
    )
}

/// `docs/kubernetes.md`, whose steps the docs' node follows.
const DOCS: &str = include_str!("../../../../docs/kubernetes.md");

/// The text of the docs between the line starting with `from` and the
/// next line starting with `to`.
fn docs_between(from: &str, to: &str) -> String {
    let mut lines = DOCS.lines().skip_while(|l| !l.starts_with(from));
    lines
        .next()
        .unwrap_or_else(|| panic!("docs/kubernetes.md has no {from:?}"));
    lines
        .take_while(|l| !l.starts_with(to))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The pause image the docs' configuration names.
fn docs_pause() -> String {
    let toml = docs_between("```toml", "```");
    let line = toml
        .lines()
        .find(|l| l.trim_start().starts_with("sandbox_image"))
        .expect("the docs' configuration names no sandbox_image");
    line.split('"').nth(1).unwrap().to_string()
}

/// The docs' `/etc/containerd/config.toml` as written, with deploy's
/// snippet appended as the docs say (this build's binary, a private state
/// root), on a private root, state and socket. One change of this host's:
/// it lacks `CAP_SYS_RESOURCE`, which the docs' commented line is for.
fn docs_config(p: &Path) -> String {
    let toml = docs_between("```toml", "```");
    assert!(toml.contains("# restrict_oom_score_adj = true"), "{toml}");
    assert!(
        DOCS.contains("cat deploy/kubernetes/containerd-config.toml >>/etc/containerd/config.toml"),
        "the docs no longer append the snippet to config.toml"
    );
    format!(
        r#"root = "{root}"
state = "{state}"
{toml}
{snippet}
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
"#,
        root = p.join("root").display(),
        state = p.join("state").display(),
        sock = p.join("c.sock").display(),
        toml = toml
            .replace("/etc/cni/net.d", &p.join("cni").to_string_lossy())
            .replace("# restrict_oom_score_adj", "restrict_oom_score_adj"),
        snippet = SNIPPET
            .replace("/usr/local/bin/warden-oci", super::bin())
            .replace("/run/warden-oci", &p.join("wo").to_string_lossy()),
    )
}

/// The docs' single-node bridge network, on a bridge and subnet of the
/// test's own, and without what changes the host for every other user
/// of this machine: a gateway turns the host's IP forwarding on, and
/// masquerading adds NAT rules (pods reach each other either way).
fn docs_conflist(bridge: &str, subnet: &str, p: &Path) -> serde_json::Value {
    let text = docs_between("cat >/etc/cni/net.d/10-bridge.conflist", "EOF");
    let mut v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the docs' conflist is not JSON: {e}\n{text}"));
    let plugin = &mut v["plugins"][0];
    plugin["bridge"] = bridge.into();
    plugin["isGateway"] = false.into();
    plugin["ipMasq"] = false.into();
    plugin["ipam"]["ranges"] = serde_json::json!([[{"subnet": subnet}]]);
    plugin["ipam"]["dataDir"] = p.join("ipam").to_string_lossy().into_owned().into();
    v
}

async fn connect(sock: PathBuf) -> Result<Channel, tonic::transport::Error> {
    tonic::transport::Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let sock = sock.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(sock).await?,
                ))
            }
        }))
        .await
}

/// A pod made by [`Node::run_pod`]; stopped and removed when dropped (if
/// the test did not).
pub struct Pod<'a> {
    pub node: &'a Node,
    pub id: String,
    pub config: api::PodSandboxConfig,
    /// The pod's log directory, where kubelet reads containers' logs.
    pub logs: PathBuf,
    removed: bool,
}

/// What a container of a pod runs and is given.
#[derive(Default)]
pub struct Spec<'s> {
    pub name: &'s str,
    pub args: &'s [&'s str],
    pub memory: Option<i64>,
    pub stdin: bool,
    pub tty: bool,
    /// Host paths bound read-only at the same path inside.
    pub binds: &'s [&'s str],
}

impl Pod<'_> {
    /// CreateContainer and StartContainer of the busybox image; its ID.
    pub fn start(&self, spec: Spec<'_>) -> String {
        let id = self
            .create(spec)
            .unwrap_or_else(|e| panic!("CreateContainer: {e}\n{}", self.node.tail()));
        let cid = id.clone();
        self.node
            .call(|mut c| async move {
                c.start_container(api::StartContainerRequest { container_id: cid })
                    .await
            })
            .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", self.node.tail()));
        id
    }

    pub fn create(&self, spec: Spec<'_>) -> Result<String, tonic::Status> {
        // What kubelet mounts into every container: its own hosts file and
        // the termination-message file it reads when the container ends.
        let dir = self.logs.join("kubelet").join(spec.name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("etc-hosts"), "127.0.0.1 localhost\n").unwrap();
        std::fs::write(dir.join("termination-log"), "").unwrap();
        let mount = |inside: &str, file: &str, readonly: bool| api::Mount {
            container_path: inside.into(),
            host_path: dir.join(file).to_string_lossy().into_owned(),
            readonly,
            ..Default::default()
        };
        let mut mounts = vec![
            mount("/etc/hosts", "etc-hosts", false),
            mount("/dev/termination-log", "termination-log", false),
        ];
        mounts.extend(spec.binds.iter().map(|p| api::Mount {
            container_path: p.to_string(),
            host_path: p.to_string(),
            readonly: true,
            ..Default::default()
        }));
        let config = api::ContainerConfig {
            mounts,
            metadata: Some(api::ContainerMetadata {
                name: spec.name.into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: BUSYBOX_IMAGE.into(),
                ..Default::default()
            }),
            command: spec.args.iter().map(|s| s.to_string()).collect(),
            envs: vec![api::KeyValue {
                key: "PATH".into(),
                value: "/bin".into(),
            }],
            log_path: format!("{}/0.log", spec.name),
            stdin: spec.stdin,
            tty: spec.tty,
            // kubelet gives a container none of the pod's annotations:
            // containerd copies them into the container's configuration
            // (the handler's `pod_annotations`).
            linux: Some(api::LinuxContainerConfig {
                resources: Some(api::LinuxContainerResources {
                    memory_limit_in_bytes: spec.memory.unwrap_or(0),
                    cpu_period: 100_000,
                    cpu_quota: 50_000,
                    cpu_shares: 512,
                    ..Default::default()
                }),
                security_context: Some(api::LinuxContainerSecurityContext {
                    namespace_options: Some(api::NamespaceOption {
                        network: api::NamespaceMode::Pod as i32,
                        pid: api::NamespaceMode::Container as i32,
                        ipc: api::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let req = api::CreateContainerRequest {
            pod_sandbox_id: self.id.clone(),
            config: Some(config),
            sandbox_config: Some(self.config.clone()),
        };
        self.node
            .call(|mut c| async move { c.create_container(req).await })
            .map(|r| r.container_id)
    }

    pub fn exec_sync(&self, container: &str, cmd: &[&str]) -> api::ExecSyncResponse {
        let req = api::ExecSyncRequest {
            container_id: container.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 30,
        };
        self.node
            .call(|mut c| async move { c.exec_sync(req).await })
            .unwrap_or_else(|e| panic!("ExecSync {cmd:?}: {e}\n{}", self.node.tail()))
    }

    pub fn status(&self, container: &str) -> api::ContainerStatus {
        let req = api::ContainerStatusRequest {
            container_id: container.into(),
            verbose: false,
        };
        self.node
            .call(|mut c| async move { c.container_status(req).await })
            .unwrap_or_else(|e| panic!("ContainerStatus: {e}"))
            .status
            .unwrap()
    }

    /// Wait until `container` has exited; its status.
    pub fn wait_exited(&self, container: &str, within: Duration) -> api::ContainerStatus {
        let deadline = Instant::now() + within;
        loop {
            let s = self.status(container);
            if s.state == api::ContainerState::ContainerExited as i32 {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "container {container} still {:?} after {within:?}",
                s.state
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pod sandbox's status (its network namespace, its IP).
    pub fn sandbox_status(&self) -> api::PodSandboxStatusResponse {
        let req = api::PodSandboxStatusRequest {
            pod_sandbox_id: self.id.clone(),
            verbose: true,
        };
        self.node
            .call(|mut c| async move { c.pod_sandbox_status(req).await })
            .unwrap()
    }

    /// StopPodSandbox then RemovePodSandbox, as kubelet ends a pod.
    pub fn remove(&mut self) {
        let id = self.id.clone();
        self.node
            .call(|mut c| async move {
                c.stop_pod_sandbox(api::StopPodSandboxRequest { pod_sandbox_id: id })
                    .await
            })
            .unwrap_or_else(|e| panic!("StopPodSandbox: {e}\n{}", self.node.tail()));
        let id = self.id.clone();
        self.node
            .call(|mut c| async move {
                c.remove_pod_sandbox(api::RemovePodSandboxRequest { pod_sandbox_id: id })
                    .await
            })
            .unwrap_or_else(|e| panic!("RemovePodSandbox: {e}\n{}", self.node.tail()));
        self.removed = true;
    }
}

impl Drop for Pod<'_> {
    fn drop(&mut self) {
        if !self.removed {
            let id = self.id.clone();
            let _ = self.node.call(|mut c| async move {
                c.stop_pod_sandbox(api::StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await?;
                c.remove_pod_sandbox(api::RemovePodSandboxRequest { pod_sandbox_id: id })
                    .await
            });
        }
    }
}

/// An OCI image layout of one layer, a static busybox with its names and
/// `/bin/pause` (a shell that sleeps until a signal ends it, as the pause
/// image's program does), as a tar for `ctr images import`.
fn build_image(dir: &Path, name: &str, entry: &[&str]) -> PathBuf {
    let work = dir.join(name.replace(['/', ':'], "_"));
    let tree = work.join("tree");
    std::fs::create_dir_all(tree.join("bin")).unwrap();
    for d in ["etc", "tmp", "proc", "dev", "sys", "run", "var"] {
        std::fs::create_dir_all(tree.join(d)).unwrap();
    }
    super::copy_program(Path::new(BUSYBOX), &tree.join("bin/busybox"));
    for tool in [
        "sh", "echo", "cat", "sleep", "nc", "hostname", "wget", "ls", "head", "dd", "kill", "ps",
        "grep", "true", "tail",
    ] {
        std::os::unix::fs::symlink("busybox", tree.join("bin").join(tool)).unwrap();
    }
    std::fs::write(
        tree.join("bin/pause"),
        "#!/bin/sh\ntrap 'exit 0' TERM INT\nwhile :; do sleep 3600 & wait $!; done\n",
    )
    .unwrap();
    std::fs::set_permissions(
        tree.join("bin/pause"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    super::image::layout_tar(
        &tree,
        &work,
        name,
        serde_json::json!({"Env": ["PATH=/bin"], "Entrypoint": entry}),
    )
}

/// PIDs of processes whose command line names `dir`.
pub fn processes_naming(dir: &Path) -> Vec<i32> {
    let want = dir.to_string_lossy().into_owned();
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| *pid != me)
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&want))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Mount points at or under `dir`, in the order of /proc/self/mountinfo.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let want = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m.starts_with(&want))
        .collect()
}

/// The directory of cgroup `path` in each mounted hierarchy that has it.
pub fn cgroup_dirs(path: &str) -> Vec<PathBuf> {
    let rel = path.trim_start_matches('/');
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| {
            d.flatten()
                .map(|e| e.path().join(rel))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(d) = std::fs::read_dir(dir) {
        for e in d.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

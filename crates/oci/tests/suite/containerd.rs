//! warden-oci driven by the distribution's containerd and `ctr`, as a
//! cluster node would: the test starts its own containerd (its own root,
//! state and socket under a temporary directory), imports an image it
//! builds itself from the static busybox (no registry), and runs
//! containers with `--runtime io.containerd.runc.v2 --runc-binary
//! warden-oci`, which sets the runc shim's `BinaryName` option.

use crate::common::listener::listener;
use crate::common::*;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) struct Containerd {
    pub(crate) dir: tempfile::TempDir,
    child: Child,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Every container the test made goes first, then the daemon.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Containerd {
    fn start() -> Option<Containerd> {
        if let Some(tool) = missing_tool(&[
            "containerd",
            "ctr",
            "containerd-shim-runc-v2",
            "tar",
            "sha256sum",
        ]) {
            eprintln!("SKIPPED: {tool} is not installed (apt-get install containerd)");
            return None;
        }
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: containerd needs root");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("warden-ctrd-")
            .tempdir()
            .unwrap();
        let p = dir.path();
        let config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n",
            root = p.join("root").display(),
            state = p.join("state").display(),
            sock = p.join("c.sock").display(),
        );
        std::fs::write(p.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(p.join("containerd.log")).unwrap();
        // The node's secrets, as its operator sets them aside for
        // containers: a directory and a WARDEN_SECRET_ variable of the
        // runtime's environment (containerd's, which its shims inherit).
        std::fs::create_dir(p.join("secrets")).unwrap();
        // The node's catalogue of profiles (the runtime's configuration
        // directory): the only profiles a pod's annotation may name.
        std::fs::create_dir_all(p.join("config/warden/profiles")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(p.join("config.toml"))
            .env("XDG_CONFIG_HOME", p.join("config"))
            .env("WARDEN_OCI_SECRETS_DIR", p.join("secrets"))
            .env("WARDEN_SECRET_KEY", NODE_KEY)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let c = Containerd { dir, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.ctr(&["version"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "containerd did not start: {}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(c)
    }

    /// Put a profile in the node's catalogue, for `warden.dev/profile=NAME`.
    pub(crate) fn node_profile(&self, name: &str, yaml: &str) {
        let path = self
            .dir
            .path()
            .join("config/warden/profiles")
            .join(format!("{name}.yaml"));
        std::fs::write(path, yaml).unwrap();
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("--address")
            .arg(self.dir.path().join("c.sock"))
            .args(["--namespace", "warden-test"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Where warden-oci keeps the containers' state (`--runc-root`).
    pub(crate) fn runtime_root(&self) -> PathBuf {
        self.dir.path().join("warden-oci")
    }

    /// `ctr run --rm` through warden-oci; its output.
    pub(crate) fn run(&self, id: &str, extra: &[&str], cmd: &[&str]) -> Output {
        self.ctr_run("--rm", id, extra, cmd)
    }

    /// `ctr run -d` through warden-oci, which must start.
    fn run_detached(&self, id: &str, extra: &[&str], cmd: &[&str]) {
        let o = self.ctr_run("-d", id, extra, cmd);
        assert!(
            o.status.success(),
            "run -d: {} {}",
            text(&o.stderr),
            self.log()
        );
    }

    /// `ctr run MODE` of `cmd` as container `id` through warden-oci, with
    /// `extra` options (annotations, namespaces, mounts).
    fn ctr_run(&self, mode: &str, id: &str, extra: &[&str], cmd: &[&str]) -> Output {
        let bin = bin();
        let root = self.runtime_root();
        let mut args = vec![
            "run",
            mode,
            "--snapshotter",
            "native",
            "--runtime",
            "io.containerd.runc.v2",
            "--runc-binary",
            bin,
            "--runc-root",
            root.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[IMAGE, id]);
        args.extend_from_slice(cmd);
        self.ctr(&args)
    }
}

const IMAGE: &str = "localhost/warden-test/busybox:1";
/// The file the image's planted profile's program would make on the node.
const NODE_MARK: &str = "ran-on-the-node";
/// The value of the node's `WARDEN_SECRET_KEY`.
pub(crate) const NODE_KEY: &str = "node-key-6f1d0c7a9e";

/// An OCI image layout of one layer (the static busybox and its names),
/// as a tar that `ctr images import` reads.
fn build_image(dir: &Path) -> PathBuf {
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("bin")).unwrap();
    for d in ["etc", "tmp", "proc", "dev", "usr"] {
        std::fs::create_dir_all(tree.join(d)).unwrap();
    }
    // The host's /usr can be bound in (its curl and libraries).
    std::os::unix::fs::symlink("usr/lib", tree.join("lib")).unwrap();
    std::os::unix::fs::symlink("usr/lib64", tree.join("lib64")).unwrap();
    copy_program(Path::new(BUSYBOX), &tree.join("bin/busybox"));
    // What a pod's author would like the node to read as its own
    // configuration: a profile in the image, whose secret's program would
    // run on the node (and leave its mark in the test's directory).
    std::fs::write(
        tree.join("etc/warden-profile.yaml"),
        format!(
            "secrets:\n  X:\n    from_command: [/usr/bin/touch, {}]\n    hosts: [evil.test]\n",
            dir.join(NODE_MARK).display()
        ),
    )
    .unwrap();
    for tool in ["sh", "echo", "cat", "sleep", "nc", "hostname", "wget"] {
        std::os::unix::fs::symlink("busybox", tree.join("bin").join(tool)).unwrap();
    }
    image::layout_tar(
        &tree,
        dir,
        IMAGE,
        serde_json::json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
    )
}

pub(crate) fn with_image() -> Option<Containerd> {
    if !can_run() {
        return None;
    }
    let c = Containerd::start()?;
    let image = build_image(c.dir.path());
    let o = c.ctr(&[
        "images",
        "import",
        "--snapshotter",
        "native",
        image.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "import: {} {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    Some(c)
}

#[test]
fn ctr_runs_a_container_through_warden_and_sees_its_exit_code() {
    let Some(c) = with_image() else { return };
    let o = c.run(
        "hello",
        &[],
        &["sh", "-c", "echo hello from $(hostname); exit 7"],
    );
    assert_eq!(
        o.status.code(),
        Some(7),
        "ctr run: {} {}\ncontainerd: {}",
        text(&o.stdout),
        text(&o.stderr),
        c.log()
    );
    assert!(
        text(&o.stdout).starts_with("hello from "),
        "{} {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    // It ran under warden: its sandbox's audit log recorded it, and
    // `ctr run --rm` deleted it (nothing is left in warden's state).
    let left: Vec<_> = std::fs::read_dir(c.runtime_root().join("warden-test/sandboxes"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn host_loopback_is_out_of_reach_unless_the_nodes_profile_allows_the_name() {
    let Some(c) = with_image() else { return };
    let (port, seen) = listener();
    // HTTP to an address of the container's choosing (every TCP connection
    // leaves through warden's proxy), whose Host header
    // names the destination: the loopback address itself, the allowed
    // name, another name pinned to the same address.
    let attack = format!(
        "for h in 127.0.0.1 allowed.test denied.test; do printf 'GET /$h HTTP/1.0\\r\\nHost: '$h':{port}\\r\\n\\r\\n' | nc -w 3 203.0.113.9 {port}; echo; done; echo direct | nc -w 3 127.0.0.1 {port}; exit 0"
    );
    // Both names resolve to the host's loopback (pinned by the node's
    // owner, in a profile of the node's catalogue: a pod's author may not
    // pin names to the node's addresses); the annotation allows another
    // name: neither they nor the raw address reach the listener.
    c.node_profile(
        "pinned",
        "egress:\n  hosts: {allowed.test: 127.0.0.1, denied.test: 127.0.0.1}\n",
    );
    let pin = "warden.dev/profile=pinned";
    let o = c.run(
        "closed",
        &[
            "--annotation",
            "warden.dev/egress=unrelated.test",
            "--annotation",
            pin,
            "--annotation",
            "warden.dev/allow-http=true",
        ],
        &["sh", "-c", &attack],
    );
    assert!(o.status.success(), "{} {}", text(&o.stderr), c.log());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        seen.lock().unwrap().is_empty(),
        "reached the host: {:?}",
        seen.lock().unwrap()
    );

    // The pod's author allows the pinned name itself: a name a caller
    // gives never uses the node owner's pin (it would reach the node's
    // loopback on any port the author picks).
    let o = c.run(
        "callers",
        &[
            "--annotation",
            &format!("warden.dev/egress=allowed.test:{port}"),
            "--annotation",
            pin,
            "--annotation",
            "warden.dev/allow-http=true",
        ],
        &["sh", "-c", &attack],
    );
    assert!(o.status.success(), "{} {}", text(&o.stderr), c.log());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        seen.lock().unwrap().is_empty(),
        "a pod author's name used the node's pin: {:?}",
        seen.lock().unwrap()
    );

    // The node's profile allows one name on that port: that name reaches
    // the listener, the other name and the raw address still do not.
    c.node_profile(
        "pinned-open",
        &format!(
            "egress:\n  domains: [\"allowed.test:{port}\"]\n  hosts: {{allowed.test: 127.0.0.1, denied.test: 127.0.0.1}}\n"
        ),
    );
    let o = c.run(
        "open",
        &[
            "--annotation",
            "warden.dev/profile=pinned-open",
            "--annotation",
            "warden.dev/allow-http=true",
        ],
        &["sh", "-c", &attack],
    );
    assert!(o.status.success(), "{} {}", text(&o.stderr), c.log());
    std::thread::sleep(Duration::from_millis(300));
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?} {}", text(&o.stderr));
    assert!(got[0].contains("Host: allowed.test:"), "{got:?}");
    assert!(
        text(&o.stdout).contains("\r\n\r\nok"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn a_profile_in_the_pods_own_image_is_never_read_as_the_nodes() {
    let Some(c) = with_image() else { return };
    // containerd runs the runtime from the bundle's directory, whose
    // `rootfs` is the image's tree.
    for profile in [
        "rootfs/etc/warden-profile.yaml",
        "./rootfs/etc/warden-profile.yaml",
        "../rootfs/etc/warden-profile.yaml",
        "warden-profile.yaml",
    ] {
        let o = c.run(
            "planted",
            &["--annotation", &format!("warden.dev/profile={profile}")],
            &["true"],
        );
        assert!(!o.status.success(), "{profile} was accepted");
        assert!(
            !c.dir.path().join(NODE_MARK).exists(),
            "{profile}: the image's profile ran a program on the node"
        );
        let _ = c.ctr(&["containers", "rm", "planted"]);
    }
}

#[test]
fn ctr_task_exec_kill_and_delete_go_through_warden() {
    let Some(c) = with_image() else { return };
    c.run_detached("long", &[], &["sleep", "600"]);
    let o = c.ctr(&["task", "ls"]);
    assert!(text(&o.stdout).contains("RUNNING"), "{}", text(&o.stdout));
    // An exec: its output and exit status come back through the shim.
    let o = c.ctr(&[
        "task",
        "exec",
        "--exec-id",
        "e1",
        "long",
        "sh",
        "-c",
        "echo in-exec; exit 4",
    ]);
    assert_eq!(
        o.status.code(),
        Some(4),
        "exec: {} {}",
        text(&o.stderr),
        c.log()
    );
    assert_eq!(text(&o.stdout).trim(), "in-exec");
    // The sandbox's audit log recorded it.
    let audit = std::fs::read_to_string(
        c.runtime_root()
            .join("warden-test/sandboxes/long/audit.jsonl"),
    )
    .unwrap();
    assert!(audit.contains("in-exec"), "{audit}");
    let o = c.ctr(&["task", "kill", "-s", "SIGKILL", "long"]);
    assert!(o.status.success(), "kill: {}", text(&o.stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !text(&c.ctr(&["task", "ls"]).stdout).contains("STOPPED") {
        assert!(
            Instant::now() < deadline,
            "the task did not stop: {}",
            c.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = c.ctr(&["task", "delete", "long"]);
    assert!(o.status.success(), "task delete: {}", text(&o.stderr));
    assert!(c.ctr(&["container", "delete", "long"]).status.success());
    let left: Vec<_> = std::fs::read_dir(c.runtime_root().join("warden-test/sandboxes"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An HTTPS server on the host's loopback for `name`, signed by an
/// authority made for the test (its PEM at `ca`), that records each
/// request's head and answers with it.
pub(crate) fn tls_echo(dir: &Path, name: &str) -> (u16, PathBuf, Arc<Mutex<Vec<String>>>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    // One authority per server, by its own name and file: a test may run
    // two, trusted side by side.
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("test authority of {name}"),
    );
    let ca = params.self_signed(&ca_key).unwrap();
    let ca_path = dir.join(format!("upstream-ca-{name}.pem"));
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for tcp in l.incoming().flatten() {
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            s.lock().unwrap().push(head.clone());
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                head.len()
            );
            let _ = std::io::Write::write_all(&mut tls, answer.as_bytes());
            tls.conn.send_close_notify();
            let _ = std::io::Write::flush(&mut tls);
        }
    });
    (port, ca_path, seen)
}

#[test]
fn a_secret_annotation_sends_the_real_value_upstream_while_the_container_holds_a_placeholder() {
    let Some(c) = with_image() else { return };
    if !Path::new("/usr/bin/curl").exists() {
        eprintln!("SKIPPED: no /usr/bin/curl to bind into the container as its HTTPS client");
        return;
    }
    let (port, ca, seen) = tls_echo(c.dir.path(), "api.secret.test");
    // The node's operator put the token in the secrets directory; the
    // other secret comes from the runtime's WARDEN_SECRET_KEY.
    let token = "ghp_realtoken_4b9e2f8a1c";
    std::fs::write(c.dir.path().join("secrets/token"), format!("{token}\n")).unwrap();
    // And declared the hosts each may be sent to.
    let declared = format!("api.secret.test:{port}\n");
    for f in ["token", "WARDEN_SECRET_KEY"] {
        let hosts = c.dir.path().join(format!("secrets/{f}.hosts"));
        std::fs::write(hosts, &declared).unwrap();
    }
    // The upstream's authority is trusted, and its name allowed and pinned
    // to the node's loopback, through a profile of the node's catalogue (a
    // secret's hosts a pod names are the pod's own entries, which never
    // use the node's pins).
    c.node_profile(
        "upstream",
        &format!(
            "filesystem:\n  read_only: [/usr]\negress:\n  domains: [\"api.secret.test:{port}\"]\n  upstream_ca: [{}]\n  hosts: {{api.secret.test: 127.0.0.1}}\n",
            ca.display()
        ),
    );
    let url = format!("https://api.secret.test:{port}");
    let script = format!(
        r#"echo "token=$TOKEN key=$KEY"
/usr/bin/curl -sS --cacert /run/warden/ca-bundle.crt -H "Authorization: Bearer $TOKEN" -H "X-Key: $KEY" {url}/first
echo ---
/usr/bin/curl -sS --cacert /run/warden/ca-bundle.crt {url}/second/$TOKEN
"#
    );
    let o = c.run(
        "secret",
        &[
            "--annotation",
            &format!("warden.dev/secret.TOKEN=file:token@api.secret.test:{port}"),
            "--annotation",
            &format!("warden.dev/secret.KEY=env:WARDEN_SECRET_KEY@api.secret.test:{port}"),
            "--annotation",
            "warden.dev/profile=upstream",
        ],
        &["sh", "-c", &script],
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out} {}\n{}", text(&o.stderr), c.log());
    // The container held placeholders only, and got the echoes back with
    // the placeholders in place of the values.
    assert!(out.starts_with("token=warden-secret-"), "{out}");
    assert!(out.contains(" key=warden-secret-"), "{out}");
    assert!(!out.contains(token) && !out.contains(NODE_KEY), "{out}");
    // The upstream got the real values.
    let got: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    assert_eq!(got.len(), 2, "{got:?}\n{out}");
    assert!(
        got[0].contains(&format!("authorization: bearer {token}\r\n")),
        "{got:?}"
    );
    assert!(
        got[0].contains(&format!("x-key: {NODE_KEY}\r\n")),
        "{got:?}"
    );
    assert!(
        got[1].starts_with(&format!("get /second/{token} ")),
        "{got:?}"
    );
}

#[test]
fn a_secret_annotation_naming_a_host_file_or_a_program_is_refused_and_leaves_nothing() {
    let Some(c) = with_image() else { return };
    for (n, value) in [
        "file:/etc/shadow@evil.test",
        "file:../config.toml@evil.test",
        "cmd:cat /etc/shadow@evil.test",
        "env:HOME@evil.test",
    ]
    .iter()
    .enumerate()
    {
        let o = c.run(
            &format!("refused{n}"),
            &["--annotation", &format!("warden.dev/secret.T={value}")],
            &["true"],
        );
        assert!(!o.status.success(), "{value}: ran");
        let err = text(&o.stderr);
        assert!(err.contains("warden.dev/secret.T"), "{value}: {err}");
    }
    let left: Vec<_> = std::fs::read_dir(c.runtime_root().join("warden-test/sandboxes"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A network namespace made for the test, as CNI makes a pod's: held by a
/// `sleep` in it; its path is `/proc/PID/ns/net`.
struct PodNamespace(Child);

impl PodNamespace {
    fn new() -> Option<PodNamespace> {
        let child = Command::new("unshare")
            .args(["--net", "sleep", "600"])
            .spawn()
            .ok()?;
        let ns = PodNamespace(child);
        let own = std::fs::metadata("/proc/self/ns/net").unwrap();
        wait_until("the pod's namespace", || {
            std::fs::metadata(ns.path()).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.ino() != own.ino()
            })
        });
        Some(ns)
    }

    fn path(&self) -> String {
        format!("/proc/{}/ns/net", self.0.id())
    }
}

impl Drop for PodNamespace {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn containers_of_one_pod_share_localhost_and_go_out_only_through_warden() {
    let Some(c) = with_image() else { return };
    let Some(pod) = PodNamespace::new() else {
        eprintln!("SKIPPED: unshare (util-linux) cannot make a network namespace here");
        return;
    };
    let (port, seen) = listener();
    // The node's owner allows the name and pins it (a pod author's own
    // names never use the node's pins).
    c.node_profile(
        "pinned-open",
        &format!(
            "egress:\n  domains: [\"allowed.test:{port}\"]\n  hosts: {{allowed.test: 127.0.0.1, denied.test: 127.0.0.1}}\n"
        ),
    );
    let ns = format!("network:{}", pod.path());
    let policy = [
        "--annotation".to_string(),
        "warden.dev/profile=pinned-open".to_string(),
        "--annotation".to_string(),
        "warden.dev/allow-http=true".to_string(),
        "--with-ns".to_string(),
        ns.clone(),
    ];
    let policy: Vec<&str> = policy.iter().map(String::as_str).collect();
    // The pod's first container serves on its localhost.
    c.run_detached(
        "pod-server",
        &policy,
        &[
            "sh",
            "-c",
            "while true; do echo served-by-the-first | nc -l -p 8080; done",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    // The second reaches it on localhost, reaches the allowed name through
    // warden's proxy, and neither the denied name nor the host's loopback.
    let attack = format!(
        "nc -w 3 127.0.0.1 8080; for h in allowed.test denied.test 127.0.0.1; do printf 'GET /$h HTTP/1.0\\r\\nHost: '$h':{port}\\r\\n\\r\\n' | nc -w 3 203.0.113.9 {port}; echo; done; echo direct | nc -w 3 127.0.0.1 {port}; exit 0"
    );
    let o = c.run("pod-client", &policy, &["sh", "-c", &attack]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out} {}\n{}", text(&o.stderr), c.log());
    assert!(
        out.contains("served-by-the-first"),
        "{out} {}",
        text(&o.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}\n{out}");
    assert!(got[0].contains("Host: allowed.test:"), "{got:?}");

    // A container of the pod whose annotations give another policy is
    // refused (it would go out under the first one's), and leaves nothing.
    let o = c.run(
        "pod-other",
        &[
            "--annotation",
            "warden.dev/egress=elsewhere.test",
            "--with-ns",
            &ns,
        ],
        &["true"],
    );
    assert!(!o.status.success(), "ran: {}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("same warden.dev/ annotations"),
        "{}",
        text(&o.stderr)
    );
    let o = c.ctr(&["task", "kill", "-s", "SIGKILL", "pod-server"]);
    assert!(o.status.success(), "kill: {}", text(&o.stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !text(&c.ctr(&["task", "ls"]).stdout).contains("STOPPED") {
        assert!(Instant::now() < deadline, "did not stop: {}", c.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(c.ctr(&["task", "delete", "pod-server"]).status.success());
    assert!(c
        .ctr(&["container", "delete", "pod-server"])
        .status
        .success());
    let left: Vec<_> = std::fs::read_dir(c.runtime_root().join("warden-test/sandboxes"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn ctr_run_with_a_terminal_gives_the_container_its_tty() {
    let Some(c) = with_image() else { return };
    if !Command::new("sh")
        .args(["-c", "command -v script"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIPPED: script (util-linux) is not installed to give ctr a terminal");
        return;
    }
    // `ctr run -t` wants a terminal of its own: `script` gives it one.
    let root = c.runtime_root();
    let line = format!(
        "ctr --address {sock} --namespace warden-test run -t --rm --snapshotter native --runtime io.containerd.runc.v2 --runc-binary {bin} --runc-root {root} {IMAGE} tty1 sh -c 'tty; test -t 0 && test -t 1 && echo on-a-terminal; exit 3'",
        sock = c.dir.path().join("c.sock").display(),
        bin = bin(),
        root = root.display(),
    );
    let o = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert!(
        out.contains("/dev/pts/"),
        "{out} {}\n{}",
        text(&o.stderr),
        c.log()
    );
    assert!(out.contains("on-a-terminal"), "{out}");
    assert_eq!(o.status.code(), Some(3), "{out} {}", text(&o.stderr));
    let left: Vec<_> = std::fs::read_dir(root.join("warden-test/sandboxes"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_pods_later_container_uses_the_pods_secrets_through_the_first_ones_proxy() {
    let Some(c) = with_image() else { return };
    if !Path::new("/usr/bin/curl").exists() {
        eprintln!("SKIPPED: no /usr/bin/curl to bind into the container as its HTTPS client");
        return;
    }
    let Some(pod) = PodNamespace::new() else {
        eprintln!("SKIPPED: unshare (util-linux) cannot make a network namespace here");
        return;
    };
    let (port, ca, seen) = tls_echo(c.dir.path(), "api.secret.test");
    let token = "ghp_podtoken_77d1e0b3";
    std::fs::write(c.dir.path().join("secrets/pod-token"), token).unwrap();
    std::fs::write(
        c.dir.path().join("secrets/pod-token.hosts"),
        format!("api.secret.test:{port}"),
    )
    .unwrap();
    c.node_profile(
        "upstream",
        &format!(
            "filesystem:\n  read_only: [/usr]\negress:\n  domains: [\"api.secret.test:{port}\"]\n  upstream_ca: [{}]\n  hosts: {{api.secret.test: 127.0.0.1}}\n",
            ca.display()
        ),
    );
    // The pod's annotations, which every container of it gets.
    let policy = [
        "--annotation".to_string(),
        format!("warden.dev/secret.TOKEN=file:pod-token@api.secret.test:{port}"),
        "--annotation".to_string(),
        "warden.dev/profile=upstream".to_string(),
        "--with-ns".to_string(),
        format!("network:{}", pod.path()),
    ];
    let policy: Vec<&str> = policy.iter().map(String::as_str).collect();
    c.run_detached("pod-first", &policy, &["sleep", "600"]);
    let script = format!(
        "echo token=$TOKEN; /usr/bin/curl -sS --cacert /run/warden/ca-bundle.crt -H \"Authorization: Bearer $TOKEN\" https://api.secret.test:{port}/from-the-second"
    );
    let o = c.run("pod-second", &policy, &["sh", "-c", &script]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out} {}\n{}", text(&o.stderr), c.log());
    assert!(out.starts_with("token=warden-secret-"), "{out}");
    assert!(!out.contains(token), "{out}");
    let got: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    assert_eq!(got.len(), 1, "{got:?}\n{out}");
    assert!(
        got[0].contains(&format!("authorization: bearer {token}\r\n")),
        "{got:?}"
    );
    let _ = c.ctr(&["task", "kill", "-s", "SIGKILL", "pod-first"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !text(&c.ctr(&["task", "ls"]).stdout).contains("STOPPED") {
        assert!(Instant::now() < deadline, "did not stop: {}", c.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = c.ctr(&["task", "delete", "pod-first"]);
}

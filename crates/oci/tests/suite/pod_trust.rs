//! A pod's author is an untrusted caller. Under the CRI, kubelet writes a
//! bundle's `mounts` and `linux.resources` from the pod spec, so a
//! `hostPath` volume whose `mountPath` is its `path` arrives as a
//! same-path bind. These tests are the bundles such a pod gives
//! `warden-oci`: each host path it names is refused before anything runs
//! (planted files stay unread and unchanged, a listener on the node sees
//! nothing), and its limits stay under the node profile's. A pod that
//! asks for the node's network (`hostNetwork: true`) is refused whole.

use crate::common::*;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Whether the tests can run here (as root: the planted files and the
/// listener are root's, as the node's are); prints why not.
fn ready() -> bool {
    if !can_run() {
        return false;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: the node's root-only files and sockets need the tests to run as root");
        return false;
    }
    true
}

/// A lab whose node catalogue (`XDG_CONFIG_HOME`) holds `profiles`.
struct Node {
    lab: Lab,
}

impl Node {
    fn new(profiles: &[(&str, &str)]) -> Node {
        let lab = Lab::new();
        let dir = lab.path("config/warden/profiles");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, yaml) in profiles {
            std::fs::write(dir.join(format!("{name}.yaml")), yaml).unwrap();
        }
        Node { lab }
    }

    /// `warden-oci run` of `config` as container `id`, with the node's
    /// catalogue; stdio through files, as [`Lab::oci`] has it.
    fn run(&self, id: &str, config: serde_json::Value) -> Output {
        let b = self.lab.bundle(id, config);
        self.lab.oci(&["run", "--bundle", b.to_str().unwrap(), id])
    }

    /// A directory of root's, `0700`, as the node's own are.
    fn root_only_dir(&self, name: &str) -> PathBuf {
        let d = self.lab.path(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }
}

/// `config` with one more mount: a same-path bind of `path`, as kubelet
/// writes a `hostPath` volume mounted at its own path.
fn with_host_path(mut config: serde_json::Value, path: &Path, rw: bool) -> serde_json::Value {
    let p = path.display().to_string();
    let mode = if rw { "rw" } else { "ro" };
    config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(
            {"destination": p, "type": "bind", "source": p, "options": ["rbind", "rprivate", mode]}
        ));
    config
}

/// The refusal a pod sees in its events: the mount by its place in the
/// bundle and the reason, and nothing left behind.
fn assert_refused(node: &Node, o: &Output, mount: &str) {
    let err = text(&o.stderr);
    assert!(
        !o.status.success(),
        "the bundle was run: {err}\nits output: {}",
        text(&o.stdout)
    );
    assert!(
        err.contains(mount),
        "the refusal does not name {mount}: {err}"
    );
    assert!(
        err.contains("hostPath") && err.contains("node"),
        "the refusal does not say why: {err}"
    );
    assert!(!err.contains("--rw") && !err.contains("--ro"), "{err}");
    assert!(node.lab.left().is_empty(), "left: {:?}", node.lab.left());
}

#[test]
fn a_pods_writable_host_path_of_a_root_only_directory_is_refused_and_its_file_stays_unread_and_unchanged(
) {
    if !ready() {
        return;
    }
    let node = Node::new(&[]);
    let dir = node.root_only_dir("nodedir");
    let secret = dir.join("shadow");
    std::fs::write(&secret, "root-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = dir.display();
    let script = format!("cat {d}/shadow; echo pwned >> {d}/shadow; echo x > {d}/cronjob");
    let o = node.run(
        "hostpath-dir",
        with_host_path(config(&["sh", "-c", &script]), &dir, true),
    );
    assert_refused(&node, &o, "mounts[2]");
    assert!(
        !text(&o.stdout).contains("root-secret"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root-secret\n");
    assert!(
        !dir.join("cronjob").exists(),
        "the pod made a file of root's"
    );
}

#[test]
fn a_pods_host_path_of_a_root_only_socket_is_refused_and_the_listener_sees_nothing() {
    if !ready() {
        return;
    }
    if !Path::new("/usr/bin/perl").exists() {
        eprintln!("SKIPPED: no /usr/bin/perl to stand in for the pod's socket client");
        return;
    }
    // The client's programs come from the node owner's own grant (a
    // profile of the catalogue binds /usr), the way a node gives pods a
    // host path: only the socket's directory is the pod's ask.
    let node = Node::new(&[("tools", "filesystem:\n  read_only: [/usr]\n")]);
    let rootfs = node.lab.path("rootfs");
    std::fs::create_dir_all(rootfs.join("usr")).unwrap();
    for lib in ["lib", "lib64"] {
        std::os::unix::fs::symlink(format!("usr/{lib}"), rootfs.join(lib)).unwrap();
    }
    let dir = node.root_only_dir("sockdir");
    let sock = dir.join("node.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let client = format!(
        "echo client-ran; exec /usr/bin/perl -MSocket -e 'socket(S, PF_UNIX, SOCK_STREAM, 0) or die; connect(S, pack_sockaddr_un(\"{}\")) or die \"connect: $!\"; print \"connected\\n\"'",
        sock.display()
    );
    let mut cfg = config(&["sh", "-c", &client]);
    cfg["annotations"] = serde_json::json!({"warden.dev/profile": "tools"});

    // The client runs, and without the pod's bind the socket is not there.
    let o = node.run("no-socket", cfg.clone());
    assert!(
        text(&o.stdout).contains("client-ran"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        !text(&o.stdout).contains("connected"),
        "{}",
        text(&o.stdout)
    );

    let o = node.run("hostpath-sock", with_host_path(cfg, &dir, true));
    assert_refused(&node, &o, "mounts[2]");
    assert!(
        !text(&o.stdout).contains("connected"),
        "{}",
        text(&o.stdout)
    );
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Ok(_) => panic!("the pod connected to the node's root-only socket"),
        Err(e) => panic!("accept: {e}"),
    }
}

#[test]
fn a_pods_writable_host_path_of_the_nodes_dev_shm_is_refused_and_writes_nothing_there() {
    if !ready() {
        return;
    }
    let node = Node::new(&[]);
    let probe = PathBuf::from(format!("/dev/shm/.warden-pod-probe-{}", std::process::id()));
    let script = format!("echo pod > {}", probe.display());
    let o = node.run(
        "hostpath-shm",
        with_host_path(config(&["sh", "-c", &script]), Path::new("/dev/shm"), true),
    );
    let wrote = probe.exists();
    let _ = std::fs::remove_file(&probe);
    assert_refused(&node, &o, "mounts[2]");
    assert!(!wrote, "the pod wrote into the node's /dev/shm");
}

#[test]
fn a_pods_read_only_host_path_of_the_nodes_run_is_refused_and_lists_nothing_of_it() {
    if !ready() {
        return;
    }
    let node = Node::new(&[]);
    // A name only the node's /run has, planted for the test.
    let marker = PathBuf::from(format!("/run/.warden-pod-marker-{}", std::process::id()));
    std::fs::write(&marker, "").unwrap();
    let o = node.run(
        "hostpath-run",
        with_host_path(config(&["ls", "-a", "/run"]), Path::new("/run"), false),
    );
    let _ = std::fs::remove_file(&marker);
    assert_refused(&node, &o, "mounts[2]");
    let name = marker.file_name().unwrap().to_string_lossy().into_owned();
    assert!(!text(&o.stdout).contains(&name), "{}", text(&o.stdout));
}

#[test]
fn a_pods_limits_above_the_node_profiles_are_refused_and_limits_within_run() {
    if !ready() {
        return;
    }
    let node = Node::new(&[("podsmall", "resources:\n  memory: 64M\n  pids: 50\n")]);
    let pod = |memory: i64, pids: i64| {
        let mut c = config(&["sh", "-c", "echo started"]);
        c["annotations"] = serde_json::json!({"warden.dev/profile": "podsmall"});
        c["linux"]["resources"] =
            serde_json::json!({"memory": {"limit": memory}, "pids": {"limit": pids}});
        c
    };
    for (id, memory, pids, field) in [
        ("above-memory", 4 << 30, 20, "linux.resources.memory.limit"),
        ("above-pids", 32 << 20, 20_000, "linux.resources.pids.limit"),
    ] {
        let o = node.run(id, pod(memory, pids));
        let err = text(&o.stderr);
        assert!(
            !o.status.success(),
            "{id} ran above the node's ceiling: {err}"
        );
        assert!(!text(&o.stdout).contains("started"), "{id}");
        assert!(
            err.contains(field),
            "{id}: the refusal does not name {field}: {err}"
        );
        assert!(
            node.lab.left().is_empty(),
            "{id} left {:?}",
            node.lab.left()
        );
    }
    let o = node.run("within", pod(32 << 20, 20));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("started"), "{}", text(&o.stdout));
}

#[test]
fn a_pods_limits_above_the_hosts_defaults_are_refused_where_the_node_profile_sets_none() {
    if !ready() {
        return;
    }
    // A node profile that sets no limit, and no profile at all: the host's
    // defaults (what a token's sandbox is given) are the ceiling.
    let node = Node::new(&[("podopen", "egress:\n  domains: [example.com]\n")]);
    let pod = |profile: Option<&str>, memory: i64, pids: i64| {
        let mut c = config(&["sh", "-c", "echo started"]);
        if let Some(p) = profile {
            c["annotations"] = serde_json::json!({ "warden.dev/profile": p });
        }
        c["linux"]["resources"] =
            serde_json::json!({"memory": {"limit": memory}, "pids": {"limit": pids}});
        c
    };
    for profile in [Some("podopen"), None] {
        let tag = if profile.is_some() { "open" } else { "none" };
        for (id, memory, pids, field) in [
            (
                format!("{tag}-memory"),
                12i64 << 30,
                20,
                "linux.resources.memory.limit",
            ),
            (
                format!("{tag}-pids"),
                32 << 20,
                20_000,
                "linux.resources.pids.limit",
            ),
        ] {
            let o = node.run(&id, pod(profile, memory, pids));
            let err = text(&o.stderr);
            assert!(
                !o.status.success(),
                "{id} ran above the host's defaults: {err}"
            );
            assert!(!text(&o.stdout).contains("started"), "{id}");
            assert!(
                err.contains(field) && err.contains("the host's default"),
                "{id}: the refusal does not name {field} and its ceiling: {err}"
            );
            assert!(
                node.lab.left().is_empty(),
                "{id} left {:?}",
                node.lab.left()
            );
        }
        let o = node.run(&format!("{tag}-within"), pod(profile, 32 << 20, 20));
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(text(&o.stdout).contains("started"), "{}", text(&o.stdout));
    }
}

#[test]
fn a_host_network_pod_is_refused_naming_host_network_and_nothing_runs() {
    if !ready() {
        return;
    }
    let node = Node::new(&[]);
    // What the CRI writes for a pod with `hostNetwork: true` (its pause
    // container's namespaces, without `network`), and a bundle with no
    // `linux` at all: both ask for the node's network, on which
    // containerd's port-forward dials the node's own loopback.
    let mut host_network = config(&["sh", "-c", "echo container-ran"]);
    host_network["linux"]["namespaces"] = serde_json::json!([
        {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}
    ]);
    let mut no_linux = config(&["sh", "-c", "echo container-ran"]);
    no_linux.as_object_mut().unwrap().remove("linux");
    for (id, c) in [("host-network", host_network), ("no-linux", no_linux)] {
        let o = node.run(id, c);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{id} was run: {err}");
        assert!(
            !text(&o.stdout).contains("container-ran"),
            "{id}: {}",
            text(&o.stdout)
        );
        assert!(
            err.contains("linux.namespaces") && err.contains("hostNetwork"),
            "{id}: the refusal does not say what and why: {err}"
        );
        assert!(
            node.lab.left().is_empty(),
            "{id} left: {:?}",
            node.lab.left()
        );
    }
}

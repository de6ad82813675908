//! What users tripped over in their second week (issue 31), each through
//! the real binary: a client that resets an allowed tunnel is recorded as
//! a connection that closed, not a denial; `warden run -d` on an overlay
//! says where its changes went and `warden logs` prints its output;
//! a warm pool's sandboxes are marked in `warden ls`; `warden vm kernel
//! --install` plans, refuses and unpacks.

use crate::common::*;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_client_that_resets_an_allowed_tunnel_is_recorded_as_closed_not_denied() {
    if !egress_available() {
        return;
    }
    // A name allowed without a port is judged by what comes through its
    // tunnel (TLS on 443): the client here sends nothing and resets. On a
    // loopback address of its own so that no host service is in the way.
    let listener = match TcpListener::bind("127.0.0.2:443") {
        Ok(l) => l,
        Err(e) => return skip(&format!("cannot listen on 127.0.0.2:443: {e}")),
    };
    let arrived = Arc::new(AtomicUsize::new(0));
    let bytes = Arc::new(AtomicUsize::new(0));
    {
        let (arrived, bytes) = (arrived.clone(), bytes.clone());
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                arrived.fetch_add(1, Ordering::SeqCst);
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = Vec::new();
                let _ = conn.read_to_end(&mut buf);
                bytes.fetch_add(buf.len(), Ordering::SeqCst);
            }
        });
    }
    let dir = TempDir::new("reset-tunnel");
    let events = dir.path().join("events.jsonl");
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--json-events"])
        .arg(&events)
        .args([
            "--allow-domain",
            "reset.test",
            "--add-host",
            "reset.test=127.0.0.2",
            "--",
            "python3",
            "-c",
            "import os, socket, struct, time\n\
host, port = os.environ['HTTPS_PROXY'].rsplit('/', 1)[1].split(':')\n\
s = socket.create_connection((host, int(port)), timeout=10)\n\
s.sendall(b'CONNECT reset.test:443 HTTP/1.1\\r\\nHost: reset.test:443\\r\\n\\r\\n')\n\
print(s.recv(200).split(b'\\r\\n')[0].decode())\n\
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n\
s.close()\n\
time.sleep(1)\n",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(so.contains("200 Connection established"), "{so} {se}");
    let evs = events_of(&events);
    let conns: Vec<&serde_json::Value> = evs
        .iter()
        .filter(|e| e["event"] == "connection" && e["name"] == "reset.test")
        .collect();
    assert_eq!(conns.len(), 1, "{evs:?}");
    assert_eq!(conns[0]["allowed"], true, "{:?}", conns[0]);
    assert!(
        !se.contains("denied") && !se.contains("would allow"),
        "the reset was reported as a denial: {se}"
    );
    assert_eq!(bytes.load(Ordering::SeqCst), 0, "bytes reached upstream");
}

/// The events of a `--json-events` file (none when it is missing).
fn events_of(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_detached_run_on_a_workspace_says_its_changes_are_kept_apart_and_logs_prints_its_output() {
    let state = TempDir::new("detached-overlay");
    let ws = TempDir::new("detached-overlay-ws");
    std::fs::write(ws.path().join("kept.txt"), "before\n").unwrap();
    let out = warden(
        state.path(),
        &[
            "run",
            "-d",
            "-w",
            ws.str(),
            "--",
            "sh",
            "-c",
            "echo written > kept.txt; echo to-stdout; echo to-stderr >&2",
        ],
    );
    let err = stderr(&out);
    let name = ok(&out).trim().to_string();
    assert!(
        err.contains(&format!("its changes to {} are kept apart", ws.str()))
            && err.contains(&format!("`warden diff {name}`"))
            && err.contains(&format!("`warden commit {name}`")),
        "run -d did not say where its changes go: {err}"
    );
    assert!(
        err.contains(&format!("`warden logs {name}` shows its output")),
        "{err}"
    );
    let dir = sandbox_dir(state.path(), &name);
    wait_until("the detached run to end", Duration::from_secs(15), || {
        !dir.join("supervisor.json").exists()
    });
    // What it said is there (both streams in the order written, as
    // `run -d` keeps them), and the directory is as it was.
    let logs = warden(state.path(), &["logs", &name]);
    assert_eq!(ok(&logs), "to-stdout\nto-stderr\n", "{}", stderr(&logs));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("kept.txt")).unwrap(),
        "before\n"
    );
    let diff = ok(&warden(state.path(), &["diff", &name]));
    assert!(diff.contains("kept.txt"), "{diff}");
    // Its events are still there, as JSON and in the audit log.
    let events = ok(&warden(state.path(), &["logs", "--json", &name]));
    assert!(events.contains("\"event\":\"exec_exited\""), "{events}");
    ok(&warden(state.path(), &["rm", &name]));
}

#[test]
fn a_warm_pools_sandboxes_are_marked_pooled_in_warden_ls_until_a_create_takes_one() {
    use crate::common::daemon::*;
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("ls-pooled");
    let config = TempDir::new("ls-pooled-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(profiles.join("warm.yaml"), "description: warm\n").unwrap();
    let mut d = Daemon::start_with(
        state.path(),
        false,
        &["--pool", "warm=1"],
        &[("XDG_CONFIG_HOME", config.path())],
    );
    let rows = |state: &std::path::Path| -> Vec<serde_json::Value> {
        let out = ok(&warden(state, &["ls", "--json"]));
        serde_json::from_str::<Vec<serde_json::Value>>(&out).unwrap()
    };
    wait_until("the pool is full", Duration::from_secs(30), || {
        rows(state.path())
            .iter()
            .any(|r| r["pooled"] == true && r["state"] == "running")
    });
    let pooled: Vec<String> = rows(state.path())
        .iter()
        .filter(|r| r["pooled"] == true)
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(pooled.len(), 1);
    let text = ok(&warden(state.path(), &["ls"]));
    let line = text
        .lines()
        .find(|l| l.starts_with(&pooled[0]))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.split_whitespace().nth(2) == Some("pooled"),
        "not marked: {text}"
    );
    // Taken by a create: the caller's, no longer marked.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"profile":"warm"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let taken = json(&b)["id"].as_str().unwrap().to_string();
    assert_eq!(taken, pooled[0], "the create did not take the pooled one");
    let row = rows(state.path())
        .into_iter()
        .find(|r| r["name"] == taken.as_str())
        .unwrap();
    assert!(row.get("pooled").is_none(), "{row}");
    d.stop();
}

/// `warden vm kernel ARGS` with the VM directory `vm_dir` and `path` as
/// its `PATH`.
fn vm_kernel(vm_dir: &std::path::Path, path: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(warden_bin());
    cmd.args(["vm", "kernel"])
        .args(args)
        .env("WARDEN_VM_DIR", vm_dir)
        .env_remove("WARDEN_VM_KERNEL")
        .env_remove("WARDEN_VM_MODULES")
        .stdin(Stdio::null());
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    cmd.output().unwrap()
}

fn on_host(program: &str) -> bool {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .any(|d| std::path::Path::new(d).join(program).exists())
}

#[test]
fn vm_kernel_install_dry_run_names_the_package_and_the_directory_and_changes_nothing() {
    if !on_host("apt-cache") {
        return skip("no apt-cache: not a Debian or Ubuntu host");
    }
    let vm = TempDir::new("vm-kernel-plan");
    let out = vm_kernel(vm.path(), None, &["--install", "--dry-run"]);
    let so = ok(&out);
    let kernel = vm.path().join("kernel");
    assert!(
        so.contains("apt-get download linux-image-") && so.contains(&kernel.display().to_string()),
        "{so}"
    );
    assert!(!so.contains("NN"), "{so}");
    assert!(!kernel.exists(), "a dry run made {}", kernel.display());
    // Without a kernel, the report names the command, not steps with a
    // placeholder in them.
    let report = stdout(&vm_kernel(vm.path(), None, &[]));
    assert!(
        report.contains("`warden vm kernel --install`") && !report.contains("-NN-"),
        "{report}"
    );
}

#[test]
fn vm_kernel_install_refuses_clearly_where_apt_is_absent() {
    let vm = TempDir::new("vm-kernel-noapt");
    let empty = TempDir::new("vm-kernel-nopath");
    let out = vm_kernel(vm.path(), Some(empty.str()), &["--install"]);
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("apt-get") && err.contains("WARDEN_VM_KERNEL"),
        "{err}"
    );
    assert!(!vm.path().join("kernel").exists());
}

#[test]
fn vm_kernel_install_unpacks_a_given_kernel_package_where_the_report_finds_it() {
    if !on_host("dpkg-deb") {
        return skip("no dpkg-deb: not a Debian or Ubuntu host");
    }
    // A package shaped as the distribution's: boot/vmlinuz-R beside
    // lib/modules/R.
    let pkg = TempDir::new("vm-kernel-deb");
    let root = pkg.path().join("root");
    let release = "9.9.9-warden-test";
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join("boot")).unwrap();
    std::fs::create_dir_all(root.join("lib/modules").join(release).join("kernel")).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        "Package: linux-image-warden-test\nVersion: 1\nArchitecture: all\nMaintainer: warden <t@example.invalid>\nDescription: a test kernel package\n",
    )
    .unwrap();
    std::fs::write(
        root.join("boot").join(format!("vmlinuz-{release}")),
        b"kernel",
    )
    .unwrap();
    let deb = pkg.path().join("linux-image-warden-test.deb");
    let built = Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&root)
        .arg(&deb)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", stderr(&built));
    let vm = TempDir::new("vm-kernel-given");
    // An older kernel there is replaced whole.
    std::fs::create_dir_all(vm.path().join("kernel/boot")).unwrap();
    std::fs::write(vm.path().join("kernel/boot/vmlinuz-0.0.1-old"), b"old").unwrap();
    let out = vm_kernel(
        vm.path(),
        None,
        &["--install", "--deb", deb.to_str().unwrap()],
    );
    let so = ok(&out);
    assert!(
        so.contains(&format!("the guest kernel is now {release}")),
        "{so}"
    );
    assert!(!vm.path().join("kernel/boot/vmlinuz-0.0.1-old").exists());
    let report: serde_json::Value =
        serde_json::from_str(&stdout(&vm_kernel(vm.path(), None, &["--json"]))).unwrap();
    assert_eq!(report["kernel"]["Ok"]["release"], release, "{report}");
    // Nothing of the work is left beside it.
    let left: Vec<String> = std::fs::read_dir(vm.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["kernel"], "{left:?}");
}

#[test]
fn vm_kernel_install_fetches_and_unpacks_the_distributions_kernel() {
    if !on_host("apt-get") || !on_host("dpkg-deb") {
        return skip("no apt-get or dpkg-deb: not a Debian or Ubuntu host");
    }
    let vm = TempDir::new("vm-kernel-real");
    let out = vm_kernel(vm.path(), None, &["--install"]);
    if !out.status.success() && stderr(&out).contains("apt-get download") {
        return skip(&format!(
            "the distribution's mirror cannot be reached: {}",
            stderr(&out).trim()
        ));
    }
    let so = ok(&out);
    assert!(so.contains("fetched linux-image-"), "{so}");
    let report: serde_json::Value =
        serde_json::from_str(&stdout(&vm_kernel(vm.path(), None, &["--json"]))).unwrap();
    let release = report["kernel"]["Ok"]["release"]
        .as_str()
        .unwrap_or_default();
    assert!(
        !release.is_empty() && so.contains(&format!("the guest kernel is now {release}")),
        "{so} {report}"
    );
}

//! The OCI verbs against bundles the tests make, as containerd's shim
//! calls them: real sandboxes, real processes, real exit statuses.

use crate::common::*;
use std::process::Stdio;

/// Container `id` of a bundle that sleeps, created (not started).
fn create_sleeper(lab: &Lab, id: &str) {
    let b = lab.bundle("b", config(&["sleep", "600"]));
    let o = lab.oci(&["create", "--bundle", b.to_str().unwrap(), id]);
    assert!(o.status.success(), "create {id}: {}", text(&o.stderr));
}

/// The process whose pid warden-oci wrote to `pid_file` (a child of this
/// subreaper) exits with `code`.
fn assert_exits_with(pid_file: &std::path::Path, code: i32) {
    let pid: i32 = std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), code)
    );
}

#[test]
fn container_goes_created_running_stopped_and_delete_leaves_nothing() {
    if !can_run() {
        return;
    }
    let lab = Lab::new();
    let b = lab.bundle("b", config(&["sleep", "600"]));
    let pid_file = lab.path("pid");
    let o = lab.oci(&[
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        "c1",
    ]);
    assert!(o.status.success(), "create: {}", text(&o.stderr));
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let s = lab.state("c1");
    assert_eq!(s["status"], "created", "{s}");
    assert_eq!(s["pid"], pid, "{s}");
    assert_eq!(s["id"], "c1");

    let o = lab.oci(&["start", "c1"]);
    assert!(o.status.success(), "start: {}", text(&o.stderr));
    assert_eq!(lab.state("c1")["status"], "running");
    let o = lab.oci(&["ps", "--format", "json", "c1"]);
    let pids: Vec<i32> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!pids.is_empty(), "ps: {}", text(&o.stdout));

    // Running: delete without --force is refused and changes nothing.
    let o = lab.oci(&["delete", "c1"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("running"), "{}", text(&o.stderr));

    let o = lab.oci(&["kill", "c1", "KILL"]);
    assert!(o.status.success(), "kill: {}", text(&o.stderr));
    wait_until("the container to stop", || {
        lab.state("c1")["status"] == "stopped"
    });
    for p in &pids {
        wait_until("the container's processes to go", || {
            !std::path::Path::new(&format!("/proc/{p}")).exists()
                || std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| s.contains(") Z"))
        });
    }
    let o = lab.oci(&["delete", "c1"]);
    assert!(o.status.success(), "delete: {}", text(&o.stderr));
    assert!(lab.left().is_empty(), "left behind: {:?}", lab.left());
    assert!(!lab.oci(&["state", "c1"]).status.success());
}

#[test]
fn pid_file_names_a_process_whose_exit_is_the_containers() {
    if !can_run() {
        return;
    }
    // As containerd's shim: a subreaper that adopts what create leaves
    // and waits for the PID in the pid file.
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let lab = Lab::new();
    let b = lab.bundle(
        "b",
        config(&["sh", "-c", "echo out-$(hostname); echo err >&2; exit 7"]),
    );
    let pid_file = lab.path("pid");
    let out = std::fs::File::create(lab.path("stdout")).unwrap();
    let err = std::fs::File::create(lab.path("stderr")).unwrap();
    // The stdio create is given is the container's, as the shim's fifos are.
    let st = std::process::Command::new(bin())
        .args([
            "--root",
            lab.root().to_str().unwrap(),
            "create",
            "--bundle",
            b.to_str().unwrap(),
        ])
        .args(["--pid-file", pid_file.to_str().unwrap(), "c2"])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "create: {}",
        std::fs::read_to_string(lab.path("stderr")).unwrap()
    );
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(lab.oci(&["start", "c2"]).status.success());
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 7)
    );
    assert_eq!(
        std::fs::read_to_string(lab.path("stdout")).unwrap(),
        "out-box\n"
    );
    assert_eq!(
        std::fs::read_to_string(lab.path("stderr")).unwrap(),
        "err\n"
    );
    assert_eq!(lab.state("c2")["status"], "stopped");
    assert!(lab.oci(&["delete", "c2"]).status.success());
    assert!(lab.left().is_empty());
}

#[test]
fn exec_runs_in_the_container_with_its_status_and_detached_with_a_waiter() {
    if !can_run() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let lab = Lab::new();
    create_sleeper(&lab, "c3");
    assert!(lab.oci(&["start", "c3"]).status.success());
    let process = lab.path("process.json");
    std::fs::write(
        &process,
        serde_json::json!({"args": ["sh", "-c", "echo in-$(hostname) $FOO; exit 3"], "env": ["PATH=/bin", "FOO=bar"], "cwd": "/tmp"}).to_string(),
    )
    .unwrap();
    let o = lab.oci(&["exec", "--process", process.to_str().unwrap(), "c3"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "in-box bar\n");

    // Detached: the PID in the pid file is a process of ours whose exit
    // is the exec's.
    let pid_file = lab.path("exec.pid");
    std::fs::write(
        &process,
        serde_json::json!({"args": ["sh", "-c", "sleep 0.3; exit 5"], "cwd": "/"}).to_string(),
    )
    .unwrap();
    let o = lab.oci(&[
        "exec",
        "--detach",
        "--pid-file",
        pid_file.to_str().unwrap(),
        "--process",
        process.to_str().unwrap(),
        "c3",
    ]);
    assert!(o.status.success(), "exec -d: {}", text(&o.stderr));
    assert_exits_with(&pid_file, 5);
    assert!(lab.oci(&["delete", "--force", "c3"]).status.success());
    assert!(lab.left().is_empty());
}

#[test]
fn bad_bundles_are_refused_by_their_field_and_leave_nothing() {
    if !can_run() {
        return;
    }
    let lab = Lab::new();
    let mut cases = Vec::new();
    let mut c = config(&["sh"]);
    c["linux"]["namespaces"][0]["path"] = "/proc/1/ns/pid".into();
    cases.push(("host-pid", c, "linux.namespaces[0].path"));
    let mut c = config(&["sh"]);
    c["annotations"] = serde_json::json!({"warden.dev/egres": "a.test"});
    cases.push(("annotation", c, "warden.dev/egres"));
    let mut c = config(&["sh"]);
    c["process"]["args"] = serde_json::json!([]);
    cases.push(("no-args", c, "process.args"));
    let mut c = config(&["sh"]);
    c["root"]["path"] = "missing".into();
    cases.push(("no-root", c, "missing"));
    let mut c = config(&["sh"]);
    c["mounts"] = serde_json::json!([{"destination": "/data", "type": "bind", "source": "/srv", "options": ["rbind"]}]);
    cases.push(("moved-bind", c, "mounts[0].destination"));
    // The bundle's own values are the caller's to be told about, never
    // passed off as a broken profile of the node's.
    let mut c = config(&["sh"]);
    c["hostname"] = "not a hostname".into();
    cases.push(("bad-hostname", c, "hostname"));
    let mut c = config(&["sh"]);
    c["linux"]["resources"] = serde_json::json!({"memory": {"limit": 1024}});
    cases.push(("tiny-memory", c, "memory"));
    for (name, c, needle) in cases {
        let b = lab.bundle(name, c);
        let o = lab.oci(&["create", "--bundle", b.to_str().unwrap(), name]);
        assert!(!o.status.success(), "{name} was accepted");
        assert!(
            text(&o.stderr).contains(needle),
            "{name}: {}",
            text(&o.stderr)
        );
        assert!(lab.left().is_empty(), "{name} left {:?}", lab.left());
    }
    std::fs::create_dir_all(lab.path("broken")).unwrap();
    std::fs::write(lab.path("broken/config.json"), "{\"process\": ").unwrap();
    let o = lab.oci(&[
        "create",
        "--bundle",
        lab.path("broken").to_str().unwrap(),
        "broken",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("not a valid OCI runtime configuration"),
        "{}",
        text(&o.stderr)
    );
    assert!(lab.left().is_empty());
}

#[test]
fn a_pods_author_cannot_have_a_file_of_its_own_read_as_the_nodes_profile() {
    if !can_run() {
        return;
    }
    let lab = Lab::new();
    // A profile the pod's author controls: in its image (the bundle's
    // rootfs), beside config.json, or anywhere on the node. Read as the
    // node's configuration, its secret's program would run on the node.
    let marker = lab.path("ran-on-the-node");
    let evil = format!(
        "secrets:\n  X:\n    from_command: [/usr/bin/touch, {}]\n    hosts: [evil.test]\n",
        marker.display()
    );
    let b = lab.bundle("b", config(&["true"]));
    std::fs::write(b.join("evil.yaml"), &evil).unwrap();
    std::fs::write(lab.path("rootfs/evil.yaml"), &evil).unwrap();
    let abs = b.join("evil.yaml").display().to_string();
    for (i, value) in [
        "evil.yaml",
        "./evil.yaml",
        "rootfs/evil.yaml",
        "rootfs/evil",
        abs.as_str(),
        "../b/evil.yaml",
        "evil.yml",
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = config(&["true"]);
        c["annotations"] = serde_json::json!({"warden.dev/profile": value});
        std::fs::write(
            b.join("config.json"),
            serde_json::to_vec_pretty(&c).unwrap(),
        )
        .unwrap();
        let id = format!("evil{i}");
        // From the bundle's directory, as containerd's shim runs it.
        let o = lab.oci_in(Some(&b), &["create", "--bundle", b.to_str().unwrap(), &id]);
        assert!(!o.status.success(), "{value} was accepted");
        let err = text(&o.stderr);
        assert!(err.contains("warden.dev/profile"), "{value}: {err}");
        assert!(err.contains("only the owner names files"), "{value}: {err}");
        assert!(
            !marker.exists(),
            "{value}: the profile's program ran on the node"
        );
        assert!(lab.left().is_empty(), "{value} left {:?}", lab.left());
    }
    // Nor may the pod's author pin a name to the node's own addresses.
    let mut c = config(&["true"]);
    c["annotations"] = serde_json::json!({"warden.dev/hosts": "api.test=127.0.0.1"});
    std::fs::write(
        b.join("config.json"),
        serde_json::to_vec_pretty(&c).unwrap(),
    )
    .unwrap();
    let o = lab.oci_in(
        Some(&b),
        &["create", "--bundle", b.to_str().unwrap(), "pin"],
    );
    assert!(!o.status.success(), "a pin was accepted");
    assert!(
        text(&o.stderr).contains("warden.dev/hosts"),
        "{}",
        text(&o.stderr)
    );
    assert!(lab.left().is_empty(), "{:?}", lab.left());
}

#[test]
fn features_name_the_annotations_warden_reads() {
    let o = std::process::Command::new(bin())
        .arg("features")
        .output()
        .unwrap();
    let f: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(f["annotations"]["warden.dev/egress"].is_string(), "{f}");
}

#[test]
fn a_created_container_killed_before_start_ends_as_killed() {
    if !can_run() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let lab = Lab::new();
    let b = lab.bundle("b", config(&["sh", "-c", "echo never"]));
    let pid_file = lab.path("pid");
    let o = lab.oci(&[
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        "c4",
    ]);
    assert!(o.status.success(), "create: {}", text(&o.stderr));
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let o = lab.oci(&["kill", "c4", "KILL"]);
    assert!(o.status.success(), "kill: {}", text(&o.stderr));
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 137)
    );
    assert_eq!(lab.state("c4")["status"], "stopped");
    assert!(!lab.oci(&["start", "c4"]).status.success());
    assert!(lab.oci(&["delete", "c4"]).status.success());
    assert!(lab.left().is_empty());
}

#[test]
fn exec_tty_sends_a_terminal_master_to_the_console_socket() {
    use std::io::Read;
    use std::os::fd::AsFd;
    if !can_run() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let lab = Lab::new();
    create_sleeper(&lab, "c5");
    assert!(lab.oci(&["start", "c5"]).status.success());
    let sock_path = lab.path("console.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    let pid_file = lab.path("tty.pid");
    let o = lab.oci(&[
        "exec",
        "--tty",
        "--detach",
        "--console-socket",
        sock_path.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        "c5",
        "sh",
        "-c",
        "tty; echo tty-ok; sleep 1",
    ]);
    assert!(o.status.success(), "exec --tty: {}", text(&o.stderr));
    let (conn, _) = listener.accept().unwrap();
    let mut buf = [0u8; 64];
    let (_, fds) = warden_jail::fdpass::recv(conn.as_fd(), &mut buf).unwrap();
    let master = fds
        .into_iter()
        .next()
        .expect("a descriptor came with the message");
    let mut master = std::fs::File::from(master);
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.contains("tty-ok") && std::time::Instant::now() < deadline {
        let mut chunk = [0u8; 256];
        match master.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&chunk[..n])),
        }
    }
    assert!(
        seen.contains("/dev/pts/"),
        "the process has no terminal: {seen:?}"
    );
    assert!(seen.contains("tty-ok"), "{seen:?}");
    assert_exits_with(&pid_file, 0);
    assert!(lab.oci(&["delete", "--force", "c5"]).status.success());
}

#[test]
fn a_root_the_sandbox_cannot_be_built_from_fails_create_and_leaves_nothing() {
    if !can_run() {
        return;
    }
    let lab = Lab::new();
    // A file where warden mounts the workspace: the init cannot build the
    // root, and the supervisor says why (it no longer reports a sandbox
    // ready that never got the word to run).
    let b = lab.path("bad");
    std::fs::create_dir_all(b.join("rootfs/bin")).unwrap();
    std::fs::copy(BUSYBOX, b.join("rootfs/bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", b.join("rootfs/bin/sh")).unwrap();
    std::fs::write(b.join("rootfs/workspace"), "").unwrap();
    std::fs::write(
        b.join("config.json"),
        config(&["sh", "-c", "exit 0"]).to_string(),
    )
    .unwrap();
    let o = lab.oci(&["create", "--bundle", b.to_str().unwrap(), "c6"]);
    assert!(!o.status.success(), "a broken root was reported created");
    assert!(
        text(&o.stderr).contains("cannot set up the sandbox")
            && text(&o.stderr).contains("/workspace"),
        "{}",
        text(&o.stderr)
    );
    assert!(lab.left().is_empty(), "left behind: {:?}", lab.left());
}

#[test]
fn a_first_process_with_a_terminal_gets_it_on_the_console_socket_before_create_returns() {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    if !can_run() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let lab = Lab::new();
    let mut cfg = config(&[
        "sh",
        "-c",
        "tty; test -t 0 && test -t 1 && echo on-a-terminal; read line; echo got-$line; exit 5",
    ]);
    cfg["process"]["terminal"] = serde_json::json!(true);
    let b = lab.bundle("b", cfg);
    // Without a console socket there is nowhere to send the terminal.
    let o = lab.oci(&["create", "--bundle", b.to_str().unwrap(), "c7"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("--console-socket"),
        "{}",
        text(&o.stderr)
    );
    assert!(lab.left().is_empty());
    let sock_path = lab.path("console7.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    let pid_file = lab.path("pid7");
    let o = lab.oci(&[
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "--console-socket",
        sock_path.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        "c7",
    ]);
    assert!(o.status.success(), "create: {}", text(&o.stderr));
    // `create` has returned: the master side is waiting on the socket.
    listener.set_nonblocking(true).unwrap();
    let (conn, _) = listener
        .accept()
        .expect("the master came before create returned");
    conn.set_nonblocking(false).unwrap();
    let mut buf = [0u8; 64];
    let (_, fds) = warden_jail::fdpass::recv(conn.as_fd(), &mut buf).unwrap();
    let mut master = std::fs::File::from(fds.into_iter().next().expect("a descriptor"));
    assert_eq!(lab.state("c7")["status"], "created");
    assert!(lab.oci(&["start", "c7"]).status.success());
    master.write_all(b"hello\n").unwrap();
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.contains("got-hello") && std::time::Instant::now() < deadline {
        let mut chunk = [0u8; 256];
        match master.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&chunk[..n])),
        }
    }
    assert!(seen.contains("/dev/pts/"), "no terminal: {seen:?}");
    assert!(seen.contains("on-a-terminal"), "{seen:?}");
    assert!(seen.contains("got-hello"), "{seen:?}");
    assert_exits_with(&pid_file, 5);
    assert!(lab.oci(&["delete", "c7"]).status.success());
    assert!(lab.left().is_empty());
}

/// A host hook: appends its kind, the state it read and the network
/// namespaces (its own and that of the state's PID) to `log`.
fn host_hook(lab: &Lab, log: &std::path::Path, kind: &str) -> serde_json::Value {
    let script = lab.path("host-hook.sh");
    if !script.exists() {
        std::fs::write(
            &script,
            "#!/bin/sh\nstate=$(cat)\npid=$(echo \"$state\" | sed -n 's/.*\"pid\":\\([0-9]*\\).*/\\1/p')\necho \"$HOOK_KIND own=$(readlink /proc/self/ns/net) target=$(readlink /proc/$pid/ns/net) $state\" >> \"$HOOK_LOG\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    serde_json::json!({
        "path": script,
        "args": ["host-hook", kind],
        "env": [format!("HOOK_KIND={kind}"), format!("HOOK_LOG={}", log.display()),
                "PATH=/usr/bin:/bin"],
        "timeout": 10
    })
}

#[test]
fn hooks_run_at_their_points_in_the_namespaces_the_specification_names() {
    if !can_run() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let lab = Lab::new();
    let log = lab.path("hooks.log");
    // What the container's hooks write is seen through a directory bound
    // into it (writable by the container's user, nobody on the host) by
    // the node's profile: a host path in config.json is a pod's hostPath,
    // which is refused.
    let shared = lab.path("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let s = shared.display().to_string();
    let inside = |kind: &str| {
        serde_json::json!({
            "path": "/bin/sh",
            "args": ["sh", "-c", format!("{{ cat; echo; hostname; readlink /proc/self/ns/net; }} > {s}/{kind}")],
            "timeout": 10
        })
    };
    let mut cfg = config(&[
        "sh",
        "-c",
        &format!("test -f {s}/startContainer && echo main-after-start-hook > {s}/main; sleep 600"),
    ]);
    lab.node_profile("hooks", &format!("filesystem:\n  read_write: [{s}]\n"));
    cfg["annotations"] = serde_json::json!({"warden.dev/profile": "hooks"});
    cfg["hooks"] = serde_json::json!({
        "prestart": [host_hook(&lab, &log, "prestart")],
        "createRuntime": [host_hook(&lab, &log, "createRuntime")],
        "createContainer": [inside("createContainer")],
        "startContainer": [inside("startContainer")],
        "poststart": [host_hook(&lab, &log, "poststart")],
        "poststop": [host_hook(&lab, &log, "poststop")]
    });
    let b = lab.bundle("b", cfg);
    let o = lab.oci(&["create", "--bundle", b.to_str().unwrap(), "h1"]);
    assert!(o.status.success(), "create: {}", text(&o.stderr));
    let lines = || -> Vec<String> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let host_net = host_net.to_str().unwrap();
    // create ran prestart, then createRuntime, on the host (its network
    // namespace), given a PID in the container's namespaces, and
    // createContainer in the container; nothing of start yet.
    let l = lines();
    assert_eq!(l.len(), 2, "{l:?}");
    assert!(
        l[0].starts_with(&format!("prestart own={host_net} target=net:")),
        "{l:?}"
    );
    assert!(l[1].starts_with("createRuntime "), "{l:?}");
    for line in &l {
        assert!(!line.contains(&format!("target={host_net}")), "{line}");
        assert!(line.contains("\"status\":\"creating\""), "{line}");
        assert!(line.contains("\"id\":\"h1\""), "{line}");
    }
    let cc = std::fs::read_to_string(shared.join("createContainer")).unwrap();
    assert!(
        cc.contains("\"status\":\"creating\"") && cc.contains("\nbox\n"),
        "{cc}"
    );
    assert!(
        !cc.contains(host_net),
        "createContainer ran in the host's namespace: {cc}"
    );
    assert!(!shared.join("startContainer").exists());
    assert!(!shared.join("main").exists());

    assert!(lab.oci(&["start", "h1"]).status.success());
    let sc = std::fs::read_to_string(shared.join("startContainer")).unwrap();
    assert!(
        sc.contains("\"status\":\"created\"") && sc.contains("\nbox\n"),
        "{sc}"
    );
    let l = lines();
    assert_eq!(l.len(), 3, "{l:?}");
    assert!(
        l[2].starts_with(&format!("poststart own={host_net}")),
        "{l:?}"
    );
    assert!(l[2].contains("\"status\":\"running\""), "{l:?}");
    wait_until("the first process", || shared.join("main").exists());

    assert!(lab.oci(&["kill", "h1", "KILL"]).status.success());
    wait_until("the container to stop", || {
        lab.state("h1")["status"] == "stopped"
    });
    assert!(lab.oci(&["delete", "h1"]).status.success());
    let l = lines();
    assert_eq!(l.len(), 4, "{l:?}");
    assert!(
        l[3].starts_with(&format!("poststop own={host_net}")),
        "{l:?}"
    );
    assert!(l[3].contains("\"status\":\"stopped\""), "{l:?}");
    assert!(lab.left().is_empty());
}

#[test]
fn a_failing_or_overdue_hook_fails_its_verb_by_name_and_leaves_nothing() {
    if !can_run() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let lab = Lab::new();
    let cases = [
        (
            serde_json::json!({"createRuntime": [{"path": "/bin/sh", "args": ["sh", "-c", "echo no-network-for-you >&2; exit 3"]}]}),
            "createRuntime hook [0] /bin/sh failed",
            "no-network-for-you",
        ),
        (
            serde_json::json!({"prestart": [{"path": "/bin/sleep", "args": ["sleep", "30"], "timeout": 1}]}),
            "prestart hook [0] /bin/sleep failed",
            "timeout of 1s",
        ),
        (
            serde_json::json!({"createContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "exit 4"]}]}),
            "createContainer hook [0] /bin/sh failed",
            "status 4",
        ),
        (
            serde_json::json!({"createRuntime": [{"path": "/nonexistent/hook"}]}),
            "createRuntime hook [0] /nonexistent/hook failed",
            "cannot start it",
        ),
    ];
    for (n, (hooks, what, why)) in cases.iter().enumerate() {
        let mut cfg = config(&["sleep", "600"]);
        cfg["hooks"] = hooks.clone();
        let b = lab.bundle(&format!("b{n}"), cfg);
        let started = std::time::Instant::now();
        let o = lab.oci(&["create", "--bundle", b.to_str().unwrap(), &format!("f{n}")]);
        assert!(!o.status.success(), "{what}: created");
        let err = text(&o.stderr);
        assert!(err.contains(what) && err.contains(why), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        assert!(lab.left().is_empty(), "{what}: left {:?}", lab.left());
    }
    // startContainer failing fails `start` and stops the container.
    let mut cfg = config(&["sleep", "600"]);
    cfg["hooks"] = serde_json::json!({"startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "exit 5"]}],
        "poststop": [{"path": "/bin/false"}]});
    let b = lab.bundle("bs", cfg);
    assert!(lab
        .oci(&["create", "--bundle", b.to_str().unwrap(), "fs"])
        .status
        .success());
    let o = lab.oci(&["start", "fs"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("startContainer hook [0] /bin/sh failed"),
        "{}",
        text(&o.stderr)
    );
    wait_until("the container to stop", || {
        lab.state("fs")["status"] == "stopped"
    });
    // A failing poststop hook is a warning: delete goes on.
    let o = lab.oci(&["delete", "fs"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("poststop hook [0] /bin/false failed"),
        "{}",
        text(&o.stderr)
    );
    assert!(lab.left().is_empty());
}

#[test]
fn sigkill_to_a_detached_execs_waiter_ends_the_execs_process() {
    if !can_run() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let lab = Lab::new();
    create_sleeper(&lab, "k1");
    assert!(lab.oci(&["start", "k1"]).status.success());
    let procs = || -> Vec<i32> {
        let o = lab.oci(&["ps", "--format", "json", "k1"]);
        serde_json::from_slice(&o.stdout).unwrap_or_default()
    };
    let before = procs();
    let pid_file = lab.path("k.pid");
    let o = lab.oci(&[
        "exec",
        "--detach",
        "--pid-file",
        pid_file.to_str().unwrap(),
        "k1",
        "sleep",
        "300",
    ]);
    assert!(o.status.success(), "exec -d: {}", text(&o.stderr));
    wait_until("the exec's process", || procs().len() > before.len());
    let waiter: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // What containerd's shim does to end an exec by force.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(waiter),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(waiter), None);
    wait_until("the exec's process to end with its waiter", || {
        procs().len() == before.len()
    });
    assert!(lab.oci(&["delete", "--force", "k1"]).status.success());
    assert!(lab.left().is_empty());
}

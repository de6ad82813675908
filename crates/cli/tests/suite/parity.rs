//! Doors that must agree, through the real binaries: `profile validate`
//! accepts exactly what `run --profile` accepts (and makes nothing doing
//! so); MCP's change list and `warden diff` list the same changes (the
//! workspace's own `.gitignore` honoured by both); a detached command's
//! output is kept and read the same way whether `exec -d`, `run -d` or
//! the daemon's API started it; the same options given as flags, a token
//! holder's API body, an E2B create and a pod's annotations are stored as
//! the same spec (a caller's allowlist entries marked as a caller's), and
//! a bad value is refused by each for the same reason in its own words.

use crate::common::daemon::{call, curl_available, json, Daemon};
use crate::common::mcp::{self, good, runtime, stdio_client};
use crate::common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// `warden ARGS` with its state in `state`/warden and its temporary files
/// in `tmp` (so that what it leaves there can be seen).
fn warden_in(state: &Path, tmp: &Path, args: &[&str]) -> Output {
    warden_env(state, args, &[("TMPDIR", tmp.to_str().unwrap())])
}

/// The entries of `dir` (none when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn profile_validate_accepts_a_caches_profile_as_run_does_and_makes_nothing() {
    let t = TempDir::new("parity-caches");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let profile = t.path().join("caches.yaml");
    std::fs::write(&profile, "filesystem:\n  caches: [pip]\n").unwrap();
    let p = profile.to_str().unwrap();

    let v = warden_in(t.path(), &tmp, &["profile", "validate", p]);
    assert_eq!(
        code(&v),
        0,
        "validate refused what run accepts: {}{}",
        stdout(&v),
        stderr(&v)
    );
    assert!(
        stdout(&v).contains(&format!("{p}: valid")),
        "{}",
        stdout(&v)
    );
    // Validating made nothing: no caches in warden's state, no scratch
    // left in the temporary directory.
    assert!(
        !t.path().join("warden/caches").exists(),
        "validate made the caches: {:?}",
        entries(&t.path().join("warden"))
    );
    assert_eq!(entries(&tmp), Vec::<String>::new());

    let r = warden_in(
        t.path(),
        &tmp,
        &["run", "--no-tty", "--profile", p, "--", "true"],
    );
    assert_eq!(code(&r), 0, "run: {}", stderr(&r));
}

#[test]
fn profile_validate_refuses_what_run_refuses_at_the_place_it_was_written() {
    let t = TempDir::new("parity-refuse");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // A value only the resolver refuses (a cache warden does not know),
    // on line 3, column 7.
    let profile = t.path().join("bad.yaml");
    std::fs::write(
        &profile,
        "hostname: x\nfilesystem:\n  caches: [pip, no-such-cache]\n",
    )
    .unwrap();
    let p = profile.to_str().unwrap();
    let v = warden_in(t.path(), &tmp, &["profile", "validate", p]);
    let r = warden_in(
        t.path(),
        &tmp,
        &["run", "--no-tty", "--profile", p, "--", "true"],
    );
    assert_ne!(code(&r), 0, "run accepted it: {}", stderr(&r));
    assert_eq!(code(&v), 1, "validate accepted it: {}", stdout(&v));
    assert!(
        stderr(&v).starts_with(&format!("{p}:3:")),
        "not at its place: {}",
        stderr(&v)
    );
    assert!(
        stderr(&v).contains("filesystem.caches") && !stderr(&v).contains("--cache"),
        "{}",
        stderr(&v)
    );
    assert!(!t.path().join("warden/caches").exists());
    assert_eq!(entries(&tmp), Vec::<String>::new());
}

#[test]
fn every_built_in_profile_is_valid_exactly_when_run_takes_it() {
    let t = TempDir::new("parity-builtin");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let list = ok(&warden_in(t.path(), &tmp, &["profile", "list"]));
    let names: Vec<&str> = list
        .lines()
        .filter(|l| l.contains("[builtin"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.len() > 3, "{list}");
    for name in names {
        let v = warden_in(t.path(), &tmp, &["profile", "validate", name]);
        // Validating made nothing in warden's state.
        assert_eq!(entries(&t.path().join("warden")), Vec::<String>::new());
        let r = warden_in(
            t.path(),
            &tmp,
            &["run", "--no-tty", "--profile", name, "--", "true"],
        );
        assert_eq!(
            code(&v) == 0,
            code(&r) == 0,
            "validate and run disagree on {name}:\nvalidate: {}{}\nrun: {}",
            stdout(&v),
            stderr(&v),
            stderr(&r)
        );
        let _ = std::fs::remove_dir_all(t.path().join("warden"));
    }
    assert_eq!(entries(&tmp), Vec::<String>::new());
}

/// A relative `filesystem.workspace` in the owner's own profile file is
/// relative to the file's directory, for `run` as for `validate`. What
/// `run` cannot mount (a path through `..` or a symbolic link, which the
/// jail never follows) `validate` refuses too, at the value's place.
#[test]
fn a_relative_workspace_means_the_same_to_validate_and_to_run() {
    let t = TempDir::new("parity-relws");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let conf = t.path().join("conf");
    std::fs::create_dir_all(conf.join("proj")).unwrap();
    std::fs::write(conf.join("proj/marker.txt"), "from the profile's dir\n").unwrap();
    std::fs::create_dir_all(t.path().join("sibling")).unwrap();
    std::os::unix::fs::symlink(t.path().join("sibling"), conf.join("link")).unwrap();
    std::fs::write(conf.join("inside.yaml"), "filesystem:\n  workspace: proj\n").unwrap();
    std::fs::write(
        conf.join("climbs.yaml"),
        "hostname: x\nfilesystem:\n  workspace: ../sibling\n",
    )
    .unwrap();
    std::fs::write(
        conf.join("link.yaml"),
        "hostname: x\nfilesystem:\n  workspace: link\n",
    )
    .unwrap();
    let in_dir = |dir: &Path, args: &[&str]| -> Output {
        Command::new(warden_bin())
            .args(args)
            .current_dir(dir)
            .env("WARDEN_STATE_DIR", t.path().join("warden"))
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // From elsewhere: the profile's directory decides, not ours.
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let inside = conf.join("inside.yaml");
    let inside = inside.to_str().unwrap();
    let v = in_dir(&elsewhere, &["profile", "validate", inside]);
    assert_eq!(code(&v), 0, "{}", stderr(&v));
    let r = in_dir(
        &elsewhere,
        &[
            "run",
            "--no-tty",
            "--profile",
            inside,
            "--",
            "cat",
            "/workspace/marker.txt",
        ],
    );
    assert_eq!(stdout(&r), "from the profile's dir\n", "{}", stderr(&r));

    // The same answer from both, whatever it is, for a workspace that
    // climbs out of the profile's directory, one through a link, and a
    // profile named by a path with '..'.
    let climbs = conf.join("climbs.yaml");
    let link = conf.join("link.yaml");
    for (dir, profile, line) in [
        (elsewhere.as_path(), climbs.to_str().unwrap(), 3),
        (elsewhere.as_path(), link.to_str().unwrap(), 3),
        (conf.join("proj").as_path(), "../inside.yaml", 2),
    ] {
        let v = in_dir(dir, &["profile", "validate", profile]);
        let r = in_dir(
            dir,
            &["run", "--no-tty", "--profile", profile, "--", "true"],
        );
        assert_eq!(
            code(&v) == 0,
            code(&r) == 0,
            "validate and run disagree on {profile}:\nvalidate: {}{}\nrun: {}",
            stdout(&v),
            stderr(&v),
            stderr(&r)
        );
        if code(&v) != 0 {
            // Said at the value's place in the file, by its key.
            assert!(
                stderr(&v).starts_with(&format!("{profile}:{line}:"))
                    && stderr(&v).contains("filesystem.workspace")
                    && !stderr(&v).contains("--workspace"),
                "{}",
                stderr(&v)
            );
        }
    }
    assert_eq!(entries(&tmp), Vec::<String>::new());
}

/// The paths of the changes an MCP `get_changes` text lists (each on a
/// line of its own after its kind).
fn mcp_paths(text: &str) -> Vec<String> {
    const KINDS: [&str; 6] = [
        "added",
        "modified",
        "deleted",
        "mode",
        "type_changed",
        "renamed",
    ];
    let mut paths: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(kind, _)| KINDS.contains(kind))
        .map(|(_, path)| path.to_string())
        .collect();
    paths.sort();
    paths
}

#[test]
fn mcp_and_diff_list_the_same_changes_and_both_leave_out_what_gitignore_ignores() {
    let state = TempDir::new("parity-mcp");
    let ws = TempDir::new("parity-mcp-ws");
    std::fs::write(ws.path().join(".gitignore"), "*.log\nbuild/\n").unwrap();
    std::fs::write(ws.path().join("a.txt"), "one\n").unwrap();
    runtime().block_on(async {
        let c = stdio_client(state.path(), &["--workspace", ws.str()], &[]).await;
        good(&mcp::call(
            &c,
            "run_command",
            serde_json::json!({"shell": "echo two >> a.txt; echo new > b.txt; echo noise > run.log; mkdir build; echo o > build/out.o"}),
        )
        .await);
        let listed = good(&mcp::call(&c, "get_changes", serde_json::json!({})).await);
        let names = entries(&state.path().join("warden/sandboxes"));
        assert_eq!(names.len(), 1, "{names:?}");
        let diff = warden(state.path(), &["diff", "--json", &names[0]]);
        let shown: Vec<serde_json::Value> = serde_json::from_str(&ok(&diff)).unwrap();
        let mut diff_paths: Vec<String> = shown
            .iter()
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect();
        diff_paths.sort();
        assert_eq!(diff_paths, ["a.txt", "b.txt"], "{}", stderr(&diff));
        assert_eq!(
            mcp_paths(&listed),
            diff_paths,
            "MCP and warden diff list different changes:\n{listed}"
        );
        // Both say what they left out, in the same words.
        let left_out = "change(s) ignored by the workspace's .gitignore or .git/info/exclude not shown";
        assert!(stderr(&diff).contains(left_out), "{}", stderr(&diff));
        assert!(listed.contains(left_out), "{listed}");
        c.cancel().await.unwrap();
    });
}

/// `warden logs NAME --exec ID` once the command has written `want` on
/// its standard output: (stdout, stderr).
fn kept_output(state: &Path, name: &str, id: &str, want: &str) -> (String, String) {
    let mut last = None;
    wait_until("the command's output", Duration::from_secs(20), || {
        let o = warden(state, &["logs", name, "--exec", id]);
        let done = o.status.success() && stdout(&o).contains(want);
        last = Some(o);
        done
    });
    let o = last.unwrap();
    (stdout(&o), stderr(&o))
}

#[test]
fn a_detached_commands_output_is_kept_and_read_the_same_way_from_every_door() {
    let state = TempDir::new("parity-detached");
    ok(&warden(state.path(), &["create", "box", "--start"]));
    let _stop = Stopper(state.path(), "box");

    // `exec -d`: the name its output is kept under.
    let started = warden(
        state.path(),
        &[
            "exec",
            "-d",
            "box",
            "--",
            "sh",
            "-c",
            "echo out-of-exec; echo err-of-exec >&2",
        ],
    );
    let id = ok(&started).trim().to_string();
    let cli_exec = id.clone();
    assert!(id.starts_with("ex-"), "{id}");
    assert!(
        stderr(&started).contains(&format!("warden logs box --exec {id}")),
        "{}",
        stderr(&started)
    );
    let (out, err) = kept_output(state.path(), "box", &id, "out-of-exec");
    assert_eq!(out, "out-of-exec\n");
    assert!(err.contains("err-of-exec"), "{err}");

    // `run -d`: kept under `run`, both streams in the order written; -f
    // ends when its sandbox does.
    let name = ok(&warden(
        state.path(),
        &[
            "run",
            "-d",
            "--",
            "sh",
            "-c",
            "echo out-of-run; echo err-of-run >&2",
        ],
    ))
    .trim()
    .to_string();
    let dir = sandbox_dir(state.path(), &name);
    wait_until("the detached run to end", Duration::from_secs(15), || {
        !dir.join("supervisor.json").exists()
    });
    let followed = warden(state.path(), &["logs", "-f", &name, "--exec", "run"]);
    assert_eq!(ok(&followed), "out-of-run\nerr-of-run\n");
    let run_name = name;

    // The daemon's API, on the same state: a command it starts is read
    // through its output route and by `warden logs` alike.
    let daemon = Daemon::start(state.path(), false);
    let sock = format!("unix:{}", daemon.socket.display());
    let id = ok(&warden(
        state.path(),
        &[
            "--host",
            &sock,
            "exec",
            "-d",
            "box",
            "--",
            "sh",
            "-c",
            "echo out-of-api; echo err-of-api >&2",
        ],
    ))
    .trim()
    .to_string();
    assert!(id.starts_with("ex-"), "{id}");
    let through_api = warden(
        state.path(),
        &["--host", &sock, "logs", "box", "--exec", &id],
    );
    assert_eq!(ok(&through_api), "out-of-api\n");
    assert!(
        stderr(&through_api).contains("err-of-api"),
        "{}",
        stderr(&through_api)
    );
    let (out, err) = kept_output(state.path(), "box", &id, "out-of-api");
    assert_eq!(out, "out-of-api\n");
    assert!(err.contains("err-of-api"), "{err}");

    // What the command line started is read through the API's output
    // route too, over real HTTP, to its end and status: `exec -d`'s, and
    // `run -d`'s (whose sandbox has stopped).
    let through_api = warden(
        state.path(),
        &["--host", &sock, "logs", "box", "--exec", &cli_exec],
    );
    assert_eq!(ok(&through_api), "out-of-exec\n");
    assert!(
        stderr(&through_api).contains("err-of-exec"),
        "{}",
        stderr(&through_api)
    );
    let through_api = warden(
        state.path(),
        &["--host", &sock, "logs", &run_name, "--exec", "run"],
    );
    assert_eq!(ok(&through_api), "out-of-run\nerr-of-run\n");
    if curl_available() {
        let (status, text) = call(
            &daemon,
            "GET",
            &format!("/v1/sandboxes/box/execs/{cli_exec}/output"),
            None,
            None,
        );
        assert_eq!(status, 200, "{text}");
        let events: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let last = events.last().cloned().unwrap_or_default();
        assert_eq!(last["type"], "exited", "{text}");
        assert_eq!(last["exit_status"], 0, "{text}");
        // Resumed from an offset, as a client that lost its connection
        // does.
        let (status, text) = call(
            &daemon,
            "GET",
            &format!("/v1/sandboxes/box/execs/{cli_exec}/output?stdout_offset=4"),
            None,
            None,
        );
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("\"data\":\"of-exec\\n\""), "{text}");
        // A name that climbs out of the sandbox's outputs is not a
        // command, and no other sandbox's command is this one's.
        for path in [
            "/v1/sandboxes/box/execs/..%2Fsandbox.json/output".to_string(),
            format!("/v1/sandboxes/{run_name}/execs/{cli_exec}/output"),
            "/v1/sandboxes/box/execs/ex-0000/output".to_string(),
        ] {
            let (status, text) = call(&daemon, "GET", &path, None, None);
            assert_eq!(status, 404, "{path}: {text}");
        }
    }

    // A name nothing was kept under is refused, not an empty answer.
    let none = warden(state.path(), &["logs", "box", "--exec", "ex-0000"]);
    assert_ne!(code(&none), 0);
    assert!(
        stderr(&none).contains("keeps no output"),
        "{}",
        stderr(&none)
    );
}

/// The sections of sandbox `name`'s stored spec (in `root`'s
/// `sandboxes/`) that the options below set.
fn stored_spec(root: &Path, name: &str, sections: &[&str]) -> serde_json::Value {
    let path = root.join("sandboxes").join(name).join("sandbox.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let stored: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut spec = stored["spec"].clone();
    // A workspace layer's default size is measured from the host's free
    // space at each create, not given by any door.
    if spec["filesystem"]["disk"]["asked"] == false {
        if let Some(fs) = spec["filesystem"].as_object_mut() {
            fs.remove("disk");
        }
    }
    let picked: serde_json::Value = sections
        .iter()
        .map(|s| (s.to_string(), spec[*s].clone()))
        .collect::<serde_json::Map<_, _>>()
        .into();
    // The places warden keeps of its own for the sandbox are named after
    // it (its home, its layer, its workspace).
    let text = picked
        .to_string()
        .replace(&format!("/{name}/"), "/NAME/")
        .replace(&format!("/{name}\""), "/NAME\"");
    serde_json::from_str(&text).unwrap()
}

/// `spec` without the marks a caller's allowlist entries carry, and the
/// entries that had one (a caller's entries reach public addresses only:
/// the one difference a caller's door may make).
fn without_caller_marks(mut spec: serde_json::Value) -> (serde_json::Value, Vec<String>) {
    let mut marked = Vec::new();
    if let Some(domains) = spec["network"]["Egress"]["domains"].as_array_mut() {
        for d in domains {
            if d["caller"] == true {
                marked.push(d["source"].as_str().unwrap_or_default().to_string());
            }
            if let Some(o) = d.as_object_mut() {
                o.remove("caller");
            }
        }
    }
    (spec, marked)
}

/// A POST to the E2B door at `addr`: its status and body.
fn e2b_create(addr: &str, key: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "60",
            "-X",
            "POST",
            "-w",
            "\n%{http_code}",
        ])
        .args(["-H", &format!("x-api-key: {key}")])
        .args(["-H", "content-type: application/json"])
        .args(["--data-binary", &body.to_string()])
        .arg(format!("http://{addr}/sandboxes"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        status.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or_else(|_| body.into()),
    )
}

#[test]
fn the_e2b_door_a_token_and_the_owners_flags_store_the_same_spec_but_for_the_callers_marks() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("parity-e2b");
    let root = state.path().join("warden");
    let domains = ["a.example.test", "b.example.test:22"];
    // The owner's flags, over the profile an E2B template names.
    ok(&warden(
        state.path(),
        &[
            "create",
            "by-flags",
            "--no-tty",
            "--profile",
            "base",
            "-e",
            "ANSWER=42",
            "--allow-domain",
            domains[0],
            "--allow-domain",
            domains[1],
            // What the E2B door gives every sandbox: E2B's user, its home,
            // and commands starting there.
            "--home-dir",
            "/home/user",
            "--workdir",
            "/home/user",
            "--user-name",
            "user",
        ],
    ));
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &addr], &[]);
    let key = crate::common::daemon::api_token(
        &d,
        "caller",
        &["sandboxes:read", "sandboxes:write", "exec"],
        None,
    );
    // A token holder's API body.
    let body = serde_json::json!({
        "name": "by-token", "start": false, "profile": "base",
        "spec": {"env": {"set": {"ANSWER": "42"}}, "egress": {"domains": domains},
            "filesystem": {"home": "/home/user", "workdir": "/home/user"},
            "process": {"user": "user"}}
    });
    let (status, text) = crate::common::daemon::call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(&body.to_string()),
        Some(&key),
    );
    assert_eq!(status, 201, "{text}");
    // An E2B client's create: envVars, network.allowOut, the template.
    let (status, made) = e2b_create(
        &addr,
        &key,
        &serde_json::json!({"templateID": "base", "envVars": {"ANSWER": "42"},
            "network": {"allowOut": domains}, "timeout": 120}),
    );
    assert_eq!(status, 201, "{made}");
    let by_e2b = made["sandboxID"].as_str().unwrap().to_string();
    let _stop = Stopper(state.path(), &by_e2b);

    let sections = ["env", "network", "command", "resources", "filesystem"];
    let owners = stored_spec(&root, "by-flags", &sections);
    let tokens = stored_spec(&root, "by-token", &sections);
    let e2bs = stored_spec(&root, &by_e2b, &sections);
    assert!(
        owners["env"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(["ANSWER", "42"])),
        "{owners}"
    );
    // The two callers' doors store the very same spec.
    assert_eq!(tokens, e2bs);
    // And the owner's, but for the marks on exactly the caller's entries
    // (the profile's own entries are the owner's in every door).
    let (owners, unmarked) = without_caller_marks(owners);
    assert_eq!(unmarked, Vec::<String>::new());
    let (callers, marked) = without_caller_marks(e2bs);
    assert_eq!(marked, domains);
    assert_eq!(owners, callers);
}

/// `warden-oci` beside `warden`, and a static busybox for a container's
/// root; `None` (said why) when this host or build has neither.
fn oci_lab() -> Option<std::path::PathBuf> {
    let oci = warden_bin().with_file_name("warden-oci");
    if !oci.exists() {
        skip("no warden-oci beside warden (cargo build -p warden-oci)");
        return None;
    }
    if !Path::new("/bin/busybox").exists() {
        skip("no /bin/busybox to build a container's root");
        return None;
    }
    Some(oci)
}

/// A bundle in `dir` whose root is a static busybox and whose config is
/// `config`.
fn bundle(dir: &Path, config: &serde_json::Value) -> std::path::PathBuf {
    let rootfs = dir.join("rootfs");
    if !rootfs.exists() {
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        std::fs::create_dir_all(rootfs.join("etc")).unwrap();
        copy_program(Path::new("/bin/busybox"), &rootfs.join("bin/busybox"));
        std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).unwrap();
    }
    let b = dir.join("bundle");
    let _ = std::fs::remove_dir_all(&b);
    std::fs::create_dir_all(&b).unwrap();
    std::os::unix::fs::symlink(&rootfs, b.join("rootfs")).unwrap();
    std::fs::write(b.join("config.json"), config.to_string()).unwrap();
    b
}

/// `warden-oci --root ROOT ARGS`, its stdio files (`create` hands them to
/// the container, held open until it ends).
fn oci_run(oci: &Path, root: &Path, args: &[&str]) -> Output {
    let dir = root.parent().unwrap();
    let (out, err) = (dir.join("oci.out"), dir.join("oci.err"));
    let status = Command::new(oci)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .status()
        .unwrap();
    Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    }
}

/// A bundle's config.json: `sh -c true`, hostname `same`, 300M and 77
/// processes, and `annotations`.
fn oci_config(annotations: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"args": ["sh", "-c", "true"], "env": ["PATH=/bin"], "cwd": "/"},
        "root": {"path": "rootfs"},
        "hostname": "same",
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "mount"}],
            "resources": {"memory": {"limit": 300 << 20}, "pids": {"limit": 77}}
        },
        "annotations": annotations
    })
}

#[test]
fn oci_annotations_and_a_bundle_store_what_the_same_flags_store() {
    let Some(oci) = oci_lab() else { return };
    let state = TempDir::new("parity-oci");
    ok(&warden(
        state.path(),
        &[
            "create",
            "by-flags",
            "--no-tty",
            "--hostname",
            "same",
            "--memory",
            "300M",
            "--pids",
            "77",
            "--timeout",
            "90s",
            "--allow-domain",
            "a.example.test",
            "--allow-domain",
            "b.example.test:22",
            "--allow-http",
            "--egress-quota",
            "5G",
            "--egress-idle-timeout",
            "2m",
            "--tmp-size",
            "128M",
            "--",
            "sh",
            "-c",
            "true",
        ],
    ));
    let root = state.path().join("oci-root");
    let b = bundle(
        state.path(),
        &oci_config(serde_json::json!({
            "warden.dev/egress": "a.example.test, b.example.test:22",
            "warden.dev/allow-http": "true",
            "warden.dev/timeout": "90s",
            "warden.dev/egress-quota": "5G",
            "warden.dev/egress-idle-timeout": "2m",
            "warden.dev/tmp-size": "128M",
        })),
    );
    let made = oci_run(
        &oci,
        &root,
        &["create", "--bundle", b.to_str().unwrap(), "by-annotations"],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let sections = ["resources", "hostname", "network", "command"];
    let by_oci = stored_spec(&root, "by-annotations", &sections);
    let tmp_size = |root: &Path, name: &str| {
        let text = std::fs::read_to_string(root.join("sandboxes").join(name).join("sandbox.json"))
            .unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["spec"]["filesystem"]["tmp_size"]
            .clone()
    };
    let oci_tmp = tmp_size(&root, "by-annotations");
    ok(&oci_run(
        &oci,
        &root,
        &["delete", "--force", "by-annotations"],
    ));
    let by_flags = stored_spec(&state.path().join("warden"), "by-flags", &sections);
    assert_eq!(by_flags["resources"]["pids"]["value"], 77, "{by_flags}");
    assert_eq!(tmp_size(&state.path().join("warden"), "by-flags"), oci_tmp);
    let (owners, _) = without_caller_marks(by_flags);
    let (pods, marked) = without_caller_marks(by_oci);
    // A pod's author is a caller: its names are marked as a caller's.
    assert_eq!(marked, ["a.example.test", "b.example.test:22"]);
    assert_eq!(owners, pods);
}

/// What every door says of the name below, whatever words it puts around
/// it: the reason, which names no door's option.
const BAD_NAME: &str = "bad domain!";
const BAD_NAME_REASON: &str =
    "\"bad domain!\": the name has a character other than letters, digits, '-', '_' and '.'";

#[test]
fn a_bad_name_is_refused_for_the_same_reason_by_every_door_each_in_its_own_words() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("parity-bad");
    // The spellings of the allowlist each door knows, each of which must
    // appear only in its own door's message.
    let spellings = [
        "--allow-domain",
        "egress.domains",
        "/egress/domains",
        "network.allowOut",
        "warden.dev/egress",
    ];
    let only = |said: &str, own: &str, door: &str| {
        assert!(said.contains(BAD_NAME_REASON), "{door}: {said}");
        assert!(said.contains(own), "{door} does not name {own}: {said}");
        for other in spellings
            .iter()
            .filter(|s| !own.contains(**s) && !s.contains(own))
        {
            assert!(!said.contains(other), "{door} says {other}: {said}");
        }
    };
    // A flag.
    let out = warden(
        state.path(),
        &[
            "create",
            "f",
            "--allow-domain",
            "ok.test",
            "--allow-domain",
            BAD_NAME,
        ],
    );
    assert_ne!(code(&out), 0);
    only(&stderr(&out), "--allow-domain", "the command line");
    // A profile: file, line and column, and the key.
    let file = state.path().join("p.yaml");
    std::fs::write(
        &file,
        format!("egress:\n  domains: [ok.test, \"{BAD_NAME}\"]\n"),
    )
    .unwrap();
    let out = warden(
        state.path(),
        &["create", "p", "--profile", file.to_str().unwrap()],
    );
    assert_ne!(code(&out), 0);
    let said = stderr(&out);
    assert!(said.contains(&format!("{}:2:", file.display())), "{said}");
    only(&said, "egress.domains", "a profile");
    // The API: a JSON pointer into the body sent, and its code.
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &addr], &[]);
    let body =
        serde_json::json!({"start": false, "spec": {"egress": {"domains": ["ok.test", BAD_NAME]}}});
    let (status, text) = call(&d, "POST", "/v1/sandboxes", Some(&body.to_string()), None);
    assert_eq!(status, 422, "{text}");
    let problem = json(&text);
    assert_eq!(problem["code"], "invalid_spec", "{text}");
    assert_eq!(problem["field"], "/spec/egress/domains/1", "{text}");
    only(
        problem["message"].as_str().unwrap(),
        "/spec/egress/domains/1",
        "the API",
    );
    // The E2B door: the place in E2B's own body.
    let key = crate::common::daemon::api_token(
        &d,
        "caller",
        &["sandboxes:read", "sandboxes:write"],
        None,
    );
    let (status, answer) = e2b_create(
        &addr,
        &key,
        &serde_json::json!({"templateID": "base", "network": {"allowOut": ["ok.test", BAD_NAME]}}),
    );
    assert_eq!(status, 400, "{answer}");
    only(
        answer["message"].as_str().unwrap(),
        "network.allowOut[1]",
        "the E2B door",
    );
    // Nothing was made by any of them.
    let (_, list) = call(&d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(json(&list)["sandboxes"], serde_json::json!([]), "{list}");
    // A pod's annotation, by its key.
    let Some(oci) = oci_lab() else { return };
    let root = state.path().join("oci-root");
    let b = bundle(
        state.path(),
        &oci_config(serde_json::json!({"warden.dev/egress": format!("ok.test,{BAD_NAME}")})),
    );
    let out = oci_run(
        &oci,
        &root,
        &["create", "--bundle", b.to_str().unwrap(), "bad"],
    );
    assert!(!out.status.success());
    only(
        &String::from_utf8_lossy(&out.stderr),
        "annotations[\"warden.dev/egress\"]",
        "warden-oci",
    );
    assert!(!root.join("sandboxes/bad").exists());
}

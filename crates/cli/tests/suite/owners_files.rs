//! The files the owner's configuration is read from are never written by
//! a token, attacked through the real daemon (outside review 20, finding
//! 1). The owner keeps a project's warden settings in the project, under
//! a `--workspace-root`, and uses them from the catalogue: a profile that
//! `extends` the project's file by path, a catalogue entry that is a
//! symbolic link to the project's `warden.yaml`, or the daemon's own
//! `--config` file kept in a directory under a root. A token holder makes
//! a sandbox over that project, appends a secret whose `from_command` is
//! its own program to the file, commits, and names the owner's profile:
//! before the fix the program ran on the host as root (a marker file
//! appeared), and a settings file with `workspace_roots: [/]` gave the
//! token every host directory after the owner's next restart. Now the
//! workspace is refused at create (403 `forbidden` at `/workspace`, in the
//! words a missing directory gets; the daemon's log says
//! `holds_configuration`), and a change to such a file (the owner's configuration
//! may come to name it after the create) is flagged `owner-config` in the
//! review and refuses the token's commit; nothing is written, no program
//! runs.
//!
//! The guard is on the writer's side, so it holds for every reader: the
//! E2B door's templates, MCP's `create_sandbox`, `warden-oci`'s
//! `warden.dev/profile` and the owner's command line read the same
//! catalogue files through the same loader, and none of them gives a
//! token a host workspace except through the checks exercised here (the
//! E2B door's sandboxes have their own empty workspace; MCP over HTTP
//! goes through the same check).

use crate::common::daemon::*;
use crate::common::mcp::CurlSession;
use crate::common::owner::OwnerHost;
use crate::common::*;
use std::path::{Path, PathBuf};

/// The settings a project keeps for the owner's profiles to extend.
const BASE: &str = "description: the project's shared settings\nresources:\n  memory: 256M\n";

/// Project `proj4` keeping [`BASE`] in `warden-base.yaml`.
fn shared_base(host: &OwnerHost) -> PathBuf {
    host.project("proj4", "warden-base.yaml", BASE)
}

/// The owner's profile `proj4` extends `proj`'s `warden-base.yaml`.
fn extend_from_profile(host: &OwnerHost, proj: &Path) {
    std::fs::write(
        host.profile("proj4"),
        format!("extends: [{}]\n", proj.join("warden-base.yaml").display()),
    )
    .unwrap();
}

/// The owner's daemon with settings file `daemon.yaml` holding
/// `settings`, and its E2B door open.
fn e2b_daemon(host: &OwnerHost, settings: &str) -> Daemon {
    let file = host.dir.path().join("daemon.yaml");
    std::fs::write(&file, settings).unwrap();
    let e2b = format!("127.0.0.1:{}", free_port());
    host.daemon(&["--config", file.to_str().unwrap(), "--e2b", &e2b])
}

/// What a token appends to an owner's file: a secret whose source is a
/// program of its choosing, run on the host when a sandbox starts.
fn payload(host: &OwnerHost) -> String {
    format!(
        "\nsecrets:\n  PWN:\n    from_command: [/usr/bin/touch, {}]\n    hosts: [example.com]\negress:\n  domains: [example.com]\n",
        host.marker.display()
    )
}

fn create_over(
    d: &Daemon,
    t: &str,
    name: &str,
    ws: &Path,
    start: bool,
) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"name": name, "workspace": ws, "start": start}).to_string();
    json_as(d, t, "POST", "/v1/sandboxes", &body)
}

/// Refused as a missing directory is: `forbidden` at `/workspace`, no
/// reason, so that the token learns nothing of where the owner's files
/// are (outside review 34, F3; the daemon's log has the reason).
fn assert_holds_configuration(s: u16, b: &serde_json::Value, what: &str) {
    assert_eq!(s, 403, "{what}: {b}");
    assert_eq!(b["code"], "forbidden", "{what}: {b}");
    assert!(b.get("reason").is_none(), "{what}: {b}");
    assert_eq!(b["field"], "/workspace", "{what}: {b}");
}

/// The flag rules the review puts on `path`.
fn flags_of(d: &Daemon, t: &str, id: &str, path: &str) -> Vec<String> {
    let (s, r) = json_as(
        d,
        t,
        "GET",
        &format!("/v1/sandboxes/{id}/changes?content=true"),
        "",
    );
    assert_eq!(s, 200, "{r}");
    assert!(r["changes"].is_array(), "{r}");
    flag_rules(&r)
        .into_iter()
        .filter(|(p, _)| p == path)
        .flat_map(|(_, rules)| rules)
        .collect()
}

/// The token names the owner's profile: a sandbox of it starts, and the
/// program the token planted, had it landed, would have run by now.
fn name_the_profile_and_check_nothing_ran(host: &OwnerHost, d: &Daemon, t: &str, profile: &str) {
    let body = serde_json::json!({"name": "named", "profile": profile}).to_string();
    let (s, b) = json_as(d, t, "POST", "/v1/sandboxes", &body);
    assert_eq!(s, 201, "the owner's profile still serves the token: {b}");
    assert!(
        !host.marker_appeared(),
        "the token's program ran on the host with the owner's trust"
    );
    json_as(d, t, "DELETE", "/v1/sandboxes/named", "");
}

#[test]
fn a_token_gets_no_workspace_over_a_file_an_owners_profile_extends() {
    let Some(host) = OwnerHost::new("owners-extends") else {
        return;
    };
    let proj = shared_base(&host);
    extend_from_profile(&host, &proj);
    let other = host.project("other", "notes.txt", "x\n");
    let d = host.daemon_over_root();
    let t = host.agent();
    // The project, and the root above it: each holds the owner's file.
    for ws in [&proj, &host.root] {
        let (s, b) = create_over(&d, &t, "e1", ws, false);
        assert_holds_configuration(s, &b, &ws.display().to_string());
    }
    // A project without one is the token's to work on.
    let (s, b) = create_over(&d, &t, "fine", &other, false);
    assert_eq!(s, 201, "{b}");
    assert_eq!(
        std::fs::read_to_string(proj.join("warden-base.yaml")).unwrap(),
        BASE
    );
    name_the_profile_and_check_nothing_ran(&host, &d, &t, "proj4");
}

#[test]
fn a_token_gets_no_workspace_over_a_project_file_a_catalogue_entry_links_to() {
    let Some(host) = OwnerHost::new("owners-linked") else {
        return;
    };
    let own = "description: proj5, kept in its repository\nresources:\n  memory: 256M\n";
    let proj5 = host.project("proj5", "warden.yaml", own);
    std::os::unix::fs::symlink(proj5.join("warden.yaml"), host.profile("proj5")).unwrap();
    // A chain: the catalogue's entry links to a link in one directory,
    // which leads to the file in another; retargeting the first link is
    // as good as writing the file.
    let proj6 = host.project("proj6", "warden.yaml", own);
    let links = host.project("links", "readme", "links\n");
    std::os::unix::fs::symlink(proj6.join("warden.yaml"), links.join("p6.yaml")).unwrap();
    std::os::unix::fs::symlink(links.join("p6.yaml"), host.profile("proj6")).unwrap();
    let d = host.daemon_over_root();
    let t = host.agent();
    for ws in [&proj5, &proj6, &links] {
        let (s, b) = create_over(&d, &t, "f1", ws, false);
        assert_holds_configuration(s, &b, &ws.display().to_string());
    }
    name_the_profile_and_check_nothing_ran(&host, &d, &t, "proj5");
    name_the_profile_and_check_nothing_ran(&host, &d, &t, "proj6");
}

#[test]
fn a_token_gets_no_workspace_over_the_daemons_own_settings_file() {
    let Some(host) = OwnerHost::new("owners-config") else {
        return;
    };
    let settings = format!("workspace_roots: [{}]\n", host.root.display());
    let serve = host.project("serve", "warden-serve.yaml", &settings);
    let other = host.project("other", "notes.txt", "x\n");
    let file = serve.join("warden-serve.yaml");
    let d = host.daemon(&["--config", file.to_str().unwrap()]);
    let t = host.agent();
    let (s, b) = create_over(&d, &t, "cfg", &serve, false);
    assert_holds_configuration(s, &b, "the settings file's directory");
    // The roots the file gives still serve.
    let (s, b) = create_over(&d, &t, "fine", &other, false);
    assert_eq!(s, 201, "{b}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), settings);
}

#[test]
fn a_file_the_owners_profile_comes_to_extend_after_the_create_is_flagged_and_not_committed() {
    let Some(host) = OwnerHost::new("owners-later") else {
        return;
    };
    let proj = shared_base(&host);
    // A second name of another owner's file, made in the project by the
    // owner: the same file, whatever its path says.
    let shared = host.dir.path().join("shared.yaml");
    std::fs::write(&shared, BASE).unwrap();
    std::fs::hard_link(&shared, proj.join("shared-link.yaml")).unwrap();
    let d = host.daemon_over_root();
    let t = host.agent();
    // Nothing of the owner's is in the project yet: the token may work
    // on it.
    let (s, b) = create_over(&d, &t, "e1", &proj, true);
    assert_eq!(s, 201, "{b}");
    let payload = payload(&host);
    shell_as(
        &d,
        &t,
        "e1",
        &format!(
            "printf '%s' '{payload}' >> /workspace/warden-base.yaml && printf '%s' '{payload}' >> /workspace/shared-link.yaml && echo ok > /workspace/notes.txt"
        ),
    );
    stop_as(&d, &t, "e1");
    // The owner now keeps the project's file as a profile's base, and a
    // secret read from the other.
    std::fs::write(
        host.profile("proj4"),
        format!(
            "extends: [{}]\nsecrets:\n  S:\n    from_file: {}\n    hosts: [example.com]\n",
            proj.join("warden-base.yaml").display(),
            shared.display()
        ),
    )
    .unwrap();
    for path in ["warden-base.yaml", "shared-link.yaml"] {
        let rules = flags_of(&d, &t, "e1", path);
        assert!(
            rules.contains(&"owner-config".to_string()),
            "{path}: {rules:?}"
        );
    }
    assert!(flags_of(&d, &t, "e1", "notes.txt").is_empty());
    for body in [
        "{}",
        r#"{"paths":["warden-base.yaml"]}"#,
        r#"{"paths":["shared-link.yaml"]}"#,
    ] {
        let (s, b) = json_as(&d, &t, "POST", "/v1/sandboxes/e1/commit", body);
        assert_eq!(s, 403, "{body}: {b}");
        assert_eq!(b["reason"], "holds_configuration", "{body}: {b}");
    }
    assert_eq!(
        std::fs::read_to_string(proj.join("warden-base.yaml")).unwrap(),
        BASE
    );
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), BASE);
    // The owner's own review at the terminal flags them too.
    let out = host.owner(&["diff", "e1", "--json"]);
    let shown = stdout(&out);
    assert!(out.status.success(), "{shown} {}", stderr(&out));
    assert_eq!(shown.matches("owner-config").count(), 2, "{shown}");
    // The token's other work lands.
    let (s, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes/e1/commit",
        r#"{"paths":["notes.txt"]}"#,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        std::fs::read_to_string(proj.join("notes.txt")).unwrap(),
        "ok\n"
    );
    // Nor is the sandbox started again over the owner's file.
    let (s, b) = json_as(&d, &t, "POST", "/v1/sandboxes/e1/start", "{}");
    assert_eq!(s, 403, "{b}");
    name_the_profile_and_check_nothing_ran(&host, &d, &t, "proj4");
}

#[test]
fn a_tokens_e2b_sandbox_mounts_no_writable_volume_over_the_owners_files() {
    let Some(host) = OwnerHost::new("owners-e2b") else {
        return;
    };
    let proj = shared_base(&host);
    extend_from_profile(&host, &proj);
    std::fs::write(host.profile("small"), "resources:\n  memory: 256M\n").unwrap();
    // The owner offers the project to E2B clients as a volume: writable,
    // its writes merged into the directory when the sandbox stops.
    let d = e2b_daemon(
        &host,
        &format!(
            "e2b:\n  volumes:\n    proj: {{path: {}, writable: true, tokens: [\"*\"]}}\n    docs: {{path: {}, tokens: [\"*\"]}}\n",
            proj.display(),
            proj.display()
        ),
    );
    let door = e2b_calls_as(&d, host.agent());
    let (s, b) = door(
        "POST",
        "/sandboxes",
        Some(
            r#"{"templateID":"small","timeout":60,"volumeMounts":[{"name":"proj","path":"/mnt/proj"}]}"#,
        ),
    );
    assert!((400..500).contains(&s), "{s} {b}");
    assert!(b.contains("owner's configuration"), "{b}");
    // Read-only, it is only read.
    let (s, b) = door(
        "POST",
        "/sandboxes",
        Some(
            r#"{"templateID":"small","timeout":60,"volumeMounts":[{"name":"docs","path":"/mnt/docs"}]}"#,
        ),
    );
    assert_eq!(s, 201, "{b}");
    assert_eq!(
        std::fs::read_to_string(proj.join("warden-base.yaml")).unwrap(),
        BASE
    );
}

#[test]
fn the_model_behind_mcp_gets_no_workspace_over_the_owners_files() {
    let Some(host) = OwnerHost::new("owners-mcp") else {
        return;
    };
    let proj = shared_base(&host);
    extend_from_profile(&host, &proj);
    let other = host.project("other", "notes.txt", "x\n");
    let d = host.daemon_over_root();
    let t = token(
        host.dir.path(),
        "model",
        &["sandboxes:write", "sandboxes:read", "exec", "mcp"],
    );
    let model = CurlSession::open(&d, Some(&t), host.dir.path().join("mcp-headers"));
    let create =
        |ws: &Path| model.call_tool("create_sandbox", serde_json::json!({"workspace": ws}));
    let b = create(&proj);
    assert!(b.contains("isError") && b.contains("true"), "{b}");
    assert!(b.contains("forbidden"), "{b}");
    let b = create(&other);
    assert!(!b.contains("\"isError\":true"), "{b}");
}

#[test]
fn a_tokens_e2b_sandbox_with_a_writable_volume_is_not_started_again_once_it_holds_the_owners_files()
{
    let Some(host) = OwnerHost::new("owners-e2b-later") else {
        return;
    };
    let proj = shared_base(&host);
    std::fs::write(host.profile("small"), "resources:\n  memory: 256M\n").unwrap();
    let d = e2b_daemon(
        &host,
        &format!(
            "e2b:\n  volumes:\n    proj: {{path: {}, writable: true, tokens: [\"*\"]}}\n",
            proj.display()
        ),
    );
    let key = host.agent();
    let door = e2b_calls_as(&d, key.clone());
    // Nothing of the owner's is in the volume yet: it is mounted.
    let (s, b) = door(
        "POST",
        "/sandboxes",
        Some(
            r#"{"templateID":"small","timeout":120,"volumeMounts":[{"name":"proj","path":"/mnt/proj"}]}"#,
        ),
    );
    assert_eq!(s, 201, "{b}");
    let id = json(&b)["sandboxID"].as_str().unwrap().to_string();
    stop_as(&d, &key, &id);
    // The owner's profile comes to extend the project's file.
    extend_from_profile(&host, &proj);
    let (s, b) = json_as(&d, &key, "POST", &format!("/v1/sandboxes/{id}/start"), "{}");
    assert_eq!(s, 403, "{b}");
    assert_eq!(b["field"], "/spec/filesystem/volumes", "{b}");
}

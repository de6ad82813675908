//! A declared volume the owner takes back from a token, through a real
//! daemon over real HTTP (outside review 33, F2, F3): what the token's
//! running sandbox wrote into it is held back at its stop (kept under the
//! state's `held-back/`, a `volume_held_back` event with the reason
//! `not_granted`), never merged into the owner's directory; the refusal
//! of its next start names the volume by where the sandbox mounts it,
//! never by the owner's host path. And a NUL byte in a variable's value
//! is refused at each door's own spelling of the variable (N1), before
//! anything is made.

use crate::common::daemon::*;
use crate::common::owner::OwnerHost;
use crate::common::*;
use std::path::{Path, PathBuf};

/// The owner's daemon with the E2B door, its settings `settings`.
fn e2b_daemon(host: &OwnerHost, settings: &str) -> Daemon {
    let file = host.dir.path().join("daemon.yaml");
    std::fs::write(&file, settings).unwrap();
    let e2b = format!("127.0.0.1:{}", free_port());
    host.daemon(&["--config", file.to_str().unwrap(), "--e2b", &e2b])
}

/// The settings that declare `dir` as the writable volume `dsrw` for the
/// tokens named `tokens`.
fn declaring(dir: &Path, tokens: &str) -> String {
    format!(
        "e2b:\n  volumes:\n    dsrw: {{path: {}, writable: true, tokens: [{tokens}]}}\n",
        dir.display()
    )
}

/// Every file under `dir`, with what it holds.
fn files_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                _ => out.push((
                    e.path(),
                    std::fs::read_to_string(e.path()).unwrap_or_default(),
                )),
            }
        }
    }
    out
}

/// Finding (F2): a token listed on writable declared volume `dsrw` made a
/// sandbox mounting it; the owner listed another token instead and
/// restarted the daemon; the token then wrote into the volume and stopped
/// its sandbox, and the stop merged the file into the owner's directory.
/// Now the write is held back and kept for the owner, with its event; and
/// the start refused afterwards (F3) names `/mnt/rw`, not the directory.
#[test]
fn a_volume_taken_back_from_a_token_takes_none_of_its_running_sandboxes_writes() {
    let Some(host) = OwnerHost::new("volume-revoked") else {
        return;
    };
    std::fs::write(host.profile("small"), "resources:\n  memory: 256M\n").unwrap();
    let dir = host.dir.path().join("decl/rw");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kept.txt"), "the owner's\n").unwrap();
    let mut d = e2b_daemon(&host, &declaring(&dir, "agent"));
    let key = host.agent();
    let (s, b) = e2b_calls_as(&d, key.clone())(
        "POST",
        "/sandboxes",
        Some(
            r#"{"templateID":"small","timeout":300,"volumeMounts":[{"name":"dsrw","path":"/mnt/rw"}]}"#,
        ),
    );
    assert_eq!(s, 201, "{b}");
    let id = json(&b)["sandboxID"].as_str().unwrap().to_string();
    // The owner takes the volume back and the daemon reads its settings
    // again; the sandbox runs on.
    d.stop();
    let d = e2b_daemon(&host, &declaring(&dir, "someone-else"));
    shell_as(
        &d,
        &key,
        &id,
        "echo written-after-revocation > /mnt/rw/late.txt && rm /mnt/rw/kept.txt",
    );
    stop_as(&d, &key, &id);
    assert!(
        !dir.join("late.txt").exists(),
        "the stop merged a write into a volume no longer granted"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("kept.txt")).unwrap(),
        "the owner's\n",
        "the stop removed the owner's file from a volume no longer granted"
    );
    let warden = host.dir.path().join("warden");
    let kept = files_under(&warden.join("held-back"));
    assert!(
        kept.iter()
            .any(|(p, t)| p.ends_with("late.txt") && t == "written-after-revocation\n"),
        "the write is not kept for the owner: {kept:?}"
    );
    let events: String = files_under(&warden.join("sandboxes").join(&id))
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| t.contains("volume_held_back"))
        .collect();
    assert!(
        events.contains("not_granted"),
        "no volume_held_back event with its reason: {events}"
    );
    // Its next start is refused, in words that name no host path.
    let (s, b) = json_as(&d, &key, "POST", &format!("/v1/sandboxes/{id}/start"), "{}");
    assert_eq!(s, 403, "{b}");
    assert_eq!(b["field"], "/spec/filesystem/volumes", "{b}");
    let said = b.to_string();
    assert!(said.contains("/mnt/rw"), "{said}");
    assert!(!said.contains("decl/rw"), "a host path is shown: {said}");
    assert!(
        !said.contains(host.dir.path().to_str().unwrap()),
        "a host path is shown: {said}"
    );
}

/// Finding (N1): `envVars: {"Y": "a\0b"}` was accepted at the E2B
/// create; the sandbox was made, failed to start and was removed, and
/// the client got an opaque 400. Now each door refuses it at its own
/// spelling of the variable (E2B's 400 at `envVars.Y`, the native API's
/// 422 at `/spec/env/set/Y`), and nothing is made.
#[test]
fn a_nul_byte_in_a_variables_value_is_refused_at_the_variable_before_anything_is_made() {
    let Some(host) = OwnerHost::new("env-nul") else {
        return;
    };
    std::fs::write(host.profile("small"), "resources:\n  memory: 256M\n").unwrap();
    let d = e2b_daemon(&host, "{}\n");
    let key = host.agent();
    let door = e2b_calls_as(&d, key.clone());
    let (s, b) = door(
        "POST",
        "/sandboxes",
        Some(r#"{"templateID":"small","timeout":60,"envVars":{"Y":"a\u0000b"}}"#),
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("envVars.Y"), "{b}");
    assert!(b.contains("NUL"), "{b}");
    let (s, b) = json_as(
        &d,
        &key,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"nul","spec":{"env":{"set":{"Y":"a\u0000b"}}}}"#,
    );
    // The native API's answer to a spec that cannot be: 422 at the
    // field's pointer.
    assert_eq!(s, 422, "{b}");
    assert_eq!(b["field"], "/spec/env/set/Y", "{b}");
    assert_eq!(b["reason"], "nul_in_env_value", "{b}");
    assert!(
        sandboxes_on_disk(host.dir.path()).is_empty(),
        "{:?}",
        sandboxes_on_disk(host.dir.path())
    );
}

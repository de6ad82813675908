//! The API's refusals carry a stable reason code (`reason`) below their
//! class (`code`), with the JSON pointer of the value at fault (`field`),
//! through real HTTP: the code a program matches on is the one the library
//! gave, the same whichever door the value came through, and the message is
//! worded for the API (JSON pointers, never a flag). A refused body makes
//! nothing.

use crate::common::daemon::{api_token, call, call_on, curl_available, json, Daemon};
use crate::common::*;

/// The sandboxes the daemon knows.
fn sandboxes(d: &Daemon) -> Vec<serde_json::Value> {
    let (s, b) = call(d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(s, 200, "{b}");
    json(&b)["sandboxes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn each_refusal_of_a_request_body_carries_its_reason_code_and_json_pointer() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("reasons");
    let d = Daemon::start(state.path(), true);
    // (body, status, class, reason, JSON pointer)
    let cases = [
        (
            r#"{"start":false,"spec":{"resources":{"memory":"1k"}}}"#,
            422,
            "invalid_spec",
            "memory_too_small",
            "/spec/resources/memory",
        ),
        (
            r#"{"start":false,"spec":{"resources":{"memory":"lots"}}}"#,
            422,
            "invalid_spec",
            "bad_value",
            "/spec/resources/memory",
        ),
        (
            r#"{"start":false,"spec":{"resources":{"pids":"many"}}}"#,
            422,
            "invalid_spec",
            "bad_value",
            "/spec/resources/pids",
        ),
        (
            r#"{"start":false,"spec":{"resources":{"memroy":"1G"}}}"#,
            422,
            "invalid_spec",
            "unknown_key",
            "/spec/resources/memroy",
        ),
        (
            r#"{"start":false,"spec":{"egress":{"domains":"pypi.org"}}}"#,
            422,
            "invalid_spec",
            "wrong_type",
            "/spec/egress/domains",
        ),
        (
            r#"{"start":false,"spec":{"egress":{"domains":["ok.test","not a name"]}}}"#,
            422,
            "invalid_spec",
            "bad_domain",
            "/spec/egress/domains/1",
        ),
        (
            r#"{"start":false,"spec":{"resources":{"pids":1}}}"#,
            422,
            "invalid_spec",
            "pids_too_small",
            "/spec/resources/pids",
        ),
    ];
    for (body, status, class, reason, pointer) in cases {
        let (s, text) = call(&d, "POST", "/v1/sandboxes", Some(body), None);
        assert_eq!(s, status, "{body}: {text}");
        let p = json(&text);
        assert_eq!(p["code"], class, "{body}: {text}");
        assert_eq!(p["reason"], reason, "{body}: {text}");
        assert_eq!(p["field"], pointer, "{body}: {text}");
        let message = p["message"].as_str().unwrap_or_default();
        assert!(!message.contains(" --"), "{body}: names a flag: {message}");
    }
    // The trust rule's refusals, for a token holder: the rule's own code,
    // as class and reason.
    let t = api_token(&d, "caller", &["sandboxes:read", "sandboxes:write"], None);
    let refused = [
        (
            r#"{"start":false,"spec":{"filesystem":{"read_only":["/root"]}}}"#,
            "owner_only",
            "/spec/filesystem/read_only",
        ),
        (
            r#"{"start":false,"profile":"/etc/passwd"}"#,
            "not_a_name",
            "/profile",
        ),
    ];
    for (body, code, pointer) in refused {
        let (s, text) = call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&t));
        assert_eq!(s, 403, "{body}: {text}");
        let p = json(&text);
        assert_eq!(p["code"], code, "{body}: {text}");
        assert_eq!(p["field"], pointer, "{body}: {text}");
    }
    assert!(sandboxes(&d).is_empty(), "a refused body made a sandbox");
}

#[test]
fn the_command_line_refuses_the_same_value_in_its_own_words() {
    let state = TempDir::new("reasons-cli");
    let out = warden(state.path(), &["create", "m", "--memory", "1k"]);
    assert_ne!(code(&out), 0);
    let said = stderr(&out);
    assert!(said.contains("--memory"), "{said}");
    assert!(said.contains("is too small"), "{said}");
    assert!(!said.contains("/resources/memory"), "{said}");
    assert!(!said.contains("resources.memory"), "{said}");
}

/// `(status, code, reason, field)` of a create refused with `body`, with
/// no sandbox made for it.
fn refused_create(d: &Daemon, body: &str) -> (u16, String, String, String) {
    let (s, text) = call(d, "POST", "/v1/sandboxes", Some(body), None);
    let p = json(&text);
    let message = p["message"].as_str().unwrap_or_default();
    assert!(!message.contains(" --"), "{body}: names a flag: {message}");
    assert!(
        sandboxes(d).is_empty(),
        "{body}: a refused body made a sandbox"
    );
    let text_of = |k: &str| p[k].as_str().unwrap_or_default().to_string();
    (s, text_of("code"), text_of("reason"), text_of("field"))
}

#[test]
fn what_gvisor_cannot_give_is_refused_with_its_own_code_at_its_field_and_nothing_is_made() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("reasons-gvisor");
    let d = Daemon::start(state.path(), false);
    // Before, both were made and their start answered 422 `refused` with
    // neither a reason nor a field; now nothing is made.
    for (start, body) in [
        (
            false,
            r#"{"name":"gc","spec":{"isolation":"gvisor","filesystem":{"caches":["pip"]}}}"#,
        ),
        (
            true,
            r#"{"name":"gc","spec":{"isolation":"gvisor","filesystem":{"caches":["pip"]}}}"#,
        ),
    ] {
        let body = body.replace("\"spec\"", &format!("\"start\":{start},\"spec\""));
        assert_eq!(
            refused_create(&d, &body),
            (
                422,
                "invalid_spec".into(),
                "caches_with_gvisor".into(),
                "/spec/filesystem/caches/0".into()
            ),
            "{body}"
        );
    }
    let data = TempDir::new("reasons-gvisor-volume");
    let body = format!(
        r#"{{"name":"gv","start":false,"spec":{{"isolation":"gvisor","filesystem":{{"volumes":["{}:/mnt/data"]}}}}}}"#,
        data.str()
    );
    assert_eq!(
        refused_create(&d, &body),
        (
            422,
            "invalid_spec".into(),
            "volumes_with_gvisor".into(),
            "/spec/filesystem/volumes/0".into()
        )
    );
    // Before: 422 `refused` once the supervisor tried, no reason, no field.
    let body = r#"{"name":"gd","start":true,"spec":{"isolation":"gvisor","desktop":true}}"#;
    assert_eq!(
        refused_create(&d, body),
        (
            422,
            "invalid_spec".into(),
            "desktop_with_gvisor".into(),
            "/spec/desktop".into()
        )
    );
    // The command line: the same refusal, named by its flags.
    let out = warden(
        state.path(),
        &["create", "gc", "--isolation", "gvisor", "--cache", "pip"],
    );
    assert_ne!(code(&out), 0);
    let said = stderr(&out);
    assert!(
        said.contains("--cache cannot be used with `--isolation gvisor`"),
        "{said}"
    );
    assert!(!said.contains("/filesystem/caches"), "{said}");
}

#[test]
fn a_rootless_daemon_refuses_a_gvisor_or_vm_sandbox_it_could_not_keep_within_its_budget_at_the_isolation(
) {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !is_root() {
        return skip("not root: the daemon cannot be started as another user");
    }
    let Some(who) = Unprivileged::get() else {
        return skip("no unprivileged user to run the daemon as");
    };
    let as_who = [
        "setpriv".to_string(),
        format!("--reuid={}", who.uid),
        format!("--regid={}", who.gid),
        "--clear-groups".to_string(),
    ];
    let reaches = std::process::Command::new(&as_who[0])
        .args(&as_who[1..])
        .args(["test", "-x"])
        .arg(warden_bin())
        .status()
        .is_ok_and(|s| s.success());
    if !reaches {
        return skip("setpriv is missing, or the unprivileged user cannot run the warden binary");
    }
    let state = TempDir::new("reasons-rootless");
    who.own(state.path());
    let launcher: Vec<&str> = as_who.iter().map(String::as_str).collect();
    let d = Daemon::start_under(&launcher, state.path(), false, &[]);
    // A named sandbox keeps its home (and an overlay its layer): before,
    // it was made and its start answered 422 `refused` with neither a
    // reason nor a field.
    for body in [
        r#"{"name":"gr","start":false,"spec":{"isolation":"gvisor"}}"#,
        r#"{"name":"gr","spec":{"isolation":"gvisor"}}"#,
    ] {
        assert_eq!(
            refused_create(&d, body),
            (
                422,
                "invalid_spec".into(),
                "gvisor_kept_layer_rootless".into(),
                "/spec/isolation".into()
            ),
            "{body}"
        );
    }
    // A VM's layer is held within its budget only as root: before, the
    // VMM wrote it straight onto the host's disk, past `--disk`.
    assert_eq!(
        refused_create(
            &d,
            r#"{"name":"vr","start":false,"spec":{"isolation":"vm"}}"#
        ),
        (
            422,
            "invalid_spec".into(),
            "vm_kept_layer_rootless".into(),
            "/spec/isolation".into()
        )
    );
    // The process backend keeps them rootless within its budget.
    let (s, text) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"gp","start":false,"spec":{"isolation":"process"}}"#),
        None,
    );
    assert_eq!(s, 201, "{text}");
}

#[test]
fn what_needs_a_stopped_sandboxs_processes_is_a_conflict_with_reason_not_running() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("reasons-stopped");
    let d = Daemon::start(state.path(), false);
    let (s, text) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"st","start":false}"#),
        None,
    );
    assert_eq!(s, 201, "{text}");
    // Before, each was a bare 409 `conflict`, which a program could not
    // tell from a name in use or a command that has ended.
    let asks = [
        (
            "POST",
            "/v1/sandboxes/st/exec",
            Some(r#"{"argv":["true"]}"#),
        ),
        ("GET", "/v1/sandboxes/st/files?path=a", None),
        ("GET", "/v1/sandboxes/st/files/list?path=", None),
        ("POST", "/v1/sandboxes/st/stop", Some("{}")),
        ("POST", "/v1/sandboxes/st/pause", Some("{}")),
        (
            "POST",
            "/v1/sandboxes/st/timeout",
            Some(r#"{"ttl_seconds":60}"#),
        ),
        ("GET", "/v1/sandboxes/st/pty", None),
    ];
    for (method, path, body) in asks {
        let (s, text) = call(&d, method, path, body, None);
        assert_eq!(s, 409, "{method} {path}: {text}");
        let p = json(&text);
        assert_eq!(p["code"], "conflict", "{method} {path}: {text}");
        assert_eq!(p["reason"], "not_running", "{method} {path}: {text}");
    }
}

#[test]
fn a_file_past_the_sandboxs_disk_limit_is_507_workspace_full_not_a_quota() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("reasons-full");
    let d = Daemon::start(state.path(), false);
    let (s, text) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"full","start":true,"spec":{"resources":{"disk":"16M","memory":"256M"}}}"#),
        None,
    );
    assert_eq!(s, 201, "{text}");
    let big = state.path().join("big");
    std::fs::write(&big, vec![0u8; 40 << 20]).unwrap();
    let out = std::process::Command::new("curl")
        .args(["-sS", "-X", "PUT", "-w", "\n%{http_code}", "--unix-socket"])
        .arg(&d.socket)
        .args([
            "-H",
            "content-type: application/octet-stream",
            "--data-binary",
        ])
        .arg(format!("@{}", big.display()))
        .arg("http://warden/v1/sandboxes/full/files?path=big")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').unwrap_or_default();
    assert_eq!(status, "507", "{text}");
    // Before: code `quota`, which a client takes for a token's quotas.
    let p = json(body);
    assert_eq!(p["code"], "workspace_full", "{text}");
    let message = p["message"].as_str().unwrap_or_default();
    assert!(message.contains("/resources/disk"), "{message}");
    let (s, _) = call(&d, "DELETE", "/v1/sandboxes/full?force=true", None, None);
    assert_eq!(s, 204);
}

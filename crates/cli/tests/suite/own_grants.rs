//! A sandbox's grants file (where its "always" answers are written) and
//! its package caches are its own principal's, through a start and
//! through a copy: a token's sandbox whose kept spec names the owner's
//! grants file, or allows a name it could only have from another's file,
//! is neither started nor copied with it, and a warm pool's sandbox (the
//! owner's file) is never handed to a token; the owner's copy of a
//! token's sandbox is re-pointed at the owner's own caches and grants
//! file.
//! Through the real daemon over real HTTP (outside review 18, F3 and F4).

use super::owner_caches::{
    connect_asked, first_question_of, grants_name, token_dir, AskingProject, Call, ASK_LOOPBACK,
};
use crate::common::daemon::*;
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The owner's catalogue with profile `asky`: asked about names, pip's
/// cache kept.
fn profile_asky(config: &Path) {
    let profiles = config.join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("asky.yaml"),
        "egress:\n  ask: true\nfilesystem:\n  caches: [pip]\n",
    )
    .unwrap();
}

/// A daemon whose workspace root holds project `ws`, with profile `asky`.
struct Setup {
    state: TempDir,
    ws: PathBuf,
    d: Daemon,
}

fn setup(name: &str) -> Setup {
    let state = TempDir::new(name);
    let config = state.path().join("config");
    profile_asky(&config);
    let root = state.path().join("projects");
    let ws = root.join("shared");
    std::fs::create_dir_all(&ws).unwrap();
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--workspace-root", root.to_str().unwrap()],
        &[("XDG_CONFIG_HOME", &config)],
    );
    Setup { state, ws, d }
}

impl Setup {
    fn stored_path(&self, name: &str) -> PathBuf {
        sandbox_dir(self.state.path(), name).join("sandbox.json")
    }

    fn stored(&self, name: &str) -> Value {
        json(&std::fs::read_to_string(self.stored_path(name)).unwrap())
    }

    fn write_stored(&self, name: &str, v: &Value) {
        std::fs::write(self.stored_path(name), v.to_string()).unwrap();
    }

    /// Sandbox `name` of `asky` over the project, not started.
    fn create(&self, t: &Call<'_>, name: &str) {
        let body = format!(
            r#"{{"name":"{name}","profile":"asky","workspace":"{}","start":false}}"#,
            self.ws.display()
        );
        let (s, b) = t("POST", "/v1/sandboxes", Some(&body));
        assert_eq!(s, 201, "{b}");
    }

    /// The owner's grants file for the project.
    fn owners_grants(&self) -> PathBuf {
        self.state
            .path()
            .join("warden/grants")
            .join(grants_name(&self.ws))
    }
}

/// The names a kept spec allows as the owner's entries.
fn owner_entries(v: &Value) -> Vec<String> {
    v["spec"]["network"]["Egress"]["domains"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|d| !d["caller"].as_bool().unwrap_or(false))
                .filter_map(|d| d["source"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Review 18, F3: before a token's answers were kept apart from the
/// owner's, a token's sandbox over a project was given the owner's
/// "always" answers at its create, as the owner's entries in its kept
/// spec, and its grants file was the owner's (`STATE/grants/PROJECT`),
/// into which its supervisor wrote. A start and a fork carried both
/// (started: 200, the owner's names allowed, the token's answers written
/// into the owner's file). Both are now held to the token's own: a kept
/// spec naming the owner's grants file, with or without the owner's
/// answers among its names (a create gave both together), is refused
/// (403 at `/spec/egress/ask`), nothing started or made; a name of the
/// token's own file still runs.
#[test]
fn a_token_s_sandbox_kept_with_the_owner_s_grants_is_not_started_or_copied_with_them() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return skip("egress interception is not available here");
    }
    let su = setup("own-grants-old");
    let token = api_token(&su.d, "bob", WORKER_SCOPES, None);
    let t = calls_as(&su.d, token.clone());
    // The owner's answer and bob's own, each in its principal's file.
    std::fs::create_dir_all(su.owners_grants().parent().unwrap()).unwrap();
    std::fs::write(
        su.owners_grants(),
        "description: \"answers\"\ndomains: [\"owners.test\"]\n",
    )
    .unwrap();
    let bobs = su
        .state
        .path()
        .join("warden/token-grants")
        .join(token_dir(&token))
        .join("grants");
    std::fs::create_dir_all(&bobs).unwrap();
    std::fs::write(
        bobs.join(grants_name(&su.ws)),
        "description: \"answers\"\ndomains: [\"bobs.test\"]\n",
    )
    .unwrap();

    // Bob's own answer is kept through a start (the feature holds).
    su.create(&t, "mine");
    let v = su.stored("mine");
    assert_eq!(owner_entries(&v), vec!["bobs.test".to_string()], "{v}");
    assert_eq!(
        v["sinks"]["grants"].as_str().unwrap(),
        bobs.join(grants_name(&su.ws)).to_str().unwrap()
    );
    let (s, b) = t("POST", "/v1/sandboxes/mine/start", None);
    assert_eq!(s, 200, "{b}");
    let _ = t("DELETE", "/v1/sandboxes/mine?force=true", None);

    // Kept as a create before answers were per principal: the owner's
    // grants file, then the owner's answer among its names.
    su.create(&t, "oldfile");
    let mut v = su.stored("oldfile");
    v["sinks"]["grants"] = Value::from(su.owners_grants().to_str().unwrap());
    su.write_stored("oldfile", &v);
    // As it was made: the owner's answer among its names too.
    su.create(&t, "oldname");
    let mut v = su.stored("oldname");
    v["sinks"]["grants"] = Value::from(su.owners_grants().to_str().unwrap());
    v["spec"]["network"]["Egress"]["domains"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name":"owners.test","subdomains":false,"port":null,"source":"owners.test"}));
    su.write_stored("oldname", &v);

    for (id, field) in [
        ("oldfile", "/spec/egress/ask"),
        ("oldname", "/spec/egress/ask"),
    ] {
        let (s, b) = t("POST", &format!("/v1/sandboxes/{id}/start"), None);
        assert_eq!(s, 403, "{id}: {b}");
        assert_eq!(json(&b)["field"], field, "{b}");
        assert!(
            json(&b)["message"]
                .as_str()
                .unwrap_or_default()
                .contains("not started"),
            "{b}"
        );
        let (s, b) = t(
            "POST",
            &format!("/v1/sandboxes/{id}/fork"),
            Some(r#"{"count":1}"#),
        );
        assert_eq!(s, 403, "{id}: {b}");
        assert_eq!(json(&b)["field"], field, "{b}");
        assert!(!sandbox_dir(su.state.path(), &format!("{id}-fork-1")).exists());
        let (s, b) = t("GET", &format!("/v1/sandboxes/{id}"), None);
        assert_eq!(s, 200, "{b}");
        assert_eq!(json(&b)["state"], "stopped", "{b}");
        let _ = t("DELETE", &format!("/v1/sandboxes/{id}?force=true"), None);
    }
    // The owner's file is as the owner wrote it.
    assert_eq!(
        std::fs::read_to_string(su.owners_grants()).unwrap(),
        "description: \"answers\"\ndomains: [\"owners.test\"]\n"
    );
}

/// Review 18, F4: the owner's fork or snapshot of a token's sandbox kept
/// that token's cache directory (`STATE/token-caches/tHEX/`) and grants
/// file (`STATE/token-grants/tHEX/`): the owner's copy shared the token's
/// live cache, charged to the token's disk, and wrote its "always"
/// answers into the token's file. A copy is its maker's: the owner's
/// fork and the owner's sandbox from a snapshot bind the owner's caches
/// (`STATE/caches/`) and write into the owner's grants file
/// (`STATE/grants/`); nothing of either names the token's directories.
#[test]
fn the_owner_s_copy_of_a_token_s_sandbox_keeps_the_owner_s_caches_and_grants_file() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let su = setup("own-grants-copy");
    let token = api_token(&su.d, "alice", WORKER_SCOPES, None);
    let t = calls_as(&su.d, token.clone());
    let owner = |m: &str, p: &str, b: Option<&str>| call(&su.d, m, p, b, None);
    su.create(&t, "hers");
    let v = su.stored("hers");
    let hex = token_dir(&token);
    let text = v.to_string();
    assert!(text.contains(&format!("token-caches/{hex}")), "{v}");
    assert!(text.contains(&format!("token-grants/{hex}")), "{v}");

    let (s, b) = owner("POST", "/v1/sandboxes/hers/fork", Some(r#"{"count":1}"#));
    assert_eq!(s, 201, "{b}");
    let (s, b) = owner(
        "POST",
        "/v1/sandboxes/hers/snapshots",
        Some(r#"{"name":"hers-snap"}"#),
    );
    assert!(s == 200 || s == 201, "{b}");
    let (s, b) = owner(
        "POST",
        "/v1/snapshots/hers-snap/sandboxes",
        Some(r#"{"name":"from-snap","start":false}"#),
    );
    assert_eq!(s, 201, "{b}");

    let caches = su.state.path().join("warden/caches");
    for id in ["hers-fork-1", "from-snap"] {
        let v = su.stored(id);
        let text = v.to_string();
        assert!(!text.contains("token-caches"), "{id}: {v}");
        assert!(!text.contains("token-grants"), "{id}: {v}");
        let host = v["spec"]["filesystem"]["caches"][0]["host"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(Path::new(&host).starts_with(&caches), "{id}: {host}");
        assert_eq!(
            v["sinks"]["grants"].as_str().unwrap_or_default(),
            su.owners_grants().to_str().unwrap(),
            "{id}"
        );
        let _ = owner("DELETE", &format!("/v1/sandboxes/{id}?force=true"), None);
    }
    let _ = t("DELETE", "/v1/sandboxes/hers?force=true", None);
}

/// A warm pool's sandboxes are made as the owner's: over a profile that
/// asks and names a workspace, a pooled sandbox's grants file is the
/// owner's. A token's claim resolves to the token's own file: the claim
/// never fits a pooled sandbox (made cold), so no token's sandbox writes
/// its "always" answers into the owner's file.
#[test]
fn a_pooled_sandbox_writing_into_the_owner_s_grants_file_is_never_handed_to_a_token() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return skip("egress interception is not available here");
    }
    let state = TempDir::new("own-grants-pool");
    let config = state.path().join("config");
    let ws = state.path().join("projects/shared");
    std::fs::create_dir_all(&ws).unwrap();
    let profiles = config.join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("asky.yaml"),
        format!(
            "egress:\n  ask: true\nfilesystem:\n  workspace: \"{}\"\n",
            ws.display()
        ),
    )
    .unwrap();
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--pool", "asky=1"],
        &[("XDG_CONFIG_HOME", &config)],
    );
    let pooled = || pooled_on_disk(state.path());
    wait_until(
        "the pool is full",
        std::time::Duration::from_secs(60),
        || {
            let p = pooled();
            p.len() == 1
                && p.iter().all(|id| {
                    sandbox_dir(state.path(), id)
                        .join("supervisor.json")
                        .exists()
                })
        },
    );
    let in_pool = pooled();
    // The grants file's directory of a kept spec.
    let grants_dir = |id: &str| -> PathBuf {
        let v: Value = json(
            &std::fs::read_to_string(sandbox_dir(state.path(), id).join("sandbox.json")).unwrap(),
        );
        let file = PathBuf::from(v["sinks"]["grants"].as_str().unwrap_or_default());
        file.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    assert_eq!(grants_dir(&in_pool[0]), state.path().join("warden/grants"));
    let token = api_token(&d, "tok", WORKER_SCOPES, None);
    let t = calls_as(&d, token.clone());
    let (s, b) = t("POST", "/v1/sandboxes", Some(r#"{"profile":"asky"}"#));
    assert_eq!(s, 201, "{b}");
    let id = json(&b)["id"].as_str().unwrap().to_string();
    let own = state
        .path()
        .join("warden/token-grants")
        .join(token_dir(&token))
        .join("grants");
    assert_eq!(grants_dir(&id), own, "{id}");
    assert!(!in_pool.contains(&id), "the token was handed pooled {id}");
    let _ = t("DELETE", &format!("/v1/sandboxes/{id}?force=true"), None);
}

/// A token's sandbox kept with the owner's grants file whose supervisor
/// runs already: started by an earlier warden, before starts were held to
/// the sandbox's own file (here, its supervisor started directly, as that
/// start did). A token's own "always" is kept on the sandbox's list as a
/// caller's entry and never written into a grants file; the owner's
/// "always" to the token's question is written into the file the
/// supervisor was started with. Before, the owner's `allow_always` (the
/// API's, or `warden approvals`) was taken and the supervisor wrote the
/// name the token's code asked for into the owner's file, where the
/// owner's own next sandboxes over the project read it, unasked. Now both
/// doors refuse the "always" (the API 403 at `/spec/egress/ask`) and the
/// owner's file is as the owner wrote it; "once" still answers.
#[test]
fn a_running_token_s_sandbox_writing_into_the_owner_s_grants_file_is_not_answered_always() {
    use std::io::Read;
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return skip("egress interception is not available here");
    }
    let AskingProject { state, ws, d } = AskingProject::start("own-grants-running");
    let scopes = ["sandboxes:read", "sandboxes:write", "exec", "approvals"];
    let bob = calls_as(&d, api_token(&d, "bob", &scopes, None));
    let owner = |m: &str, p: &str, b: Option<&str>| call(&d, m, p, b, None);
    let up = crate::common::tcp::Holder::start();
    let body = format!(
        r#"{{"name":"old-run","profile":"asky","workspace":"{}","start":false}}"#,
        ws.display()
    );
    let (s, b) = bob("POST", "/v1/sandboxes", Some(&body));
    assert_eq!(s, 201, "{b}");
    let owners = state.path().join("warden/grants").join(grants_name(&ws));
    std::fs::create_dir_all(owners.parent().unwrap()).unwrap();
    std::fs::write(&owners, "description: \"answers\"\ndomains: []\n").unwrap();
    let before = std::fs::read_to_string(&owners).unwrap();
    let stored = sandbox_dir(state.path(), "old-run").join("sandbox.json");
    let mut v = json(&std::fs::read_to_string(&stored).unwrap());
    v["sinks"]["grants"] = Value::from(owners.to_str().unwrap());
    std::fs::write(&stored, v.to_string()).unwrap();
    // Its supervisor, started as a start before the check started it.
    let mut sup = std::process::Command::new(warden_bin())
        .args(["__supervise", "old-run"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env(ASK_LOOPBACK.0, ASK_LOOPBACK.1)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut said = String::new();
    sup.stdout
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert!(said.contains("ready"), "the supervisor said: {said}");
    std::thread::spawn(move || sup.wait());

    let connect = connect_asked(up.port);
    let (s, b) = bob("POST", "/v1/sandboxes/old-run/exec", Some(&connect));
    assert_eq!(s, 202, "{b}");
    let id = first_question_of(&bob, "bob's question");
    let question = format!("/v1/approvals/{id}");
    let written = || std::fs::read_to_string(&owners).unwrap_or_default();
    // The owner's "always" over the API.
    let (s, b) = owner("POST", &question, Some(r#"{"decision":"allow_always"}"#));
    if s == 204 {
        wait_until(
            "the answer's write",
            std::time::Duration::from_secs(10),
            || written() != before,
        );
        panic!(
            "the owner's always was taken; the owner's file now reads: {}",
            written()
        );
    }
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["field"], "/spec/egress/ask", "{b}");
    // The token's, and the owner's at the command line.
    let (s, b) = bob("POST", &question, Some(r#"{"decision":"allow_always"}"#));
    assert_eq!(s, 403, "{b}");
    let out = warden(state.path(), &["approvals", &id, "allow_always"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("not its own principal's"),
        "{}",
        stderr(&out)
    );
    // Once still answers, and the connection goes through.
    let (s, b) = owner("POST", &question, Some(r#"{"decision":"allow_once"}"#));
    assert_eq!(s, 204, "{b}");
    wait_until("the connection", std::time::Duration::from_secs(20), || {
        up.arrivals() > 0
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(written(), before, "the owner's grants file was written");
    let _ = owner("DELETE", "/v1/sandboxes/old-run?force=true", None);
}

//! What warden keeps beyond one sandbox is its owner's: a profile's
//! package caches are shared by one owner's sandboxes only (the machine's
//! owner's, or one token's), and the E2B door's envd access token is a
//! key of the sandbox's own whatever made the sandbox, never the caller's
//! API key. Through the real daemon over real HTTP, two tokens.

use crate::common::daemon::*;
use crate::common::grants::stdout_of;
use crate::common::*;
use std::path::Path;

/// The owner's catalogue with profile `cachy`, which keeps pip's cache.
fn profile_with_cache(config: &Path) {
    let profiles = config.join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("cachy.yaml"),
        "description: installs with a kept pip cache\nfilesystem:\n  caches: [pip]\n",
    )
    .unwrap();
}

const WHEEL: &str = "~/.cache/pip/wheels/evil-1.0-py3-none-any.whl";

/// Sandbox `name` of profile `cachy`, made through `t`.
fn make(t: &impl Fn(&str, &str, Option<&str>) -> (u16, String), name: &str) {
    let body = format!(r#"{{"name":"{name}","profile":"cachy"}}"#);
    let (s, b) = t("POST", "/v1/sandboxes", Some(&body));
    assert_eq!(s, 201, "{b}");
}

/// Every path under `dir`, as text.
fn paths_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            out.push(e.path().display().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
        }
    }
    out
}

/// Finding (review 16, 2): alice's sandbox of the owner's profile wrote
/// a wheel into pip's cache; when it stopped, the wheel was merged into
/// `STATE/caches/PROFILE/`, the one directory every sandbox of that
/// profile binds, and bob's sandbox (another token) read it:
/// PLANTED-BY-ALICE. A cache is now its owner's: each token's sandboxes
/// share one of their own (named by the token's id in hexadecimal, never
/// its secret), the owner's sandboxes theirs; bob and the owner see
/// nothing of alice's, and alice's next sandbox still finds what her
/// first kept (the feature holds).
#[test]
fn a_token_s_cache_is_shared_by_its_own_sandboxes_and_never_read_by_another_token_s() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("owner-caches");
    let config = state.path().join("config");
    profile_with_cache(&config);
    let d = Daemon::start_with(state.path(), true, &[], &[("XDG_CONFIG_HOME", &config)]);
    let alice_token = api_token(&d, "alice", WORKER_SCOPES, None);
    let alice = calls_as(&d, alice_token.clone());
    let bob_token = api_token(&d, "bob", WORKER_SCOPES, None);
    let bob = calls_as(&d, bob_token.clone());
    let read = format!(r#"{{"shell":"cat {WHEEL} 2>/dev/null; true"}}"#);

    make(&alice, "pa");
    let plant = format!(
        r#"{{"shell":"mkdir -p ~/.cache/pip/wheels && echo PLANTED-BY-ALICE > {WHEEL} && cat {WHEEL}"}}"#
    );
    let (s, b) = alice("POST", "/v1/sandboxes/pa/exec", Some(&plant));
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("PLANTED-BY-ALICE"), "{b}");
    // Its writes reach the cache when it stops.
    let (s, b) = alice("POST", "/v1/sandboxes/pa/stop", None);
    assert_eq!(s, 200, "{b}");

    // Alice's next sandbox of the profile finds what her first kept.
    make(&alice, "pa2");
    let (s, b) = alice("POST", "/v1/sandboxes/pa2/exec", Some(&read));
    assert_eq!(s, 200, "{b}");
    assert!(
        stdout_of(&b).contains("PLANTED-BY-ALICE"),
        "the owner's own sandboxes no longer share its cache: {b}"
    );

    // Bob's sandbox of the same profile reads nothing of it.
    make(&bob, "pb");
    let (s, b) = bob("POST", "/v1/sandboxes/pb/exec", Some(&read));
    assert_eq!(s, 200, "{b}");
    assert!(
        !stdout_of(&b).contains("PLANTED"),
        "bob's sandbox read alice's wheel: {b}"
    );
    // Nor does the owner's.
    let body = r#"{"name":"po","profile":"cachy"}"#;
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(body), None);
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(&d, "POST", "/v1/sandboxes/po/exec", Some(&read), None);
    assert_eq!(s, 200, "{b}");
    assert!(
        !stdout_of(&b).contains("PLANTED"),
        "the owner's sandbox read alice's wheel: {b}"
    );

    // On disk: alice's wheel is in one directory, not the owner's, and
    // no path names a token's secret.
    let root = state.path().join("warden");
    let paths = paths_under(&root);
    let wheels: Vec<&String> = paths
        .iter()
        .filter(|p| p.ends_with("evil-1.0-py3-none-any.whl") && !p.contains("/sandboxes/"))
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    assert!(wheels[0].contains("/token-caches/"), "{wheels:?}");
    assert!(!root.join("caches/cachy/pip/pip/wheels").exists());
    for t in [&alice_token, &bob_token] {
        let secret = t.rsplit('_').next().unwrap();
        assert!(
            paths.iter().all(|p| !p.contains(secret)),
            "a path holds a token's secret"
        );
    }
    for (t, name) in [(&alice, "pa2"), (&bob, "pb")] {
        let _ = t("DELETE", &format!("/v1/sandboxes/{name}?force=true"), None);
    }
    let _ = alice("DELETE", "/v1/sandboxes/pa?force=true", None);
    let _ = call(&d, "DELETE", "/v1/sandboxes/po?force=true", None, None);
}

/// A warm pool's sandboxes are made as the owner's, with the owner's
/// caches bound: handed to a token, one would give the token the owner's
/// cache (and the token's writes to the owner's next sandboxes). A
/// token's create of a pooled profile with caches resolves to the
/// token's own caches, never fits a pooled sandbox, and is made cold;
/// the owner's create still takes one warm.
#[test]
fn a_pooled_sandbox_with_the_owner_s_caches_is_never_handed_to_a_token() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("owner-caches-pool");
    let config = state.path().join("config");
    profile_with_cache(&config);
    // The owner's cache holds what the owner's sandboxes kept.
    let owners = state.path().join("warden/caches/cachy/pip/pip/wheels");
    std::fs::create_dir_all(&owners).unwrap();
    std::fs::write(owners.join("owners-1.0-py3-none-any.whl"), "OWNERS-OWN\n").unwrap();
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--pool", "cachy=1"],
        &[("XDG_CONFIG_HOME", &config)],
    );
    let pooled = || pooled_on_disk(state.path());
    let ready = || {
        pooled().len() == 1
            && pooled().iter().all(|id| {
                sandbox_dir(state.path(), id)
                    .join("supervisor.json")
                    .exists()
            })
    };
    wait_until(
        "the pool is full",
        std::time::Duration::from_secs(60),
        ready,
    );
    let in_pool = pooled();
    let t = calls_as(&d, api_token(&d, "tok", WORKER_SCOPES, None));
    let (s, b) = t("POST", "/v1/sandboxes", Some(r#"{"profile":"cachy"}"#));
    assert_eq!(s, 201, "{b}");
    let id = json(&b)["id"].as_str().unwrap().to_string();
    assert!(!in_pool.contains(&id), "the token was handed pooled {id}");
    let read = r#"{"shell":"cat ~/.cache/pip/wheels/*.whl 2>/dev/null; true"}"#;
    let (s, b) = t("POST", &format!("/v1/sandboxes/{id}/exec"), Some(read));
    assert_eq!(s, 200, "{b}");
    assert!(!stdout_of(&b).contains("OWNERS-OWN"), "{b}");
    // The owner's create is served warm, with the owner's cache.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"profile":"cachy"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let own = json(&b)["id"].as_str().unwrap().to_string();
    assert!(in_pool.contains(&own), "{own} is not {in_pool:?}");
    let (s, b) = call(
        &d,
        "POST",
        &format!("/v1/sandboxes/{own}/exec"),
        Some(read),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("OWNERS-OWN"), "{b}");
    let _ = t("DELETE", &format!("/v1/sandboxes/{id}?force=true"), None);
    let _ = call(
        &d,
        "DELETE",
        &format!("/v1/sandboxes/{own}?force=true"),
        None,
        None,
    );
}

/// A token's sandbox made before caches were kept per owner binds the
/// one directory every token's sandbox of the profile shared
/// (`STATE/caches/PROFILE`): its spec, kept since its create, would bind
/// it again at each start and in each copy. Both are held to what the
/// owner grants that token now, its own caches only: refused (403 at the
/// caches' pointer), nothing started or made, and the shared directory's
/// wheel stays unread.
#[test]
fn a_token_s_sandbox_made_with_the_shared_cache_is_not_started_or_copied_with_it() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("owner-caches-old");
    let config = state.path().join("config");
    profile_with_cache(&config);
    let shared = state.path().join("warden/caches/cachy/pip/pip/wheels");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(
        shared.join("evil-1.0-py3-none-any.whl"),
        "PLANTED-BY-ALICE\n",
    )
    .unwrap();
    let d = Daemon::start_with(state.path(), true, &[], &[("XDG_CONFIG_HOME", &config)]);
    let t = calls_as(&d, api_token(&d, "bob", WORKER_SCOPES, None));
    let (s, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"old","profile":"cachy","start":false}"#),
    );
    assert_eq!(s, 201, "{b}");
    // Its kept spec as a create before this change wrote it.
    let stored = sandbox_dir(state.path(), "old").join("sandbox.json");
    let text = std::fs::read_to_string(&stored).unwrap();
    let own = state.path().join("warden/token-caches");
    let own = own.to_str().unwrap();
    assert!(text.contains(own), "{text}");
    let start = text.find(own).unwrap();
    let end = start + text[start..].find("/cachy/").unwrap();
    let old = text.replace(
        &text[start..end],
        state.path().join("warden/caches").to_str().unwrap(),
    );
    std::fs::write(&stored, old).unwrap();

    let (s, b) = t("POST", "/v1/sandboxes/old/start", None);
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["field"], "/spec/filesystem/caches", "{b}");
    let (s, b) = t("POST", "/v1/sandboxes/old/fork", Some(r#"{"count":1}"#));
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["field"], "/spec/filesystem/caches", "{b}");
    assert!(!sandbox_dir(state.path(), "old-fork-1").exists());
    let (s, b) = t("GET", "/v1/sandboxes/old", None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["state"], "stopped", "{b}");
    let _ = t("DELETE", "/v1/sandboxes/old?force=true", None);
}

/// Python in the sandbox: connect to NAME:PORT (the name the owner's
/// profile pins to the host's loopback) with a TLS ClientHello for it;
/// prints `open` once connected.
pub(super) const PY_CONNECT: &str = r#"import socket, ssl, sys
name, port = sys.argv[1], int(sys.argv[2])
ctx = ssl.create_default_context(); i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
t = ctx.wrap_bio(i, o, server_hostname=name)
try: t.do_handshake()
except ssl.SSLWantReadError: pass
try:
    s = socket.create_connection((socket.gethostbyname(name), port), timeout=60); s.sendall(o.read())
    print('open', flush=True); s.settimeout(1)
    try: s.recv(100)
    except OSError: pass
except OSError as e:
    print('closed', e, flush=True)
"#;

/// A call over the daemon's TCP listener as one token.
pub(super) type Call<'a> = dyn Fn(&str, &str, Option<&str>) -> (u16, String) + 'a;

/// The name of a project's grants file, as warden escapes its path.
pub(super) fn grants_name(ws: &Path) -> String {
    let mut name = String::new();
    for b in ws.to_str().unwrap().bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
            name.push(b as char);
        } else {
            name.push_str(&format!("_{b:02x}"));
        }
    }
    format!("{name}.yaml")
}

/// A token's directory name below `token-grants/` and `token-caches/`.
pub(super) fn token_dir(token: &str) -> String {
    let id = token.split('_').nth(1).unwrap();
    let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
    format!("t{hex}")
}

/// The test switch that lets a held connection to the host's loopback be
/// asked about (`asked.test` is pinned there).
pub(super) const ASK_LOOPBACK: (&str, &str) = ("WARDEN_TEST_ASK_LOOPBACK", "1");

/// A daemon (over TCP) whose workspace root `STATE/projects` holds
/// project `shared`, with the owner's profile `asky`: asked about names,
/// `asked.test` pinned to the host's loopback.
pub(super) struct AskingProject {
    pub(super) state: TempDir,
    pub(super) ws: std::path::PathBuf,
    pub(super) d: Daemon,
}

impl AskingProject {
    pub(super) fn start(tag: &str) -> AskingProject {
        let state = TempDir::new(tag);
        let config = state.path().join("config");
        let profiles = config.join("warden/profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        std::fs::write(
            profiles.join("asky.yaml"),
            "egress:\n  ask: true\n  hosts:\n    asked.test: 127.0.0.1\n",
        )
        .unwrap();
        let root = state.path().join("projects");
        let ws = root.join("shared");
        std::fs::create_dir_all(&ws).unwrap();
        let d = Daemon::start_with(
            state.path(),
            true,
            &["--workspace-root", root.to_str().unwrap()],
            &[
                ("XDG_CONFIG_HOME", &config),
                (ASK_LOOPBACK.0, Path::new(ASK_LOOPBACK.1)),
            ],
        );
        AskingProject { state, ws, d }
    }
}

/// The exec body of a background [`PY_CONNECT`] to `asked.test:port`.
pub(super) fn connect_asked(port: u16) -> String {
    serde_json::json!({
        "argv": ["python3", "-c", PY_CONNECT, "asked.test", port.to_string()],
        "background": true,
    })
    .to_string()
}

/// The id of the first question `t` is shown (within 20 s).
pub(super) fn first_question_of(t: &Call<'_>, whose: &str) -> String {
    let mut found = None;
    wait_until(whose, std::time::Duration::from_secs(20), || {
        let (_, b) = t("GET", "/v1/approvals", None);
        found = json(&b)["approvals"][0]["id"].as_str().map(str::to_string);
        found.is_some()
    });
    found.unwrap()
}

/// "Always" answers were kept in one file per project, read by every
/// later sandbox over it as the owner's own entries, whoever answered
/// and whoever made the sandbox: a name alice's sandbox was allowed
/// "always" for a project both tokens may use (the daemon's workspace
/// root) was given to bob's sandbox over the same workspace unasked, and
/// as the owner's entry it reached the address the owner's profile pins
/// it to. Each principal's answers are now its own
/// (`STATE/token-grants/tHEX/grants/` for a token, the owner's where
/// they always were): bob's sandbox is given neither the owner's file
/// nor alice's, is asked, and nothing of it reaches the listener; alice's
/// sandbox is given hers.
#[test]
fn a_project_s_always_answers_are_their_principal_s_and_never_given_to_another_token_s_sandbox() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return skip("egress interception is not available here");
    }
    let AskingProject { state, ws, d } = AskingProject::start("owner-grants");
    let scopes = ["sandboxes:read", "sandboxes:write", "exec", "approvals"];
    let alice_token = api_token(&d, "alice", &scopes, None);
    let alice = calls_as(&d, alice_token.clone());
    let bob = calls_as(&d, api_token(&d, "bob", &scopes, None));
    let up = crate::common::tcp::Holder::start();
    let entry = format!("asked.test:{}", up.port);
    let grants = format!("description: \"answers\"\ndomains: [\"{entry}\"]\n");
    // The file every sandbox over the project read: an answer of the
    // owner's, or one a token gave before answers were kept per owner.
    let shared = state.path().join("warden/grants");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join(grants_name(&ws)), &grants).unwrap();
    // Alice's own, where hers are kept now.
    let hers = state
        .path()
        .join("warden/token-grants")
        .join(token_dir(&alice_token))
        .join("grants");
    std::fs::create_dir_all(&hers).unwrap();
    std::fs::write(hers.join(grants_name(&ws)), &grants).unwrap();

    let create = |t: &Call<'_>, name: &str| {
        let body = format!(
            r#"{{"name":"{name}","profile":"asky","workspace":"{}"}}"#,
            ws.display()
        );
        let (s, b) = t("POST", "/v1/sandboxes", Some(&body));
        assert_eq!(s, 201, "{b}");
        std::fs::read_to_string(sandbox_dir(state.path(), name).join("sandbox.json")).unwrap()
    };
    let spec = create(&alice, "a1");
    assert!(spec.contains(&entry), "alice's answer is not hers: {spec}");
    let spec = create(&bob, "b1");
    assert!(
        !spec.contains(&entry),
        "bob's sandbox was given another's answer: {spec}"
    );
    // Bob's connection is asked about, and nothing of it arrives.
    let connect = connect_asked(up.port);
    let (s, b) = bob("POST", "/v1/sandboxes/b1/exec", Some(&connect));
    assert_eq!(s, 202, "{b}");
    let id = first_question_of(&bob, "bob's question");
    assert_eq!(up.arrivals(), 0, "bob's sandbox went through unasked");
    let (s, b) = bob(
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(r#"{"decision":"deny"}"#),
    );
    assert_eq!(s, 204, "{b}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(up.arrivals(), 0, "a denied connection arrived");
    let _ = alice("DELETE", "/v1/sandboxes/a1?force=true", None);
    let _ = bob("DELETE", "/v1/sandboxes/b1?force=true", None);
}

/// The sandboxes an E2B answer names, with the envd access token each
/// was answered with (a fork answers one entry per sandbox made).
fn answers(what: &str, s: u16, b: &str) -> Vec<(String, String)> {
    assert!(s == 200 || s == 201, "{what}: {s} {b}");
    let v = json(b);
    let one = |v: &serde_json::Value| {
        (
            v["sandboxID"].as_str().unwrap_or_default().to_string(),
            v["envdAccessToken"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    match v.as_array() {
        Some(list) => list.iter().map(|e| one(&e["sandbox"])).collect(),
        None => vec![one(&v)],
    }
}

/// Finding (review 16, 4): a sandbox the E2B door made from a snapshot of
/// a natively made sandbox (and an E2B fork of one) carried no E2B label,
/// and the door answered the caller's API key (`wdn_...`) as its
/// `envdAccessToken`: a "sandbox" credential that then created sandboxes
/// and listed all of the token's. Every answer of the door now carries a
/// key of the sandbox's own (`wde_...`), whatever made the sandbox:
/// create from a native snapshot, fork of a native sandbox, connect to
/// and look up a natively made one; none is the API key, and none
/// creates or lists sandboxes.
#[test]
fn the_e2b_door_answers_a_key_of_the_sandbox_s_own_and_never_the_caller_s_api_key() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("e2b-own-key");
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &addr], &[]);
    let key = api_token(
        &d,
        "e2b",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
        None,
    );
    let native = calls_as(&d, key.clone());
    let (s, b) = native(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"n1","ttl_seconds":600}"#),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = native(
        "POST",
        "/v1/sandboxes/n1/snapshots",
        Some(r#"{"name":"nsnap"}"#),
    );
    assert_eq!(s, 201, "{b}");

    let mut answered: Vec<(String, String)> = Vec::new();
    let mut take = |what: &str, s: u16, b: &str| answered.extend(answers(what, s, b));
    // Create from the native snapshot.
    let (s, b) = e2b_call(
        &addr,
        "POST",
        "/sandboxes",
        &key,
        Some(r#"{"templateID":"nsnap","timeout":600}"#),
    );
    let first = answers("create from a native snapshot", s, &b);
    let from_snap = first[0].0.clone();
    take("create from a native snapshot", s, &b);
    let (s, b) = e2b_call(
        &addr,
        "POST",
        &format!("/sandboxes/{from_snap}/connect"),
        &key,
        Some(r#"{"timeout":600}"#),
    );
    take("connect to it", s, &b);
    // Connect to, look up and fork the natively made sandbox.
    let (s, b) = e2b_call(
        &addr,
        "POST",
        "/sandboxes/n1/connect",
        &key,
        Some(r#"{"timeout":600}"#),
    );
    take("connect to a native sandbox", s, &b);
    let (s, b) = e2b_call(&addr, "GET", "/sandboxes/n1", &key, None);
    take("look up a native sandbox", s, &b);
    let (s, b) = e2b_call(&addr, "POST", "/sandboxes/n1/fork", &key, Some("{}"));
    take("fork a native sandbox", s, &b);

    assert!(answered.len() >= 5, "{answered:?}");
    for (id, k) in &answered {
        assert!(!id.is_empty(), "{answered:?}");
        assert_ne!(k, &key, "sandbox {id} was answered the caller's API key");
        assert!(k.starts_with("wde_"), "sandbox {id}: {k:?}");
        // The key is the sandbox's: it creates nothing and lists nothing.
        let (s, b) = e2b_call(
            &addr,
            "POST",
            "/sandboxes",
            k,
            Some(r#"{"templateID":"base","timeout":60}"#),
        );
        assert_eq!(s, 401, "sandbox {id}'s key created a sandbox: {b}");
        let (s, b) = e2b_call(&addr, "GET", "/v2/sandboxes", k, None);
        assert_eq!(s, 401, "sandbox {id}'s key listed sandboxes: {b}");
    }
    // One sandbox answers one key to one token: the connect repeats
    // the create's.
    assert_eq!(answered[0], answered[1]);
    // And it works where it is meant to: the sandbox's own calls.
    let (s, b) = exchange(
        "GET",
        &format!("http://{addr}/health"),
        &[
            ("x-access-token", answered[2].1.as_str()),
            ("e2b-sandbox-id", "n1"),
        ],
        None,
        &[],
    );
    assert!(
        s == 200 || s == 204,
        "the key of n1 is not taken for n1: {s} {b}"
    );
    let (s, b) = exchange(
        "GET",
        &format!("http://{addr}/health"),
        &[
            ("x-access-token", answered[2].1.as_str()),
            ("e2b-sandbox-id", from_snap.as_str()),
        ],
        None,
        &[],
    );
    assert_eq!(s, 401, "the key of n1 was taken for another sandbox: {b}");
    let mut ids: Vec<String> = answered.iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let _ = native("DELETE", &format!("/v1/sandboxes/{id}?force=true"), None);
    }
}

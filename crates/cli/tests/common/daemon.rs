//! A running `warden serve` for the tests that speak to it over real
//! HTTP (curl), on its owner-only socket or on TCP.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `warden serve`, killed when dropped (its sandboxes are
/// stopped through it first).
pub struct Daemon {
    pub child: Option<Child>,
    pub state: PathBuf,
    pub socket: PathBuf,
    pub tcp: Option<String>,
    /// The E2B-compatible listener's address, when `--e2b` was given.
    pub e2b: Option<String>,
}

impl Daemon {
    pub fn start(state: &Path, tcp: bool) -> Daemon {
        Daemon::start_with(state, tcp, &[], &[])
    }

    /// Started with `args` after `serve`, and `env` added to its
    /// environment (and its supervisors').
    pub fn start_with(state: &Path, tcp: bool, args: &[&str], env: &[(&str, &Path)]) -> Daemon {
        Daemon::start_in(None, state, tcp, args, env)
    }

    /// [`Daemon::start_with`], its working directory `cwd`.
    pub fn start_in(
        cwd: Option<&Path>,
        state: &Path,
        tcp: bool,
        args: &[&str],
        env: &[(&str, &Path)],
    ) -> Daemon {
        Daemon::launch(&[], cwd, state, tcp, args, env)
    }

    /// [`Daemon::start_with`], run by `launcher` (a program and its
    /// arguments, such as `prlimit --nofile=256`, given the daemon's
    /// command line after them).
    pub fn start_under(launcher: &[&str], state: &Path, tcp: bool, args: &[&str]) -> Daemon {
        Daemon::launch(launcher, None, state, tcp, args, &[])
    }

    fn launch(
        launcher: &[&str],
        cwd: Option<&Path>,
        state: &Path,
        tcp: bool,
        args: &[&str],
        env: &[(&str, &Path)],
    ) -> Daemon {
        let mut cmd = match launcher.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(warden_bin());
                c
            }
            None => Command::new(warden_bin()),
        };
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.arg("serve")
            .args(args)
            .env("WARDEN_STATE_DIR", state.join("warden"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if tcp {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = cmd.spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut tcp_addr = None;
        let mut e2b = None;
        let mut serving = false;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 || Instant::now() > deadline {
                panic!("the daemon did not start");
            }
            if let Some(rest) = line.split("E2B-compatible API on http://").nth(1) {
                e2b = Some(rest.split_whitespace().next().unwrap().to_string());
            } else if let Some(rest) = line.split("http://").nth(1) {
                tcp_addr = Some(rest.split_whitespace().next().unwrap().to_string());
            }
            serving |= line.contains("serving on");
            if serving && (e2b.is_some() || !args.contains(&"--e2b")) {
                break;
            }
        }
        // Its later messages are not read: keep the pipe drained.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while err.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
        Daemon {
            child: Some(child),
            state: state.to_path_buf(),
            socket: state.join("warden/daemon.sock"),
            tcp: tcp_addr,
            e2b,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Stop it as a service manager would (SIGTERM), and wait for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) with the PID of our own child and a signal.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
        // Whatever the test left running is stopped.
        if let Ok(rd) = std::fs::read_dir(self.state.join("warden/sandboxes")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let _ = warden(&self.state, &["stop", "--time", "1s", &name]);
            }
        }
    }
}

/// One HTTP exchange through curl: the status and the body.
pub fn call(
    d: &Daemon,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, String) {
    call_on(d, false, method, path, body, token)
}

pub fn call_on(
    d: &Daemon,
    tcp: bool,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-N", "-X", method, "-w", "\n%{http_code}"]);
    let url = if tcp {
        format!("http://{}{path}", d.tcp.as_ref().unwrap())
    } else {
        cmd.arg("--unix-socket").arg(&d.socket);
        format!("http://warden{path}")
    };
    if let Some(b) = body {
        cmd.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    if let Some(t) = token {
        cmd.args(["-H", &format!("authorization: Bearer {t}")]);
    }
    let out = cmd.arg(url).output().expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (status.trim().parse().unwrap_or(0), body.to_string())
}

/// One HTTP exchange with `url` through curl, bounded at 60 s: each header
/// as `name: value`, a JSON body if any, then `extra` curl arguments; the
/// status and the body.
/// The `api_denied` lines of the daemon's audit log that `pick` keeps.
pub fn denied(log: &std::path::Path, pick: impl Fn(&str) -> bool) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"api_denied\"") && pick(l))
        .map(str::to_string)
        .collect()
}

/// A sandbox made through the E2B door at `e2b` (its address) with the
/// API key `key`, from the base template with a 300 s timeout: the door's
/// answer (`sandboxID`, `envdAccessToken`, ...).
pub fn e2b_sandbox(e2b: &str, key: &str) -> serde_json::Value {
    let (s, body) = e2b_call(
        e2b,
        "POST",
        "/sandboxes",
        key,
        Some(r#"{"templateID":"base","timeout":300}"#),
    );
    assert!(s == 200 || s == 201, "{s} {body}");
    json(&body)
}

/// One exchange with the E2B door at `addr` (`path` on it), with the API
/// key `key`: status and body.
pub fn e2b_call(
    addr: &str,
    method: &str,
    path: &str,
    key: &str,
    body: Option<&str>,
) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    exchange(method, &url, &[("x-api-key", key)], body, &[])
}

/// A daemon over `state` with the E2B door on a port of its own, and a
/// token `e2b` that works there, with a sandbox of its own, `src` (not
/// started), and that sandbox's snapshot `src-snap`, a template to name:
/// the daemon, the door's address and the token.
pub fn e2b_door_with_a_snapshot(state: &Path) -> (Daemon, String, String) {
    let addr = format!("127.0.0.1:{}", super::free_port());
    let d = Daemon::start_with(state, true, &["--e2b", &addr], &[]);
    let t = api_token(
        &d,
        "e2b",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
        None,
    );
    let (s, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"src","start":false}"#,
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes/src/snapshots",
        r#"{"name":"src-snap"}"#,
    );
    assert_eq!(s, 201, "{b}");
    (d, addr, t)
}

/// [`e2b_sandbox`]: its id and its envd access token (empty when the
/// door gave none).
pub fn e2b_sandbox_ids(e2b: &str, key: &str) -> (String, String) {
    let made = e2b_sandbox(e2b, key);
    let id = made["sandboxID"].as_str().unwrap().to_string();
    let access = made["envdAccessToken"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (id, access)
}

/// A unary call `method` of the E2B door's filesystem service
/// (`/filesystem.Filesystem/METHOD`) on sandbox `id`, with its envd
/// access token and a JSON `body`: the status and body.
pub fn envd_files(e2b: &str, id: &str, access: &str, method: &str, body: &str) -> (u16, String) {
    exchange(
        "POST",
        &format!("http://{e2b}/filesystem.Filesystem/{method}"),
        &[("x-access-token", access), ("e2b-sandbox-id", id)],
        Some(body),
        &[],
    )
}

pub fn exchange(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    extra: &[&str],
) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "60",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ]);
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    if let Some(b) = body {
        cmd.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    let out = cmd.args(extra).arg(url).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (status.trim().parse().unwrap_or(0), body.to_string())
}

pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

pub fn curl_available() -> bool {
    Command::new("curl").arg("--version").output().is_ok()
}

/// One exchange through curl: status and body (bytes). `extra` are curl
/// arguments (e.g. `-T file`, `-o file`).
pub fn curl(d: &Daemon, method: &str, path: &str, extra: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "120",
            "-X",
            method,
            "-w",
            "\n%{http_code}",
        ])
        .arg("--unix-socket")
        .arg(&d.socket)
        .args(extra)
        .arg(format!("http://warden{path}"))
        .output()
        .expect("curl is installed");
    let text = out.stdout;
    let cut = text.iter().rposition(|b| *b == b'\n').unwrap_or(0);
    let status = String::from_utf8_lossy(&text[cut..])
        .trim()
        .parse()
        .unwrap_or(0);
    (status, text[..cut].to_vec())
}

/// One exchange over TCP at `addr` through curl, the answer's head and
/// all: status, headers (lower-cased names), body.
pub fn http_on(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-i", "--max-time", "60", "-X", method]);
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    if let Some(b) = body {
        cmd.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    let out = cmd
        .arg(format!("http://{addr}{path}"))
        .output()
        .expect("curl is installed");
    answer_of(&out.stdout)
}

/// An HTTP answer as `curl -i` prints it, read: status, headers
/// (lower-cased names), body.
pub fn answer_of(printed: &[u8]) -> (u16, Vec<(String, String)>, String) {
    let text = String::from_utf8_lossy(printed).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

/// A header of an [`http_on`] answer, by its lower-cased name.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// One request to the daemon's `/mcp` on a connection of its own, as a
/// client speaking HTTP by hand: `token` as its bearer, `headers` (whole
/// lines, each ending in CRLF) and `body`. What came back, read until
/// `enough` says it is, the connection closes, or `wait` passes with
/// nothing more.
pub fn mcp_raw(
    addr: &str,
    method: &str,
    token: &str,
    headers: &str,
    body: &str,
    wait: Duration,
    enough: impl Fn(&[u8]) -> bool,
) -> String {
    use std::io::{Read, Write};
    let req = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n{headers}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !enough(&got) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The status code of an HTTP answer's text (0 when it has none).
pub fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The names of the sandboxes on disk in state directory `state` (pooled
/// ones included, which no listing shows).
pub fn sandboxes_on_disk(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("warden/sandboxes"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The names of the pooled sandboxes (made ahead by `--pool`, named
/// `sb-...` until claimed) on disk in state directory `state`.
pub fn pooled_on_disk(state: &Path) -> Vec<String> {
    sandboxes_on_disk(state)
        .into_iter()
        .filter(|n| n.starts_with("sb-"))
        .collect()
}

/// A token that reads, makes and runs commands in sandboxes, with at
/// most `max` sandboxes at once.
pub fn quota_token(state: &Path, name: &str, max: &str) -> String {
    token_with(state, name, WORKER_SCOPES, &["--max-sandboxes", max])
}

pub fn json_call(d: &Daemon, method: &str, path: &str, body: &str) -> (u16, String) {
    let (s, b) = curl(
        d,
        method,
        path,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
        ],
    );
    (s, String::from_utf8_lossy(&b).into_owned())
}

/// The scopes of a token that makes sandboxes, runs commands in them and
/// saves or copies them.
pub const WORKER_SCOPES: &[&str] = &["sandboxes:read", "sandboxes:write", "exec"];

/// Calls over the daemon's TCP listener as `token`: `(method, path, body)`
/// to `(status, body)`.
pub fn calls_as(
    d: &Daemon,
    token: String,
) -> impl Fn(&str, &str, Option<&str>) -> (u16, String) + Sync + '_ {
    move |method, path, body| call_on(d, true, method, path, body, Some(&token))
}

/// A JSON call over the daemon's TCP listener with token `t`: the status
/// and the body read as JSON (`null` when it is not).
pub fn json_as(
    d: &Daemon,
    t: &str,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, serde_json::Value) {
    let url = format!("http://{}{path}", d.tcp.as_ref().unwrap());
    let bearer = format!("Bearer {t}");
    let (s, b) = exchange(
        method,
        &url,
        &[("authorization", &bearer)],
        None,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
        ],
    );
    (
        s,
        serde_json::from_str(&b).unwrap_or(serde_json::Value::Null),
    )
}

/// `script` run whole in sandbox `id` by token `t` over TCP: it must be
/// answered 200 and exit 0; the answer.
pub fn shell_as(d: &Daemon, t: &str, id: &str, script: &str) -> serde_json::Value {
    let body = serde_json::json!({ "shell": script }).to_string();
    let (s, r) = json_as(d, t, "POST", &format!("/v1/sandboxes/{id}/exec"), &body);
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["exit_status"], 0, "{script}: {r}");
    r
}

/// Sandbox `id` stopped by token `t` over TCP: the stop must succeed.
pub fn stop_as(d: &Daemon, t: &str, id: &str) {
    let (s, b) = json_as(d, t, "POST", &format!("/v1/sandboxes/{id}/stop"), "{}");
    assert!(s < 300, "{s} {b}");
}

/// Each change's path and the rules of its flags, from a review's JSON
/// (the API's `{"changes": [...]}` or `warden diff --json`'s list).
pub fn flag_rules(changes: &serde_json::Value) -> Vec<(String, Vec<String>)> {
    changes["changes"]
        .as_array()
        .or(changes.as_array())
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let rules = c["flags"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|f| f["rule"].as_str().unwrap_or_default().to_string())
                .collect();
            (c["path"].as_str().unwrap_or_default().to_string(), rules)
        })
        .collect()
}

/// Calls through the daemon's E2B door as the API key `key`: `(method,
/// path, body)` to `(status, body)`.
pub fn e2b_calls_as(
    d: &Daemon,
    key: String,
) -> impl Fn(&str, &str, Option<&str>) -> (u16, String) + Sync + '_ {
    let door = format!("http://{}", d.e2b.as_ref().unwrap());
    move |method, path, body| {
        exchange(
            method,
            &format!("{door}{path}"),
            &[("x-api-key", key.as_str())],
            body,
            &[],
        )
    }
}

/// A daemon over TCP (with `args` besides, and `env`) in a new state
/// directory `tag`, its configuration file holding `config`; `None`, the
/// reason printed, without curl.
pub fn with_config(
    tag: &str,
    config: &str,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Option<(TempDir, Daemon)> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new(tag);
    let file = state.path().join("daemon.yaml");
    std::fs::write(&file, config).unwrap();
    let mut all = vec!["--config", file.to_str().unwrap()];
    all.extend_from_slice(args);
    let d = Daemon::start_with(state.path(), true, &all, env);
    Some((state, d))
}

/// A daemon over TCP with the E2B door in `state`, whose tokens may keep
/// `disk` of disk, and an owner's profile `small` (a template for E2B) of
/// an 8M disk budget; its catalogue is `STATE/config`.
pub fn with_small_template(state: &Path, disk: &str) -> Daemon {
    let config = state.join("config");
    std::fs::create_dir_all(config.join("warden/profiles")).unwrap();
    std::fs::write(
        config.join("warden/profiles/small.yaml"),
        "resources:\n  disk: 8M\n",
    )
    .unwrap();
    let file = state.join("daemon.yaml");
    std::fs::write(&file, format!("quotas:\n  disk: {disk}\n")).unwrap();
    let e2b = format!("127.0.0.1:{}", free_port());
    Daemon::start_with(
        state,
        true,
        &["--config", file.to_str().unwrap(), "--e2b", &e2b],
        &[("XDG_CONFIG_HOME", &config)],
    )
}

/// A daemon over TCP in a new state directory `tag`; `None`, the reason
/// printed, without curl.
pub fn over_tcp(tag: &str) -> Option<(TempDir, Daemon)> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new(tag);
    let d = Daemon::start(state.path(), true);
    Some((state, d))
}

/// A daemon on its owner-only socket alone (no TCP listener) in a new
/// state directory `tag`; `None`, the reason printed, without curl.
pub fn on_socket(tag: &str) -> Option<(TempDir, Daemon)> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new(tag);
    let d = Daemon::start(state.path(), false);
    Some((state, d))
}

/// [`with_config`], with supervisors that serve `bound` connections
/// (`WARDEN_TEST_SUPERVISOR_CONNECTIONS`).
pub fn with_supervisor_bound(
    tag: &str,
    config: &str,
    bound: usize,
    args: &[&str],
) -> Option<(TempDir, Daemon)> {
    let bound = bound.to_string();
    with_config(
        tag,
        config,
        args,
        &[("WARDEN_TEST_SUPERVISOR_CONNECTIONS", Path::new(&bound))],
    )
}

/// A token `name` made by the owner with [`WORKER_SCOPES`], and its
/// sandbox `sandbox`, made by it over TCP: the token.
pub fn worker_with_sandbox(d: &Daemon, name: &str, sandbox: &str) -> String {
    let token = api_token(d, name, WORKER_SCOPES, None);
    let body = format!(r#"{{"name":"{sandbox}"}}"#);
    let (s, b) = call_on(d, true, "POST", "/v1/sandboxes", Some(&body), Some(&token));
    assert_eq!(s, 201, "{b}");
    token
}

/// Make sandbox `name` with a disk budget of `disk` through `t`.
pub fn with_disk(t: &impl Fn(&str, &str, Option<&str>) -> (u16, String), name: &str, disk: &str) {
    let spec = format!(r#"{{"name":"{name}","spec":{{"resources":{{"disk":"{disk}"}}}}}}"#);
    let (s, b) = t("POST", "/v1/sandboxes", Some(&spec));
    assert_eq!(s, 201, "{b}");
}

/// Make sandbox `name` (with `disk`) through `t` and give it a layer whose
/// copy takes a while: 4,000 small files and `mb` MB of random bytes, the
/// window a race against a snapshot or a create falls in.
pub fn slow_to_copy(
    t: &impl Fn(&str, &str, Option<&str>) -> (u16, String),
    name: &str,
    disk: &str,
    mb: u32,
) {
    with_disk(t, name, disk);
    let fill = format!(
        r#"{{"shell":"mkdir -p /workspace/many && cd /workspace/many && for d in $(seq 1 8); do mkdir $d; for f in $(seq 1 500); do echo x > $d/$f; done; done; head -c {mb}000000 /dev/urandom > /workspace/big"}}"#
    );
    let (s, b) = t("POST", &format!("/v1/sandboxes/{name}/exec"), Some(&fill));
    assert_eq!(s, 200, "{b}");
}

/// A token `name` made by the owner with [`WORKER_SCOPES`], as
/// [`calls_as`].
pub fn worker<'a>(
    d: &'a Daemon,
    name: &str,
) -> impl Fn(&str, &str, Option<&str>) -> (u16, String) + Sync + 'a {
    calls_as(d, api_token(d, name, WORKER_SCOPES, None))
}

/// A token made by the owner through the API (`POST /v1/tokens`), for
/// `sandbox` only when it names one: the token.
pub fn api_token(d: &Daemon, name: &str, scopes: &[&str], sandbox: Option<&str>) -> String {
    let mut body = serde_json::json!({ "name": name, "scopes": scopes });
    if let Some(sb) = sandbox {
        body["sandbox"] = sb.into();
    }
    let (s, b) = call(d, "POST", "/v1/tokens", Some(&body.to_string()), None);
    assert_eq!(s, 201, "{b}");
    json(&b)["token"].as_str().unwrap().to_string()
}

/// `warden token create NAME --scope S...` on the state of [`warden`] (a
/// daemon's `state`): the token (the last line it prints).
pub fn token(state: &Path, name: &str, scopes: &[&str]) -> String {
    create_token(state, name, scopes, None)
}

/// [`token`], for one sandbox only (`--sandbox SANDBOX`).
pub fn token_for(state: &Path, name: &str, scopes: &[&str], sandbox: &str) -> String {
    create_token(state, name, scopes, Some(sandbox))
}

fn create_token(state: &Path, name: &str, scopes: &[&str], sandbox: Option<&str>) -> String {
    match sandbox {
        Some(sb) => token_with(state, name, scopes, &["--sandbox", sb]),
        None => token_with(state, name, scopes, &[]),
    }
}

/// [`token`], with the flags `extra` besides (`--max-pids 10`, ...).
pub fn token_with(state: &Path, name: &str, scopes: &[&str], extra: &[&str]) -> String {
    let mut args = vec!["token", "create", name];
    for s in scopes {
        args.extend(["--scope", s]);
    }
    args.extend_from_slice(extra);
    ok(&warden(state, &args))
        .trim()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// `p` percent-encoded for a query string (`/` kept).
pub fn q(p: &str) -> String {
    let mut out = String::new();
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

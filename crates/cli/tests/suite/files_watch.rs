//! The files watch of `warden serve` (`GET .../files/watch`) through real
//! HTTP: changes made inside the sandbox arrive as they happen, with
//! paths relative to the workspace; links planted in the workspace
//! towards a real host directory (bound read-write into the sandbox, so
//! that a walk that followed them would see its changes) are never
//! entered, and changes made there, from the host or through the links,
//! are never reported; the daemon holds at most its share of the user's
//! inotify instances.

use crate::common::daemon::{curl, curl_available, json_call, q, Daemon};
use crate::common::*;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Run a shell script in the sandbox (as its own processes would): its
/// standard output.
fn sh(d: &Daemon, script: &str) -> String {
    let body = serde_json::json!({ "shell": script }).to_string();
    let (s, b) = json_call(d, "POST", "/v1/sandboxes/f/exec", &body);
    assert_eq!(s, 200, "{b}");
    let r: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(r["exit_status"], 0, "{script}: {r}");
    r["stdout"].as_str().unwrap_or("").to_string()
}

/// A daemon with one running sandbox whose workspace is `ws`, and a host
/// directory `secret` (bound read-write at the same path inside) holding
/// `marker.txt`.
struct Setup {
    // Dropped first: the sandbox is stopped while its state is still there.
    d: Daemon,
    _dir: TempDir,
    secret: PathBuf,
    marker: String,
}

fn setup(tag: &str) -> Option<Setup> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let dir = TempDir::new(tag);
    let ws = dir.path().join("ws");
    let secret = dir.path().join("secret");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&secret).unwrap();
    let marker = unique("HOST-MARKER");
    std::fs::write(secret.join("marker.txt"), &marker).unwrap();
    let d = Daemon::start(dir.path(), false);
    let body = format!(
        r#"{{"name":"f","spec":{{"filesystem":{{"workspace":"{}","read_write":["{}"]}}}}}}"#,
        ws.display(),
        secret.display()
    );
    let (s, b) = json_call(&d, "POST", "/v1/sandboxes", &body);
    assert_eq!(s, 201, "{b}");
    Some(Setup {
        d,
        _dir: dir,
        secret,
        marker,
    })
}

/// A `GET .../files/watch` stream read as it comes (curl -N); the changes
/// it sent, once it said it is `ready`.
struct Watch {
    child: Child,
    rx: std::sync::mpsc::Receiver<serde_json::Value>,
    seen: Vec<serde_json::Value>,
}

impl Watch {
    fn open(d: &Daemon, query: &str) -> Watch {
        let mut child = Command::new("curl")
            .args(["-sS", "-N", "--unix-socket"])
            .arg(&d.socket)
            .arg(format!("http://warden/v1/sandboxes/f/files/watch?{query}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("curl is installed");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Some(data) = line.strip_prefix("data: ").or(line.strip_prefix("data:")) {
                    if let Ok(v) = serde_json::from_str(data) {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut w = Watch {
            child,
            rx,
            seen: Vec::new(),
        };
        w.until(|e| e["type"] == "ready");
        w.seen.clear();
        w
    }

    /// Read until a change matches `f` (at most 20 s); that change.
    fn until(&mut self, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(e) => {
                    self.seen.push(e.clone());
                    if f(&e) {
                        return e;
                    }
                }
                Err(_) => panic!("no such change came; these did: {:?}", self.seen),
            }
        }
    }

    fn saw(&mut self, kind: &str, path: &str) -> serde_json::Value {
        self.until(|e| e["type"] == kind && e["path"] == path)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn changes_made_in_the_sandbox_arrive_as_they_happen() {
    let Some(t) = setup("fw-changes") else { return };
    let mut all = Watch::open(&t.d, "recursive=true");
    let mut top = Watch::open(&t.d, "path=/workspace");
    sh(&t.d, "echo a > /workspace/f.txt");
    assert_eq!(all.saw("created", "f.txt")["kind"], "file");
    top.saw("created", "f.txt");
    sh(&t.d, "echo b >> /workspace/f.txt");
    all.saw("modified", "f.txt");
    sh(&t.d, "mkdir -p /workspace/d/e && echo x > /workspace/d/e/g");
    assert_eq!(all.saw("created", "d")["kind"], "dir");
    all.saw("created", "d/e/g");
    sh(&t.d, "echo y >> /workspace/d/e/g");
    all.saw("modified", "d/e/g");
    sh(&t.d, "mv /workspace/f.txt /workspace/d/h.txt");
    let moved = all.until(|e| e["type"] == "moved");
    assert_eq!(
        (moved["from"].as_str(), moved["path"].as_str()),
        (Some("f.txt"), Some("d/h.txt"))
    );
    sh(
        &t.d,
        "mv /workspace/d /workspace/d2 && echo z > /workspace/d2/e/after",
    );
    all.until(|e| e["type"] == "moved" && e["from"] == "d" && e["path"] == "d2");
    // A directory moved is followed at its new place.
    all.saw("created", "d2/e/after");
    sh(&t.d, "rm /workspace/d2/h.txt && rm -r /workspace/d2/e");
    all.saw("removed", "d2/h.txt");
    all.saw("removed", "d2/e");
    // Without `recursive`, what happens below is not reported.
    sh(
        &t.d,
        "echo q > /workspace/d2/deep && echo r > /workspace/top",
    );
    top.saw("created", "top");
    assert!(
        !top.seen.iter().any(|e| e["path"] == "d2/deep"),
        "{:?}",
        top.seen
    );
    // A watch of one directory names paths from the workspace.
    let mut sub = Watch::open(&t.d, "path=d2&recursive=true");
    sh(&t.d, "echo s > /workspace/d2/new");
    sub.saw("created", "d2/new");
}

#[test]
fn a_watch_never_reaches_outside_the_workspace() {
    let Some(t) = setup("fw-escape") else { return };
    let secret = t.secret.display().to_string();
    sh(
        &t.d,
        &format!("ln -s {secret} /workspace/link && mkdir /workspace/sub && ln -s {secret} /workspace/sub/l2 && ln -s /proc/self/root/{secret} /workspace/magic"),
    );
    // A path that leaves the workspace, or goes through a link: 400, and
    // nothing is watched.
    for p in [
        "link",
        "sub/l2",
        "magic",
        "..",
        "sub/../..",
        &secret,
        "/etc",
        "/workspace/../etc",
    ] {
        let (s, b) = curl(
            &t.d,
            "GET",
            &format!("/v1/sandboxes/f/files/watch?path={}", q(p)),
            &["--max-time", "5"],
        );
        assert_eq!(s, 400, "{p}: {}", String::from_utf8_lossy(&b));
    }
    let mut w = Watch::open(&t.d, "recursive=true");
    // Changes in the host directory the links point to, from the host and
    // from inside the sandbox through the link, are not the workspace's.
    std::fs::write(t.secret.join("from-host.txt"), "h").unwrap();
    std::fs::write(t.secret.join("marker.txt"), &t.marker).unwrap();
    std::fs::create_dir(t.secret.join("hostdir")).unwrap();
    std::fs::write(t.secret.join("hostdir/deeper"), "h").unwrap();
    sh(
        &t.d,
        "echo in > /workspace/link/through-link; echo in > /workspace/sub/l2/through-l2",
    );
    sh(&t.d, "echo done > /workspace/done");
    w.saw("created", "done");
    for e in &w.seen {
        let path = e["path"].as_str().unwrap_or("");
        assert!(
            ![
                "link/",
                "sub/l2/",
                "magic/",
                "from-host",
                "marker",
                "hostdir",
                "through-"
            ]
            .iter()
            .any(|bad| path.contains(bad)),
            "a change outside the workspace was reported: {e}"
        );
    }
    // The links themselves are the workspace's own entries.
    sh(&t.d, "rm /workspace/link");
    w.saw("removed", "link");
}

/// The inotify instances process `pid` holds.
fn inotify_instances(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("inotify"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn watches_cannot_take_every_inotify_instance_of_the_daemons_user() {
    let Some(t) = setup("fw-many") else { return };
    let mut open: Vec<Watch> = (0..32).map(|_| Watch::open(&t.d, "path=")).collect();
    assert_eq!(inotify_instances(t.d.pid()), 32);
    let (s, b) = curl(
        &t.d,
        "GET",
        "/v1/sandboxes/f/files/watch",
        &["--max-time", "5"],
    );
    assert_eq!(s, 429, "{}", String::from_utf8_lossy(&b));
    assert_eq!(inotify_instances(t.d.pid()), 32);
    // A watch that ends gives its place back.
    drop(open.pop());
    wait_until("the closed watch to go", Duration::from_secs(10), || {
        inotify_instances(t.d.pid()) == 31
    });
    open.push(Watch::open(&t.d, "path="));
    drop(open);
    wait_until("every watch to go", Duration::from_secs(10), || {
        inotify_instances(t.d.pid()) == 0
    });
}

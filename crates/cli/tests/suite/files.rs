//! The files API of `warden serve` through real HTTP (curl on the owner's
//! socket): bytes in and out unchanged and streamed, listing, mkdir, move,
//! delete, and the escapes: `..`, absolute paths elsewhere, links planted
//! in the workspace towards a real host file that holds a marker (bound
//! read-write into the sandbox, so that a resolution that followed the
//! link would reach it), chains of links, /proc/self/root, a FIFO, and a
//! link swapped in while requests run. The marker must never come back
//! and the file must never change.
//!
//! The files watch (`GET .../files/watch`): changes made inside the
//! sandbox arrive as they happen, with paths relative to the workspace;
//! links planted in the workspace towards a real host directory (bound
//! read-write into the sandbox, so that a walk that followed them would
//! see its changes) are never entered, and changes made there, from the
//! host or through the links, are never reported; the daemon holds at most
//! its share of the user's inotify instances.

use crate::common::daemon::{curl, curl_available, json_call, q, Daemon};
use crate::common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn files(id: &str, path: &str) -> String {
    format!("/v1/sandboxes/{id}/files?path={}", q(path))
}

fn put(d: &Daemon, id: &str, path: &str, data: &[u8], scratch: &Path) -> (u16, String) {
    let src = scratch.join(unique("up"));
    std::fs::write(&src, data).unwrap();
    let (s, b) = curl(d, "PUT", &files(id, path), &["-T", src.to_str().unwrap()]);
    let _ = std::fs::remove_file(&src);
    (s, String::from_utf8_lossy(&b).into_owned())
}

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
    dir: TempDir,
    ws: PathBuf,
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
        dir,
        ws,
        secret,
        marker,
    })
}

impl Setup {
    fn marker_intact(&self) {
        assert_eq!(
            std::fs::read_to_string(self.secret.join("marker.txt")).unwrap(),
            self.marker,
            "the host file was changed through the files API"
        );
        let names: Vec<_> = std::fs::read_dir(&self.secret)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            names.len(),
            1,
            "something was made in the host directory: {names:?}"
        );
    }

    fn refused(&self, method: &str, path: &str) {
        let (s, b) = match method {
            "PUT" => put(&self.d, "f", path, b"overwritten", self.dir.path()),
            m => {
                let (s, b) = curl(&self.d, m, &files("f", path), &[]);
                (s, String::from_utf8_lossy(&b).into_owned())
            }
        };
        assert_eq!(s, 400, "{method} {path}: {b}");
        assert!(
            !b.contains(&self.marker),
            "{method} {path} returned the marker"
        );
        self.marker_intact();
    }
}

#[test]
fn every_byte_value_comes_back_as_it_went_in() {
    let Some(t) = setup("fa-bin") else { return };
    let data: Vec<u8> = (0..4096).map(|i| (i % 256) as u8).collect();
    let (s, b) = put(&t.d, "f", "bin/all", &data, t.dir.path());
    assert_eq!(s, 404, "no parent yet: {b}");
    let (s, b) = json_call(
        &t.d,
        "POST",
        "/v1/sandboxes/f/files/mkdir",
        r#"{"path":"bin/deep/er"}"#,
    );
    assert_eq!(s, 204, "{b}");
    let (s, b) = put(&t.d, "f", "/workspace/bin/all", &data, t.dir.path());
    assert_eq!(s, 204, "{b}");
    let (s, got) = curl(&t.d, "GET", &files("f", "bin/all"), &[]);
    assert_eq!(s, 200);
    assert_eq!(got, data);
    assert_eq!(
        sh(
            &t.d,
            "od -An -tx1 /workspace/bin/all | tr -d ' \\n' | md5sum"
        ),
        sh(
            &t.d,
            &format!(
                "printf '%s' {} | md5sum",
                data.iter().map(|b| format!("{b:02x}")).collect::<String>()
            )
        )
    );
    // Replaced whole, with the mode asked for.
    let (s, b) = curl(
        &t.d,
        "PUT",
        &format!("{}&mode=0600", files("f", "bin/all")),
        &["--data-binary", "short"],
    );
    assert_eq!(s, 204, "{b:?}");
    let (_, got) = curl(&t.d, "GET", &files("f", "bin/all"), &[]);
    assert_eq!(got, b"short");
    assert_eq!(sh(&t.d, "stat -c %a /workspace/bin/all").trim(), "600");
    let (s, _) = curl(&t.d, "GET", &files("f", "bin/missing"), &[]);
    assert_eq!(s, 404);
    let (s, _) = curl(&t.d, "GET", &files("f", "bin"), &[]);
    assert_eq!(s, 400, "a directory is not read as a file");
    let (s, _) = curl(
        &t.d,
        "PUT",
        &format!("{}&mode=4755", files("f", "x")),
        &["--data-binary", "x"],
    );
    assert_eq!(s, 400, "a setuid mode is refused");
}

#[test]
fn many_small_files_are_listed_moved_and_removed() {
    let Some(t) = setup("fa-many") else { return };
    let (s, _) = json_call(
        &t.d,
        "POST",
        "/v1/sandboxes/f/files/mkdir",
        r#"{"path":"many"}"#,
    );
    assert_eq!(s, 204);
    for i in 0..100 {
        let (s, b) = put(
            &t.d,
            "f",
            &format!("many/f{i:03}"),
            format!("n{i}").as_bytes(),
            t.dir.path(),
        );
        assert_eq!(s, 204, "{b}");
    }
    let (s, b) = curl(&t.d, "GET", "/v1/sandboxes/f/files/list?path=many", &[]);
    assert_eq!(s, 200);
    let list: serde_json::Value = serde_json::from_slice(&b).unwrap();
    let entries = list["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 100, "no upload leftovers: {list}");
    assert_eq!(entries[7]["name"], "f007");
    assert_eq!(entries[7]["path"], "many/f007");
    assert_eq!(entries[7]["kind"], "file");
    assert_eq!(entries[7]["size"], 2);
    assert!(entries[7]["modified_ms"].as_u64().unwrap() > 0);
    let (s, b) = json_call(
        &t.d,
        "POST",
        "/v1/sandboxes/f/files/move",
        r#"{"from":"many/f001","to":"moved"}"#,
    );
    assert_eq!(s, 204, "{b}");
    assert_eq!(sh(&t.d, "cat /workspace/moved"), "n1");
    let (s, _) = curl(&t.d, "DELETE", &files("f", "moved"), &[]);
    assert_eq!(s, 204);
    assert_eq!(sh(&t.d, "ls /workspace"), "many\n");
    let (s, b) = curl(&t.d, "DELETE", &files("f", "many"), &[]);
    assert_eq!(s, 409, "not empty: {}", String::from_utf8_lossy(&b));
    let (s, _) = curl(
        &t.d,
        "DELETE",
        &format!("{}&recursive=true", files("f", "many")),
        &[],
    );
    assert_eq!(s, 204);
    assert_eq!(sh(&t.d, "ls /workspace"), "");
    let (s, b) = curl(&t.d, "GET", "/v1/sandboxes/f/files/list", &[]);
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
}

#[test]
fn a_hundred_megabytes_stream_both_ways_without_the_daemon_holding_them() {
    let Some(t) = setup("fa-big") else { return };
    let src = t.dir.path().join("big.src");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&src).unwrap());
        let block: Vec<u8> = (0..1 << 20)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect();
        for i in 0..100u8 {
            let mut b = block.clone();
            b[0] = i;
            f.write_all(&b).unwrap();
        }
    }
    // Warm up, then measure the peak around both transfers.
    let _ = put(&t.d, "f", "warm", b"x", t.dir.path());
    let before = status_kib(t.d.pid(), "VmHWM").unwrap();
    let (s, b) = curl(
        &t.d,
        "PUT",
        &files("f", "big"),
        &["-T", src.to_str().unwrap()],
    );
    assert_eq!(s, 204, "{}", String::from_utf8_lossy(&b));
    let out = t.dir.path().join("big.out");
    let (s, _) = curl(
        &t.d,
        "GET",
        &files("f", "big"),
        &["-o", out.to_str().unwrap()],
    );
    assert_eq!(s, 200);
    let grown = status_kib(t.d.pid(), "VmHWM")
        .unwrap()
        .saturating_sub(before);
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 100 << 20);
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap(),
        "the 100 MB came back changed"
    );
    assert!(
        grown < 40 * 1024,
        "the daemon's peak memory grew by {grown} kB"
    );
}

#[test]
fn paths_that_leave_the_workspace_are_refused() {
    let Some(t) = setup("fa-dots") else { return };
    // Up from /workspace to the root, then down to the host file (which
    // the sandbox sees at the same path).
    let up = format!("..{}", t.secret.join("marker.txt").display());
    for m in ["GET", "PUT", "DELETE"] {
        t.refused(m, &up);
        t.refused(m, "../secret/marker.txt");
        t.refused(m, "/workspace/../secret/marker.txt");
        t.refused(m, t.secret.join("marker.txt").to_str().unwrap());
        t.refused(m, "/etc/passwd");
    }
    let (s, _) = curl(&t.d, "GET", "/v1/sandboxes/f/files/list?path=..", &[]);
    assert_eq!(s, 400);
    let (s, _) = json_call(
        &t.d,
        "POST",
        "/v1/sandboxes/f/files/move",
        r#"{"from":"../secret/marker.txt","to":"stolen"}"#,
    );
    assert_eq!(s, 400);
    let (s, _) = json_call(
        &t.d,
        "POST",
        "/v1/sandboxes/f/files/mkdir",
        r#"{"path":"../secret/made"}"#,
    );
    assert_eq!(s, 400);
    t.marker_intact();
}

#[test]
fn links_planted_in_the_workspace_lead_nowhere() {
    let Some(t) = setup("fa-links") else { return };
    let target = t.secret.join("marker.txt");
    // To the file, through a chain, to its directory, through the magic
    // link of /proc, to the host's own path of the workspace.
    // Planted by the sandbox's own processes; the target is reachable
    // inside (bound read-write), so a resolution that followed a link
    // would reach it.
    let (target, secret, host_ws) = (target.display(), t.secret.display(), t.ws.display());
    assert_eq!(sh(&t.d, &format!("cat {target}")), t.marker);
    sh(
        &t.d,
        &format!(
            "cd /workspace && ln -s {target} leak && ln -s leak chain2 && ln -s chain2 chain1 \
             && ln -s {secret} dir && ln -s /proc/self/root{target} proc \
             && ln -s /proc/self/root{secret} procdir && ln -s /workspace self \
             && ln -s {host_ws} hostws && echo plain > plain"
        ),
    );
    for p in [
        "leak",
        "chain1",
        "dir/marker.txt",
        "proc",
        "procdir/marker.txt",
        "self/plain",
        "hostws/plain",
    ] {
        t.refused("GET", p);
        t.refused("PUT", p);
    }
    t.refused("PUT", "dir/new");
    t.refused("DELETE", "dir/marker.txt");
    let (s, _) = curl(&t.d, "GET", "/v1/sandboxes/f/files/list?path=dir", &[]);
    assert_eq!(s, 400);
    let (s, _) = json_call(
        &t.d,
        "POST",
        "/v1/sandboxes/f/files/move",
        r#"{"from":"dir/marker.txt","to":"stolen"}"#,
    );
    assert_eq!(s, 400);
    let (s, _) = json_call(
        &t.d,
        "POST",
        "/v1/sandboxes/f/files/move",
        r#"{"from":"plain","to":"dir/planted"}"#,
    );
    assert_eq!(s, 400);
    let (s, _) = json_call(
        &t.d,
        "POST",
        "/v1/sandboxes/f/files/mkdir",
        r#"{"path":"dir/made/deep"}"#,
    );
    assert_eq!(s, 400);
    t.marker_intact();
    // The links themselves are still listed as links, not followed.
    let (_, b) = curl(&t.d, "GET", "/v1/sandboxes/f/files/list", &[]);
    let text = String::from_utf8_lossy(&b);
    assert!(!text.contains(&t.marker));
    let list: serde_json::Value = serde_json::from_slice(&b).unwrap();
    let leak = list["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "leak")
        .unwrap();
    assert_eq!(leak["kind"], "symlink");
    // A recursive removal of a tree with a link to the host directory
    // removes the link, not what it points to.
    sh(
        &t.d,
        &format!("mkdir /workspace/tree && ln -s {secret} /workspace/tree/out"),
    );
    let (s, _) = curl(
        &t.d,
        "DELETE",
        &format!("{}&recursive=true", files("f", "tree")),
        &[],
    );
    assert_eq!(s, 204);
    t.marker_intact();
}

#[test]
fn a_fifo_is_refused_at_once_instead_of_hanging() {
    let Some(t) = setup("fa-fifo") else { return };
    sh(&t.d, "mkfifo /workspace/fifo");
    let start = Instant::now();
    let (s, b) = curl(&t.d, "GET", &files("f", "fifo"), &["--max-time", "5"]);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(s, 400, "{}", String::from_utf8_lossy(&b));
    // The sandbox still answers.
    let (s, _) = curl(&t.d, "GET", "/v1/sandboxes/f/files/list", &[]);
    assert_eq!(s, 200);
}

#[test]
fn a_link_swapped_in_during_requests_never_leaks() {
    let Some(t) = setup("fa-race") else { return };
    // Inside, a process swaps a directory of the workspace and a link to
    // the host directory under one name, as fast as it can.
    sh(
        &t.d,
        &format!(
            "cd /workspace && mkdir race && echo benign > race/marker.txt && ln -s {} race.link",
            t.secret.display()
        ),
    );
    let body = serde_json::json!({
        "shell": "cd /workspace; while :; do mv -T race race.dir; mv -T race.link race; mv -T race race.link; mv -T race.dir race; done",
        "background": true,
    })
    .to_string();
    let (s, b) = json_call(&t.d, "POST", "/v1/sandboxes/f/exec", &body);
    assert_eq!(s, 202, "{b}");
    let mut benign = 0;
    for _ in 0..150 {
        let (s, b) = curl(&t.d, "GET", &files("f", "race/marker.txt"), &[]);
        assert!(
            !String::from_utf8_lossy(&b).contains(&t.marker),
            "the swapped-in link was followed"
        );
        if s == 200 {
            benign += 1;
        }
        let (_, b) = put(&t.d, "f", "race/marker.txt", b"benign", t.dir.path());
        assert!(!b.contains(&t.marker));
        t.marker_intact();
    }
    eprintln!("{benign} of 150 reads found the directory");
}

#[test]
fn a_file_over_the_limit_is_refused_before_anything_is_written() {
    let Some(t) = setup("fa-limit") else { return };
    let (s, b) = curl(
        &t.d,
        "PUT",
        &files("f", "huge"),
        &[
            "-H",
            "content-length: 2147483648",
            "--data-binary",
            "x",
            "--max-time",
            "10",
        ],
    );
    assert_eq!(s, 413, "{}", String::from_utf8_lossy(&b));
    let (_, b) = curl(&t.d, "GET", "/v1/sandboxes/f/files/list", &[]);
    let list: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(list["entries"], serde_json::json!([]), "nothing made");
}

// --- The files watch -----------------------------------------------------------

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

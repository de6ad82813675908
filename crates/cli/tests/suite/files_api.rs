//! The files API of `warden serve` through real HTTP (curl on the owner's
//! socket): bytes in and out unchanged and streamed, listing, mkdir, move,
//! delete, and the escapes: `..`, absolute paths elsewhere, links planted
//! in the workspace towards a real host file that holds a marker (bound
//! read-write into the sandbox, so that a resolution that followed the
//! link would reach it), chains of links, /proc/self/root, a FIFO, and a
//! link swapped in while requests run. The marker must never come back
//! and the file must never change.

use crate::common::daemon::{curl, curl_available, json_call, q, Daemon};
use crate::common::*;
use std::path::{Path, PathBuf};
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

fn status_kb(pid: i32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
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
    let before = status_kb(t.d.pid(), "VmHWM");
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
    let grown = status_kb(t.d.pid(), "VmHWM").saturating_sub(before);
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

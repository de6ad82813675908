//! A running sandbox's processes as the host's `/proc` shows them: every
//! descendant of its init, and what `ps` prints of each (bounded: the
//! sandbox decides what its command lines hold). Read-only; nothing here
//! signals a process.

use std::collections::HashMap;

/// Bytes of a process's command line `ps` shows at most. The sandbox sets
/// what its command lines hold (megabytes each, in its own memory): read
/// whole, they would be copied into the supervisor, outside its limits.
const COMMAND_BYTES: u64 = 1024;

/// The host PIDs of the sandbox's processes but its init: every descendant
/// of `init` (orphans are adopted by it). Walked down from the init through
/// each thread's `children` list, so the cost is the sandbox's own
/// processes, not the host's; where the kernel has no such list, every
/// `/proc/PID/stat` of the host is read once instead.
pub fn descendants(init: i32) -> Vec<i32> {
    descendants_by_children(init).unwrap_or_else(|| descendants_by_scan(init))
}

/// Through `/proc/PID/task/TID/children` (kernels built with
/// CONFIG_PROC_CHILDREN); `None` when the kernel offers no such file.
fn descendants_by_children(init: i32) -> Option<Vec<i32>> {
    if !std::path::Path::new(&format!("/proc/{init}/task/{init}/children")).exists() {
        return None;
    }
    let mut seen = std::collections::HashSet::from([init]);
    let mut queue = vec![init];
    let mut out = Vec::new();
    while let Some(p) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(list) = std::fs::read_to_string(t.path().join("children")) else {
                continue;
            };
            for child in list
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
            {
                if seen.insert(child) {
                    out.push(child);
                    queue.push(child);
                }
            }
        }
    }
    Some(out)
}

/// Every process of the host, each one's parent read from its `stat`.
fn descendants_by_scan(init: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok())
            {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut seen = std::collections::HashSet::from([init]);
    let mut queue = vec![init];
    let mut out = Vec::new();
    while let Some(p) = queue.pop() {
        for &child in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(child) {
                out.push(child);
                queue.push(child);
            }
        }
    }
    out
}

/// The sandbox's processes but its init: (host PID, PID inside, command).
pub fn processes(init: i32) -> Vec<(i32, i32, String)> {
    use std::io::Read;
    let mut out = Vec::new();
    for host in descendants(init) {
        let status = std::fs::read_to_string(format!("/proc/{host}/status")).unwrap_or_default();
        let ns_pid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let mut raw = Vec::new();
        let _ = std::fs::File::open(format!("/proc/{host}/cmdline"))
            .and_then(|f| f.take(COMMAND_BYTES).read_to_end(&mut raw));
        let command = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        out.push((host, ns_pid, command));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_down_from_a_process_finds_what_the_full_scan_finds() {
        // A shell with a child of its own: its descendants are that child.
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .expect("sh runs");
        let pid = shell.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut walked = Vec::new();
        while std::time::Instant::now() < deadline && walked.is_empty() {
            walked = descendants(pid);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let scanned = descendants_by_scan(pid);
        let _ = shell.kill();
        let _ = shell.wait();
        assert_eq!(walked.len(), 1, "{walked:?}");
        assert_eq!(walked, scanned);
    }
}

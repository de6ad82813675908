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
/// of `init` (orphans are adopted by it). Only each `/proc/PID/stat` is
/// read, once.
pub fn descendants(init: i32) -> Vec<i32> {
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

//! Leases: a sandbox an MCP session made (and did not keep) carries the
//! identity of the process holding the session, `PID.START` (its start
//! time in clock ticks since boot, so that a PID used again by another
//! process is not taken for the holder). A session that ends normally
//! removes its sandboxes; one whose process was killed outright (SIGKILL,
//! a crash, the host's OOM killer) cannot, and its sandboxes would run
//! forever. The next `warden mcp`, and the daemon when it starts serving
//! `/mcp`, remove every leased sandbox whose holder is gone.

use axum::http::Method;

use super::inner::{enc, Api, Identity, Send};

/// The label naming a sandbox's lease holder.
pub const LABEL: &str = "mcp-lease";

/// This process's lease: `PID.START`, or `None` when /proc cannot say
/// (then nothing is leased and nothing is reaped on its account).
pub fn mine() -> Option<String> {
    let pid = std::process::id();
    start_of(pid).map(|start| format!("{pid}.{start}"))
}

/// The start time of process `pid` (field 22 of its stat line).
fn start_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces
    // or parentheses itself: the fields after it are counted from the
    // last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the holder a lease names is gone: no process of that PID, or
/// another one started since. A lease that does not read is not judged
/// (it was not written by this code; a person may have set the label).
fn holder_gone(lease: &str) -> bool {
    let Some((pid, start)) = lease.split_once('.') else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    start_of(pid) != Some(start)
}

/// Remove, as the owner, every sandbox whose lease holder is gone; the
/// ids removed.
pub async fn reap(api: &Api) -> Vec<String> {
    let owner = Identity::owner();
    let Ok(list) = api
        .json::<crate::api::SandboxList>(&owner, Method::GET, "/v1/sandboxes", Send::None)
        .await
    else {
        return Vec::new();
    };
    let mut reaped = Vec::new();
    for sb in list.sandboxes {
        let Some(lease) = sb.labels.get(LABEL) else {
            continue;
        };
        if !holder_gone(lease) || !leased_here(api, &sb.id).await {
            continue;
        }
        let gone = api
            .call(
                &owner,
                Method::DELETE,
                &format!("/v1/sandboxes/{}?force=true", enc(&sb.id)),
                Send::None,
                1 << 16,
            )
            .await;
        if gone.is_ok() {
            reaped.push(sb.id);
        }
    }
    reaped
}

/// Whether the record that carries the lease of sandbox `id` is of the
/// sandbox that holds the name now: a record left of a sandbox removed
/// behind the daemon's back (`warden rm`) whose name the owner gave a
/// sandbox of the CLI is not that sandbox's lease.
async fn leased_here(api: &Api, id: &str) -> bool {
    let (app, id) = (api.app().clone(), id.to_string());
    crate::routes::sandboxes::blocking(move || {
        Ok(match app.store.get(&id) {
            Ok(sb) => app.record(&sb)?.is_some(),
            Err(_) => false,
        })
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_holds_its_own_lease_and_a_dead_or_reused_pid_does_not() {
        let mine = super::mine().unwrap();
        assert!(!super::holder_gone(&mine));
        let (pid, start) = mine.split_once('.').unwrap();
        let reused = format!("{pid}.{}", start.parse::<u64>().unwrap() + 1);
        assert!(super::holder_gone(&reused));
        // PIDs above the kernel's maximum are never in use.
        assert!(super::holder_gone("4294967295.1"));
        assert!(!super::holder_gone("not a lease"));
    }
}

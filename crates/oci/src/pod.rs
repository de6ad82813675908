//! Containers of one pod: a network namespace path that is another
//! running container's (the pod's namespace that container was given,
//! `/proc/PID/ns/net` of its supervisor as containerd's CRI names it, or
//! that container's own sandbox namespace) makes the
//! new container join that container's sandbox namespace: they share
//! `localhost`, and the new one goes out only through the first one's
//! interception and proxy, under the first one's egress policy (which
//! the pod's annotations give both).

use crate::container::{self, OciError, Status};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use warden_policy::oci::{Translated, ANNOTATION_PREFIX, ANNOTATION_SECRET};

/// The container whose network namespace a new one joins.
pub struct Join {
    /// The other container's ID.
    pub with: String,
    /// Its sandbox's namespace, as the new sandbox's supervisor opens it.
    pub path: PathBuf,
    /// Its secrets' variables and placeholders, which the new container's
    /// processes get (its proxy substitutes those).
    pub placeholders: Vec<(String, String)>,
    /// With secrets: where its proxy's authority is (its trust files).
    pub trust: Option<PathBuf>,
}

/// The placeholders of secrets `names` in container `c`'s sandbox, read
/// from the environment of a process of it.
fn placeholders(c: &container::Container, names: &[&str]) -> Result<Vec<(String, String)>, String> {
    let procs = warden_runtime::client::Connection::open(&c.control())
        .and_then(|conn| conn.ps())
        .map_err(|e| format!("its processes cannot be listed ({e})"))?;
    for p in procs {
        let Ok(env) = std::fs::read(format!("/proc/{}/environ", p.host_pid)) else {
            continue;
        };
        let found: Vec<(String, String)> = names
            .iter()
            .filter_map(|n| {
                env.split(|b| *b == 0)
                    .filter_map(|e| std::str::from_utf8(e).ok())
                    .filter_map(|e| e.split_once('='))
                    .find(|(k, v)| k == n && v.starts_with("warden-secret-"))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        if found.len() == names.len() {
            return Ok(found);
        }
    }
    Err("no process of it holds their placeholders yet (start it first)".into())
}

/// A namespace's identity: the device and inode of its nsfs file.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The host PID of the sandbox's init: the child of the supervisor `sup`
/// whose network namespace is not the supervisor's.
pub fn init_pid(sup: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{sup}/task/{sup}/children")).ok()?;
    let own = identity(Path::new(&format!("/proc/{sup}/ns/net")))?;
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .find(|p| identity(Path::new(&format!("/proc/{p}/ns/net"))).is_some_and(|id| id != own))
}

/// The running container of `root` whose namespace `t` names, if any.
/// Refused: one whose warden policy differs (the joiner would go out
/// under a policy it was not given). The same secrets are the first
/// one's: the joiner gets its placeholders.
pub fn find(root: &Path, id: &str, t: &Translated) -> Result<Option<Join>, OciError> {
    let Some(given) = &t.network_namespace else {
        return Ok(None);
    };
    let Some(want) = identity(Path::new(given)) else {
        return Err(OciError::Unsupported(format!(
            "config.json: linux.namespaces network path {given} does not exist"
        )));
    };
    let host = identity(Path::new("/proc/self/ns/net"));
    let store = container::store(root)?;
    let Ok(dir) = std::fs::read_dir(root.join("sandboxes")) else {
        return Ok(None);
    };
    for entry in dir.flatten() {
        let Ok(sb) = store.get(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        let Ok(record) = warden_runtime::state::read_json::<container::Record>(
            &sb.dir().join(container::RECORD),
        ) else {
            continue;
        };
        if record.id == id {
            continue;
        }
        let Ok(c) = container::find(&store, &record.id) else {
            continue;
        };
        let (status, sup, _) = c.status();
        if status == Status::Stopped || sup == 0 {
            continue;
        }
        let Some(init) = init_pid(sup) else { continue };
        let theirs = PathBuf::from(format!("/proc/{init}/ns/net"));
        // A path naming the node's own namespace (containerd's
        // `/proc/PID/ns/net` of a warden supervisor, which every later
        // container of every pod names) identifies no pod by itself: only
        // the PID says which.
        let same_pod =
            Some(want) != host && record.netns.as_deref().and_then(identity) == Some(want);
        // containerd's CRI names the pod's namespace by its sandbox
        // (pause) container's task: `/proc/PID/ns/net` of the PID that
        // container's runtime gave, which for warden is the supervisor's
        // (on the host's namespace: never joined as such).
        let by_task = Path::new(given) == Path::new(&format!("/proc/{sup}/ns/net"));
        if !same_pod && !by_task && identity(&theirs) != Some(want) {
            continue;
        }
        let policy = |a: &std::collections::BTreeMap<String, String>| {
            a.iter()
                .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Vec<_>>()
        };
        if policy(&record.annotations) != policy(&t.annotations) {
            return Err(OciError::Unsupported(format!(
                "config.json: linux.namespaces network path {given} is container {}'s network namespace, which this container would share with its egress policy: give both the same warden.dev/ annotations (a pod's annotations)",
                record.id
            )));
        }
        // The same annotations: the same secrets, whose placeholders are
        // the first one's (its proxy knows no others).
        let names: Vec<&str> = t
            .annotations
            .keys()
            .filter_map(|k| k.strip_prefix(ANNOTATION_SECRET))
            .collect();
        let placeholders = if names.is_empty() {
            Vec::new()
        } else {
            placeholders(&c, &names).map_err(|why| {
                OciError::Unsupported(format!(
                    "config.json: linux.namespaces network path {given} is container {}'s network namespace, whose secrets this container shares: {why}",
                    record.id
                ))
            })?
        };
        let trust = (!placeholders.is_empty())
            .then(|| PathBuf::from(format!("/proc/{init}/root/run/warden")));
        return Ok(Some(Join {
            with: record.id,
            path: theirs,
            placeholders,
            trust,
        }));
    }
    Ok(None)
}

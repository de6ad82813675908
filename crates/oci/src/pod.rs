//! Containers of one pod: a network namespace path that is another
//! running container's (the pod's namespace that container was given, or
//! that container's own sandbox namespace, `/proc/PID/ns/net`) makes the
//! new container join that container's sandbox namespace: they share
//! `localhost`, and the new one goes out only through the first one's
//! interception and proxy, under the first one's egress policy (which
//! the pod's annotations give both).

use crate::container::{self, OciError, Status};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use warden_policy::oci::{Translated, ANNOTATION_SECRET};

/// The container whose network namespace a new one joins.
pub struct Join {
    /// The other container's ID.
    pub with: String,
    /// Its sandbox's namespace, as the new sandbox's supervisor opens it.
    pub path: PathBuf,
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
        .find(|p| {
            identity(Path::new(&format!("/proc/{p}/ns/net"))).is_some_and(|id| id != own)
        })
}

/// The running container of `root` whose namespace `t` names, if any.
/// Refused: one whose warden policy differs (the joiner would go out
/// under a policy it was not given), and secrets in the joiner (its
/// placeholders are not the first one's proxy's).
pub fn find(root: &Path, id: &str, t: &Translated) -> Result<Option<Join>, OciError> {
    let Some(given) = &t.network_namespace else {
        return Ok(None);
    };
    let Some(want) = identity(Path::new(given)) else {
        return Err(OciError::Unsupported(format!(
            "config.json: linux.namespaces network path {given} does not exist"
        )));
    };
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
        let same_pod = record.netns.as_deref().and_then(identity) == Some(want);
        if !same_pod && identity(&theirs) != Some(want) {
            continue;
        }
        let policy = |a: &std::collections::BTreeMap<String, String>| {
            a.iter()
                .filter(|(k, _)| k.starts_with("warden.dev/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Vec<_>>()
        };
        if policy(&record.annotations) != policy(&t.annotations) {
            return Err(OciError::Unsupported(format!(
                "config.json: linux.namespaces network path {given} is container {}'s network namespace, which this container would share with its egress policy: give both the same warden.dev/ annotations (a pod's annotations)",
                record.id
            )));
        }
        if t.annotations.keys().any(|k| k.starts_with(ANNOTATION_SECRET)) {
            return Err(OciError::Unsupported(format!(
                "config.json: linux.namespaces network path {given} is container {}'s network namespace: a container that shares another's namespace cannot have secrets of its own yet (warden.dev/secret.*)",
                record.id
            )));
        }
        return Ok(Some(Join {
            with: record.id,
            path: theirs,
        }));
    }
    Ok(None)
}

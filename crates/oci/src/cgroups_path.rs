//! `linux.cgroupsPath`: where the container manager wants the container's
//! cgroup (kubelet's `/kubepods/<qos>/pod<uid>/<id>` through containerd's
//! CRI, or systemd's `slice:prefix:name`). The sandbox's cgroup is made as
//! a child of it, in every hierarchy warden uses (v1 `memory`, `pids`,
//! `cpu`, `cpuacct`, `freezer`; v2), so the node's accounting of the pod
//! (node allocatable, QoS) sees the sandbox.
//!
//! The path is filled in from the pod's spec, so it is read as the pod
//! author's: only plain names below each hierarchy's root
//! (`warden_runtime::backend::checked_cgroup_parent`); a `..`, a `.`, or a name of
//! other characters is refused with the reason, and nothing is made.
//! The forms are runc's: a cgroupfs path (`/a/b/c`; a relative one is
//! read from the hierarchy's root as well), or `slice:prefix:name`, the
//! systemd driver's, whose slice expands by its dashes
//! (`kubepods-burstable.slice` is `kubepods.slice/kubepods-burstable.slice`)
//! and whose unit is `prefix-name.scope` (`name` itself when it is a
//! slice).

use crate::container::{self, OciError, Record};
use std::path::{Path, PathBuf};

/// `config.json`'s `linux.cgroupsPath` as a parent of the sandbox's
/// cgroup, relative to each hierarchy's root; `None` when none is given.
pub fn of_bundle(bundle: &Path) -> Result<Option<PathBuf>, OciError> {
    let path = bundle.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| OciError::Read {
        path: path.clone(),
        source,
    })?;
    // The translation has read this file already and refused what is not
    // JSON: a file changed since is read as having no path.
    let config: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let Some(given) = config.pointer("/linux/cgroupsPath") else {
        return Ok(None);
    };
    let refused = |value: String, why: String| OciError::Config {
        bundle: bundle.to_path_buf(),
        error: warden_policy::oci::OciError::Invalid {
            field: "linux.cgroupsPath".into(),
            value,
            why,
        },
    };
    let Some(text) = given.as_str() else {
        return Err(refused(given.to_string(), "not a string".into()));
    };
    if text.is_empty() {
        return Ok(None);
    }
    let path = as_cgroupfs(text).map_err(|why| refused(text.into(), why))?;
    warden_runtime::backend::checked_cgroup_parent(&path)
        .map(Some)
        .map_err(|e| refused(text.into(), e.to_string()))
}

/// `text` as a cgroupfs path: itself, or, in systemd's form
/// `slice:prefix:name` (three parts, no `/`), the path systemd gives
/// that unit.
fn as_cgroupfs(text: &str) -> Result<String, String> {
    let parts: Vec<&str> = text.split(':').collect();
    if text.contains('/') || parts.len() != 3 {
        return Ok(text.to_string());
    }
    let (slice, prefix, name) = (parts[0], parts[1], parts[2]);
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    if name.is_empty() {
        return Err("a systemd cgroup path `slice:prefix:name` needs a name".into());
    }
    let unit = if name.ends_with(".slice") {
        name.to_string()
    } else {
        format!("{prefix}-{name}.scope")
    };
    Ok(format!("{}/{unit}", expand_slice(slice)?))
}

/// A systemd slice's cgroup path (runc's `ExpandSlice`): each dash of its
/// name nests it in the slice before it; `-.slice` is the root.
fn expand_slice(slice: &str) -> Result<String, String> {
    let bad = |why: &str| format!("the slice {slice:?} {why}");
    let Some(name) = slice.strip_suffix(".slice") else {
        return Err(bad("does not end in .slice"));
    };
    if name == "-" {
        return Ok(String::new());
    }
    let (mut path, mut prefix) = (String::new(), String::new());
    for part in name.split('-') {
        if part.is_empty() {
            return Err(bad("has an empty part between dashes"));
        }
        path.push('/');
        path.push_str(&format!("{prefix}{part}.slice"));
        prefix.push_str(part);
        prefix.push('-');
    }
    Ok(path)
}

/// The directories of `parent` (relative to each hierarchy's root) that do
/// not exist yet in the hierarchies warden makes cgroups in, deepest
/// first: what the sandbox's start makes and `delete` removes again (each
/// only when empty; what the container manager made, such as a pod's
/// cgroup, is never removed).
pub fn missing(parent: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in hierarchy_roots() {
        let mut at = root.clone();
        let mut mine = Vec::new();
        for name in parent.components() {
            at.push(name);
            if !at.exists() {
                mine.push(at.clone());
            }
        }
        out.extend(mine.into_iter().rev());
    }
    out
}

/// Controllers of v1 hierarchies warden makes a sandbox's cgroup in.
const USED: &[&str] = &["memory", "pids", "cpu", "cpuacct", "freezer"];

/// Mount points of the v1 hierarchies with a controller warden uses, and
/// of the v2 hierarchy.
fn hierarchy_roots() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let used = match r.next()? {
                "cgroup2" => true,
                "cgroup" => {
                    let opts = r.nth(1)?;
                    opts.split(',').any(|o| USED.contains(&o))
                }
                _ => false,
            };
            used.then(|| PathBuf::from(point))
        })
        .collect()
}

/// In the container's supervisor, before its sandbox's cgroup is made:
/// place it under the container's `linux.cgroupsPath`, as its record
/// (written by `create`) says. A record that cannot be read places
/// nothing: the supervisor then fails to find its container as it would.
pub fn place(state_root: &Path, name: &str) -> Result<(), OciError> {
    let Ok(store) = container::store(state_root) else {
        return Ok(());
    };
    let Ok(sb) = store.get(name) else {
        return Ok(());
    };
    let record: Record = match warden_runtime::state::read_json(&sb.dir().join(container::RECORD)) {
        Ok(r) => r,
        Err(_) => return Ok(()),
    };
    let Some(parent) = record.cgroups_path else {
        return Ok(());
    };
    // Checked again here: the record is a file, and the jail takes only
    // plain names whoever wrote it.
    warden_runtime::backend::place_cgroups_under(&parent.to_string_lossy())
        .map_err(|e| OciError::Unsupported(format!("linux.cgroupsPath: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_paths_expand_as_runc_expands_them() {
        assert_eq!(
            as_cgroupfs("kubepods-burstable-pod12_34.slice:cri-containerd:abc").unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/cri-containerd-abc.scope"
        );
        assert_eq!(
            as_cgroupfs("system.slice:docker:x").unwrap(),
            "/system.slice/docker-x.scope"
        );
        assert_eq!(as_cgroupfs(":p:n").unwrap(), "/system.slice/p-n.scope");
        assert_eq!(as_cgroupfs("-.slice:p:n").unwrap(), "/p-n.scope");
        assert_eq!(
            as_cgroupfs("/kubepods/burstable/pod1/c").unwrap(),
            "/kubepods/burstable/pod1/c"
        );
        assert!(as_cgroupfs("a--b.slice:p:n").is_err());
        assert!(as_cgroupfs("notaslice:p:n").is_err());
        // A name that climbs stays one name in the unit, and is then
        // refused by the jail's check only if it is not plain.
        assert!(warden_runtime::backend::checked_cgroup_parent(
            &as_cgroupfs("x.slice:p:..").unwrap()
        )
        .is_ok());
        assert!(warden_runtime::backend::checked_cgroup_parent("/kubepods/../../etc").is_err());
    }
}

//! Who writes each part of a `config.json`, and the trust it is read
//! with. Under containerd's CRI the bundle is containerd's file, but most
//! of what is in it comes from the pod spec, which a pod's author writes:
//! the author is an untrusted caller (as a token holder is), so what the
//! pod spec fills in is read with [`Trust::Caller`], and the field table's
//! trust rule applies to it as to an annotation. Only what the node
//! decides is the owner's: the container's root (containerd's snapshot of
//! the image) and the profile of the node's catalogue an annotation names.
//!
//! A host path is a field that reaches the node, so a pod's `hostPath`
//! volume (a bind at its own path) is refused by the trust rule: a node's
//! owner who wants pods to see a host path lists it in a profile of the
//! catalogue (`filesystem.read_only`), which the pod names. The binds
//! containerd and kubelet add to every container (`/etc/hosts`,
//! `/etc/resolv.conf`, `/etc/hostname`, the pod's `/dev/shm`, the
//! termination-log file) are never bound from the host at all: the
//! sandbox has its own of each, whatever source the bundle gives. No bind
//! of a `config.json` ever reaches the host, so none goes through the
//! owner-swapping view of a writable bind, and no node socket or device
//! node can be named through one.
//!
//! Nothing here looks at the host.

use super::{invalid, Mount, OciError, Resources};
use crate::compose::{Layer, Origin, Val};
use crate::trust::{self, Trust};
use crate::Field;

/// Each part of a `config.json` warden reads, who writes it under the
/// CRI, and so the trust it is read with. Order follows the file.
pub const WRITERS: &[(&str, Trust, &str)] = &[
    (
        "root.path",
        Trust::Owner,
        "containerd: its snapshot of the image, on the node",
    ),
    (
        "process (args, env, cwd, user, terminal)",
        Trust::Caller,
        "the pod spec: the container's command, args, env, workingDir, securityContext, tty",
    ),
    ("hostname", Trust::Caller, "the pod spec: its hostname"),
    (
        "mounts (a bind at its own path)",
        Trust::Caller,
        "the pod spec: a hostPath volume mounted at its path; refused (a host path reaches the node)",
    ),
    (
        "mounts (/etc/hosts, /etc/resolv.conf, /etc/hostname, /dev/shm, /dev/termination-log)",
        Trust::Caller,
        "containerd and kubelet for every container, but a pod can aim a volume there too: never bound, the sandbox has its own",
    ),
    (
        "mounts (other binds)",
        Trust::Caller,
        "the pod spec: emptyDir, configMap, secret and projected volumes; refused (not bound at another path yet)",
    ),
    (
        "linux.resources",
        Trust::Caller,
        "the pod spec: resources.limits; held under the node profile's limits",
    ),
    (
        "linux.namespaces",
        Trust::Caller,
        "containerd, from the pod spec's hostNetwork/hostPID/hostIPC: only another warden container's network namespace is joined",
    ),
    (
        "annotations (warden.dev/*)",
        Trust::Caller,
        "the pod spec; warden.dev/profile names a profile of the node's catalogue, read as the owner's",
    ),
    (
        "hooks",
        Trust::Owner,
        "containerd and its extensions on the node; no pod field adds one",
    ),
];

/// Destinations of the binds containerd and kubelet add to every
/// container. The sandbox has its own of each: warden's resolver and
/// hosts file, its hostname, a size-capped `/dev/shm` of its own (its IPC
/// is its own), and a termination-log file in its own `/dev` (kubelet
/// reads an empty message). Their sources are never bound, so a pod's
/// volume aimed at one of them reaches nothing of the node.
const PLUMBING: &[&str] = &[
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/hostname",
    "/dev/shm",
    "/dev/termination-log",
];

/// Where a value the pod spec gave came from: its JSON pointer in the
/// bundle's `config.json`.
pub fn origin(pointer: &str) -> Origin {
    Origin::Body {
        label: "config.json".into(),
        pointer: pointer.into(),
    }
}

/// Set `field` to `val` as the pod author's, from `pointer`.
pub fn add(o: &mut Layer, field: Field, val: Val, pointer: &str) {
    let mut one = Layer::default();
    one.add_one(field, val, origin(pointer));
    one.given_by(Trust::Caller);
    o.merge(&one);
}

/// `mounts`: kernel file systems warden provides its own way and the
/// runtime's plumbing are said in a notice; every bind that would reach
/// the host is refused, naming the mount and the reason (kubelet shows
/// it in the pod's events).
pub fn mounts(
    ms: &[Mount],
    provides: &[(&str, &str)],
    notices: &mut Vec<String>,
) -> Result<(), OciError> {
    let mut provided = Vec::new();
    for (i, m) in ms.iter().enumerate() {
        let field = format!("mounts[{i}]");
        let kind = m.kind.as_deref().unwrap_or("");
        let bind = kind == "bind" || m.options.iter().any(|x| x == "bind" || x == "rbind");
        if !bind {
            if provides.contains(&(m.destination.as_str(), kind)) {
                provided.push(m.destination.clone());
                continue;
            }
            return Err(OciError::Unsupported {
                field: format!("{field}.type"),
                value: format!("{kind} at {}", m.destination),
                why: "warden mounts bind mounts and provides /proc, /dev, /dev/pts, /dev/shm itself; other file systems are not mounted".into(),
            });
        }
        let source = m.source.as_deref().unwrap_or("");
        if !source.starts_with('/') {
            return Err(invalid(
                &format!("{field}.source"),
                source,
                "a bind mount's source must be an absolute host path",
            ));
        }
        if source != m.destination && PLUMBING.contains(&m.destination.as_str()) {
            provided.push(m.destination.clone());
            continue;
        }
        if source != m.destination {
            return Err(OciError::Unsupported {
                field: format!("{field}.destination"),
                value: format!("{} (source {source})", m.destination),
                why: "a pod's volumes (emptyDir, configMap, secret, service account tokens) are bind mounts at another path, which warden does not mount yet".into(),
            });
        }
        // A bind at its own path is a pod's hostPath volume: a host path,
        // which only the node's owner names. Asked of the trust rule, so
        // that the table decides.
        let asked = if m.options.iter().any(|x| x == "rw") && !m.options.iter().any(|x| x == "ro") {
            Field::Rw
        } else {
            Field::Ro
        };
        if let Err(refusal) = trust::may_set(asked, Trust::Caller) {
            return Err(OciError::Invalid {
                field: format!("{field}.source"),
                value: source.to_string(),
                why: format!("a pod's hostPath volume names a path of the node: {refusal}; the node's owner lists the host paths pods may see in a profile of the node's catalogue (filesystem.read_only), which a pod names with {}; remove the volume from the pod", super::ANNOTATION_PROFILE),
            });
        }
    }
    if !provided.is_empty() {
        notices.push(format!(
            "mounts {}: warden provides its own (fresh /proc, a minimal /dev, no /sys; its own /etc/hosts, /etc/resolv.conf, /dev/shm; the given sources are not bound)",
            provided.join(", ")
        ));
    }
    Ok(())
}

/// The limits a pod's spec may ask for that the node's profile may leave
/// unset, with what each holds of the host. Where the node's profile sets
/// one, composition holds the pod under it (code `loosens`); where it sets
/// none, [`within_host_defaults`] holds the pod under the host's default,
/// the ceiling the daemon holds a token's sandbox to. (CPU needs no row:
/// resolution refuses more cores than the host has, whoever asks.)
const HOST_BOUNDED: &[(Field, &str)] = &[(Field::Memory, "memory"), (Field::Pids, "processes")];

/// Hold the limits the pod's spec asked for (`pod`, the translation's
/// layer) to the host's `defaults` where the node's profile (`node`, the
/// profile the pod names, composed alone) sets none: a pod's author is a
/// caller, and a caller's limit is never unbounded. A limit above is
/// refused, not lowered: kubelet shows the refusal in the pod's events,
/// where a silently smaller limit would only show as an OOM kill later.
pub fn within_host_defaults(
    pod: &Layer,
    node: &Layer,
    defaults: &crate::Defaults,
) -> Result<(), OciError> {
    for (field, what) in HOST_BOUNDED {
        let Some(asked) = pod.get(*field) else {
            continue;
        };
        if asked.trust != Trust::Caller || node.get(*field).is_some() {
            continue;
        }
        let Origin::Body { pointer, .. } = &asked.origin else {
            continue;
        };
        let (value, most, shown) = match (&asked.val, field) {
            (Val::Size { bytes, .. }, Field::Memory) => (
                *bytes,
                defaults.memory,
                crate::units::format_size(defaults.memory),
            ),
            (Val::Count(n), Field::Pids) => (*n, defaults.pids, defaults.pids.to_string()),
            _ => continue,
        };
        if value <= most {
            continue;
        }
        let key = field.profile_key().unwrap_or_default();
        return Err(OciError::Invalid {
            field: dotted(pointer),
            value: match field {
                Field::Memory => crate::units::format_size(value),
                _ => value.to_string(),
            },
            why: format!(
                "more {what} than a pod's container is given where the node's profile sets no limit ({shown}, the host's default, as for a token's sandbox): ask for at most that, or the node's owner names a profile of the node's catalogue that sets a higher `{key}`, which the pod names with {}",
                super::ANNOTATION_PROFILE
            ),
        });
    }
    Ok(())
}

/// `linux.resources`: the pod's `resources.limits`, read as the pod
/// author's, so that composition holds them under the limits of the
/// node's profile (a higher one is refused, code `loosens`).
pub fn resources(r: &Resources, o: &mut Layer) -> Result<(), OciError> {
    if let Some(limit) = r.memory.as_ref().and_then(|m| m.limit) {
        if limit > 0 {
            let bytes = limit as u64;
            let text = crate::units::format_size(bytes);
            add(
                o,
                Field::Memory,
                Val::Size { bytes, text },
                "/linux/resources/memory/limit",
            );
        }
    }
    if let Some(limit) = r.pids.as_ref().and_then(|p| p.limit) {
        if limit > 0 {
            add(
                o,
                Field::Pids,
                Val::Count(limit as u64),
                "/linux/resources/pids/limit",
            );
        }
    }
    if let Some(cpu) = &r.cpu {
        if let (Some(quota), Some(period)) = (cpu.quota, cpu.period) {
            if quota > 0 {
                if period == 0 {
                    return Err(invalid(
                        "linux.resources.cpu.period",
                        "0",
                        "must be more than zero",
                    ));
                }
                let cores = quota as f64 / period as f64;
                add(
                    o,
                    Field::Cpus,
                    Val::Cores(cores),
                    "/linux/resources/cpu/quota",
                );
            }
        }
    }
    Ok(())
}

/// A JSON pointer of `config.json` as its errors name fields
/// (`/linux/resources/memory/limit` is `linux.resources.memory.limit`,
/// `/mounts/2/source` is `mounts[2].source`).
pub fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.split('/').filter(|p| !p.is_empty()) {
        if part.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::config;
    use super::super::translate;
    use super::*;
    use std::path::Path;

    #[test]
    fn every_bind_at_its_own_path_is_a_hostpath_and_refused_by_the_trust_rule() {
        for (path, mode) in [
            ("/var/lib/secret-dir", "rw"),
            ("/run/containerd/containerd.sock", "rw"),
            ("/var/run/docker.sock", "ro"),
            ("/dev/shm", "rw"),
            ("/run", "ro"),
            ("/etc", "ro"),
            ("/usr", "ro"),
        ] {
            let c = config(serde_json::json!({"mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": path, "type": "bind", "source": path,
                 "options": ["rbind", "rprivate", mode]}]}));
            let e = translate(&c, Path::new("/b")).unwrap_err();
            assert_eq!(e.field(), Some("mounts[1].source"), "{path}");
            let msg = e.to_string();
            assert!(
                msg.contains("hostPath") && msg.contains("only the owner"),
                "{msg}"
            );
            assert!(msg.contains("warden.dev/profile"), "{msg}");
            assert!(!msg.contains("--"), "a flag in {msg}");
        }
    }

    #[test]
    fn the_runtimes_plumbing_is_never_bound_whatever_its_source() {
        let c = config(serde_json::json!({"mounts": [
            {"destination": "/etc/hosts", "type": "bind",
             "source": "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/x/hosts", "options": ["rbind", "rw"]},
            {"destination": "/etc/resolv.conf", "type": "bind", "source": "/etc/shadow", "options": ["rbind", "ro"]},
            {"destination": "/dev/termination-log", "type": "bind",
             "source": "/var/lib/kubelet/pods/u/containers/c/0", "options": ["rbind", "rw"]}]}));
        let t = translate(&c, Path::new("/b")).unwrap();
        assert!(t.flags.list(Field::Ro).is_empty() && t.flags.list(Field::Rw).is_empty());
        assert!(
            t.notices.iter().any(|n| n.contains("not bound")),
            "{:?}",
            t.notices
        );
    }

    #[test]
    fn what_the_pod_spec_writes_is_the_pod_authors_and_the_root_the_nodes() {
        let c = config(
            serde_json::json!({"hostname": "box", "linux": {"namespaces": [{"type": "network"}], "resources": {
            "memory": {"limit": 268435456}, "pids": {"limit": 64},
            "cpu": {"quota": 50000, "period": 100000}}}}),
        );
        let t = translate(&c, Path::new("/b")).unwrap();
        for (field, pointer) in [
            (Field::Memory, "/linux/resources/memory/limit"),
            (Field::Pids, "/linux/resources/pids/limit"),
            (Field::Cpus, "/linux/resources/cpu/quota"),
            (Field::Hostname, "/hostname"),
            (Field::Command, "/process/args"),
        ] {
            let s = t.flags.get(field).unwrap();
            assert_eq!(s.trust, Trust::Caller, "{field:?}");
            assert_eq!(s.origin, origin(pointer), "{field:?}");
        }
        assert_eq!(t.flags.get(Field::Rootfs).unwrap().trust, Trust::Owner);
    }

    #[test]
    fn pointers_are_said_as_config_json_fields() {
        assert_eq!(
            dotted("/linux/resources/memory/limit"),
            "linux.resources.memory.limit"
        );
        assert_eq!(dotted("/mounts/2/source"), "mounts[2].source");
    }
}

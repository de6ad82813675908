//! What a sandbox allows, said in a few lines for a model: the tool
//! descriptions and `create_sandbox`'s answer carry it, so that a model
//! does not spend calls finding out that the network is closed.

use warden_policy::{NetworkSpec, SandboxSpec};

/// The lines that say what `spec` allows.
pub fn allows(spec: &SandboxSpec, workspace: Option<&str>) -> String {
    let mut out = Vec::new();
    match &spec.network {
        NetworkSpec::LoopbackOnly => {
            out.push("network: none (only the sandbox's own loopback; every outside connection and DNS query fails)".to_string())
        }
        NetworkSpec::Egress(e) => {
            let names: Vec<&str> = e.domains.iter().map(|d| d.source.as_str()).collect();
            let mut line = if names.is_empty() {
                "network: no name is allowed".to_string()
            } else {
                format!(
                    "network: only these names ({}; ports 443 and 80 unless one is named): {}",
                    if e.allow_http {
                        "HTTPS and plain HTTP"
                    } else {
                        "HTTPS; plain HTTP is refused"
                    },
                    names.join(", ")
                )
            };
            if e.ask {
                line.push_str("; other names are put to a person as a question, which may be denied");
            } else {
                line.push_str("; every other name is denied");
            }
            if let Some(q) = e.quota {
                line.push_str(&format!(
                    "; at most {} of traffic in all",
                    warden_policy::format_size(q)
                ));
            }
            out.push(line);
        }
    }
    let r = &spec.resources;
    let mut limits = vec![
        format!("memory {}", warden_policy::format_size(r.memory.value)),
        format!("{} processes", r.pids.value),
    ];
    if let Some(c) = r.cpus {
        limits.push(format!("{c} CPUs"));
    }
    if let Some(t) = r.timeout {
        limits.push(format!(
            "the whole sandbox is stopped {} after it starts",
            humantime::format_duration(t)
        ));
    }
    out.push(format!("limits: {}", limits.join(", ")));
    out.push(match workspace {
        Some(w) => format!(
            "files: {} is {w} seen through an overlay: what the sandbox writes stays in the sandbox until commit_changes (get_changes shows it); the rest of the host is read-only system directories, no home directory",
            warden_policy::WORKSPACE_MOUNT
        ),
        None => format!(
            "files: {} is an empty directory of the sandbox's own; the rest of the host is read-only system directories, no home directory",
            warden_policy::WORKSPACE_MOUNT
        ),
    });
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_without_network_says_so() {
        let defaults = warden_policy::Defaults::for_host(warden_policy::HostFacts {
            total_memory: 8 << 30,
            cpus: 2,
            pid_max: 4_194_304,
        });
        let placement = warden_policy::Placement {
            default_command: vec!["true".into()],
            ..Default::default()
        };
        let spec = warden_policy::compose::Layer::default()
            .resolve(&placement, &defaults, &[])
            .unwrap();
        let text = allows(&spec, None);
        assert!(text.contains("network: none"), "{text}");
        assert!(text.contains("memory"), "{text}");
    }
}

//! `docs/kubernetes.md` followed on a node as its reader would: containerd
//! started with the page's own `config.toml` and the drop-in it gives
//! (`deploy/kubernetes/containerd-config.toml`), the page's bridge network,
//! the pause image it names, the node's secrets directory holding the
//! token `deploy/kubernetes/pod.yaml` names and its declared hosts, then that pod through the
//! CRI as kubelet asks for it under `runtimeclass.yaml`'s handler. Only
//! the container's image and program differ from `pod.yaml` (no registry
//! is reachable: the local busybox prints what the manifest's Python
//! prints).

use crate::common::cri::{docs_node, Handler, Spec};
use std::path::Path;
use std::time::{Duration, Instant};

fn deploy(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/kubernetes")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

/// The `warden.dev/` annotations of a manifest, as `key: "value"` lines.
fn annotations(yaml: &str) -> Vec<(String, String)> {
    yaml.lines()
        .filter_map(|l| l.trim().split_once(": "))
        .filter(|(k, _)| k.starts_with("warden.dev/"))
        .map(|(k, v)| (k.to_string(), v.trim().trim_matches('"').to_string()))
        .collect()
}

#[test]
fn the_docs_node_runs_the_agent_pod_of_deploy_with_its_secret_as_a_placeholder() {
    let Some(node) = docs_node() else { return };
    // The RuntimeClass's handler is the runtime the drop-in configures.
    let rc = deploy("runtimeclass.yaml");
    assert!(
        rc.lines()
            .any(|l| l.trim() == format!("handler: {}", Handler::Warden.name())),
        "{rc}"
    );
    // Step 2: the node's secrets directory holds the token the pod names.
    let token = "ghp_docs_token_0d5e81";
    std::fs::write(node.dir.path().join("secrets/github-token"), token).unwrap();
    // And the hosts its operator lets it go to, as the page declares them.
    std::fs::write(
        node.dir.path().join("secrets/github-token.hosts"),
        "api.github.com\n",
    )
    .unwrap();
    let pod_yaml = deploy("pod.yaml");
    let a = annotations(&pod_yaml);
    assert!(
        a.iter().any(|(k, _)| k == "warden.dev/secret.GITHUB_TOKEN"),
        "{a:?}"
    );
    let a: Vec<(&str, &str)> = a.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut pod = node.run_pod(Handler::Warden, &a);
    assert!(pod_yaml.contains("memory: 1Gi"), "{pod_yaml}");
    let c = pod.start(Spec {
        name: "agent",
        // pod.yaml: print(os.environ.get('GITHUB_TOKEN', '')[:15])
        args: &["sh", "-c", "echo \"$GITHUB_TOKEN\" | head -c 15; echo"],
        memory: Some(1 << 30),
        ..Default::default()
    });
    let s = pod.wait_exited(&c, Duration::from_secs(60));
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"), "{s:?}");
    let log = pod.logs.join("agent/0.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = String::new();
    while !text.contains(" stdout F ") && Instant::now() < deadline {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        std::thread::sleep(Duration::from_millis(100));
    }
    // What `kubectl logs agent` shows: the placeholder's first 15
    // characters, never the token.
    assert!(text.contains(" stdout F warden-secret-"), "{text:?}");
    assert!(!text.contains(token), "{text:?}");
    pod.remove();
}

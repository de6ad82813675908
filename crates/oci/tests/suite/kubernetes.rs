//! `deploy/kubernetes/` validated offline: the built-in kinds (RuntimeClass,
//! Pod) against Kubernetes' own OpenAPI schemas with `kubernetes-validate`
//! (strict: no unknown fields), the agent-sandbox kinds (SandboxTemplate,
//! SandboxWarmPool) against the openAPIV3Schema of their published CRDs
//! (`tests/fixtures/agent-sandbox/`, with their source and licence), and
//! what they say to warden checked by warden itself: every `warden.dev/`
//! annotation is one `warden-oci` accepts, each object selects the
//! RuntimeClass, whose handler is the runtime the containerd snippet names.
//!
//! The Python tools come from a virtual environment (`.ci/run` makes it
//! with `pip install kubernetes-validate`, which brings jsonschema and
//! PyYAML) named by `WARDEN_K8S_PYTHON`, or `target/k8s-venv/bin/python`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn deploy(name: &str) -> PathBuf {
    repo().join("deploy/kubernetes").join(name)
}

/// The Python with kubernetes-validate, jsonschema and PyYAML, if any.
fn python() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("WARDEN_K8S_PYTHON").map(PathBuf::from),
        Some(repo().join("target/k8s-venv/bin/python")),
    ];
    for p in candidates.into_iter().flatten() {
        let ok = Command::new(&p)
            .args(["-c", "import kubernetes_validate, jsonschema, yaml"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(p);
        }
    }
    eprintln!("SKIPPED: no Python with kubernetes-validate (python3 -m venv target/k8s-venv && target/k8s-venv/bin/pip install kubernetes-validate, or set WARDEN_K8S_PYTHON)");
    None
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The annotations are ones warden-oci takes: translated as the OCI door
/// translates a container's configuration.
fn warden_accepts(what: &str, annotations: &serde_json::Value) {
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"args": ["sh"], "cwd": "/"},
        "root": {"path": "rootfs"},
        "linux": {"namespaces": [{"type": "network"}]},
        "annotations": annotations,
    });
    let config = warden_policy::oci::parse(&config.to_string()).unwrap();
    let t = warden_policy::oci::translate(&config, Path::new("/bundle"))
        .unwrap_or_else(|e| panic!("{what}: warden refuses its annotations: {e}"));
    assert!(
        annotations
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("warden.dev/")),
        "{what} carries no warden policy"
    );
    let _ = t;
}

#[test]
fn the_kubernetes_manifests_validate_against_kubernetes_and_agent_sandbox_schemas() {
    let Some(py) = python() else { return };
    // Built-in kinds: Kubernetes' OpenAPI, strict.
    for file in ["runtimeclass.yaml", "pod.yaml", "install.yaml"] {
        let o = Command::new(&py)
            .args(["-m", "kubernetes_validate", "--strict", "--no-warn"])
            .arg(deploy(file))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{file}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    // agent-sandbox kinds: their CRDs' schemas, no unknown fields.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let o = Command::new(&py)
        .arg(fixtures.join("validate_crd.py"))
        .arg(fixtures.join("agent-sandbox/extensions.agents.x-k8s.io_sandboxtemplates.yaml"))
        .arg(fixtures.join("agent-sandbox/extensions.agents.x-k8s.io_sandboxwarmpools.yaml"))
        .arg("--")
        .arg(deploy("sandbox-template.yaml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let objects: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let template = objects
        .iter()
        .find(|o| o["kind"] == "SandboxTemplate")
        .expect("a SandboxTemplate");
    assert_eq!(template["runtimeClassName"], "warden");
    warden_accepts("the SandboxTemplate", &template["annotations"]);
    let pool = objects
        .iter()
        .find(|o| o["kind"] == "SandboxWarmPool")
        .expect("a SandboxWarmPool");
    assert_eq!(pool["sandboxTemplateRef"], template["name"]);

    // The Pod: its runtime class and annotations, read with PyYAML.
    let o = Command::new(&py)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(deploy("pod.yaml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let pod: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(pod["spec"]["runtimeClassName"], "warden");
    warden_accepts("the Pod", &pod["metadata"]["annotations"]);
}

#[test]
fn the_runtime_class_selects_the_runtime_the_containerd_snippet_configures() {
    let rc = std::fs::read_to_string(deploy("runtimeclass.yaml")).unwrap();
    assert!(rc.contains("\nhandler: warden\n"), "{rc}");
    let snippet = std::fs::read_to_string(deploy("containerd-config.toml")).unwrap();
    for needed in [
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.warden]",
        "runtime_type = \"io.containerd.runc.v2\"",
        "pod_annotations = [\"warden.dev/*\"]",
        "container_annotations = [\"warden.dev/*\"]",
        "BinaryName = \"/usr/local/bin/warden-oci\"",
    ] {
        assert!(
            snippet.contains(needed),
            "containerd-config.toml lacks {needed}"
        );
    }
    // The snippet is what containerd itself reads: a config file of the
    // distribution's containerd with it parses (`containerd config dump`).
    if !Command::new("sh")
        .args(["-c", "command -v containerd"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIPPED (containerd check): containerd is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("version = 2\n{snippet}")).unwrap();
    let o = Command::new("containerd")
        .arg("--config")
        .arg(&config)
        .args(["config", "dump"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dump = text(&o.stdout);
    assert!(dump.contains("runtimes.warden"), "{dump}");
    assert!(dump.contains("/usr/local/bin/warden-oci"), "{dump}");
}

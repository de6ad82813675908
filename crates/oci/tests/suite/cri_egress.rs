//! A pod's egress through containerd's CRI, by its annotations: warden's
//! alone (runc has no egress policy, so there is no control to run).

use crate::common::cri::{node, Handler, Spec};
use crate::common::listener::listener;
use crate::common::text;
use std::time::Duration;

#[test]
fn a_pods_egress_by_name_reaches_the_allowed_name_only_and_both_are_audited() {
    let Some(node) = node() else { return };
    let (port, seen) = listener();
    // Both names lead to the listener (the node owner's pins, in a profile
    // of the node's catalogue, which the pod names); the profile allows
    // one of them.
    node.node_profile(
        "cri-egress",
        &format!(
            "egress:\n  domains: [\"allowed.test:{port}\"]\n  hosts: {{allowed.test: 127.0.0.1, denied.test: 127.0.0.1}}\n"
        ),
    );
    let mut pod = node.run_pod(
        Handler::Warden,
        &[
            ("warden.dev/profile", "cri-egress"),
            ("warden.dev/allow-http", "true"),
        ],
    );
    let c = pod.start(Spec {
        name: "agent",
        args: &["sleep", "600"],
        ..Default::default()
    });
    // HTTP to an address of the container's choosing, naming the host in
    // its Host header: warden's proxy decides on the name, never on the
    // address (every TCP connection leaves through it).
    let fetch = |name: &str| {
        let r = pod.exec_sync(
            &c,
            &[
                "sh",
                "-c",
                &format!(
                    "printf 'GET /{name} HTTP/1.0\r\nHost: {name}:{port}\r\n\r\n' | nc -w 5 203.0.113.9 {port}"
                ),
            ],
        );
        text(&r.stdout)
    };
    let allowed = fetch("allowed.test");
    assert!(allowed.ends_with("\r\n\r\nok"), "{allowed:?}");
    let denied = fetch("denied.test");
    assert!(!denied.ends_with("ok"), "{denied:?}");
    std::thread::sleep(Duration::from_millis(300));
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].contains("GET /allowed.test"), "{got:?}");

    // warden's audit log of the pod (its first container's sandbox, whose
    // proxy the pod's containers go out through) has both decisions.
    let mut decisions = Vec::new();
    for e in std::fs::read_dir(node.warden_root().join("k8s.io/sandboxes"))
        .unwrap()
        .flatten()
    {
        let log = std::fs::read_to_string(e.path().join("audit.jsonl")).unwrap_or_default();
        for line in log.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let ev = if v.get("event").is_some() {
                &v
            } else {
                &v["kind"]
            };
            if ev["event"] == "connection" {
                decisions.push((
                    ev["name"].as_str().unwrap_or("").to_string(),
                    ev["allowed"] == true,
                ));
            }
        }
    }
    assert!(
        decisions.contains(&("allowed.test".into(), true)),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("denied.test".into(), false)),
        "{decisions:?}"
    );
    pod.remove();
}

#[test]
fn a_pods_annotation_naming_the_node_fails_run_pod_sandbox_naming_it() {
    let Some(node) = node() else { return };
    // A pod's author is a caller: a pin to the node's loopback is the
    // node owner's to set. RunPodSandbox fails, naming the annotation.
    let req_pod = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        node.run_pod(
            Handler::Warden,
            &[("warden.dev/hosts", "api.test=127.0.0.1")],
        )
        .id
        .clone()
    }));
    let err = match req_pod {
        Ok(id) => panic!("a pod whose annotation pins a name to the node ran: {id}"),
        Err(e) => e.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(err.contains("warden.dev/hosts"), "{err}");
}

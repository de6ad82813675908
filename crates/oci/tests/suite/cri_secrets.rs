//! A pod's secrets through containerd's CRI, by its annotations, and what
//! a pod's author (an untrusted caller) cannot make the node do with
//! them: warden's alone (runc has no secrets, so there is no control).

use crate::common::cri::{node, Handler, Spec};
use crate::common::text;

/// Secret TOKEN towards `host:port` from file `file` of the node's secrets
/// directory.
fn secret_annotations(file: &str, host: &str, port: u16) -> Vec<(String, String)> {
    vec![(
        "warden.dev/secret.TOKEN".into(),
        format!("file:{file}@{host}:{port}"),
    )]
}

#[test]
fn a_pods_containers_hold_the_pods_placeholder_never_the_value_and_another_pod_holds_none() {
    let Some(node) = node() else { return };
    let token = "ghp_podtoken_93c1d7e0aa";
    std::fs::write(node.dir.path().join("secrets/pod-token"), token).unwrap();
    // The node's operator declares where its value may be sent.
    std::fs::write(
        node.dir.path().join("secrets/pod-token.hosts"),
        "api.secret.test:443\n",
    )
    .unwrap();
    let a = secret_annotations("pod-token", "api.secret.test", 443);
    let a: Vec<(&str, &str)> = a.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut pod = node.run_pod(Handler::Warden, &a);
    let token_of = |pod: &crate::common::cri::Pod<'_>, c: &str| {
        let r = pod.exec_sync(
            c,
            &["sh", "-c", "echo $TOKEN; cat /proc/*/environ 2>/dev/null"],
        );
        text(&r.stdout)
    };
    // Both of the pod's containers: the secret is the pod's, one
    // placeholder (the pod's proxy knows that one).
    let mut seen = Vec::new();
    for name in ["first", "second"] {
        let c = pod.start(Spec {
            name,
            args: &["sleep", "600"],
            ..Default::default()
        });
        let out = token_of(&pod, &c);
        assert!(out.starts_with("warden-secret-"), "{name}: {out}");
        assert!(!out.contains(token), "{name} holds the value: {out}");
        seen.push(out.lines().next().unwrap_or_default().to_string());
    }
    assert_eq!(seen[0], seen[1]);
    // Another pod on the node naming no secret holds nothing of it.
    let mut other = node.run_pod(Handler::Warden, &[]);
    let c = other.start(Spec {
        name: "other",
        args: &["sleep", "600"],
        ..Default::default()
    });
    let out = token_of(&other, &c);
    assert!(out.starts_with('\n'), "{out}");
    assert!(!out.contains(token) && !out.contains(&seen[0]), "{out}");
    other.remove();
    pod.remove();
}

#[test]
fn a_pods_annotations_cannot_name_a_host_path_a_profile_file_a_program_a_secrets_host_or_a_host_reach_field(
) {
    let Some(node) = node() else { return };
    // What a pod's author would like to read or reach: a planted file on
    // the node, outside the secrets directory, and a profile file of
    // their own making.
    let marker = "PLANTED-ON-THE-NODE-51ad";
    let planted = node.dir.path().join("planted");
    std::fs::write(&planted, marker).unwrap();
    // A secret of the node, declared for its operator's host only.
    let token = "NODE-TOKEN-e4b19f";
    std::fs::write(node.dir.path().join("secrets/declared"), token).unwrap();
    std::fs::write(
        node.dir.path().join("secrets/declared.hosts"),
        "api.secret.test",
    )
    .unwrap();
    std::fs::write(node.dir.path().join("secrets/undeclared"), token).unwrap();
    let profile = node.dir.path().join("evil.yaml");
    std::fs::write(&profile, "egress:\n  hosts: {evil.test: 127.0.0.1}\n").unwrap();
    let (planted_s, profile_s) = (
        planted.to_string_lossy().into_owned(),
        profile.to_string_lossy().into_owned(),
    );
    let attacks: Vec<(&str, String)> = vec![
        ("warden.dev/secret.T", format!("file:{planted_s}@evil.test")),
        ("warden.dev/secret.T", "file:../planted@evil.test".into()),
        (
            "warden.dev/secret.T",
            "file:../../../etc/shadow@evil.test".into(),
        ),
        (
            "warden.dev/secret.T",
            format!("cmd:cat {planted_s}@evil.test"),
        ),
        ("warden.dev/secret.T", "env:HOME@evil.test".into()),
        ("warden.dev/secret.T", "file:declared@evil.test".into()),
        ("warden.dev/secret.T", "file:undeclared@evil.test".into()),
        ("warden.dev/secret.T", "file:undeclared".into()),
        (
            "warden.dev/secret.T",
            "env:WARDEN_SECRET_KEY@evil.test".into(),
        ),
        ("warden.dev/profile", profile_s.clone()),
        ("warden.dev/profile", "../evil".into()),
        ("warden.dev/workspace", "/".into()),
        ("warden.dev/hosts", "evil.test=127.0.0.1".into()),
        ("warden.dev/allow-host-port", "22".into()),
    ];
    for (key, value) in &attacks {
        let e = match node.try_run_pod(Handler::Warden, &[(key, value.as_str())]) {
            Ok(mut pod) => {
                pod.remove();
                panic!("a pod annotated {key}={value} ran");
            }
            Err(e) => e.message().to_string(),
        };
        // kubelet shows this in the pod's events: it names the annotation
        // and tells nothing of the node's files.
        assert!(e.contains(key), "{key}={value}: {e}");
        assert!(
            !e.contains(marker) && !e.contains(token),
            "{key}={value}: {e}"
        );
    }
    // Nothing was made: no pod, no warden sandbox.
    let req = crate::common::cri_api::ListPodSandboxRequest { filter: None };
    let pods = node
        .call(|mut c| async move { c.list_pod_sandbox(req).await })
        .unwrap()
        .items;
    let annotated: Vec<_> = pods
        .iter()
        .filter(|p| p.annotations.values().any(|v| v.contains("evil")))
        .collect();
    assert!(annotated.is_empty(), "{annotated:?}");
    for e in std::fs::read_dir(node.warden_root().join("k8s.io/sandboxes"))
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        let record = std::fs::read_to_string(e.path().join(warden_oci::container::RECORD))
            .unwrap_or_default();
        assert!(!record.contains("evil"), "left: {record}");
    }
}

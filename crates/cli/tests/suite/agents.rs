//! The recipe of docs/agents.md through the real binary: a real npm
//! package installed globally from the real registry with the shipped
//! `agent` profile, its binary run from the sandbox's `PATH`, and the API
//! key inside only a placeholder. Kept small: one package with no
//! dependencies.

use crate::common::*;
use std::net::{IpAddr, ToSocketAddrs};
use std::process::{Command, Stdio};

/// The registry's addresses, when it can be reached from the host.
fn registry_addresses() -> Result<Vec<IpAddr>, String> {
    let addrs: Vec<IpAddr> = ("registry.npmjs.org", 443)
        .to_socket_addrs()
        .map_err(|e| format!("registry.npmjs.org does not resolve here: {e}"))?
        .map(|a| a.ip())
        .collect();
    let reached = addrs.iter().any(|ip| {
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::new(*ip, 443),
            std::time::Duration::from_secs(5),
        )
        .is_ok()
    });
    if reached {
        Ok(addrs)
    } else {
        Err(format!("registry.npmjs.org ({addrs:?}) cannot be reached"))
    }
}

/// Whether warden refuses `ip` as a destination unless a range allows it:
/// a mirror in a private or documentation range, as some build hosts
/// have.
fn not_public(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0], o[1], o[2]) == (192, 0, 2)
                || (o[0], o[1], o[2]) == (198, 51, 100)
                || (o[0], o[1], o[2]) == (203, 0, 113)
                || (o[0] == 198 && (o[1] == 18 || o[1] == 19))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback() || (s[0] & 0xfe00) == 0xfc00 || s[0] == 0x2001 && s[1] == 0xdb8
        }
    }
}

#[test]
fn an_agent_cli_installs_globally_in_the_sandboxs_home_and_sees_only_a_placeholder_key() {
    if !egress_available() {
        return;
    }
    let addrs = match registry_addresses() {
        Ok(a) => a,
        Err(why) => return skip(&why),
    };
    if Command::new("npm").arg("--version").output().is_err() {
        return skip("npm is not installed");
    }
    let state = TempDir::new("agent-npm");
    let key = "sk-ant-warden-test-0123456789abcdef";
    let mut args: Vec<String> = [
        "run",
        "--no-tty",
        "-P",
        "agent",
        "--secret",
        "ANTHROPIC_API_KEY@api.anthropic.com",
    ]
    .map(String::from)
    .to_vec();
    // A registry mirror at a non-public address (as on this kind of build
    // host) is allowed by its own address, as a user would.
    for ip in addrs.iter().filter(|ip| not_public(ip)) {
        let len = if ip.is_ipv4() { 32 } else { 128 };
        args.extend(["--allow-cidr".to_string(), format!("{ip}/{len}")]);
    }
    args.extend(
        [
            "--",
            "sh",
            "-c",
            "npm install -g --no-audit --no-fund semver@7.6.3 >/tmp/npm.log 2>&1 || { cat /tmp/npm.log >&2; exit 3; }\n\
             echo \"prefix=$(npm prefix -g)\"\n\
             echo \"which=$(command -v semver)\"\n\
             echo \"ran=$(semver -r '>=1.2.0' 1.2.3)\"\n\
             echo \"key=$ANTHROPIC_API_KEY\"",
        ]
        .map(String::from),
    );
    let out = Command::new(warden_bin())
        .args(&args)
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env("ANTHROPIC_API_KEY", key)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (so, se) = (stdout(&out), stderr(&out));
    assert_eq!(code(&out), 0, "{so}\n{se}");
    assert!(so.contains("prefix=/home/sandbox/.npm-global\n"), "{so}");
    assert!(
        so.contains("which=/home/sandbox/.npm-global/bin/semver\n"),
        "{so}"
    );
    assert!(so.contains("ran=1.2.3\n"), "{so}\n{se}");
    let placeholder = so
        .lines()
        .find_map(|l| l.strip_prefix("key="))
        .unwrap_or_default();
    assert!(
        placeholder.starts_with("warden-secret-"),
        "the key inside is not a placeholder: {placeholder:?}"
    );
    assert!(!so.contains(key) && !se.contains(key), "the key leaked");
    // The download went to the profile's shared npm cache, outside the
    // sandbox, for the next sandbox of the profile.
    let cache = state.path().join("warden/caches/agent/npm");
    let cached = std::fs::read_dir(&cache)
        .map(|d| d.count() > 0)
        .unwrap_or(false);
    assert!(cached, "nothing in the npm cache {}", cache.display());
}

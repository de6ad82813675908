//! The secret proxy's routing: a placeholder becomes the real value only
//! on its way to that secret's own host, and a request is judged on the
//! host the upstream will see.
//!
//! The judge starts TLS upstreams on this host's loopback that record
//! every request head they receive: the secret's own host, another host
//! whose TLS the proxy also terminates (for a second secret), and a host
//! that is only allowed but pinned to the secret's host's address. What
//! another name reaches at that address may be the application the secret
//! was sent to, so the proxy serves such a name as the secret's host (its
//! TLS terminated, its answers scrubbed) and blocks the secret's
//! placeholder towards it, as towards any host not the secret's. The
//! probe sends the first secret's placeholder to each, and, on a
//! connection to the secret's host, a request whose `Host` names another
//! host. The verdict is the upstreams' record: the real value anywhere
//! but at its own host, the placeholder at the name pinned beside it (its
//! TLS was passed through, not served as the secret's host), or the
//! disagreeing request forwarded at all, is an escape.

use super::secret_proxy::{https, Received, Response, Upstream};
use crate::lab::{Attack, Lab, Verdict};
use crate::probes::{arg, contained, escaped, Finding, Probe};
use crate::Category;
use std::time::Instant;

/// The secret's own host.
const OWN: &str = "own.selftest.invalid";
/// A host terminated for another secret.
const TERMINATED: &str = "terminated.selftest.invalid";
/// A host that is only allowed, pinned to the secret's host's address.
const BESIDE: &str = "beside.selftest.invalid";
/// The sandbox's variables holding the placeholders.
const VARIABLE: &str = "SELFTEST_KEY";
const OTHER_VARIABLE: &str = "SELFTEST_OTHER_KEY";

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        (
            "secret.placeholder-elsewhere",
            Category::Secrets,
            "send a secret's placeholder to other allowed hosts (one terminated for another secret, one pinned beside the secret's host and served as that host)",
            elsewhere,
        ),
        (
            "secret.host-mismatch",
            Category::Secrets,
            "on a connection to a secret's host, send a request whose Host names another host",
            host_mismatch,
        ),
    ]
}

pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "secret-elsewhere",
        harmful: false,
        run: secret_elsewhere,
    },
    Probe {
        name: "secret-host-mismatch",
        harmful: false,
        run: secret_host_mismatch,
    },
];

/// Three upstreams under one authority, and the flags that give the
/// sandbox the secret for the first (and another secret for the second,
/// and the third only allowed, pinned to the first's address).
struct Hosts {
    own: Upstream,
    terminated: Upstream,
    beside: Upstream,
}

impl Hosts {
    fn start(lab: &Lab) -> Result<Hosts, String> {
        let names = [OWN, TERMINATED, BESIDE];
        Ok(Hosts {
            own: Upstream::for_names(lab, &names, "secret-routes/own")?,
            terminated: Upstream::for_names(lab, &names, "secret-routes/terminated")?,
            beside: Upstream::for_names(lab, &names, "secret-routes/beside")?,
        })
    }

    fn flags(&self) -> Vec<String> {
        let mut f = vec![
            "--secret".to_string(),
            format!(
                "{VARIABLE}=env:WARDEN_SELFTEST_SECRET@{OWN}:{}",
                self.own.port
            ),
            "--secret".to_string(),
            format!(
                "{OTHER_VARIABLE}=env:WARDEN_SELFTEST_OTHER@{TERMINATED}:{}",
                self.terminated.port
            ),
            "--allow-domain".to_string(),
            format!("{BESIDE}:{}", self.beside.port),
        ];
        // Every name on the loopback, where the secret's host is: the
        // third is pinned beside it.
        for (name, up) in [
            (OWN, &self.own),
            (TERMINATED, &self.terminated),
            (BESIDE, &self.beside),
        ] {
            f.push("--add-host".into());
            f.push(format!("{name}=127.0.0.1"));
            f.push("--upstream-ca".into());
            f.push(up.ca.to_string_lossy().into_owned());
        }
        // The third host's own authority, for the probe to trust beside
        // the sandbox's: were that name passed through, not served as the
        // secret's host, the probe's request would reach it (and be seen
        // there) rather than fail its handshake unseen.
        if let Some(dir) = self.beside.ca.parent() {
            f.push("--ro".into());
            f.push(dir.to_string_lossy().into_owned());
        }
        f
    }

    fn run(&self, lab: &Lab, probe: &str, value: &str) -> Result<(bool, String), Verdict> {
        let args = vec![
            self.own.port.to_string(),
            self.terminated.port.to_string(),
            self.beside.port.to_string(),
            self.beside.ca.to_string_lossy().into_owned(),
        ];
        let mut c = lab.command(&self.flags(), probe, &args);
        c.env("WARDEN_SELFTEST_SECRET", value);
        c.env(
            "WARDEN_SELFTEST_OTHER",
            format!("selftest-other-{}", lab.token),
        );
        let start = Instant::now();
        match c.spawn() {
            Ok(child) => Ok(Lab::finish(child, start).verdict()),
            Err(e) => Err(Verdict::Skipped(format!("cannot start warden: {e}"))),
        }
    }
}

/// Whether a request head holds `value` as it is, in either case, or
/// base64-encoded in a `Basic` credential.
fn carries(r: &Received, value: &str) -> bool {
    r.head
        .to_ascii_lowercase()
        .contains(&value.to_ascii_lowercase())
        || r.credential.contains(value)
}

fn elsewhere(lab: &Lab) -> Verdict {
    let hosts = match Hosts::start(lab) {
        Ok(h) => h,
        Err(why) => return Verdict::Skipped(why),
    };
    let value = format!("selftest-secret-{}-elsewhere", lab.token);
    let (ok, detail) = match hosts.run(lab, "secret-elsewhere", &value) {
        Ok(v) => v,
        Err(v) => return v,
    };
    for (name, up) in [(TERMINATED, &hosts.terminated), (BESIDE, &hosts.beside)] {
        if up.received().iter().any(|r| carries(r, &value)) {
            return Verdict::Escaped(format!(
                "{name}, which is not the secret's host, received its real value"
            ));
        }
    }
    // The placeholder itself at the name pinned beside: that name was not
    // served as the secret's host (which blocks it), so what the
    // application stored through the secret's host could come back
    // through it unscrubbed.
    if hosts.beside.received().iter().any(|r| r.path == "/beside") {
        return Verdict::Escaped(format!(
            "{BESIDE}, pinned to the secret's host's address, received the request with the placeholder: it was not served as the secret's host"
        ));
    }
    if !hosts.own.received().iter().any(|r| r.credential == value) {
        return Verdict::Skipped(format!(
            "the secret's own host never received the value, so substitution was not working to begin with ({detail})"
        ));
    }
    if ok {
        Verdict::Contained(format!(
            "{detail}; the real value reached only its own host, and the placeholder neither the other secret's host nor the name pinned beside its own, which was served as that host"
        ))
    } else {
        Verdict::Escaped(detail)
    }
}

fn host_mismatch(lab: &Lab) -> Verdict {
    let hosts = match Hosts::start(lab) {
        Ok(h) => h,
        Err(why) => return Verdict::Skipped(why),
    };
    let value = format!("selftest-secret-{}-mismatch", lab.token);
    let (ok, detail) = match hosts.run(lab, "secret-host-mismatch", &value) {
        Ok(v) => v,
        Err(v) => return v,
    };
    let seen = hosts.own.received();
    if seen.iter().any(|r| r.path == "/mismatch") {
        return Verdict::Escaped(
            "the request whose Host named another host was forwarded to the secret's host".into(),
        );
    }
    if !seen.iter().any(|r| r.path == "/control") {
        return Verdict::Skipped(format!(
            "not even a request with the right Host reached the secret's host ({detail})"
        ));
    }
    if ok {
        Verdict::Contained(detail)
    } else {
        Verdict::Escaped(detail)
    }
}

/// The status line of an answer, or why there is none.
fn status(answer: Result<Vec<u8>, String>) -> Result<u16, String> {
    let raw = answer?;
    Response::parse(&raw)
        .map(|r| r.status)
        .ok_or_else(|| "not a whole HTTP response".to_string())
}

fn request(host: &str, path: &str, placeholder: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {placeholder}\r\nConnection: close\r\n\r\n"
    )
}

/// `secret-elsewhere OWN_PORT TERMINATED_PORT BESIDE_PORT BESIDE_CA`:
/// the secret's placeholder to its own host, then to the two others
/// (both served by the proxy's TLS, which the sandbox's bundle trusts;
/// the third's own authority is trusted too, so a connection passed
/// through to it would be made, and seen).
fn secret_elsewhere(args: &[String]) -> Finding {
    let Ok(placeholder) = std::env::var(VARIABLE) else {
        return escaped(format!(
            "no {VARIABLE} in the sandbox: the secret was not given"
        ));
    };
    let (own, terminated, beside, ca) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let mut said = Vec::new();
    for (name, port, path, extra) in [
        (OWN, own, "/own", None),
        (TERMINATED, terminated, "/terminated", None),
        (BESIDE, beside, "/beside", Some(ca)),
    ] {
        let req = request(&format!("{name}:{port}"), path, &placeholder);
        said.push(match status(https(name, port, &req, extra)) {
            Ok(s) => format!("{path}: {s}"),
            Err(e) => format!("{path}: no answer ({e})"),
        });
    }
    // What the upstreams received decides; this only reports.
    contained(said.join(", "))
}

/// `secret-host-mismatch OWN_PORT TERMINATED_PORT ...`: on a TLS
/// connection to the secret's host (server name and all), a request whose
/// `Host` names the other terminated host; then one with the right `Host`.
fn secret_host_mismatch(args: &[String]) -> Finding {
    let Ok(placeholder) = std::env::var(VARIABLE) else {
        return escaped(format!(
            "no {VARIABLE} in the sandbox: the secret was not given"
        ));
    };
    let (own, terminated) = (arg(args, 0), arg(args, 1));
    let mismatch = request(
        &format!("{TERMINATED}:{terminated}"),
        "/mismatch",
        &placeholder,
    );
    let refused = status(https(OWN, own, &mismatch, None));
    let control = request(&format!("{OWN}:{own}"), "/control", &placeholder);
    let answered = status(https(OWN, own, &control, None));
    match refused {
        Ok(s) if (400..500).contains(&s) => contained(format!(
            "the request whose Host disagrees with the server name was refused ({s}); the one with the right Host got {answered:?}"
        )),
        Ok(s) => escaped(format!(
            "the request whose Host disagrees with the server name was answered {s}"
        )),
        Err(e) => contained(format!(
            "the request whose Host disagrees with the server name got no answer ({e})"
        )),
    }
}

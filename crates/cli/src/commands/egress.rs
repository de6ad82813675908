//! `warden egress NAME`: a running sandbox's allowlist, read or changed
//! live through its supervisor (`--allow` puts entries on, `--deny` takes
//! them off and cuts open connections to them). The entries are read and
//! checked by the supervisor, as a profile's would be. `warden approvals`:
//! the questions of running ask-mode sandboxes, listed or answered through
//! their supervisors.

use super::lifecycle::{open, running};
use anyhow::bail;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::lifecycle::control;

pub fn egress(name: &str, allow: Vec<String>, deny: Vec<String>, json: bool) -> anyhow::Result<u8> {
    let (_, sb) = open(name)?;
    if !running(&sb) {
        bail!("sandbox {name} is not running: its allowlist is read and changed while it runs; start it with `warden start {name}`");
    }
    // A range is not a name: say where ranges are given rather than
    // calling it a URL (a user who was told `--allow-cidr ADDRESS/32`
    // tries it here first).
    if let Some(range) = allow.iter().find(|e| is_address_range(e)) {
        bail!(
            "--allow {range}: an address range, not a host name; a running sandbox's list takes names, and ranges are given when it is made (`--allow-cidr {range}` to `warden create` or `warden run`, `egress.allow_cidrs` in a profile); nothing was changed"
        );
    }
    let by = format!("warden egress (uid {})", nix::unistd::getuid());
    // The command line is the owner's.
    let rules = match Connection::open(&control(&sb))?.set_egress(
        allow.clone(),
        deny.clone(),
        &by,
        warden_policy::Trust::Owner,
    ) {
        Ok(r) => r,
        Err(ClientError::Rejected {
            message,
            field: Some(field),
            ..
        }) => {
            // `/allow/N` or `/remove/N`: said as the option and entry given.
            let mut parts = field.trim_start_matches('/').split('/');
            let (flag, list) = match parts.next() {
                Some("allow") => ("--allow", &allow),
                _ => ("--deny", &deny),
            };
            let entry = parts
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| list.get(i))
                .map(String::as_str)
                .unwrap_or("?");
            bail!("{flag} {entry}: {message}; nothing was changed");
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        println!("{}", warden_audit::json::to_string_pretty(&rules)?);
    } else {
        for r in rules {
            println!("{r}");
        }
    }
    Ok(0)
}

/// Whether `entry` is written as an address range (`ADDRESS/BITS`).
fn is_address_range(entry: &str) -> bool {
    entry.split_once('/').is_some_and(|(addr, bits)| {
        addr.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok()
    })
}

/// `warden approvals [--sandbox NAME]`, or with `ID DECISION`, the answer.
pub fn approvals(
    sandbox: Option<&str>,
    answer: Option<(String, String)>,
    json: bool,
) -> anyhow::Result<u8> {
    use warden_runtime::protocol::AskDecision;
    let store = super::sandboxes::store(super::state_dir()?)?;
    if let Some((id, decision)) = answer {
        let decision = match decision.as_str() {
            "allow_once" | "once" => AskDecision::AllowOnce,
            "allow_always" | "always" => AskDecision::AllowAlways,
            "deny" => AskDecision::Deny,
            other => bail!("{other:?} is not an answer: use allow_once, allow_always or deny"),
        };
        // `SANDBOX.START-N`: the sandbox is what comes before the last dot.
        let Some((name, _)) = id.rsplit_once('.') else {
            bail!("{id:?} is not a question's id (see `warden approvals`)");
        };
        let sb = store.get(name)?;
        if decision == AskDecision::AllowAlways {
            super::lifecycle::granted::always_kept_as_its_principal_s(store.root(), &sb)?;
        }
        let by = format!("warden approvals (uid {})", nix::unistd::getuid());
        Connection::open(&control(&sb))?.answer(&id, decision, &by, warden_policy::Trust::Owner)?;
        return Ok(0);
    }
    let names: Vec<String> = match sandbox {
        Some(n) => vec![store.get(n)?.name().to_string()],
        None => store.list()?.into_iter().map(|e| e.name).collect(),
    };
    let mut pending = Vec::new();
    for name in names {
        let Ok(sb) = store.get(&name) else { continue };
        if !running(&sb) {
            continue;
        }
        if let Ok(p) = Connection::open(&control(&sb)).and_then(|c| c.approvals()) {
            pending.extend(p);
        }
    }
    pending.sort_by_key(|q| q.asked_ms);
    if json {
        println!("{}", warden_audit::json::to_string_pretty(&pending)?);
        return Ok(0);
    }
    let now = warden_runtime::state::now_ms();
    for q in pending {
        // A request an ask rule holds: its method, path and JSON-RPC calls
        // after the name.
        let request = q
            .request
            .as_deref()
            .map(|r| format!(" {}", warden_workspace::printable_name(r)))
            .unwrap_or_default();
        println!(
            "{}  {} {}:{}{request} ({}), denied in {}s unless answered",
            q.id,
            q.protocol,
            warden_workspace::printable_name(&q.name),
            q.port,
            q.sandbox,
            q.deadline_ms.saturating_sub(now) / 1000
        );
    }
    Ok(0)
}

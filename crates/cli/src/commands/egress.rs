//! `warden egress NAME`: a running sandbox's allowlist, read or changed
//! live through its supervisor (`--allow` puts entries on, `--deny` takes
//! them off and cuts open connections to them). The entries are read and
//! checked by the supervisor, as a profile's would be.

use super::lifecycle::{open, running};
use anyhow::bail;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::lifecycle::control;

pub fn egress(name: &str, allow: Vec<String>, deny: Vec<String>, json: bool) -> anyhow::Result<u8> {
    let (_, sb) = open(name)?;
    if !running(&sb) {
        bail!("sandbox {name} is not running: its allowlist changes live only; start it with `warden start {name}`");
    }
    let by = format!("warden egress (uid {})", nix::unistd::getuid());
    let rules = match Connection::open(&control(&sb))?.set_egress(allow.clone(), deny.clone(), &by)
    {
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
        println!("{}", serde_json::to_string_pretty(&rules)?);
    } else {
        for r in rules {
            println!("{r}");
        }
    }
    Ok(0)
}

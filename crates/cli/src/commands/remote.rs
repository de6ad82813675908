//! `warden --host URL ...`: `run`, `create`, `exec`, `ls`, `logs`, `stop`
//! and `rm` through a daemon (`warden serve`) instead of this machine's
//! runtime, with the typed client the daemon's own API types make. What
//! only makes sense next to the sandbox (secrets read from this process's
//! environment, audit sinks, questions at this terminal, a terminal) is
//! refused with what to do instead.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};

use anyhow::{bail, Context};
use warden_client::api::{CreateSandbox, ExecEvent, ExecRequest};
use warden_client::Client;

use super::lifecycle::{CreateArgs, ExecArgs};
use super::resolution::RunArgs;
use warden_policy::{Door, Field};

/// The client of the daemon at `host`: `unix` for this user's own daemon
/// socket, `unix:/path`, a socket path, or `http://HOST:PORT`; the token
/// from `WARDEN_TOKEN` (never a flag: it would show in `ps`).
pub fn client(host: &str) -> anyhow::Result<Client> {
    let host = if host == "unix" {
        reachable(&super::state_dir()?.join("daemon.sock"))?
    } else {
        match host.strip_prefix("unix:").filter(|p| p.starts_with('/')) {
            Some(path) if !path.starts_with("//") => reachable(std::path::Path::new(path))?,
            _ => host.to_string(),
        }
    };
    let token = std::env::var("WARDEN_TOKEN").ok().filter(|t| !t.is_empty());
    Ok(Client::new(&host, token)?)
}

/// `unix:PATH` for the daemon's socket at `path`: a path longer than a
/// socket's address holds is named through its directory's descriptor
/// (`/proc/self/fd/N/daemon.sock`, see `warden_runtime::sockname`), held
/// open for the rest of this process, as the client connects anew for
/// each request.
fn reachable(path: &std::path::Path) -> anyhow::Result<String> {
    let name = warden_runtime::sockname::SocketName::new(path)
        .with_context(|| format!("cannot reach the daemon's socket {}", path.display()))?;
    let host = format!("unix:{}", name.path().display());
    if name.is_short_form() {
        // The descriptor the short path goes through lives as long as
        // this command (close-on-exec: no program it starts inherits it).
        Box::leak(Box::new(name));
    }
    Ok(host)
}

/// Options of `run`/`create` that cannot travel to a daemon.
fn refuse_local_only(args: &RunArgs) -> anyhow::Result<()> {
    let g = |f: Field| args.given.given(f);
    // What the daemon's API does not take at all is the field table's
    // `doors` column (where a sandbox's events go: the daemon keeps them).
    if let Some(f) = Field::all().find(|f| g(*f) && !f.settable_by(Door::Api)) {
        bail!(
            "{} cannot be used with --host: the daemon decides where each sandbox's events go; read them with `warden --host ... logs` (-f --json to follow them)",
            f.flag().unwrap_or_default()
        );
    }
    let refused: [(bool, &str, &str); 7] = [
        (g(Field::Secret) || g(Field::SecretInBody) || g(Field::SecretRule),
         "--secret", "secrets are read by the daemon, not from this shell: name them in a profile of the daemon's host"),
        (g(Field::UpstreamCa), "--upstream-ca", "name the authority in a profile of the daemon's host"),
        (args.given.value(Field::Ask) == Some("true"), "--ask", "questions go to the daemon's approvals, not to this terminal"),
        (args.ask_save.is_some(), "--ask-save", "questions go to the daemon's approvals, whose \"always\" keeps the name on the sandbox's list"),
        (args.egress_learn_file.is_some(), "--egress-learn-file", "the daemon's sandboxes record what they were allowed in their audit log; read it with `warden --host ... logs`"),
        (args.tty, "--tty", "a terminal through the daemon is its PTY WebSocket (the Python client's sb.pty); run without -t"),
        (args.through_exec, "--through-exec", "a run through the daemon is already a create and an exec"),
    ];
    for (given, flag, why) in refused {
        if given {
            bail!("{flag} cannot be used with --host: {why}");
        }
    }
    if let Some(p) = &args.profile {
        if p.contains('/') || p.ends_with(".yaml") || p.ends_with(".yml") {
            bail!("--profile {p}: with --host a profile is named from the daemon's catalog (`warden profile list` on its host); put the file in the daemon's profile directory");
        }
    }
    Ok(())
}

/// The sandbox's part of `run`/`create`'s options as an API request: the
/// flags become an inline profile (`spec`), the command is left for the
/// exec.
fn create_request(
    args: RunArgs,
    name: Option<String>,
) -> anyhow::Result<(CreateSandbox, Vec<String>)> {
    refuse_local_only(&args)?;
    let profile = args.profile.clone();
    let input = super::resolution::input(args)?;
    let mut flags = input.flags;
    let command = match flags.slots.remove(&Field::Command) {
        Some(warden_policy::compose::Slot::One(s)) => match s.val {
            warden_policy::compose::Val::Argv(a) => a,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let workspace = match flags.slots.remove(&Field::Workspace) {
        Some(warden_policy::compose::Slot::One(s)) => match s.val {
            warden_policy::compose::Val::Path(p) => Some(p),
            _ => None,
        },
        _ => None,
    };
    let doc = flags.document();
    let spec = match &doc {
        serde_json::Value::Object(m) if m.is_empty() => None,
        _ => Some(doc),
    };
    let workspace = workspace
        .map(|w| {
            w.to_str().map(str::to_string).with_context(|| {
                format!(
                    "the workspace {} is not UTF-8, which the API cannot carry",
                    w.display()
                )
            })
        })
        .transpose()?;
    Ok((
        CreateSandbox {
            name,
            profile,
            spec,
            workspace,
            ttl_seconds: None,
            labels: BTreeMap::new(),
            start: Some(true),
        },
        command,
    ))
}

/// `warden --host H run ... -- CMD`: a sandbox made for the command,
/// removed after it.
pub fn run(host: &str, args: RunArgs) -> anyhow::Result<u8> {
    let detach = args.detach;
    if detach {
        bail!("--detach cannot be used with --host: use `warden --host ... create NAME --start` and `exec -d`");
    }
    let c = client(host)?;
    let (mut req, command) = create_request(args, None)?;
    if command.is_empty() {
        bail!("with --host, give the command after --");
    }
    req.labels
        .insert("warden.created-by".into(), "warden run".into());
    let sb = c.create(&req)?;
    let result = exec_in(host, &c, &sb.id, command, BTreeMap::new(), None, None);
    let removed = c.remove(&sb.id, true);
    let code = result?;
    removed.with_context(|| {
        format!(
            "the command ended, but sandbox {} could not be removed",
            sb.id
        )
    })?;
    Ok(code)
}

/// `warden --host H create NAME ...`.
pub fn create(host: &str, a: CreateArgs) -> anyhow::Result<u8> {
    let c = client(host)?;
    let (mut req, command) = create_request(*a.run, Some(a.name.clone()))?;
    if !command.is_empty() {
        bail!("with --host, a sandbox has no command of its own: give it to each `exec`");
    }
    req.ttl_seconds = a.ttl.map(|d| d.as_secs().max(1));
    req.start = Some(a.start);
    let sb = c.create(&req)?;
    eprintln!("created sandbox {} on {}", sb.id, c.target());
    Ok(0)
}

/// `warden --host H exec NAME ... -- CMD`.
pub fn exec(host: &str, a: ExecArgs) -> anyhow::Result<u8> {
    if a.tty {
        bail!("--tty cannot be used with --host: a terminal through the daemon is its PTY WebSocket; run without -t");
    }
    if a.workspace.is_some() {
        bail!("a sandbox's workspace is chosen when it is created");
    }
    if a.command.is_empty() {
        bail!("with --host, give the command after --");
    }
    let mut env = BTreeMap::new();
    for e in &a.env {
        let Some((k, v)) = e.split_once('=') else {
            bail!("--env {e}: expected NAME=VALUE");
        };
        env.insert(k.to_string(), v.to_string());
    }
    let c = client(host)?;
    if a.detach {
        let req = ExecRequest {
            argv: Some(a.command),
            env,
            cwd: a.workdir,
            timeout_seconds: a.timeout.map(|d| d.as_secs_f64()),
            background: true,
            ..Default::default()
        };
        let info = c
            .exec_background(&a.name, &req)
            .map_err(|e| refused(&a.name, e))?;
        println!("{}", info.id);
        return Ok(0);
    }
    exec_in(
        host,
        &c,
        &a.name,
        a.command,
        env,
        a.workdir,
        a.timeout.map(|d| d.as_secs_f64()),
    )
}

/// A command the daemon refused, as the command line says it: a sandbox
/// whose supervisor is busy as this machine's would be (one sentence);
/// anything else as the daemon said it.
fn refused(name: &str, e: warden_client::ClientError) -> anyhow::Error {
    match &e {
        warden_client::ClientError::Refused { problem, .. }
            if problem.reason.as_deref() == Some("busy") =>
        {
            super::lifecycle::busy(name)
        }
        _ => e.into(),
    }
}

/// Run `argv` in sandbox `id`, its output to ours as it comes and our
/// standard input to it (unless ours is a terminal); its exit status.
fn exec_in(
    host: &str,
    c: &Client,
    id: &str,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    timeout: Option<f64>,
) -> anyhow::Result<u8> {
    let forward_stdin = !std::io::stdin().is_terminal();
    let req = ExecRequest {
        argv: Some(argv),
        env,
        cwd,
        timeout_seconds: timeout,
        stdin_open: forward_stdin,
        ..Default::default()
    };
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let mut write_error = None;
    let exit = c.exec_stream(id, &req, |event| {
        let written = match event {
            ExecEvent::Started { id: exec, .. } if forward_stdin => {
                feed_stdin(host.to_string(), id.to_string(), exec.clone());
                Ok(())
            }
            ExecEvent::Stdout {
                data, data_base64, ..
            } => out
                .write_all(&warden_client::output_bytes(data, data_base64))
                .and_then(|_| out.flush()),
            ExecEvent::Stderr {
                data, data_base64, ..
            } => err.write_all(&warden_client::output_bytes(data, data_base64)),
            _ => Ok(()),
        };
        if let Err(e) = written {
            write_error.get_or_insert(e);
        }
    });
    let exit = exit.map_err(|e| refused(id, e))?;
    if let Some(e) = write_error {
        // Our own output went away (a closed pipe): the command's status
        // still stands, said once.
        eprintln!("warden: cannot write the command's output: {e}");
    }
    match exit {
        ExecEvent::Exited {
            exit_status,
            timed_out,
            stdout_dropped,
            stderr_dropped,
            ..
        } => {
            if timed_out {
                eprintln!("warden: the command was killed at its timeout");
            }
            if let Some(line) = super::lifecycle::dropped_line(stdout_dropped, stderr_dropped) {
                eprintln!("warden: {line}");
            }
            Ok(u8::try_from(exit_status).unwrap_or(255))
        }
        _ => Ok(125),
    }
}

/// Our standard input to the exec, from a thread of its own (with a
/// client of its own), closed at our end of file.
fn feed_stdin(host: String, id: String, exec: String) {
    std::thread::spawn(move || {
        let Ok(c) = client(&host) else { return };
        let mut stdin = std::io::stdin();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = c.stdin(&id, &exec, &[], true);
                    return;
                }
                Ok(n) => {
                    if c.stdin(&id, &exec, &buf[..n], false).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// `warden --host H ls`.
pub fn ls(host: &str, json: bool) -> anyhow::Result<u8> {
    let list = client(host)?.list()?;
    if json {
        println!("{}", warden_audit::json::to_string_pretty(&list)?);
        return Ok(0);
    }
    println!(
        "{:<24} {:<14} {:<9} {:>5} {:>8} {:>8} {:>8} {:>5}  WORKSPACE",
        "NAME", "PROFILE", "STATE", "PROCS", "MEMORY", "EGRESS", "CHANGES", "AGE"
    );
    for s in list {
        println!(
            "{:<24} {:<14} {:<9} {:>5} {:>8} {:>8} {:>8} {:>5}  {}",
            super::sandboxes::printable(&s.id),
            super::sandboxes::printable(s.profile.as_deref().unwrap_or("-")),
            super::sandboxes::printable(&s.state),
            s.processes,
            s.memory_bytes
                .map(super::units::human)
                .unwrap_or_else(|| "-".into()),
            super::units::human(s.egress_bytes),
            super::units::human(s.changes_bytes),
            super::units::age(s.age_seconds),
            super::sandboxes::printable(&s.workspace)
        );
    }
    Ok(0)
}

/// `warden --host H logs NAME [-f] [--json]`.
pub fn logs(host: &str, name: &str, follow: bool, json: bool) -> anyhow::Result<u8> {
    let c = client(host)?;
    let mut out = std::io::stdout();
    c.events(name, 0, follow, |v| {
        // The daemon's JSON as the local `--json` writes it: no control or
        // format character raw on the terminal.
        let escaped = || warden_audit::json::to_string(&v).unwrap_or_default();
        let line = if json {
            escaped()
        } else {
            match serde_json::from_value::<warden_audit::Event>(v.clone()) {
                Ok(e) => super::rows::one_line(&super::audit::describe(&e)),
                Err(_) => escaped(),
            }
        };
        writeln!(out, "{line}").and_then(|_| out.flush()).is_ok()
    })?;
    Ok(0)
}

/// `warden --host H logs NAME --exec ID`: a command's kept output through
/// the daemon's output route, from its start: the daemon streams it until
/// the command ends, with or without -f.
pub fn exec_output(host: &str, name: &str, exec: &str, _follow: bool) -> anyhow::Result<u8> {
    let c = client(host)?;
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let exit = c.exec_output(name, exec, |event| {
        let _ = match event {
            ExecEvent::Stdout {
                data, data_base64, ..
            } => out
                .write_all(&warden_client::output_bytes(data, data_base64))
                .and_then(|_| out.flush()),
            ExecEvent::Stderr {
                data, data_base64, ..
            } => err.write_all(&warden_client::output_bytes(data, data_base64)),
            _ => Ok(()),
        };
    })?;
    if let ExecEvent::Exited {
        stdout_dropped,
        stderr_dropped,
        ..
    } = exit
    {
        if let Some(line) = super::lifecycle::dropped_line(stdout_dropped, stderr_dropped) {
            eprintln!("warden: {line}");
        }
    }
    Ok(0)
}

/// `warden --host H stop NAME...`.
pub fn stop(host: &str, names: &[String], time: std::time::Duration) -> anyhow::Result<u8> {
    let c = client(host)?;
    for name in names {
        c.stop(name, Some(time.as_secs()))?;
        println!("stopped sandbox {name}");
    }
    Ok(0)
}

/// `warden --host H rm [-f] NAME...`.
pub fn rm(host: &str, names: &[String], force: bool) -> anyhow::Result<u8> {
    let c = client(host)?;
    for name in names {
        c.remove(name, force)?;
        println!("removed sandbox {name}");
    }
    Ok(0)
}

/// `warden --host H egress NAME [--allow E]... [--deny E]...`: the
/// daemon's sandbox's allowlist, read or changed live.
pub fn egress(
    host: &str,
    name: &str,
    allow: Vec<String>,
    deny: Vec<String>,
    json: bool,
) -> anyhow::Result<u8> {
    let patch = warden_client::api::EgressPatch {
        allow,
        remove: deny,
    };
    let rules = client(host)?.egress(name, &patch)?;
    if json {
        println!("{}", warden_audit::json::to_string_pretty(&rules)?);
    } else {
        for r in rules {
            println!("{r}");
        }
    }
    Ok(0)
}

/// `warden --host H diff NAME [PATHS] [--json]`: the sandbox's changes as
/// the daemon reviews them, one line each with its flags and its content
/// (or as JSON): a review, which the same caller's later commit counts.
pub fn diff(host: &str, a: super::sandboxes::DiffArgs) -> anyhow::Result<u8> {
    if a.stat {
        bail!("--stat cannot be used with --host: the daemon answers whole changes; use --json for their details");
    }
    let answer = client(host)?.changes_with_content(&a.name)?;
    let wanted: Vec<String> = a
        .paths
        .iter()
        .map(|p| {
            p.to_string_lossy()
                .trim_start_matches("/workspace/")
                .to_string()
        })
        .collect();
    let listing = warden_workspace::Listing::of_json(answer.changes, a.ignored);
    let shown: Vec<&serde_json::Value> = listing
        .shown
        .iter()
        .filter(|c| {
            wanted.is_empty()
                || c["path"].as_str().is_some_and(|p| {
                    wanted
                        .iter()
                        .any(|w| p == w || p.starts_with(&format!("{w}/")))
                })
        })
        .collect();
    if a.json {
        println!("{}", warden_audit::json::to_string_pretty(&shown)?);
        return Ok(0);
    }
    for c in &shown {
        let path = super::sandboxes::printable(c["path"].as_str().unwrap_or("?"));
        println!("{:<12} {path}", c["kind"].as_str().unwrap_or("?"));
        for f in c["flags"].as_array().into_iter().flatten() {
            println!(
                "             ! {}: {}",
                f["rule"].as_str().unwrap_or("?"),
                super::sandboxes::printable(f["reason"].as_str().unwrap_or(""))
            );
        }
        print_content(&c["content"]);
    }
    if let Some(line) = listing.left_out_line("shown", "--ignored shows them") {
        eprintln!("{line}");
    }
    if shown.is_empty() {
        eprintln!("no changes in sandbox {}", a.name);
    } else if answer.flagged > 0 {
        eprintln!(
            "{} change(s) flagged: `warden --host ... commit {} --accept-flagged` applies them too when the daemon's owner or a quota-free admin token sends it; another token commits the other paths by name and leaves these to the owner",
            answer.flagged, a.name
        );
    }
    Ok(0)
}

/// One change's `content` as the daemon gave it: its unified diff line
/// by line, or what differs (binary, not diffed), each line escaped.
fn print_content(content: &serde_json::Value) {
    let say = |line: &str| println!("  {}", super::sandboxes::printable(line));
    match content["type"].as_str() {
        Some("text") => {
            if content["coarse"].as_bool() == Some(true) {
                say(&format!("({})", warden_workspace::COARSE_NOTE));
            }
            match content["patch"].as_str() {
                Some(patch) => warden_workspace::patch_lines(patch).for_each(say),
                None => say(&format!(
                    "+{} -{} lines",
                    content["added"].as_u64().unwrap_or(0),
                    content["removed"].as_u64().unwrap_or(0)
                )),
            }
        }
        Some("binary") => say(&format!(
            "binary files differ ({} -> {} bytes)",
            content["old_size"].as_u64().unwrap_or(0),
            content["new_size"].as_u64().unwrap_or(0)
        )),
        Some("not_diffed") => say(&format!(
            "changed, {} -> {} lines, not diffed: {}",
            content["old_lines"].as_u64().unwrap_or(0),
            content["new_lines"].as_u64().unwrap_or(0),
            content["reason"].as_str().unwrap_or("?")
        )),
        _ => {}
    }
}

/// `warden --host H commit NAME [PATHS] [--force] [--accept-flagged]`:
/// what the last `diff` showed (or, with --unreviewed, the layer as it is
/// now), by the daemon's rules.
pub fn commit(host: &str, a: super::sandboxes::CommitArgs) -> anyhow::Result<u8> {
    if a.interactive {
        bail!("--interactive cannot be used with --host: review with `warden --host ... diff`, then commit what you chose by path");
    }
    let c = client(host)?;
    if a.unreviewed {
        c.changes_with_content(&a.name)?;
    }
    let req = warden_client::api::CommitRequest {
        paths: a
            .paths
            .iter()
            .map(|p| {
                p.to_string_lossy()
                    .trim_start_matches("/workspace/")
                    .to_string()
            })
            .collect(),
        force: a.force,
        accept_flagged: a.accept_flagged,
        include_ignored: a.ignored,
    };
    let done = c.commit(&a.name, &req)?;
    for p in &done.applied {
        println!("applied {}", super::sandboxes::printable(p));
    }
    if let Some(line) = warden_workspace::left_out_line(
        done.ignored.len(),
        "committed, left in the sandbox",
        "--ignored commits them",
    ) {
        eprintln!("warden: {line}");
    }
    for p in &done.forced {
        eprintln!(
            "warden: {} had changed on the host too; overwritten (--force)",
            super::sandboxes::printable(p)
        );
    }
    Ok(0)
}

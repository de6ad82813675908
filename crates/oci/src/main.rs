//! `warden-oci`: the runc command line onto warden's sandboxes. Parses,
//! calls the library, prints; and, under hidden verbs, is the supervisor
//! of a container (`__supervise NAME`) and the waiter of a detached exec.

// The binaries only parse, wire and print: what needs unsafe is the
// libraries' (jail, egress, vm), each block with its reason.
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use warden_oci::args::{Cli, Verb};
use warden_oci::{create, exec, verbs};

fn main() -> ExitCode {
    // The host's settings the runtime and the backends honour (the state
    // directory, `XDG_RUNTIME_DIR`, `WARDEN_RUNSC`), read once here: the
    // libraries read no environment.
    warden_runtime::settings::install_from(|name| std::env::var_os(name));
    let argv: Vec<String> = std::env::args().collect();
    // The supervisor clones the sandbox: it must start single-threaded,
    // before anything else runs.
    if argv.get(1).map(String::as_str) == Some("__supervise") {
        return code(supervise(argv.get(2).map(String::as_str).unwrap_or("")));
    }
    if argv.get(1).map(String::as_str) == Some(exec::WAITER) {
        return code(exec_wait(&argv[2..]));
    }
    if argv.get(1).map(String::as_str) == Some(exec::GUARD) {
        return code(exec_guard(&argv[2..]));
    }
    let cli = Cli::parse();
    let log = Log {
        path: cli.log.clone(),
        json: cli.log_format == "json",
    };
    match dispatch(&cli, &log) {
        Ok(c) => ExitCode::from(c),
        Err(e) => {
            let msg = message(&e);
            log.write("error", &msg);
            eprintln!("warden-oci: {msg}");
            ExitCode::from(1)
        }
    }
}

fn code(r: anyhow::Result<u8>) -> ExitCode {
    match r {
        Ok(c) => ExitCode::from(c),
        Err(e) => {
            eprintln!("warden-oci: {}", message(&e));
            ExitCode::from(125)
        }
    }
}

/// Library text as this door says it. Whoever reads warden-oci's messages
/// (containerd's log, the person running the node) set the sandbox's
/// options in the node's profile and the pod's annotations, never with
/// `warden run`'s flags: options are named by their profile keys
/// (`` `resources.disk` ``), as the libraries write them.
fn worded(text: &str) -> String {
    warden_policy::word(text, warden_policy::Door::Profile)
}

/// An error with its causes, as this door says it: a value's error names
/// its field by the key (`resources.memory: 1024 bytes is too small`),
/// where the resolver's `Display` is the command line's (`--memory ...`).
fn message(e: &anyhow::Error) -> String {
    use warden_oci::OciError;
    use warden_runtime::lifecycle::LifecycleError;
    use warden_runtime::resolve::ResolveError;
    let text = format!("{e:#}");
    let value = e.chain().find_map(|c| {
        let resolve = match c.downcast_ref::<OciError>() {
            Some(OciError::Lifecycle(LifecycleError::Resolve(r))) => Some(&**r),
            _ => match c.downcast_ref::<LifecycleError>() {
                Some(LifecycleError::Resolve(r)) => Some(&**r),
                _ => c.downcast_ref::<ResolveError>(),
            },
        };
        match resolve {
            Some(ResolveError::Spec(s)) => Some(s),
            _ => None,
        }
    });
    let text = match value {
        Some(s) => text.replace(&s.describe_for_cli(), &s.describe_for_profile()),
        None => text,
    };
    worded(&text)
}

/// `--log` / `--log-format`: where messages for the shim go.
struct Log {
    path: Option<PathBuf>,
    json: bool,
}

impl Log {
    fn write(&self, level: &str, msg: &str) {
        let Some(path) = &self.path else {
            return;
        };
        let msg = worded(msg);
        let time = humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string();
        let line = if self.json {
            serde_json::json!({"level": level, "msg": msg, "time": time}).to_string()
        } else {
            format!("{time} {level}: {msg}")
        };
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

fn dispatch(cli: &Cli, log: &Log) -> anyhow::Result<u8> {
    let root = absolute(&cli.root)?;
    match &cli.verb {
        Verb::Create(a) => {
            let made = create::create(
                &root,
                &a.id,
                &a.bundle,
                a.pid_file.as_deref(),
                a.console_socket.as_deref(),
                &create::own_exe()?,
            )?;
            for n in &made.notices {
                log.write("warning", n);
            }
            Ok(0)
        }
        Verb::Run(a) => {
            let c = &a.create;
            let made = create::create(
                &root,
                &c.id,
                &c.bundle,
                c.pid_file.as_deref(),
                c.console_socket.as_deref(),
                &create::own_exe()?,
            )?;
            for n in &made.notices {
                log.write("warning", n);
            }
            let exec = verbs::start(&root, &c.id)?;
            if a.detach {
                return Ok(0);
            }
            let _ = made.pid;
            let status = verbs::wait(&root, &c.id, exec);
            if let Ok(warnings) = verbs::delete(&root, &c.id, true) {
                for w in warnings {
                    log.write("warning", &w);
                }
            }
            Ok(status?.clamp(0, 255) as u8)
        }
        Verb::Start { id } => {
            verbs::start(&root, id)?;
            Ok(0)
        }
        Verb::State { id } => {
            println!(
                "{}",
                warden_audit::json::to_string_pretty(&verbs::state(&root, id)?)?
            );
            Ok(0)
        }
        Verb::Kill { id, signal, all } => {
            verbs::kill(&root, id, signal, *all)?;
            Ok(0)
        }
        Verb::Delete { id, force } => {
            for w in verbs::delete(&root, id, *force)? {
                log.write("warning", &w);
                eprintln!("warden-oci: warning: {}", worded(&w));
            }
            Ok(0)
        }
        Verb::Exec(a) => {
            let req = exec::request(a)?;
            if a.detach {
                exec::detach(
                    &root,
                    &a.id,
                    &req,
                    a.console_socket.as_deref(),
                    a.pid_file.as_deref(),
                    &create::own_exe()?,
                )?;
                return Ok(0);
            }
            let status = exec::run(
                &root,
                &a.id,
                req,
                a.console_socket.as_deref(),
                a.pid_file.as_deref(),
            )?;
            Ok(status.clamp(0, 255) as u8)
        }
        Verb::Ps { id, format } => {
            let out = verbs::ps(&root, id, format == "json")?;
            print!("{out}");
            if format == "json" {
                println!();
            }
            Ok(0)
        }
        Verb::Features => {
            println!(
                "{}",
                warden_audit::json::to_string_pretty(&verbs::features())?
            );
            Ok(0)
        }
        Verb::Pause { id } => {
            verbs::pause(&root, id, false)?;
            Ok(0)
        }
        Verb::Resume { id } => {
            verbs::pause(&root, id, true)?;
            Ok(0)
        }
        Verb::Update { .. } => Err(verbs::unsupported("update").into()),
        Verb::Events { .. } => Err(verbs::unsupported("events").into()),
    }
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("--root {}", p.display()))
}

/// `__supervise NAME`: the supervisor of a container's sandbox.
fn supervise(name: &str) -> anyhow::Result<u8> {
    let state = std::env::var_os("WARDEN_STATE_DIR")
        .map(PathBuf::from)
        .context("the supervisor needs WARDEN_STATE_DIR")?;
    // How the start went is told on stdout, which `create` reads.
    let ready = warden_runtime::supervisor::take_ready_pipe()
        .context("cannot keep the start-up pipe and detach stdout")?;
    // The container's cgroup under the one its manager named, before the
    // supervisor makes it.
    warden_oci::cgroups_path::place(&state, name)?;
    // The node's catalogue, as its pods' profiles are read from it.
    let catalog = warden_runtime::resolve::catalog(|k| std::env::var_os(k));
    let code = warden_runtime::supervisor::run_main(&state, name, Vec::new(), ready, &catalog);
    Ok(code.clamp(0, 255) as u8)
}

/// `__exec-guard ROOT ID EXEC`: ends the exec if its waiter is killed.
fn exec_guard(args: &[String]) -> anyhow::Result<u8> {
    let [root, id, exec] = args else {
        anyhow::bail!("__exec-guard takes ROOT ID EXEC");
    };
    let exec: u64 = exec.parse().context("the exec's number")?;
    exec::guard(Path::new(root), id, exec)?;
    Ok(0)
}

/// `__exec-wait ROOT ID PIDFILE CONSOLE REQUEST`: a detached exec's waiter.
fn exec_wait(args: &[String]) -> anyhow::Result<u8> {
    let [root, id, pid_file, console, req] = args else {
        anyhow::bail!("__exec-wait takes ROOT ID PIDFILE CONSOLE REQUEST");
    };
    let req = serde_json::from_str(req).context("the exec request")?;
    let console = (!console.is_empty()).then(|| PathBuf::from(console));
    let status = exec::run(
        Path::new(root),
        id,
        req,
        console.as_deref(),
        Some(Path::new(pid_file)),
    )?;
    Ok(status.clamp(0, 255) as u8)
}

//! The tools: their descriptions and arguments, and each one as calls to
//! the daemon's API. A bad argument, a refusal of the API or a denied
//! action is a tool error (`isError`) whose text says what was wrong and
//! what to do, never a protocol error.

use axum::http::Method;
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::Peer;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

use super::inner::{enc, Api, Identity, Refused, Send};
use super::Session;
use crate::api::{ChangesAnswer, CommitAnswer, ExecInfo, ExecResult, FileList};

/// What the server tells a client about itself at the start.
pub const INSTRUCTIONS: &str = "warden gives you a sandbox: a Linux machine of its own (its own processes, file tree and network) in which you run commands and edit files without reaching the host. Tools that take \"sandbox\" use this session's only sandbox when it is left out, and make one of the defaults when there is none yet. The workspace is at /workspace; with a workspace from the host, what you write there stays in the sandbox until commit_changes (get_changes shows it). Each sandbox's event log is a resource (warden://sandboxes/ID/events).";

/// Bytes of a stream shown in a tool result; more is cut in the middle.
const SHOWN: usize = 32 * 1024;
/// Bytes of a file `read_file` shows.
const FILE_SHOWN: usize = 256 * 1024;
/// The largest file `read_file` reads at all.
const FILE_READ: usize = 16 << 20;
/// `run_command`'s timeout when none is given, and the most it takes.
const RUN_TIMEOUT: f64 = 120.0;
const MAX_TIMEOUT: f64 = 24.0 * 3600.0;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// A profile's name (see the tool's description for the ones offered).
    pub profile: Option<String>,
    /// A host directory to work on, seen at /workspace through an overlay.
    pub workspace: Option<String>,
    /// Leave the sandbox behind when this session ends (default: it is removed).
    #[serde(default)]
    pub keep: bool,
    /// Stop the sandbox this many seconds after it starts.
    pub ttl_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// The sandbox (default: this session's only one).
    pub sandbox: Option<String>,
    /// The program and its arguments, e.g. ["ls", "-l"]. Give this or `shell`.
    pub argv: Option<Vec<String>>,
    /// A shell command line, run with `sh -c`, e.g. "make test 2>&1 | tail". Give this or `argv`.
    pub shell: Option<String>,
    /// The working directory (default /workspace).
    pub cwd: Option<String>,
    /// Text for the command's standard input.
    pub stdin: Option<String>,
    /// Seconds before the command is killed (run_command: default 120).
    pub timeout_seconds: Option<f64>,
    /// Environment variables to add.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PollArgs {
    /// The id start_command answered.
    pub command: String,
    /// Wait up to this many seconds for output or the end (0 to 60, default 10).
    pub wait_seconds: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    pub sandbox: Option<String>,
    /// Relative to /workspace, or absolute under /workspace.
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    pub sandbox: Option<String>,
    /// Relative to /workspace, or absolute under /workspace.
    pub path: String,
    /// The whole new content (text).
    pub content: String,
    /// Permission bits, octal, e.g. "0755" (default "0644").
    pub mode: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitArgs {
    pub sandbox: Option<String>,
    /// Only these paths (default: every change get_changes showed).
    #[serde(default)]
    pub paths: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DestroyArgs {
    /// The sandbox to stop and remove, with its uncommitted changes.
    pub sandbox: String,
}

fn tool<T: JsonSchema + 'static>(name: &'static str, description: String) -> Tool {
    Tool::new(name, description, schema_for_type::<T>())
}

impl Session {
    /// The tools, with what this session's sandboxes allow in their
    /// descriptions.
    pub(super) fn tool_list(&self) -> Vec<Tool> {
        let allows = {
            let state = self.state();
            if state.sandboxes.is_empty() {
                format!(
                    "\n\nA sandbox made without arguments allows:\n{}",
                    self.default_allows()
                )
            } else {
                let mut s = String::from("\n\nThis session's sandboxes:");
                for (id, o) in &state.sandboxes {
                    s.push_str(&format!("\n{id}:\n{}", o.allows));
                }
                s
            }
        };
        let offered = {
            let s = self.settings();
            match (s.profiles.is_empty(), &s.default_profile, s.door) {
                (false, _, _) => format!("Profiles offered: {}.", s.profiles.join(", ")),
                (true, _, "http") => {
                    "Profiles: any the daemon's owner wrote that your token may use.".into()
                }
                (true, Some(d), _) => format!("The only profile offered is {d:?}."),
                (true, None, _) => {
                    "No profile is offered: sandboxes get warden's defaults (no network).".into()
                }
            }
        };
        let roots = {
            let s = self.settings();
            if s.workspace_roots.is_empty() {
                "No workspace may be named.".to_string()
            } else {
                format!(
                    "A workspace may be named under: {}.",
                    s.workspace_roots
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        };
        vec![
            tool::<CreateArgs>("create_sandbox", format!(
                "Make and start a sandbox. Usually not needed: the other tools make one of the defaults when this session has none. {offered} {roots} The sandbox is removed when this session ends unless \"keep\" is true; commit_changes first to keep its work.{allows}")),
            tool::<RunArgs>("run_command", format!(
                "Run a command in the sandbox and wait for it: its exit status, standard output and standard error (each cut in the middle past {} KiB, with a note saying how much). Killed after timeout_seconds (default {RUN_TIMEOUT} s); for longer commands use start_command. Network connections the sandbox denied while it ran are listed.{allows}", SHOWN / 1024)),
            tool::<RunArgs>("start_command", format!(
                "Start a long-running command in the sandbox and return at once with its id; read its output and end with poll_command. timeout_seconds: none unless given.{allows}")),
            tool::<PollArgs>("poll_command", "Output of a command start_command started, since the last poll, and whether it has ended (with its exit status). Waits up to wait_seconds for something new.".into()),
            tool::<PathArgs>("read_file", format!(
                "Read a file of the sandbox's workspace (/workspace). Paths outside it (`..`, absolute paths elsewhere, symbolic links anywhere on the way) are refused. Text is shown up to {} KiB.", FILE_SHOWN / 1024)),
            tool::<WriteArgs>("write_file", "Write (create or replace) a file in the sandbox's workspace (/workspace); its directory must exist. Paths outside the workspace and symbolic links are refused.".into()),
            tool::<PathArgs>("list_files", "List a directory of the sandbox's workspace (default: /workspace itself): each entry's kind, size and name.".into()),
            tool::<PathArgs>("get_changes", "What the sandbox changed in its workspace, as a review: each changed path, what kind of change, flags (changes to files the host runs, such as git hooks or build scripts, are flagged and left for a person) and a unified diff for text. What this shows is what commit_changes may apply.".into()),
            tool::<CommitArgs>("commit_changes", "Apply the changes get_changes showed to the host's real workspace. The sandbox is stopped for the commit (its processes end) and started again. Refused, with nothing applied, when something changed since get_changes (call it again), when a change is flagged (a person reviews those: the sandbox is then kept after this session), or when the host's file changed meanwhile.".into()),
            tool::<DestroyArgs>("destroy_sandbox", "Stop and remove a sandbox of this session, with its uncommitted changes.".into()),
        ]
    }

    /// Run one tool; every failure is a tool error for the model to read.
    pub(super) async fn dispatch(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let args = serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
        let name = request.name.as_ref();
        let result = match name {
            "create_sandbox" => match parse::<CreateArgs>(name, args) {
                Ok(a) => self
                    .create(a.profile, a.workspace, a.keep, a.ttl_seconds, &ctx)
                    .await
                    .map(|(id, allows)| format!("Sandbox {id} is running. It allows:\n{allows}")),
                Err(e) => Err(e),
            },
            "run_command" => match parse::<RunArgs>(name, args) {
                Ok(a) => self.run(a, &ctx).await,
                Err(e) => Err(e),
            },
            "start_command" => match parse::<RunArgs>(name, args) {
                Ok(a) => self.start(a, &ctx).await,
                Err(e) => Err(e),
            },
            "poll_command" => match parse::<PollArgs>(name, args) {
                Ok(a) => self.poll(a, &ctx).await,
                Err(e) => Err(e),
            },
            "read_file" => match parse::<PathArgs>(name, args) {
                Ok(a) => self.read_file(a, &ctx).await,
                Err(e) => Err(e),
            },
            "write_file" => match parse::<WriteArgs>(name, args) {
                Ok(a) => self.write_file(a, &ctx).await,
                Err(e) => Err(e),
            },
            "list_files" => match parse::<PathArgs>(name, args) {
                Ok(a) => self.list_files(a, &ctx).await,
                Err(e) => Err(e),
            },
            "get_changes" => match parse::<PathArgs>(name, args) {
                Ok(a) => self.get_changes(a, &ctx).await,
                Err(e) => Err(e),
            },
            "commit_changes" => match parse::<CommitArgs>(name, args) {
                Ok(a) => self.commit(a, &ctx).await,
                Err(e) => Err(e),
            },
            "destroy_sandbox" => match parse::<DestroyArgs>(name, args) {
                Ok(a) => self.destroy(a, &ctx).await,
                Err(e) => Err(e),
            },
            other => Err(Refused::new(
                "bad_request",
                format!("there is no tool {other:?}: list the tools to see them"),
            )),
        };
        let notes = self.take_notes();
        let with_notes = |mut text: String| {
            for n in &notes {
                text.push_str("\n\nNote: ");
                text.push_str(n);
            }
            text
        };
        match result {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(with_notes(text))]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(with_notes(format!(
                "{name} failed ({}): {}",
                e.code, e.message
            )))]),
        }
    }

    async fn run(&self, a: RunArgs, ctx: &RequestContext<RoleServer>) -> Result<String, Refused> {
        let timeout = checked_timeout(a.timeout_seconds)?.unwrap_or(RUN_TIMEOUT);
        let who = self.identity(ctx)?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        let since = warden_runtime::state::now_ms();
        let body = exec_body(&a, Some(timeout), false);
        let r: ExecResult = self
            .api()
            .json(
                &who,
                Method::POST,
                &format!("/v1/sandboxes/{}/exec", enc(&sb)),
                Send::Json(body),
            )
            .await?;
        let mut text = match (r.timed_out, r.signal) {
            (true, _) => format!(
                "killed after {timeout} s (timeout_seconds); status {}",
                r.exit_status
            ),
            (false, Some(sig)) => format!("killed by signal {sig}; status {}", r.exit_status),
            (false, None) => format!("exit status {}", r.exit_status),
        };
        text.push_str(&format!(
            "\n--- stdout ---\n{}",
            shown(r.stdout.as_bytes(), SHOWN)
        ));
        text.push_str(&format!(
            "\n--- stderr ---\n{}",
            shown(r.stderr.as_bytes(), SHOWN)
        ));
        let denied = self.denials_since(&who, &sb, since).await;
        if !denied.is_empty() {
            text.push_str(&format!(
                "\n--- denied by the sandbox's policy while it ran ---\n{}",
                denied.join("\n")
            ));
            if r.exit_status != 0 {
                // The command failed, and warden refused it something: the
                // refusal is the answer, not a reason to try again.
                return Err(Refused::new(
                    "denied",
                    format!(
                        "the command failed and the sandbox denied what it tried (this sandbox does not allow it; do not retry the same thing):\n{text}"
                    ),
                ));
            }
        }
        Ok(text)
    }

    async fn start(&self, a: RunArgs, ctx: &RequestContext<RoleServer>) -> Result<String, Refused> {
        let timeout = checked_timeout(a.timeout_seconds)?;
        let who = self.identity(ctx)?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        let body = exec_body(&a, timeout, true);
        let info: ExecInfo = self
            .api()
            .json(
                &who,
                Method::POST,
                &format!("/v1/sandboxes/{}/exec", enc(&sb)),
                Send::Json(body),
            )
            .await?;
        self.state().commands.insert(
            info.id.clone(),
            super::Started {
                sandbox: sb.clone(),
                stdout: 0,
                stderr: 0,
            },
        );
        Ok(format!(
            "command {} started in sandbox {sb} (pid {}): read its output with poll_command {{\"command\": \"{}\"}}",
            info.id,
            info.pid.unwrap_or(0),
            info.id
        ))
    }

    async fn poll(&self, a: PollArgs, ctx: &RequestContext<RoleServer>) -> Result<String, Refused> {
        use futures_util::StreamExt;
        let wait = match a.wait_seconds {
            None => 10.0,
            Some(w) if w.is_finite() && (0.0..=60.0).contains(&w) => w,
            Some(w) => {
                return Err(Refused::new(
                    "bad_request",
                    format!("wait_seconds {w}: a number of seconds from 0 to 60"),
                ))
            }
        };
        let who = self.identity(ctx)?;
        let (sb, from_out, from_err) = {
            let state = self.state();
            let Some(c) = state.commands.get(&a.command) else {
                return Err(Refused::new(
                    "not_found",
                    format!(
                        "no command {:?} in this session: start_command answers the id",
                        a.command
                    ),
                ));
            };
            (c.sandbox.clone(), c.stdout, c.stderr)
        };
        let response = self
            .api()
            .raw(
                &who,
                Method::GET,
                &format!(
                    "/v1/sandboxes/{}/execs/{}/output?stdout_offset={from_out}&stderr_offset={from_err}",
                    enc(&sb),
                    enc(&a.command)
                ),
                Send::None,
            )
            .await?;
        let mut stream = response.into_body().into_data_stream();
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(wait);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut ended = None;
        let mut pending = Vec::new();
        // Once output came, a little more time for the rest of it.
        let mut soon: Option<tokio::time::Instant> = None;
        loop {
            let until = soon.map_or(deadline, |s| s.min(deadline));
            let next = tokio::time::timeout_at(until, stream.next()).await;
            let chunk = match next {
                Ok(Some(Ok(c))) => c,
                _ => break,
            };
            pending.extend_from_slice(&chunk);
            while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=nl).collect();
                let Ok(ev) = serde_json::from_slice::<crate::api::ExecEvent>(&line) else {
                    continue;
                };
                match ev {
                    crate::api::ExecEvent::Stdout {
                        data, data_base64, ..
                    } => out.extend(bytes_of(data, data_base64)),
                    crate::api::ExecEvent::Stderr {
                        data, data_base64, ..
                    } => err.extend(bytes_of(data, data_base64)),
                    crate::api::ExecEvent::Exited {
                        exit_status,
                        signal,
                        timed_out,
                    } => ended = Some((exit_status, signal, timed_out)),
                    _ => {}
                }
            }
            if ended.is_some() || out.len() + err.len() > SHOWN * 4 {
                break;
            }
            if !out.is_empty() || !err.is_empty() {
                soon.get_or_insert_with(|| {
                    tokio::time::Instant::now() + Duration::from_millis(200)
                });
            }
        }
        if let Some(c) = self.state().commands.get_mut(&a.command) {
            c.stdout += out.len() as u64;
            c.stderr += err.len() as u64;
        }
        let mut text = match ended {
            Some((status, _, true)) => format!("ended: killed at its timeout; status {status}"),
            Some((status, Some(sig), _)) => {
                format!("ended: killed by signal {sig}; status {status}")
            }
            Some((status, None, _)) => format!("ended: exit status {status}"),
            None => "still running (poll again for more)".to_string(),
        };
        text.push_str(&format!("\n--- stdout (new) ---\n{}", shown(&out, SHOWN)));
        text.push_str(&format!("\n--- stderr (new) ---\n{}", shown(&err, SHOWN)));
        if ended.is_some() {
            self.state().commands.remove(&a.command);
        }
        Ok(text)
    }

    async fn read_file(
        &self,
        a: PathArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
        let who = self.identity(ctx)?;
        let path = a
            .path
            .ok_or_else(|| Refused::new("bad_request", "name the file with \"path\""))?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        let bytes = self
            .api()
            .call(
                &who,
                Method::GET,
                &format!("/v1/sandboxes/{}/files?path={}", enc(&sb), enc(&path)),
                Send::None,
                FILE_READ,
            )
            .await
            .map_err(|mut e| {
                if e.code == "too_large" {
                    e.message = format!(
                        "{path} is larger than {} MiB: read a part of it with run_command (head, tail, sed -n '100,200p')",
                        FILE_READ >> 20
                    );
                }
                e
            })?;
        Ok(match std::str::from_utf8(&bytes) {
            Ok(_) if bytes.len() <= FILE_SHOWN => String::from_utf8_lossy(&bytes).into_owned(),
            Ok(_) => format!(
                "{}\n[... the file has {} bytes; the first {} are shown, {} cut: read a part with run_command, e.g. sed -n '100,200p' {path}]",
                String::from_utf8_lossy(&bytes[..utf8_cut(&bytes, FILE_SHOWN)]),
                bytes.len(),
                utf8_cut(&bytes, FILE_SHOWN),
                bytes.len() - utf8_cut(&bytes, FILE_SHOWN)
            ),
            Err(_) => format!(
                "{path} is not text ({} bytes); look at it with run_command (e.g. xxd {path} | head)",
                bytes.len()
            ),
        })
    }

    async fn write_file(
        &self,
        a: WriteArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
        let who = self.identity(ctx)?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        let mut uri = format!("/v1/sandboxes/{}/files?path={}", enc(&sb), enc(&a.path));
        if let Some(m) = &a.mode {
            uri.push_str(&format!("&mode={}", enc(m)));
        }
        let n = a.content.len();
        self.api()
            .call(
                &who,
                Method::PUT,
                &uri,
                Send::Bytes(a.content.into_bytes()),
                1 << 16,
            )
            .await?;
        Ok(format!("wrote {n} bytes to {} in sandbox {sb}", a.path))
    }

    async fn list_files(
        &self,
        a: PathArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
        let who = self.identity(ctx)?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        let path = a.path.unwrap_or_default();
        let list: FileList = self
            .api()
            .json(
                &who,
                Method::GET,
                &format!("/v1/sandboxes/{}/files/list?path={}", enc(&sb), enc(&path)),
                Send::None,
            )
            .await?;
        if list.entries.is_empty() {
            return Ok(format!(
                "{} is empty",
                if path.is_empty() { "/workspace" } else { &path }
            ));
        }
        Ok(list
            .entries
            .iter()
            .map(|e| {
                let slash = if e.kind == "dir" { "/" } else { "" };
                format!("{:<8} {:>10} {}{slash}", e.kind, e.size, e.path)
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }

    async fn get_changes(
        &self,
        a: PathArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
        let who = self.identity(ctx)?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        let mut uri = format!("/v1/sandboxes/{}/changes?content=true", enc(&sb));
        if let Some(p) = &a.path {
            uri.push_str(&format!("&path={}", enc(p)));
        }
        let answer: ChangesAnswer = self.api().json(&who, Method::GET, &uri, Send::None).await?;
        if answer.changes.is_empty() {
            return Ok("no changes".into());
        }
        let mut text = format!("{} change(s)", answer.changes.len());
        if answer.flagged > 0 {
            text.push_str(&format!(
                ", {} flagged (a person reviews those; commit_changes leaves them)",
                answer.flagged
            ));
        }
        for c in &answer.changes {
            text.push_str(&format!(
                "\n\n{} {}",
                c.get("kind").and_then(|k| k.as_str()).unwrap_or("changed"),
                c.get("path").and_then(|p| p.as_str()).unwrap_or("?")
            ));
            if let Some(flags) = c.get("flags").and_then(|f| f.as_array()) {
                for f in flags {
                    text.push_str(&format!(
                        "\n  flagged: {} ({})",
                        f.get("rule").and_then(|r| r.as_str()).unwrap_or(""),
                        f.get("reason").and_then(|r| r.as_str()).unwrap_or("")
                    ));
                }
            }
            let content = c.get("content");
            if let Some(patch) = content
                .and_then(|d| d.get("patch"))
                .and_then(|p| p.as_str())
            {
                text.push('\n');
                text.push_str(patch);
            } else if content.and_then(|d| d.get("type")).and_then(|t| t.as_str()) == Some("binary")
            {
                text.push_str(&format!(
                    "\n  (not text: {} bytes before, {} after)",
                    content
                        .and_then(|d| d.get("old_size"))
                        .and_then(|v| v.as_u64())
                        .unwrap_or(0),
                    content
                        .and_then(|d| d.get("new_size"))
                        .and_then(|v| v.as_u64())
                        .unwrap_or(0)
                ));
            }
        }
        Ok(shown(text.as_bytes(), SHOWN * 2))
    }

    async fn commit(
        &self,
        a: CommitArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
        let who = self.identity(ctx)?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        let base = format!("/v1/sandboxes/{}", enc(&sb));
        let info: crate::api::SandboxInfo = self
            .api()
            .json(&who, Method::GET, &base, Send::None)
            .await?;
        if info.state == "running" {
            self.api()
                .call(
                    &who,
                    Method::POST,
                    &format!("{base}/stop"),
                    Send::Json(serde_json::json!({"grace_seconds": 5})),
                    1 << 20,
                )
                .await?;
        }
        let body = serde_json::json!({ "paths": a.paths });
        let committed: Result<CommitAnswer, Refused> = self
            .api()
            .json(
                &who,
                Method::POST,
                &format!("{base}/commit"),
                Send::Json(body),
            )
            .await;
        let restarted = self
            .api()
            .call(
                &who,
                Method::POST,
                &format!("{base}/start"),
                Send::None,
                1 << 20,
            )
            .await;
        let again = match restarted {
            Ok(_) => "The sandbox runs again.".to_string(),
            Err(e) => format!("The sandbox could not be started again: {}", e.message),
        };
        match committed {
            Ok(c) if c.applied.is_empty() => Ok(format!("nothing to commit. {again}")),
            Ok(c) => Ok(format!(
                "committed {} path(s) to the host's workspace: {}. {again}",
                c.applied.len(),
                c.applied.join(", ")
            )),
            Err(mut e) => {
                if e.code == "flagged" || e.code == "conflicts" {
                    // A person decides those: the sandbox stays for them.
                    if let Some(o) = self.state().sandboxes.get_mut(&sb) {
                        o.keep = true;
                    }
                    e.message.push_str(&format!(
                        " (those are for a person: sandbox {sb} is kept after this session; `warden diff {sb}` and `warden commit {sb}` on the host review it). Commit the other paths by naming them in \"paths\"."
                    ));
                } else if e.code == "unreviewed" {
                    e.message = format!(
                        "nothing committed: the changes are not what get_changes last showed (it was not called, or something changed since): call get_changes, then commit_changes. ({})",
                        e.message
                    );
                }
                e.message.push(' ');
                e.message.push_str(&again);
                Err(e)
            }
        }
    }

    async fn destroy(
        &self,
        a: DestroyArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
        let who = self.identity(ctx)?;
        let sb = self.pick(Some(&a.sandbox), ctx).await?;
        self.api()
            .call(
                &who,
                Method::DELETE,
                &format!("/v1/sandboxes/{}?force=true", enc(&sb)),
                Send::None,
                1 << 16,
            )
            .await?;
        if let Some(o) = self.state().sandboxes.remove(&sb) {
            if let Some(w) = o.watcher {
                w.abort();
            }
        }
        self.state().commands.retain(|_, c| c.sandbox != sb);
        let _ = ctx.peer.notify_tool_list_changed().await;
        let _ = ctx.peer.notify_resource_list_changed().await;
        Ok(format!("sandbox {sb} is removed"))
    }
}

/// The arguments of tool `name`, or what is wrong with them.
fn parse<T: serde::de::DeserializeOwned + JsonSchema + 'static>(
    name: &str,
    args: serde_json::Value,
) -> Result<T, Refused> {
    serde_json::from_value(args).map_err(|e| {
        Refused::new(
            "bad_arguments",
            format!(
                "the arguments of {name} do not fit its schema: {e}; it takes {}",
                takes::<T>()
            ),
        )
    })
}

/// A tool's arguments and their types, from its schema: `argv (array)`.
fn takes<T: JsonSchema + 'static>() -> String {
    let schema = schema_for_type::<T>();
    let required: Vec<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else {
        return "no arguments".into();
    };
    props
        .iter()
        .map(|(k, v)| {
            let ty = match v.get("type") {
                Some(serde_json::Value::String(t)) => t.clone(),
                Some(serde_json::Value::Array(ts)) => ts
                    .iter()
                    .filter_map(|t| t.as_str())
                    .filter(|t| *t != "null")
                    .collect::<Vec<_>>()
                    .join("|"),
                _ => "value".into(),
            };
            let ty = if ty == "array" {
                "array of strings".to_string()
            } else {
                ty
            };
            let req = if required.contains(&k.as_str()) {
                ", required"
            } else {
                ""
            };
            format!("{k} ({ty}{req})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn checked_timeout(t: Option<f64>) -> Result<Option<f64>, Refused> {
    match t {
        Some(t) if !(t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT) => Err(Refused::new(
            "bad_arguments",
            format!("timeout_seconds {t}: a number of seconds above 0, at most {MAX_TIMEOUT}"),
        )),
        t => Ok(t),
    }
}

fn exec_body(a: &RunArgs, timeout: Option<f64>, background: bool) -> serde_json::Value {
    let mut body = serde_json::json!({ "env": a.env, "background": background });
    if let Some(v) = &a.argv {
        body["argv"] = serde_json::json!(v);
    }
    if let Some(v) = &a.shell {
        body["shell"] = v.clone().into();
    }
    if let Some(v) = &a.cwd {
        body["cwd"] = v.clone().into();
    }
    if let Some(v) = &a.stdin {
        body["stdin"] = v.clone().into();
    }
    if let Some(t) = timeout {
        body["timeout_seconds"] = t.into();
    }
    body
}

fn bytes_of(data: Option<String>, b64: Option<String>) -> Vec<u8> {
    use base64::Engine;
    match (data, b64) {
        (Some(d), _) => d.into_bytes(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .unwrap_or_default(),
        (None, None) => Vec::new(),
    }
}

/// The longest prefix of at most `max` bytes that ends on a character.
fn utf8_cut(bytes: &[u8], max: usize) -> usize {
    let mut n = max.min(bytes.len());
    while n > 0 && n < bytes.len() && (bytes[n] & 0xC0) == 0x80 {
        n -= 1;
    }
    n
}

/// Output as text; past `max` bytes the middle is cut, with a note of how much.
pub(super) fn shown(bytes: &[u8], max: usize) -> String {
    if bytes.len() <= max {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let head = utf8_cut(bytes, max / 4);
    let mut tail = bytes.len() - (max - max / 4);
    while tail < bytes.len() && (bytes[tail] & 0xC0) == 0x80 {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes cut of {}: the first {} and the last {} are shown ...]\n{}",
        String::from_utf8_lossy(&bytes[..head]),
        tail - head,
        bytes.len(),
        head,
        bytes.len() - tail,
        String::from_utf8_lossy(&bytes[tail..])
    )
}

/// The sandbox's event log, one JSON object per line (the last 2000).
pub(super) async fn events_text(api: &Api, who: &Identity, id: &str) -> Result<String, Refused> {
    let lines = events(api, who, id, 0).await?;
    let skip = lines.len().saturating_sub(2000);
    let mut text = String::new();
    if skip > 0 {
        text.push_str(&format!(
            "{{\"note\":\"the first {skip} events are left out; the whole log is GET /v1/sandboxes/{id}/events\"}}\n"
        ));
    }
    for l in &lines[skip..] {
        text.push_str(l);
        text.push('\n');
    }
    Ok(text)
}

/// The events of sandbox `id` so far from the `from`th on, as JSON lines.
async fn events(api: &Api, who: &Identity, id: &str, from: u64) -> Result<Vec<String>, Refused> {
    let body = api
        .call(
            who,
            Method::GET,
            &format!("/v1/sandboxes/{}/events?follow=false&from={from}", enc(id)),
            Send::None,
            64 << 20,
        )
        .await?;
    Ok(String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|l| l.trim_start().to_string())
        .collect())
}

impl Session {
    /// What sandbox `id` denied since `since_ms`, one line each. Only the
    /// events not looked through before are read.
    async fn denials_since(&self, who: &Identity, id: &str, since_ms: u64) -> Vec<String> {
        let from = self
            .state()
            .sandboxes
            .get(id)
            .map(|o| o.events_seen)
            .unwrap_or(0);
        let Ok(lines) = events(self.api(), who, id, from).await else {
            return Vec::new();
        };
        if let Some(o) = self.state().sandboxes.get_mut(id) {
            o.events_seen = from + lines.len() as u64;
        }
        let mut out = Vec::new();
        for l in lines {
            let Ok(e) = serde_json::from_str::<warden_audit::Event>(&l) else {
                continue;
            };
            if e.ts_ms + 50 < since_ms || !e.is_denial() {
                continue;
            }
            let line = e.describe();
            if !out.contains(&line) {
                out.push(line);
            }
            if out.len() >= 20 {
                out.push("(more are in the event log resource)".into());
                break;
            }
        }
        out
    }
}

/// Put an ask-mode question to the person through the client.
pub(super) async fn ask_person(
    peer: &Peer<RoleServer>,
    q: &crate::api::Approval,
) -> Result<crate::api::Decision, String> {
    use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
    use rmcp::service::ElicitationMode;
    if !peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return Err("this MCP client takes no elicitation requests, so nobody can be asked; ask mode's questions are denied (a person can allow the name with `warden egress` on the host)".into());
    }
    let schema = ElicitationSchema::builder()
        .required_bool("allow")
        .optional_bool("always", false)
        .build()
        .map_err(|e| format!("cannot build the question: {e}"))?;
    let message = format!(
        "Sandbox {} wants to connect to {}:{} ({}), which its policy does not allow. Allow it? (\"always\" adds the name to this sandbox's allowlist)",
        q.sandbox, q.name, q.port, q.protocol
    );
    let left = q
        .deadline_ms
        .saturating_sub(warden_runtime::state::now_ms());
    let answer = peer
        .create_elicitation_with_timeout(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            },
            Some(Duration::from_millis(left.max(1000))),
        )
        .await
        .map_err(|e| format!("the question could not be put to the client: {e}"))?;
    match answer.action {
        ElicitationAction::Accept => {
            let c = answer.content.unwrap_or_default();
            let allow = c.get("allow").and_then(|v| v.as_bool()).unwrap_or(false);
            let always = c.get("always").and_then(|v| v.as_bool()).unwrap_or(false);
            Ok(match (allow, always) {
                (true, true) => crate::api::Decision::AllowAlways,
                (true, false) => crate::api::Decision::AllowOnce,
                _ => crate::api::Decision::Deny,
            })
        }
        _ => Err("the person declined the question".into()),
    }
}

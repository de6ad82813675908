//! Commands in a session's sandboxes: run and wait, start and poll, and
//! what the sandbox denied meanwhile; output cut to what a model can read,
//! and credential-shaped strings in it flagged (by rule and line, never
//! repeating the value).

use axum::http::Method;
use rmcp::service::{RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

use super::inner::{enc, Api, Identity, Refused, Send};
use super::Session;
use crate::api::{ExecInfo, ExecResult};

/// The arguments of run_command and start_command.
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

/// The arguments of poll_command.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PollArgs {
    /// The id start_command answered.
    pub command: String,
    /// Wait up to this many seconds for output or the end (0 to 60, default 10).
    pub wait_seconds: Option<f64>,
}

/// Bytes of a stream shown in a tool result; more is cut in the middle.
pub(super) const SHOWN: usize = 32 * 1024;
/// `run_command`'s timeout when none is given, and the most it takes.
pub(super) const RUN_TIMEOUT: f64 = 120.0;
const MAX_TIMEOUT: f64 = 24.0 * 3600.0;

impl Session {
    pub(super) async fn run(
        &self,
        a: RunArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
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
            .await
            .map_err(|r| busy(r, &sb))?;
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
        text.push_str(&flagged(r.stdout.as_bytes(), r.stderr.as_bytes()));
        if r.exit_status != 0 && self.closed_network(&sb) && failed_resolving(&r.stderr) {
            // Without a network nothing is denied (no query leaves), so no
            // denial explains the failure: say it here.
            text.push_str(
                "\n--- note ---\nthis sandbox has no network: no name resolves and nothing outside it can be reached (do not retry; a person decides what a sandbox may reach)",
            );
        }
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

    pub(super) async fn start(
        &self,
        a: RunArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
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
            .await
            .map_err(|r| busy(r, &sb))?;
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

    pub(super) async fn poll(
        &self,
        a: PollArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
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
                        ..
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
        text.push_str(&flagged(&out, &err));
        if ended.is_some() {
            self.state().commands.remove(&a.command);
        }
        Ok(text)
    }
}

/// The section a result ends with when its output holds credential-shaped
/// strings (`warden-detect`'s rules): which rule, on which line of which
/// stream; empty when none does. The model is told so that it does not
/// copy the value into a file, a commit or a message.
/// A command refused because sandbox `sb`'s supervisor serves as many
/// connections as it may (each running command holds one), in this
/// door's words: what a model can do about it, with no route of the API
/// it cannot call. Any other refusal as it came.
fn busy(r: Refused, sb: &str) -> Refused {
    if r.reason.as_deref() != Some("busy") {
        return r;
    }
    Refused {
        message: format!(
            "sandbox {sb} runs as many commands as it serves at once: nothing was started; wait until a command started with start_command ends (poll_command says when), then call this again"
        ),
        ..r
    }
}

pub(super) fn flagged(out: &[u8], err: &[u8]) -> String {
    let mut lines = Vec::new();
    for (stream, bytes) in [("stdout", out), ("stderr", err)] {
        for f in warden_detect::scan(bytes) {
            lines.push(format!("{stream} line {}: {}", f.line, f.rule));
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\n--- flagged: credential-shaped strings in the output (do not write them into files, commits or messages) ---\n{}",
        lines.join("\n")
    )
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
pub(super) fn utf8_cut(bytes: &[u8], max: usize) -> usize {
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

/// Events the event log resource shows: the newest.
const SHOWN_EVENTS: usize = 2000;

/// The sandbox's event log, one JSON object per line: its newest
/// [`SHOWN_EVENTS`], asked of the API as such (`tail`), whatever the
/// log's length, with a note of how many older ones are left out.
pub(super) async fn events_text(api: &Api, who: &Identity, id: &str) -> Result<String, Refused> {
    let body = api
        .call(
            who,
            Method::GET,
            &format!(
                "/v1/sandboxes/{}/events?follow=false&tail={SHOWN_EVENTS}",
                enc(id)
            ),
            Send::None,
            64 << 20,
        )
        .await?;
    let events = sse_events(&String::from_utf8_lossy(&body));
    let mut text = String::new();
    let skip = events.first().map_or(0, |(n, _)| *n);
    if skip > 0 {
        text.push_str(&format!(
            "{{\"note\":\"the first {skip} events are left out; the whole log is GET /v1/sandboxes/{id}/events\"}}\n"
        ));
    }
    for (_, l) in &events {
        text.push_str(l);
        text.push('\n');
    }
    Ok(text)
}

/// The events of a server-sent event stream: each one's id (its line in
/// the log) and its data.
fn sse_events(stream: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut id = 0;
    for line in stream.lines() {
        if let Some(n) = line.strip_prefix("id:") {
            id = n.trim().parse().unwrap_or(id);
        } else if let Some(d) = line.strip_prefix("data:") {
            out.push((id, d.trim_start().to_string()));
        }
    }
    out
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

/// Whether a command's standard error says a name did not resolve (the
/// words of glibc, curl, Python, Node and git).
fn failed_resolving(stderr: &str) -> bool {
    const SIGNS: [&str; 7] = [
        "Temporary failure in name resolution",
        "Name or service not known",
        "Could not resolve host",
        "could not resolve host",
        "getaddrinfo",
        "EAI_AGAIN",
        "No address associated with hostname",
    ];
    SIGNS.iter().any(|s| stderr.contains(s))
}

impl Session {
    /// Whether sandbox `id` (of this session) has no network at all.
    fn closed_network(&self, id: &str) -> bool {
        self.state()
            .sandboxes
            .get(id)
            .is_some_and(|o| o.allows.starts_with("network: none"))
    }

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
            let line = crate::routes::events::describe(&e);
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

#[cfg(test)]
mod tests {
    #[test]
    fn an_event_stream_reads_as_each_events_line_number_and_data() {
        let got = super::sse_events("id: 12001\ndata: {\"a\":1}\n\nid: 12002\ndata:{\"b\":2}\n\n");
        assert_eq!(
            got,
            vec![
                (12001, "{\"a\":1}".to_string()),
                (12002, "{\"b\":2}".to_string())
            ]
        );
    }

    #[test]
    fn output_holding_a_token_is_flagged_by_rule_and_line_without_the_value() {
        let token = ["ghp_", "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"].concat();
        let out = format!("cloning\nusing {token}\n");
        let note = super::flagged(out.as_bytes(), b"");
        assert!(note.contains("stdout line 2: github-token"), "{note}");
        assert!(!note.contains(&token), "{note}");
        assert_eq!(super::flagged(b"all fine\n", b""), "");
    }
}

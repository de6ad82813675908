//! Files and changes of a session's sandboxes: read, write, list (the
//! daemon's files API: the sandbox's init confines each path), the review
//! and the commit, and removal.

use axum::http::Method;
use rmcp::service::{RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::Deserialize;

use super::commands::{shown, utf8_cut, SHOWN};
use super::inner::{enc, Refused, Send};
use super::Session;
use crate::api::{ChangesAnswer, CommitAnswer, FileList};

/// The arguments of read_file, list_files and get_changes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    pub sandbox: Option<String>,
    /// Relative to /workspace, or absolute under /workspace.
    pub path: Option<String>,
}

/// The arguments of write_file.
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

/// The arguments of commit_changes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitArgs {
    pub sandbox: Option<String>,
    /// Only these paths (default: every change get_changes showed).
    #[serde(default)]
    pub paths: Vec<String>,
}

/// The arguments of destroy_sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DestroyArgs {
    /// The sandbox to stop and remove, with its uncommitted changes.
    pub sandbox: String,
}

/// Bytes of a file `read_file` shows.
pub(super) const FILE_SHOWN: usize = 256 * 1024;
/// The largest file `read_file` reads at all.
const FILE_READ: usize = 16 << 20;

impl Session {
    pub(super) async fn read_file(
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

    pub(super) async fn write_file(
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

    pub(super) async fn list_files(
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
        let mut lines: Vec<String> = list
            .entries
            .iter()
            .map(|e| {
                let slash = if e.kind == "dir" { "/" } else { "" };
                format!("{:<8} {:>10} {}{slash}", e.kind, e.size, e.path)
            })
            .collect();
        // One answer holds one page: a larger directory says so rather
        // than being read whole.
        if list.next.is_some() {
            lines.push(format!(
                "(the first {} entries only: the directory has more; list a directory below it)",
                list.entries.len()
            ));
        }
        Ok(lines.join("\n"))
    }

    pub(super) async fn get_changes(
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
        // What `warden diff` lists, and what commit_changes applies (it
        // never asks for ignored changes): the workspace's own ignore
        // files' changes are left out and counted.
        let listing = warden_workspace::Listing::of_json(answer.changes, false);
        let left_out = listing.left_out_line(
            "shown",
            "commit_changes leaves them too; a person commits them with `warden commit --ignored`",
        );
        if listing.shown.is_empty() {
            return Ok(match left_out {
                Some(line) => format!("no changes; {line}"),
                None => "no changes".into(),
            });
        }
        let mut text = format!("{} change(s)", listing.shown.len());
        if answer.flagged > 0 {
            text.push_str(&format!(
                ", {} flagged (a person reviews those; commit_changes leaves them)",
                answer.flagged
            ));
        }
        if let Some(line) = &left_out {
            text.push_str(&format!("; {line}"));
        }
        for c in &listing.shown {
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
                if content.and_then(|d| d.get("coarse")) == Some(&serde_json::Value::Bool(true)) {
                    text.push_str(&format!("\n  ({})", warden_workspace::COARSE_NOTE));
                }
                text.push('\n');
                text.push_str(patch);
            } else if content.and_then(|d| d.get("type")).and_then(|t| t.as_str())
                == Some("not_diffed")
            {
                let n = |k: &str| {
                    content
                        .and_then(|d| d.get(k))
                        .and_then(|v| v.as_u64())
                        .unwrap_or(0)
                };
                let why = match content
                    .and_then(|d| d.get("reason"))
                    .and_then(|r| r.as_str())
                {
                    Some("too_many_lines") => "too many lines to diff",
                    _ => "the review's time for line diffs was spent on other files",
                };
                text.push_str(&format!(
                    "\n  (text not diffed, {why}: {} lines before, {} after)",
                    n("old_lines"),
                    n("new_lines")
                ));
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

    pub(super) async fn commit(
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

    pub(super) async fn destroy(
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

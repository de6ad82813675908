//! The tools: their descriptions and arguments, and the dispatch of a
//! call to the one it names. A bad argument, a refusal of the API or a
//! denied action is a tool error (`isError`) whose text says what was
//! wrong and what to do, never a protocol error.

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool};
use rmcp::service::{RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::Deserialize;

use super::commands::{PollArgs, RunArgs, RUN_TIMEOUT, SHOWN};
use super::files::{CommitArgs, DestroyArgs, PathArgs, WriteArgs, FILE_SHOWN};
use super::inner::Refused;
use super::Session;

/// What the server tells a client about itself at the start.
pub const INSTRUCTIONS: &str = "warden gives you a sandbox: a Linux machine of its own (its own processes, file tree and network) in which you run commands and edit files without reaching the host. Tools that take \"sandbox\" use this session's only sandbox when it is left out, and make one of the defaults when there is none yet. The workspace is at /workspace; with a workspace from the host, what you write there stays in the sandbox until commit_changes (get_changes shows it). Each sandbox's event log is a resource (warden://sandboxes/ID/events).";

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
            tool::<super::desktop::ScreenshotArgs>("desktop_screenshot", "The screen of a desktop sandbox (one made with the `desktop` profile) as an image: what its browser and windows show now.".into()),
            tool::<super::desktop::DesktopArgs>("desktop_action", "Drive a desktop sandbox's mouse, keyboard and browser: action move_mouse {x,y}; left_click, right_click, double_click {x?,y?} (at the pointer when left out); scroll {direction, amount?}; write {text} (types it); press {keys} (e.g. \"ctrl+l\", \"Return\"); open {url} (a new browser tab). Points are pixels of the screenshot. Take a screenshot after to see what changed.".into()),
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
            "desktop_screenshot" => {
                let shot = match parse::<super::desktop::ScreenshotArgs>(name, args) {
                    Ok(a) => self.desktop_screenshot(a, &ctx).await,
                    Err(e) => Err(e),
                };
                match shot {
                    Ok(png) => {
                        use base64::Engine;
                        return CallToolResult::success(vec![ContentBlock::image(
                            base64::engine::general_purpose::STANDARD.encode(png),
                            "image/png",
                        )]);
                    }
                    Err(e) => Err(e),
                }
            }
            "desktop_action" => match parse::<super::desktop::DesktopArgs>(name, args) {
                Ok(a) => self.desktop_action(a, &ctx).await,
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
            // The code, and the reason below it when the API gave one
            // (`invalid_spec, caches_with_gvisor`): a model or a client
            // matches on them, not on the words.
            Err(e) => CallToolResult::error(vec![ContentBlock::text(with_notes(format!(
                "{name} failed ({}): {}",
                match &e.reason {
                    Some(r) if *r != e.code => format!("{}, {r}", e.code),
                    _ => e.code.clone(),
                },
                e.message
            )))]),
        }
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

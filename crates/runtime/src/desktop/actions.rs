//! The agent's hands and eyes on a desktop sandbox: a screenshot, mouse
//! and keyboard input, a URL opened in its browser. Each is one short
//! process of the sandbox (`maim`, `xdotool`, `chromium`), started through
//! the exec path like any other command, so that it runs with the
//! sandbox's restrictions and its audit log records it; nothing here
//! touches the screen from the host.
//!
//! Input is checked before anything runs: an unknown action, a point off
//! the screen, keys that are not key names or a URL that is not http(s)
//! are refused, and nothing is started.

use serde::Deserialize;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;
use warden_policy::DesktopSpec;

use crate::client::{ClientError, Connection};
use crate::protocol::ExecRequest;

use super::services::{BROWSER_DIR, CHROMIUM_FLAGS};

/// The actions, by the names the API takes.
pub const ACTIONS: &[&str] = &[
    "move_mouse",
    "left_click",
    "right_click",
    "double_click",
    "scroll",
    "write",
    "press",
    "open",
];

/// Longest text `write` types.
pub const MAX_TEXT: usize = 10_000;
/// Longest URL `open` takes.
pub const MAX_URL: usize = 8192;
/// Most scroll steps at once.
pub const MAX_SCROLL: i64 = 100;
/// How long one action may take.
pub const ACTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest screenshot read back.
pub const MAX_SCREENSHOT: usize = 64 << 20;

/// One action on the desktop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    MoveMouse {
        x: u32,
        y: u32,
    },
    /// Button 1, 3; at a point, or where the pointer is.
    Click {
        button: u8,
        at: Option<(u32, u32)>,
        repeat: u8,
    },
    /// Steps right (`dx` > 0) or left, down (`dy` > 0) or up.
    Scroll {
        dx: i64,
        dy: i64,
    },
    Write {
        text: String,
    },
    Press {
        keys: Vec<String>,
    },
    Open {
        url: String,
    },
}

/// Why an action was refused (nothing ran) or failed in the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("{name:?} is not a desktop action: use one of {}", ACTIONS.join(", "))]
    Unknown { name: String },
    #[error("{field}: {why}")]
    Invalid { field: &'static str, why: String },
    #[error("({x}, {y}) is off the screen, which is {width}x{height} (x from 0 to {}, y from 0 to {})", .width - 1, .height - 1)]
    OffScreen {
        x: i64,
        y: i64,
        width: u32,
        height: u32,
    },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot read the output of {program}")]
    Pipe {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} did not finish within {}s; it was stopped", .timeout.as_secs())]
    Timeout { program: String, timeout: Duration },
    /// The program ran in the sandbox and failed: its status and what it
    /// said.
    #[error("{program} failed in the sandbox (status {status}): {said}")]
    Failed {
        program: String,
        status: i32,
        said: String,
    },
}

impl ActionError {
    /// The request's field at fault, as a JSON pointer.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ActionError::Invalid { field, .. } => Some(field),
            ActionError::OffScreen { .. } => Some("/x"),
            _ => None,
        }
    }

    /// Whether the request itself was wrong (nothing ran).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ActionError::Unknown { .. }
                | ActionError::Invalid { .. }
                | ActionError::OffScreen { .. }
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Point {
    x: i64,
    y: i64,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MaybePoint {
    x: Option<i64>,
    y: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScrollBody {
    dx: Option<i64>,
    dy: Option<i64>,
    direction: Option<String>,
    amount: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextBody {
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysBody {
    keys: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UrlBody {
    url: String,
}

fn body<T: for<'de> Deserialize<'de>>(v: serde_json::Value) -> Result<T, ActionError> {
    serde_json::from_value(v).map_err(|e| ActionError::Invalid {
        field: "",
        why: format!("the body does not fit the action: {e}"),
    })
}

fn on_screen(d: &DesktopSpec, x: i64, y: i64) -> Result<(u32, u32), ActionError> {
    if x < 0 || y < 0 || x >= i64::from(d.width) || y >= i64::from(d.height) {
        return Err(ActionError::OffScreen {
            x,
            y,
            width: d.width,
            height: d.height,
        });
    }
    Ok((x as u32, y as u32))
}

/// A key name as xdotool takes it (`Return`, `ctrl+l`, `KP_Add`): letters,
/// digits, `_` and `+`, one or more joined by `+`.
fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 64
        && !k.starts_with('+')
        && !k.ends_with('+')
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '+')
}

impl Action {
    /// The action `name` with its JSON body (`null` or `{}` where it takes
    /// none), checked against the screen `d`.
    pub fn parse(name: &str, v: serde_json::Value, d: &DesktopSpec) -> Result<Action, ActionError> {
        let v = if v.is_null() {
            serde_json::json!({})
        } else {
            v
        };
        let click = |button: u8, repeat: u8, v: serde_json::Value| -> Result<Action, ActionError> {
            let p: MaybePoint = body(v)?;
            let at = match (p.x, p.y) {
                (Some(x), Some(y)) => Some(on_screen(d, x, y)?),
                (None, None) => None,
                _ => {
                    return Err(ActionError::Invalid {
                        field: "/x",
                        why: "give both x and y, or neither (to click where the pointer is)".into(),
                    })
                }
            };
            Ok(Action::Click { button, at, repeat })
        };
        match name {
            "move_mouse" => {
                let p: Point = body(v)?;
                let (x, y) = on_screen(d, p.x, p.y)?;
                Ok(Action::MoveMouse { x, y })
            }
            "left_click" => click(1, 1, v),
            "right_click" => click(3, 1, v),
            "double_click" => click(1, 2, v),
            "scroll" => {
                let s: ScrollBody = body(v)?;
                let (dx, dy) = match (s.dx, s.dy, s.direction.as_deref()) {
                    (_, _, Some(dir)) if s.dx.is_none() && s.dy.is_none() => {
                        let n = s.amount.unwrap_or(3);
                        match dir {
                            "up" => (0, -n),
                            "down" => (0, n),
                            "left" => (-n, 0),
                            "right" => (n, 0),
                            other => {
                                return Err(ActionError::Invalid {
                                    field: "/direction",
                                    why: format!("{other:?} is not a direction: up, down, left or right"),
                                })
                            }
                        }
                    }
                    (dx, dy, None) if (dx.is_some() || dy.is_some()) && s.amount.is_none() => {
                        (dx.unwrap_or(0), dy.unwrap_or(0))
                    }
                    _ => {
                        return Err(ActionError::Invalid {
                            field: "/dy",
                            why: "give dx and/or dy (steps; dy > 0 scrolls down), or direction (up, down, left, right) with an optional amount".into(),
                        })
                    }
                };
                if dx.abs() > MAX_SCROLL || dy.abs() > MAX_SCROLL || (dx == 0 && dy == 0) {
                    return Err(ActionError::Invalid {
                        field: "/dy",
                        why: format!("scroll by 1 to {MAX_SCROLL} steps each way"),
                    });
                }
                Ok(Action::Scroll { dx, dy })
            }
            "write" => {
                let t: TextBody = body(v)?;
                if t.text.is_empty() || t.text.chars().count() > MAX_TEXT || t.text.contains('\0') {
                    return Err(ActionError::Invalid {
                        field: "/text",
                        why: format!("type 1 to {MAX_TEXT} characters, without NUL"),
                    });
                }
                Ok(Action::Write { text: t.text })
            }
            "press" => {
                let k: KeysBody = body(v)?;
                let keys: Vec<String> = match k.keys {
                    serde_json::Value::String(s) => {
                        s.split_whitespace().map(str::to_string).collect()
                    }
                    serde_json::Value::Array(a) => a
                        .into_iter()
                        .map(|k| k.as_str().map(str::to_string).unwrap_or_default())
                        .collect(),
                    _ => Vec::new(),
                };
                if keys.is_empty() || keys.len() > 32 || !keys.iter().all(|k| valid_key(k)) {
                    return Err(ActionError::Invalid {
                        field: "/keys",
                        why: "key names as xdotool takes them, e.g. \"Return\", \"ctrl+l\", \"ctrl+shift+t\" (letters, digits, _ joined by +), one to 32 of them".into(),
                    });
                }
                Ok(Action::Press { keys })
            }
            "open" => {
                let u: UrlBody = body(v)?;
                let url = u.url.trim().to_string();
                let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
                if !scheme_ok
                    || url.len() > MAX_URL
                    || url.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(ActionError::Invalid {
                        field: "/url",
                        why: format!(
                            "an http:// or https:// URL without spaces, at most {MAX_URL} bytes"
                        ),
                    });
                }
                Ok(Action::Open { url })
            }
            other => Err(ActionError::Unknown {
                name: other.to_string(),
            }),
        }
    }

    /// The command that does it inside the sandbox. Values follow `--`, so
    /// that none is ever read as an option.
    pub fn argv(&self) -> Vec<String> {
        let s = |x: &str| x.to_string();
        match self {
            Action::MoveMouse { x, y } => {
                vec![s("xdotool"), s("mousemove"), x.to_string(), y.to_string()]
            }
            Action::Click { button, at, repeat } => {
                let mut v = vec![s("xdotool")];
                if let Some((x, y)) = at {
                    v.extend([s("mousemove"), x.to_string(), y.to_string()]);
                }
                v.extend([
                    s("click"),
                    s("--repeat"),
                    repeat.to_string(),
                    button.to_string(),
                ]);
                v
            }
            Action::Scroll { dx, dy } => {
                let mut v = vec![s("xdotool")];
                for (n, less, more) in [(*dy, "4", "5"), (*dx, "6", "7")] {
                    if n != 0 {
                        let button = if n < 0 { less } else { more };
                        v.extend([s("click"), s("--repeat"), n.abs().to_string(), s(button)]);
                    }
                }
                v
            }
            Action::Write { text } => vec![
                s("xdotool"),
                s("type"),
                s("--delay"),
                s("12"),
                s("--"),
                text.clone(),
            ],
            Action::Press { keys } => {
                let mut v = vec![s("xdotool"), s("key"), s("--")];
                v.extend(keys.iter().cloned());
                v
            }
            // A second `chromium` with the same profile and flags hands
            // the URL to the running browser (a new tab) and exits; it
            // checks its flags before it looks for the running one.
            Action::Open { url } => {
                let mut v = vec![
                    s("/bin/sh"),
                    s("-c"),
                    format!("exec chromium --user-data-dir=\"{BROWSER_DIR}\" \"$@\""),
                    s("sh"),
                ];
                v.extend(CHROMIUM_FLAGS.iter().map(|(f, _)| s(f)));
                v.extend([s("--"), url.clone()]);
                v
            }
        }
    }
}

/// The command that takes a screenshot (PNG on its standard output).
pub fn screenshot_argv() -> Vec<String> {
    vec![
        "maim".to_string(),
        "--format".to_string(),
        "png".to_string(),
    ]
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Run `argv` in the sandbox whose supervisor listens on `control`, and
/// return what it printed when it succeeds; its status and last words
/// otherwise. It is stopped after `timeout`.
pub fn run(
    control: &Path,
    argv: Vec<String>,
    timeout: Duration,
    max_output: usize,
) -> Result<Output, ActionError> {
    let program = argv.first().cloned().unwrap_or_default();
    let pipe_err = |source: std::io::Error| ActionError::Pipe {
        program: program.clone(),
        source,
    };
    let null = std::fs::File::open("/dev/null").map_err(pipe_err)?;
    let (out_r, out_w) = nix::unistd::pipe().map_err(|e| pipe_err(e.into()))?;
    let (err_r, err_w) = nix::unistd::pipe().map_err(|e| pipe_err(e.into()))?;
    let req = ExecRequest {
        argv,
        env: Vec::new(),
        cwd: None,
        tty: false,
        winsize: None,
        keep_output: None,
    };
    let running =
        Connection::open(control)?.exec(req, &[null.as_fd(), out_w.as_fd(), err_w.as_fd()])?;
    drop((out_w, err_w, null));
    let exec = running.exec;
    let reader = |fd: OwnedFd, max: usize| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = std::fs::File::from(fd).take(max as u64).read_to_end(&mut v);
            v
        })
    };
    let out = reader(out_r, max_output);
    let err = reader(err_r, 64 * 1024);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let control_path = control.to_path_buf();
    let timer = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(timeout) {
            if let Ok(c) = Connection::open(&control_path) {
                let _ = c.signal(exec, libc::SIGKILL);
            }
            return true;
        }
        false
    });
    let status = running.wait();
    let _ = done_tx.send(());
    let timed_out = timer.join().unwrap_or(false);
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let status = status?;
    if timed_out {
        return Err(ActionError::Timeout { program, timeout });
    }
    if status.status != 0 {
        let said = String::from_utf8_lossy(&stderr).trim().to_string();
        return Err(ActionError::Failed {
            program,
            status: status.status,
            said: if said.is_empty() {
                "it said nothing".into()
            } else {
                said
            },
        });
    }
    Ok(Output { stdout, stderr })
}

/// Take a screenshot: PNG bytes.
pub fn screenshot(control: &Path) -> Result<Vec<u8>, ActionError> {
    Ok(run(control, screenshot_argv(), ACTION_TIMEOUT, MAX_SCREENSHOT)?.stdout)
}

/// Do `action` on the desktop.
pub fn perform(control: &Path, action: &Action) -> Result<(), ActionError> {
    run(control, action.argv(), ACTION_TIMEOUT, 64 * 1024).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d() -> DesktopSpec {
        DesktopSpec::default()
    }

    #[test]
    fn a_point_off_the_screen_is_refused_before_anything_runs() {
        for (x, y) in [(-1, 0), (0, -1), (1280, 10), (10, 800), (i64::MAX, 0)] {
            let e = Action::parse("left_click", json!({"x": x, "y": y}), &d()).unwrap_err();
            assert!(matches!(e, ActionError::OffScreen { .. }), "{x},{y}: {e}");
        }
        assert_eq!(
            Action::parse("move_mouse", json!({"x": 1279, "y": 799}), &d()).unwrap(),
            Action::MoveMouse { x: 1279, y: 799 }
        );
    }

    #[test]
    fn no_value_is_ever_read_as_an_option() {
        let a = Action::parse("write", json!({"text": "--help"}), &d()).unwrap();
        let argv = a.argv();
        let dashes = argv.iter().position(|x| x == "--").unwrap();
        assert_eq!(argv[dashes + 1], "--help");
        // A URL is given after `--`, and must be http(s).
        for bad in [
            "--renderer-cmd-prefix=sh",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "http://a b",
        ] {
            assert!(
                Action::parse("open", json!({"url": bad}), &d()).is_err(),
                "{bad}"
            );
        }
        let open = Action::parse("open", json!({"url": "http://x.test/"}), &d())
            .unwrap()
            .argv();
        assert_eq!(
            &open[open.len() - 2..],
            ["--", "http://x.test/"],
            "{open:?}"
        );
        for bad in ["-x", "ctrl+", "a;b", "", "Return --clearmodifiers"] {
            assert!(
                Action::parse("press", json!({"keys": bad}), &d()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn scroll_takes_steps_or_a_direction() {
        assert_eq!(
            Action::parse("scroll", json!({"direction": "down", "amount": 5}), &d()).unwrap(),
            Action::Scroll { dx: 0, dy: 5 }
        );
        assert_eq!(
            Action::parse("scroll", json!({"dx": -2}), &d())
                .unwrap()
                .argv(),
            ["xdotool", "click", "--repeat", "2", "6"]
        );
        assert!(Action::parse("scroll", json!({}), &d()).is_err());
        assert!(Action::parse("scroll", json!({"direction": "sideways"}), &d()).is_err());
    }

    #[test]
    fn an_unknown_action_is_named_in_its_refusal() {
        let e = Action::parse("explode", json!({}), &d()).unwrap_err();
        assert!(e.to_string().contains("explode") && e.to_string().contains("left_click"));
        assert!(e.is_bad_input());
    }
}

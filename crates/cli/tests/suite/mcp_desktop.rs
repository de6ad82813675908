//! A desktop sandbox's tools through the daemon's `/mcp` with a real MCP
//! client: the screenshot comes back as an image content (a real PNG), an
//! action is done, bad input is a tool error with its reason, and each
//! tool is checked against its route's scope (a token with
//! `desktop:view` only sees the screen and may not touch it).

use crate::common;
use crate::common::daemon::Daemon;
use crate::common::*;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::ServiceExt;
use std::path::Path;
use std::time::{Duration, Instant};

type Client = RunningService<RoleClient, ()>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn call<H: rmcp::ClientHandler>(
    c: &RunningService<RoleClient, H>,
    name: &str,
    args: serde_json::Value,
) -> CallToolResult {
    let serde_json::Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    tokio::time::timeout(
        Duration::from_secs(120),
        c.call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(args)),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} answered in time"))
    .unwrap_or_else(|e| panic!("{name} was answered as a tool result, not {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool result that must have succeeded; its text.
fn good(r: &CallToolResult) -> String {
    assert_ne!(r.is_error, Some(true), "a tool error: {}", text(r));
    text(r)
}

/// A tool result that must be a tool error; its text.
fn refused(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "not a tool error: {}", text(r));
    text(r)
}

/// `warden token create NAME --scope S...` on the daemon's state; the token.
fn token(state: &Path, name: &str, scopes: &[&str]) -> String {
    let mut args = vec!["token", "create", name];
    for s in scopes {
        args.push("--scope");
        args.push(s);
    }
    ok(&warden(state, &args)).trim().to_string()
}

async fn http_client(addr: &str, token: Option<&str>) -> Result<Client, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"));
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    tokio::time::timeout(Duration::from_secs(30), ().serve(transport))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())
}

#[test]
fn the_desktop_tools_show_the_screen_as_an_image_and_keep_to_their_scopes() {
    if let Some(why) = common::desktop::unavailable() {
        return skip(&why);
    }
    let state = TempDir::new("mcp-desktop");
    let d = Daemon::start(state.path(), true);
    let addr = d.tcp.clone().unwrap();
    let viewer = token(
        state.path(),
        "viewer",
        &["mcp", "sandboxes:read", "sandboxes:write", "desktop:view"],
    );
    // desktop:control alone: it grants desktop:view (the screenshot).
    let driver = token(
        state.path(),
        "driver",
        &[
            "mcp",
            "sandboxes:read",
            "sandboxes:write",
            "desktop:control",
        ],
    );
    runtime().block_on(async {
        let c = http_client(&addr, Some(&driver)).await.unwrap();
        let names: Vec<String> = c
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert!(
            names.contains(&"desktop_screenshot".to_string()),
            "{names:?}"
        );
        assert!(names.contains(&"desktop_action".to_string()), "{names:?}");
        good(
            &call(
                &c,
                "create_sandbox",
                serde_json::json!({"profile": "desktop"}),
            )
            .await,
        );
        // The screen, as an image the model sees.
        let deadline = Instant::now() + Duration::from_secs(60);
        let png = loop {
            let r = call(&c, "desktop_screenshot", serde_json::json!({})).await;
            if r.is_error != Some(true) {
                let image = r.content[0].as_image().expect("an image content");
                assert_eq!(image.mime_type, "image/png");
                use base64::Engine;
                break base64::engine::general_purpose::STANDARD
                    .decode(&image.data)
                    .unwrap();
            }
            assert!(Instant::now() < deadline, "no screenshot: {}", text(&r));
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert_eq!(&png[16..24], &[0, 0, 5, 0, 0, 0, 3, 32], "1280x800");
        // Done, and bad input refused with its reason.
        good(
            &call(
                &c,
                "desktop_action",
                serde_json::json!({"action": "move_mouse", "x": 5, "y": 5}),
            )
            .await,
        );
        let e = refused(
            &call(
                &c,
                "desktop_action",
                serde_json::json!({"action": "left_click", "x": 9999, "y": 5}),
            )
            .await,
        );
        assert!(e.contains("off the screen"), "{e}");
        // A token without desktop:control is refused the action by the
        // scope table before anything looks at the sandbox; with
        // desktop:view it gets as far as the sandbox (which has no desktop).
        let c2 = http_client(&addr, Some(&viewer)).await.unwrap();
        good(&call(&c2, "create_sandbox", serde_json::json!({})).await);
        let e = refused(
            &call(
                &c2,
                "desktop_action",
                serde_json::json!({"action": "move_mouse", "x": 5, "y": 5}),
            )
            .await,
        );
        assert!(e.contains("desktop:control"), "{e}");
        let e = refused(&call(&c2, "desktop_screenshot", serde_json::json!({})).await);
        assert!(e.contains("no desktop"), "{e}");
        c2.cancel().await.unwrap();
        c.cancel().await.unwrap();
    });
}

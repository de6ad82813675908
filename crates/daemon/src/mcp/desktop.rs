//! A desktop sandbox's screen and input as tools: a screenshot (an image
//! content the model sees) and the actions of the API. Each calls the
//! daemon's own route with the session's token, so that the scope table
//! decides as for any caller (`desktop:view` to look, `desktop:control` to
//! touch).

use axum::http::Method;
use rmcp::service::{RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::Deserialize;

use super::inner::{enc, Refused, Send};
use super::Session;

/// The largest screenshot read back.
const SHOT_MAX: usize = 64 << 20;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotArgs {
    /// The sandbox (default: this session's only one); it must be a desktop.
    pub sandbox: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopArgs {
    /// The sandbox (default: this session's only one); it must be a desktop.
    pub sandbox: Option<String>,
    /// move_mouse, left_click, right_click, double_click, scroll, write, press or open.
    pub action: String,
    /// Pixels from the screen's left edge (move_mouse; clicks, where the pointer is when left out).
    pub x: Option<i64>,
    /// Pixels from the screen's top edge.
    pub y: Option<i64>,
    /// scroll: up, down, left or right.
    pub direction: Option<String>,
    /// scroll: steps (default 3).
    pub amount: Option<i64>,
    /// write: the text to type.
    pub text: Option<String>,
    /// press: key names as xdotool takes them, e.g. "ctrl+l", "Return".
    pub keys: Option<String>,
    /// open: an http:// or https:// URL to open in the browser.
    pub url: Option<String>,
}

impl Session {
    /// The screen as PNG bytes.
    pub(super) async fn desktop_screenshot(
        &self,
        a: ScreenshotArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Vec<u8>, Refused> {
        let who = self.identity(ctx)?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        self.api()
            .call(
                &who,
                Method::GET,
                &format!("/v1/sandboxes/{}/desktop/screenshot", enc(&sb)),
                Send::None,
                SHOT_MAX,
            )
            .await
    }

    pub(super) async fn desktop_action(
        &self,
        a: DesktopArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
        let who = self.identity(ctx)?;
        let sb = self.pick(a.sandbox.as_deref(), ctx).await?;
        let mut body = serde_json::Map::new();
        let mut put = |k: &str, v: Option<serde_json::Value>| {
            if let Some(v) = v {
                body.insert(k.to_string(), v);
            }
        };
        put("x", a.x.map(Into::into));
        put("y", a.y.map(Into::into));
        put("direction", a.direction.map(Into::into));
        put("amount", a.amount.map(Into::into));
        put("text", a.text.map(Into::into));
        put("keys", a.keys.map(Into::into));
        put("url", a.url.map(Into::into));
        self.api()
            .call(
                &who,
                Method::POST,
                &format!("/v1/sandboxes/{}/desktop/{}", enc(&sb), enc(&a.action)),
                Send::Json(serde_json::Value::Object(body)),
                64 * 1024,
            )
            .await?;
        Ok(format!(
            "{} done; take a screenshot to see the result",
            a.action
        ))
    }
}

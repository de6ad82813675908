//! What a desktop sandbox is: the screen's geometry and the sandbox's own
//! loopback ports of its VNC server and its browser's DevTools endpoint.
//! Fixed here, so that every door (the runtime that starts the desktop, the
//! daemon that drives it, the proxies that reach it) agrees on them. Pure:
//! the programs themselves are the runtime's.

use serde::{Deserialize, Serialize};

/// The X display inside the sandbox (`:99`, socket `/tmp/.X11-unix/X99`).
pub const DISPLAY: u32 = 99;
/// The VNC server's port on the sandbox's own 127.0.0.1.
pub const VNC_PORT: u16 = 5900;
/// Chromium's DevTools endpoint on the sandbox's own 127.0.0.1.
pub const CDP_PORT: u16 = 9222;
/// The session bus the desktop's programs share (a socket in the sandbox's
/// own `/tmp`).
pub const DBUS_SOCKET: &str = "/tmp/.warden-dbus";

/// A sandbox's desktop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesktopSpec {
    /// The X display number (`:99`).
    pub display: u32,
    /// The screen's size in pixels.
    pub width: u32,
    pub height: u32,
    /// Port of the VNC server on the sandbox's own loopback.
    pub vnc_port: u16,
    /// Port of the browser's DevTools endpoint on the sandbox's own loopback.
    pub cdp_port: u16,
}

impl Default for DesktopSpec {
    fn default() -> DesktopSpec {
        DesktopSpec {
            display: DISPLAY,
            width: 1280,
            height: 800,
            vnc_port: VNC_PORT,
            cdp_port: CDP_PORT,
        }
    }
}

impl DesktopSpec {
    /// `:99`.
    pub fn display_name(&self) -> String {
        format!(":{}", self.display)
    }

    /// What every process of a desktop sandbox finds in its environment:
    /// the screen, and the session bus of the desktop's programs.
    pub fn env(&self) -> [(&'static str, String); 2] {
        [
            ("DISPLAY", self.display_name()),
            (
                "DBUS_SESSION_BUS_ADDRESS",
                format!("unix:path={DBUS_SOCKET}"),
            ),
        ]
    }
}

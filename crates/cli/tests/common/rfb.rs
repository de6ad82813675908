//! A desktop's screen through the daemon, as a VNC client sees it: a
//! WebSocket to the daemon's route and the RFB handshake over it (shared by
//! the process backend's desktop tests and the VM's).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::daemon::Daemon;
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self, Message};

pub type Ws = tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A WebSocket to `path` on the daemon's socket, or the HTTP status it
/// was refused with.
pub async fn connect(d: &Daemon, path: &str, token: Option<&str>) -> Result<Ws, u16> {
    use tungstenite::client::IntoClientRequest;
    let stream = tokio::net::UnixStream::connect(&d.socket).await.unwrap();
    let mut req = format!("ws://warden{path}").into_client_request().unwrap();
    if let Some(t) = token {
        req.headers_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    match tokio_tungstenite::client_async(req, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("the WebSocket failed: {e}"),
    }
}

pub async fn send(ws: &mut Ws, bytes: &[u8]) {
    ws.send(Message::Binary(bytes.to_vec().into()))
        .await
        .unwrap();
}

/// Read binary frames until `n` bytes came (or the session closed).
pub async fn read_bytes(ws: &mut Ws, buf: &mut Vec<u8>, n: usize) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while buf.len() < n {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(Message::Binary(b)))) => buf.extend_from_slice(&b),
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => return false,
            Ok(Some(Ok(_))) => {}
            Err(_) => panic!("timed out with {} of {n} bytes", buf.len()),
        }
    }
    true
}

/// The RFB handshake as a client, up to ServerInit: (width, height,
/// bytes per pixel) and what was read past it.
pub async fn rfb_handshake(ws: &mut Ws) -> (u16, u16, usize, Vec<u8>) {
    let mut buf = Vec::new();
    assert!(read_bytes(ws, &mut buf, 12).await);
    send(ws, b"RFB 003.008\n").await;
    assert!(read_bytes(ws, &mut buf, 13).await);
    let n = buf[12] as usize;
    assert!(read_bytes(ws, &mut buf, 13 + n).await);
    assert!(buf[13..13 + n].contains(&1), "no None security: {buf:?}");
    send(ws, &[1, 1]).await;
    // SecurityResult (4), then ServerInit: w, h, pixel format (16), name.
    let at = 13 + n;
    assert!(read_bytes(ws, &mut buf, at + 4 + 24).await);
    assert_eq!(&buf[at..at + 4], &[0, 0, 0, 0], "security failed");
    let s = at + 4;
    let w = u16::from_be_bytes([buf[s], buf[s + 1]]);
    let h = u16::from_be_bytes([buf[s + 2], buf[s + 3]]);
    let bpp = buf[s + 4] as usize / 8;
    let name_len =
        u32::from_be_bytes([buf[s + 20], buf[s + 21], buf[s + 22], buf[s + 23]]) as usize;
    assert!(read_bytes(ws, &mut buf, s + 24 + name_len).await);
    (w, h, bpp, buf[s + 24 + name_len..].to_vec())
}

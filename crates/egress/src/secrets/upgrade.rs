//! A WebSocket on a terminated connection: the upgrade request is decided
//! like any other request (its name's request rules, its headers and
//! target checked), then sent upstream over a connection of its own, and
//! once the upstream answers `101 Switching Protocols` the two upgraded
//! streams are relayed both ways as they are, for as long as the session
//! lasts (its idle timeout, a removal of its name). Only bytes the sandbox
//! sends after the 101 are relayed: any it sent behind the upgrade's head
//! before it (a second request, undecided) close the relay unrelayed.
//! Those hyper read with the head are seen at once; those still in the
//! kernel's or TLS's buffers cannot be told from later ones by their
//! timing, so the sandbox's side reaches the upstream only once its first
//! bytes read as a client's masked frame header, which no HTTP request
//! does (`first_frame`, where the reasoning for checking the first frame
//! alone is).
//!
//! Only `websocket` is upgraded, and only over HTTP/1.1 (`Upgrade` and
//! `Connection: upgrade`); any other upgrade is sent on as a plain request,
//! its hop-by-hop headers dropped (so the upstream never switches). The
//! frames after the upgrade are not read: an upgrade to a host some
//! secret covers is refused, since neither its placeholders nor its real
//! value could be followed through them. It never decides whether the
//! request may go (the rules did) and never records anything itself (the
//! request's tally does).

mod first_frame;

use super::ruled::Tally;
use super::{BoxError, OutBody, BUFFER_LIMIT};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// The sandbox's side of a terminated connection as hyper serves it: what
/// an HTTP/1.1 upgrade hands back.
pub(super) type SandboxIo = TokioIo<
    crate::linger::Lingering<
        tokio_rustls::server::TlsStream<crate::metered::Metered<tokio::net::TcpStream>>,
    >,
>;

/// How long connecting and greeting the upstream of an upgrade may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `parts` asks to become a WebSocket: HTTP/1.1, an `Upgrade`
/// naming `websocket` and a `Connection` that lists `upgrade`.
pub(super) fn is_websocket(parts: &http::request::Parts) -> bool {
    let lists = |name: http::header::HeaderName, token: &str| {
        parts.headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    parts.version == http::Version::HTTP_11
        && lists(http::header::UPGRADE, "websocket")
        && lists(http::header::CONNECTION, "upgrade")
}

/// Where an upgrade goes: the session's name, the address its own
/// upstream connection was made to (judged when it was) and its TLS
/// client.
pub(super) struct Upstream<'a> {
    pub(super) name: &'a str,
    pub(super) peer: Option<std::net::SocketAddr>,
    pub(super) client: &'a rustls::ClientConfig,
}

/// What an upgrade needs besides the request going upstream.
pub(super) struct Upgrade {
    /// Resolves to the sandbox's side once the 101 is sent.
    pub(super) client: hyper::upgrade::OnUpgrade,
    /// The request's record, finished with the relay's bytes.
    pub(super) tally: Option<Tally>,
    /// Records that the sandbox sent this many bytes behind the upgrade's
    /// head before its 101 (and that the relay was closed for them).
    pub(super) early: Box<dyn FnOnce(usize) + Send>,
}

/// Send `request` (its target and headers already checked and
/// substituted) upstream on a connection of its own and, when the upstream
/// switches, answer the sandbox with its 101 and relay the two streams
/// until either ends; any other answer goes back as the upstream's. The
/// relay's task comes back with the 101, for the session to wait for (and
/// stop when it ends).
pub(super) async fn relay(
    s: &Upstream<'_>,
    mut request: Request<OutBody>,
    upgrade: Upgrade,
) -> Result<(Response<OutBody>, Option<tokio::task::JoinHandle<()>>), String> {
    let Some(peer) = s.peer else {
        return Err(format!("the upstream address of {} is unknown", s.name));
    };
    // The upgrade's own hop-by-hop headers, dropped with the others.
    let headers = request.headers_mut();
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("upgrade"),
    );
    headers.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static("websocket"),
    );
    let mut response = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let mut sender = connect(s, peer).await?;
        sender
            .send_request(request)
            .await
            .map_err(|e| format!("the upgrade request to {} failed: {e}", s.name))
    })
    .await
    .map_err(|_| {
        format!(
            "the upstream {} did not answer the upgrade within {} s",
            s.name,
            CONNECT_TIMEOUT.as_secs()
        )
    })??;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Not switched: an ordinary answer, recorded as one.
        let response = response.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed());
        let response = match upgrade.tally {
            Some(t) => t.answered(response),
            None => response,
        };
        return Ok((response, None));
    }
    // An agreed extension may give a frame's reserved bits a meaning.
    let extensions = response
        .headers()
        .contains_key(http::header::SEC_WEBSOCKET_EXTENSIONS);
    let upstream = hyper::upgrade::on(&mut response);
    let Upgrade {
        client,
        tally,
        early,
    } = upgrade;
    let task = tokio::spawn(async move {
        let (Ok(client), Ok(upstream)) = tokio::join!(client, upstream) else {
            if let Some(t) = tally {
                t.relayed(0, 0);
            }
            return;
        };
        let Some(mut client) = undecided_bytes_refused(client, extensions, early) else {
            // Both upgraded streams are dropped: closed, nothing relayed.
            if let Some(t) = tally {
                t.relayed(0, 0);
            }
            return;
        };
        let mut upstream = TokioIo::new(upstream);
        let (out, inn) = tokio::io::copy_bidirectional(&mut client, &mut upstream)
            .await
            .unwrap_or((0, 0));
        if let Some(t) = tally {
            t.relayed(out, inn);
        }
    });
    let (parts, _) = response.into_parts();
    Ok((Response::from_parts(parts, empty()), Some(task)))
}

/// The sandbox's upgraded stream, when hyper read nothing behind the
/// upgrade's head, its reads held until they start with a client's frame
/// (`extensions`: the 101 agreed one). Bytes hyper read there were sent
/// before the 101 (in the head's write, or while the upstream was
/// answering), which no WebSocket client does (RFC 6455 §4.1: it sends
/// frames once it has read the 101). They were never decided as a request
/// (a second request behind the upgrade would reach the server unread),
/// so the relay is refused, with `early` told how many there were; it is
/// told the same when the first bytes read later are not a frame.
fn undecided_bytes_refused(
    client: hyper::upgrade::Upgraded,
    extensions: bool,
    early: Box<dyn FnOnce(usize) + Send>,
) -> Option<
    first_frame::FirstFrame<tokio_rustls::server::TlsStream<crate::metered::Metered<TcpStream>>>,
> {
    match client.downcast::<SandboxIo>() {
        Ok(parts) if parts.read_buf.is_empty() => Some(first_frame::FirstFrame::new(
            parts.io.into_inner().into_inner(),
            extensions,
            early,
        )),
        Ok(parts) => {
            early(parts.read_buf.len());
            None
        }
        // Not the stream `session` serves over HTTP/1.1: unreachable, and
        // refused all the same.
        Err(_) => None,
    }
}

/// The 101's body: nothing (the upgraded stream carries the rest).
fn empty() -> OutBody {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

/// An HTTP/1.1 client on a new TLS connection to `peer`, the address the
/// session's own upstream connection was made to (judged when it was):
/// HTTP/1.1 alone is offered, since a WebSocket is upgraded from it.
async fn connect(
    s: &Upstream<'_>,
    peer: std::net::SocketAddr,
) -> Result<hyper::client::conn::http1::SendRequest<OutBody>, String> {
    let server_name = ServerName::try_from(s.name.to_string())
        .map_err(|e| format!("{} is not a TLS server name: {e}", s.name))?;
    let tcp = TcpStream::connect(peer)
        .await
        .map_err(|e| format!("cannot connect to {} ({peer}) for the upgrade: {e}", s.name))?;
    let mut config = s.client.clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("TLS to the upstream {} failed: {e}", s.name))?;
    tls.get_mut().1.set_buffer_limit(Some(BUFFER_LIMIT));
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(BUFFER_LIMIT)
        .handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("HTTP/1.1 to the upstream {} failed: {e}", s.name))?;
    tokio::spawn(conn.with_upgrades());
    Ok(sender)
}

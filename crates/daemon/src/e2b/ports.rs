//! A sandbox's ports through the door, as E2B's proxy serves them: a
//! request naming a port other than envd's (the `E2b-Sandbox-Port` header
//! the SDKs send when `E2B_SANDBOX_URL` is set, as the code interpreter's
//! `run_code` does; or a host name `PORT-ID.localhost[:DOOR]`, what
//! `get_host(port)` answers) is relayed, HTTP and WebSocket alike, to that
//! port on the sandbox's own loopback. The sandbox's init opens that
//! connection inside the sandbox's network namespace and hands it back
//! over the supervisor's control socket (the connect-inside path of
//! [`crate::routes::inside`]), so nothing new listens on the host: the
//! door is the only listener.
//!
//! Who may: a caller that may run commands in the sandbox (a service
//! inside runs with the sandbox's powers, and a code interpreter runs
//! code), proved as on envd's calls by `X-Access-Token` or E2B's
//! `E2B-Traffic-Access-Token`; anyone else is refused before anything
//! is opened. The credentials that proved it are never passed on to the
//! service inside.
//!
//! What a relay may hold: each request relayed (until its answer's body
//! ends) and each WebSocket relayed (until either side closes) takes a
//! place among its caller's long-lived answers ([`crate::leases`], the
//! ledger every door's long-lived answers share), refused with 429 past
//! the caller's bound before anything inside is opened; and a relay that
//! carries nothing either way for the idle timeout (`sessions:
//! {idle_seconds}`) is closed ([`crate::idle`]).
//!
//! The sandbox domain create answers is `localhost` (with the door's
//! port): a `.localhost` name never leaves the machine that asks for it
//! (RFC 6761), and no certificate authority signs one, so an SDK left
//! without `E2B_SANDBOX_URL` fails to connect (its envd URL is HTTPS)
//! rather than sending its commands and token to E2B's public host.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use hyper_util::rt::TokioIo;
use std::sync::Arc;

use super::answer::{DOMAIN, DOOR};
use super::inside::{connect_inside, refused};
use super::{answer, control, interpreter, permit, E2b};
use crate::app::App;
use crate::credential::Credential;
use crate::error::chain;
use crate::leases::{Kind, Lease};

/// envd's port: requests for it are the door's own envd routes.
pub const ENVD_PORT: u16 = 49983;

/// Headers that belong to one hop, never relayed (RFC 9110 7.6.1), and
/// the credentials and routing headers of the door itself, never shown to
/// the service inside.
const NOT_RELAYED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "x-access-token",
    "e2b-traffic-access-token",
    "x-api-key",
    "e2b-sandbox-id",
    "e2b-sandbox-port",
];

/// The sandbox domain for a request that came to the door as
/// `Host: NAME[:PORT]`: `localhost:PORT`.
fn domain_for(headers: &HeaderMap) -> String {
    let port = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.rsplit_once(':'))
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    match port {
        Some(p) => format!("{DOMAIN}:{p}"),
        None => DOMAIN.to_string(),
    }
}

/// Where a request is to go: a sandbox (when named) and a port inside it.
#[derive(Debug, PartialEq, Eq)]
struct Route {
    sandbox: Option<String>,
    port: u16,
}

/// The port a request names, if it is not for envd: `None` lets the door's
/// own routes answer it.
fn route_of(headers: &HeaderMap) -> Result<Option<Route>, String> {
    if let Some(v) = headers.get("e2b-sandbox-port") {
        let port = v
            .to_str()
            .ok()
            .and_then(|p| p.trim().parse::<u16>().ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| "E2b-Sandbox-Port is not a port number (1-65535)".to_string())?;
        return Ok((port != ENVD_PORT).then(|| Route {
            sandbox: super::sandbox_header(headers),
            port,
        }));
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return Ok(None);
    };
    Ok(host_route(host))
}

/// `PORT-ID.localhost[:DOOR]`, as `get_host(port)` answers it.
fn host_route(host: &str) -> Option<Route> {
    let name = match host.rsplit_once(':') {
        Some((n, p)) if p.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => host,
    };
    let label = name
        .to_ascii_lowercase()
        .strip_suffix(&format!(".{DOMAIN}"))
        .map(str::to_string)?;
    let (port, id) = label.split_once('-')?;
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    if id.is_empty() || id.contains('.') || port == ENVD_PORT {
        return None;
    }
    Some(Route {
        sandbox: Some(id.to_string()),
        port,
    })
}

/// In front of the door's routes: a request for a sandbox's port is
/// relayed there, everything else goes on to the door's own routes.
pub async fn route(State(e): State<Arc<E2b>>, req: Request, next: Next) -> Response {
    match route_of(req.headers()) {
        // The door's own routes run as its own: a native handler they
        // call (create) may write the door's labels (see [`crate::labels`]).
        Ok(None) => {
            let own = DOOR.scope(domain_for(req.headers()), next.run(req));
            crate::labels::within(crate::labels::Door::E2b, own).await
        }
        // E2B's MCP gateway port is warden's own MCP for the sandbox.
        Ok(Some(Route {
            sandbox: Some(id),
            port: super::mcp::MCP_PORT,
        })) => super::mcp::serve(e, req, id).await,
        Ok(Some(r)) => relay(e, req, r).await,
        Err(m) => answer::error(StatusCode::BAD_REQUEST, m),
    }
}

/// The credential a port request carries.
fn token(headers: &HeaderMap) -> Option<String> {
    ["x-access-token", "e2b-traffic-access-token"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(|v| v.trim().to_string())
}

async fn relay(e: Arc<E2b>, req: Request, r: Route) -> Response {
    let Some(sid) = r.sandbox else {
        return answer::error(
            StatusCode::BAD_REQUEST,
            "E2b-Sandbox-Port without E2b-Sandbox-Id: name the sandbox too (the SDK sends both)",
        );
    };
    let token = token(req.headers());
    let route = crate::auth::Route::refused_at(req.method(), "/e2b/port");
    let peer = crate::denials::Peer::of(req.extensions());
    let caller = match super::check_access(&e.app, peer, &route, &sid, token.as_deref()) {
        Ok(c) => c,
        Err((status, m)) => return answer::error(status, m),
    };
    // A port's service runs with the sandbox's powers: reaching it is
    // running code in it.
    if let Err(why) = permit(
        &e.app,
        &caller,
        "POST",
        "/v1/sandboxes/{id}/exec",
        Some(&sid),
    )
    .map_err(String::from)
    {
        // Another caller's sandbox is answered as one that is not there.
        return if why == format!("sandbox {sid} was not found") {
            gone(&sid)
        } else {
            answer::error(StatusCode::FORBIDDEN, why)
        };
    }
    // Let in by a credential: the answer is not cut at the deadline of
    // requests nobody proved (a long cell of the code interpreter, a
    // service's stream).
    crate::deadline::proven_by(&req, caller.token_id());
    let credential = Credential {
        token: caller.token_id().map(str::to_string),
        session: None,
        envd: token
            .filter(|t| t.starts_with(super::signing::KEY_PREFIX))
            .map(|k| (sid.clone(), k)),
    };
    // A place among the caller's long-lived answers, before anything
    // inside is opened or started.
    let lease = match e.app.leases.take(&credential, Kind::PortRelay) {
        Ok(l) => l,
        Err(err) => return control::from_api(err),
    };
    // The code interpreter's server starts with its first request.
    if r.port == interpreter::PORT && interpreter::serves(&e.app, &sid) {
        match interpreter::ensure(&e.app, &sid, &credential).await {
            Ok(()) => {}
            Err(interpreter::InterpreterError::Refused(err)) => return control::from_api(err),
            Err(err) => return answer::error(StatusCode::SERVICE_UNAVAILABLE, err.to_string()),
        }
    }
    let stream = match open(&e.app, &sid, r.port).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let resp = forward(&e.app, &credential, req, stream, lease).await;
    crate::revocation::bound(&e.app, credential, resp, None)
}

/// The answer for a sandbox that is not there, stopped, or not the
/// caller's, as E2B's proxy gives it.
fn gone(id: &str) -> Response {
    answer::error(
        StatusCode::BAD_GATEWAY,
        format!("sandbox {id} was not found: it was killed, or its timeout ended"),
    )
}

/// A connection to `port` on the sandbox's own loopback.
async fn open(app: &Arc<App>, id: &str, port: u16) -> Result<tokio::net::TcpStream, Response> {
    let fd = match connect_inside(app, id, port).await {
        None => return Err(gone(id)),
        Some(Ok(fd)) => fd,
        Some(Err(e)) if refused(&e) => {
            return Err(answer::error(
                StatusCode::BAD_GATEWAY,
                format!("the sandbox {id} is running but nothing listens on port {port} inside it"),
            ))
        }
        Some(Err(e)) => return Err(answer::error(StatusCode::BAD_GATEWAY, chain(&e))),
    };
    let std = std::net::TcpStream::from(fd);
    std.set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(std))
        .map_err(|err| {
            answer::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot relay to port {port} of sandbox {id}: {err}"),
            )
        })
}

/// Whether `headers` ask to switch protocols (a WebSocket handshake).
fn upgrading(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
        && headers.contains_key(header::UPGRADE)
}

/// `headers` without what is never relayed (and without what the
/// `Connection` header names as this hop's own).
fn relayed(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::new();
    for (k, v) in headers {
        let name = k.as_str();
        if NOT_RELAYED.contains(&name) || named.iter().any(|n| n == name) {
            continue;
        }
        if *k == header::AUTHORIZATION && holds_warden_credential(v) {
            // The caller's warden token or access key is for the door,
            // never for the service inside (which runs the sandbox's code).
            continue;
        }
        if *k == header::COOKIE {
            // The dashboard's session is warden's, not the service's.
            let kept: Vec<&str> = v
                .to_str()
                .unwrap_or("")
                .split(';')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .filter(|c| {
                    c.split_once('=').map(|(n, _)| n.trim()) != Some(crate::session::COOKIE)
                })
                .collect();
            if let Ok(v) = axum::http::HeaderValue::from_str(&kept.join("; ")) {
                if !kept.is_empty() {
                    out.append(k.clone(), v);
                }
            }
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

/// Whether an `Authorization` value carries a warden token or access key.
fn holds_warden_credential(v: &axum::http::HeaderValue) -> bool {
    let text = String::from_utf8_lossy(v.as_bytes());
    ["wdn_", super::signing::KEY_PREFIX]
        .iter()
        .any(|p| text.contains(p))
}

/// Send `req` over `stream` as HTTP/1.1 and answer what comes back; a
/// WebSocket handshake the service accepts becomes a relay of bytes both
/// ways until either side closes, nothing moves for the idle timeout, or
/// the credential ends. `lease` is held as long as the relay is: to the
/// end of the answer's body, or of the WebSocket.
async fn forward(
    app: &Arc<App>,
    credential: &Credential,
    mut req: Request,
    stream: tokio::net::TcpStream,
    lease: Lease,
) -> Response {
    let idle = app.leases.idle();
    let bad_gateway = |m: String| answer::error(StatusCode::BAD_GATEWAY, m);
    let upgrade = upgrading(req.headers());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
        Ok(c) => c,
        Err(err) => return bad_gateway(format!("the service inside did not answer HTTP: {err}")),
    };
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut sender = sender;
    let (parts, body) = req.into_parts();
    let mut headers = relayed(&parts.headers);
    if upgrade {
        for h in [header::CONNECTION, header::UPGRADE] {
            if let Some(v) = parts.headers.get(&h) {
                headers.insert(h, v.clone());
            }
        }
    }
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    // A request body that trickles in holds the relay as an answer does.
    let body = crate::idle::body(body, idle, ());
    let mut out = match hyper::Request::builder()
        .method(parts.method)
        .uri(path)
        .body(body)
    {
        Ok(r) => r,
        Err(err) => {
            return answer::error(
                StatusCode::BAD_REQUEST,
                format!("the request cannot be relayed: {err}"),
            )
        }
    };
    *out.headers_mut() = headers;
    let mut answer = match sender.send_request(out).await {
        Ok(a) => a,
        Err(err) => return bad_gateway(format!("the service inside broke off: {err}")),
    };
    if answer.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_side) = client_side else {
            return bad_gateway("the service inside switched protocols unasked".into());
        };
        let service_side = hyper::upgrade::on(&mut answer);
        let (app, credential) = (app.clone(), credential.clone());
        tokio::spawn(async move {
            let (Ok(a), Ok(b)) = (client_side.await, service_side.await) else {
                return;
            };
            let _held = lease;
            let (a, b) = (TokioIo::new(a), TokioIo::new(b));
            tokio::select! {
                _ = crate::idle::both_ways(a, b, idle) => {}
                () = app.revoked(credential), if credential.revocable() => {}
            }
        });
        let (parts, _) = answer.into_parts();
        return Response::from_parts(parts, Body::empty());
    }
    let (parts, body) = answer.into_parts();
    let body = crate::idle::body(Body::new(body), idle, lease);
    let mut resp = Response::from_parts(parts, body);
    let kept = relayed(resp.headers());
    *resp.headers_mut() = kept;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                *k,
                HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static("")),
            );
        }
        h
    }

    #[test]
    fn a_port_is_named_by_header_or_by_host_and_envd_stays_the_doors() {
        let by_header = headers(&[("e2b-sandbox-port", "49999"), ("e2b-sandbox-id", "sb1")]);
        assert_eq!(
            route_of(&by_header),
            Ok(Some(Route {
                sandbox: Some("sb1".into()),
                port: 49999
            }))
        );
        let envd = headers(&[("e2b-sandbox-port", "49983"), ("e2b-sandbox-id", "sb1")]);
        assert_eq!(route_of(&envd), Ok(None));
        assert!(route_of(&headers(&[("e2b-sandbox-port", "0")])).is_err());
        assert!(route_of(&headers(&[("e2b-sandbox-port", "x")])).is_err());
        let by_host = headers(&[("host", "8000-e2b-abc.localhost:3000")]);
        assert_eq!(
            route_of(&by_host),
            Ok(Some(Route {
                sandbox: Some("e2b-abc".into()),
                port: 8000
            }))
        );
        for other in [
            "127.0.0.1:3000",
            "8000-abc.example.com",
            "localhost:3000",
            "x-abc.localhost",
            "8000-a.b.localhost",
            "49983-abc.localhost",
        ] {
            assert_eq!(route_of(&headers(&[("host", other)])), Ok(None), "{other}");
        }
    }

    #[test]
    fn the_sandbox_domain_is_loopback_with_the_doors_port() {
        assert_eq!(
            domain_for(&headers(&[("host", "127.0.0.1:4321")])),
            "localhost:4321"
        );
        assert_eq!(domain_for(&headers(&[("host", "door")])), "localhost");
        assert_eq!(
            domain_for(&headers(&[("host", "door:4321/x")])),
            "localhost"
        );
        assert_eq!(domain_for(&HeaderMap::new()), "localhost");
        assert_eq!(answer::sandbox_domain(), "localhost");
    }

    #[test]
    fn credentials_and_hop_headers_are_never_relayed() {
        let h = headers(&[
            ("x-access-token", "ea_secret"),
            ("e2b-traffic-access-token", "t"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("accept", "*/*"),
            ("authorization", "Bearer wdn_abc.def"),
            ("cookie", "warden_session=s3cret; theirs=1"),
        ]);
        let out = relayed(&h);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out.contains_key("accept"));
        assert_eq!(out["cookie"], "theirs=1");
        // The service's own credentials pass.
        let own = relayed(&headers(&[("authorization", "Bearer service-token")]));
        assert_eq!(own["authorization"], "Bearer service-token");
    }
}

//! The sandbox's network, seen from the host: the wiring of the sandbox's
//! network namespace (`wiring`), the proxy that decides every connection on
//! the name it asks for (`proxy`, with the readers of TLS SNI in `tls` and
//! HTTP heads in `http`, and the name `matcher`), the resolver that answers
//! only allowed names (`dns`), published ports (`publish`), and the
//! TLS-terminating proxy that substitutes secrets for their own hosts
//! (`secrets`).

pub mod decision;
pub mod dns;
pub mod http;
pub mod matcher;
pub mod proxy;
pub mod publish;
pub mod secrets;
pub mod tls;
pub mod wiring;

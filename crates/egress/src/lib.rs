//! The sandbox's network, seen from the host: which names a sandbox may
//! reach, and how a connection says where it goes. Today this crate holds
//! the name matcher every egress decision goes through and the parsers that
//! read a name from a connection's first bytes (TLS SNI, HTTP Host, absolute
//! URI, CONNECT); the redirect rules, the proxy and the DNS responder of the
//! egress issue build on them. Nothing here makes a syscall.

pub mod dns;
pub mod http;
pub mod matcher;
pub mod proxy;
pub mod publish;
pub mod tls;
pub mod wiring;

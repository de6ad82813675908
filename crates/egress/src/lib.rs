//! The sandbox's network, seen from the host: which names a sandbox may
//! reach. Today this crate holds the name matcher that every egress
//! decision (TLS SNI, HTTP Host, DNS question) goes through; the redirect
//! rules, the proxy and the DNS responder of the egress issue build on it.

pub mod matcher;

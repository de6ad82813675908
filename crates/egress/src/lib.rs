//! The sandbox's network, seen from the host: the proxy that decides every
//! connection on the name it asks for (`proxy`, with the readers of TLS SNI
//! in `tls` and HTTP heads in `http`, the name `matcher`, and `socket`, the
//! original destination of a redirected connection), the resolver that
//! answers only allowed names (`dns`), published ports (`publish`), and the
//! TLS-terminating proxy that substitutes secrets for their own hosts
//! (`secrets`). It serves sockets it is handed: the namespace they were
//! opened in is wired by the jail (`warden_jail::netns`).

// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod ask;
pub mod decision;
pub mod dns;
pub mod http;
mod linger;
pub mod matcher;
mod metered;
pub mod proxy;
pub mod publish;
pub mod requests;
pub mod secrets;
pub mod socket;
pub mod tls;

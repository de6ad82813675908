//! The catalogue, one file per category. Each file holds its attacks (id,
//! category, description, and the judge that runs a sandbox and reads the
//! host's instruments) and, beside them, the probes those attacks run
//! inside the sandbox (`PROBES`, dispatched by `crate::probes::run`).

pub(crate) mod cross;
pub(crate) mod exec;
pub(crate) mod fs;
pub(crate) mod kernel;
pub(crate) mod net;
pub(crate) mod persistence;
pub(crate) mod process;
pub(crate) mod resources;
pub(crate) mod secret_proxy;
pub(crate) mod secret_routes;
pub(crate) mod secrets;

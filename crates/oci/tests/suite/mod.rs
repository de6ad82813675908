//! One module per area of the OCI runtime's tests.

mod cgroups_path;
pub(crate) mod containerd;
mod cri;
mod cri_docs;
mod cri_egress;
mod cri_life;
mod cri_secrets;
mod cri_stream;
mod kubernetes;
mod pod_allow_exec;
mod pod_trust;
mod secret_hosts;
mod secrets;
mod verbs;

//! One module per area of the OCI runtime's tests.

mod containerd;
mod kubernetes;
mod secrets;
mod verbs;

//! One module per layer of the jail's tests.

mod cgroup_limits;
mod deep_layer;
mod gvisor_workspace;
mod helper_caps;
mod landlock_rules;
mod layer_links;
mod netns;
mod seccomp_rules;

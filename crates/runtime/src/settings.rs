//! The host's settings of this process, read from its environment once
//! by a door's `main` and never by a library: the process backends' and
//! the runtime's (`warden_jail::settings::Settings`: the state directory,
//! where a user's cgroup plan is remembered, which runsc runs, the host's
//! git configuration that a review reads). Installed through here so that
//! a door which does not link the jail (`warden-oci`) installs the same
//! value the same way.

use std::ffi::OsString;

/// Read the host's settings from `get` (a binary's environment) and make
/// them this process's, before any sandbox exists; `false` when some were
/// installed already (nothing changes).
pub fn install_from(get: impl Fn(&str) -> Option<OsString>) -> bool {
    warden_jail::settings::Settings::from_vars(get).install()
}

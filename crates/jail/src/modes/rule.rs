//! The rule itself, apart from how a file is found: whether a mode change
//! may give the host's other users a bit the file did not give them. One
//! rule for a live change and for what warden lands on a host file later
//! (a commit, a volume's or a cache's merge): it lives with the workspace,
//! which lands changes, and is read here.

pub use warden_workspace::exposure::{may_set, taken_away, Seen};

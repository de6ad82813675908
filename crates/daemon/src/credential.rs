//! What a request was let in with: the app asks whether it still stands
//! ([`crate::app::App::still_granted`]), the lease ledger counts the places
//! its holder takes ([`crate::leases`]).

/// What a request was let in with (the owner on the Unix socket: nothing
/// to revoke), kept by long-lived streams to ask [`crate::app::App::still_granted`].
#[derive(Debug, Clone, Default)]
pub struct Credential {
    /// The token's id.
    pub token: Option<String>,
    /// The browser session's cookie value.
    pub session: Option<String>,
    /// The E2B door's envd access token: its sandbox and the key, which
    /// ends with its sandbox even while its warden token stands.
    pub envd: Option<(String, String)>,
}

impl Credential {
    /// Whether anything here can be revoked or end (the owner's calls
    /// carry nothing).
    pub fn revocable(&self) -> bool {
        self.token.is_some() || self.session.is_some() || self.envd.is_some()
    }
}

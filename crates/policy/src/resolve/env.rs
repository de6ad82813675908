//! The environment's last additions, from the other sections: the
//! proxy's variables, the secrets' authority, a desktop's screen. A value
//! the person set is never replaced.

use crate::compose::Layer;
use crate::fields::Field;
use crate::secrets::SecretSpec;
use crate::{DesktopSpec, NetworkSpec, CA_BUNDLE_PATH, CA_CERT_PATH, EXPLICIT_PROXY_URL};

/// The environment `env` with what the network, the secrets and a
/// desktop add, and the desktop itself.
pub(super) fn finish_env(
    layer: &Layer,
    env: Vec<(String, String)>,
    network: &NetworkSpec,
    secrets: &[SecretSpec],
) -> (Vec<(String, String)>, Option<DesktopSpec>) {
    let mut env = env;
    if matches!(network, NetworkSpec::Egress(_)) {
        // For tools that prefer an explicit proxy; every other program
        // is intercepted transparently, with the same decisions.
        for (k, v) in [
            ("HTTP_PROXY", EXPLICIT_PROXY_URL),
            ("HTTPS_PROXY", EXPLICIT_PROXY_URL),
            ("http_proxy", EXPLICIT_PROXY_URL),
            ("https_proxy", EXPLICIT_PROXY_URL),
            ("NO_PROXY", "localhost,127.0.0.1"),
            ("no_proxy", "localhost,127.0.0.1"),
        ] {
            if !env.iter().any(|(n, _)| n == k) {
                env.push((k.to_string(), v.to_string()));
            }
        }
    }
    let terminated = match network {
        NetworkSpec::Egress(e) => !e.requests.is_empty(),
        NetworkSpec::LoopbackOnly => false,
    };
    if !secrets.is_empty() || terminated {
        // The proxy presents certificates of a per-sandbox authority
        // for the secrets' hosts and the names with request rules: common tools are pointed at a bundle
        // that trusts it (the jail mounts the files; the placeholders
        // themselves are added by the supervisor, which makes them).
        for (k, v) in [
            ("SSL_CERT_FILE", CA_BUNDLE_PATH),
            ("REQUESTS_CA_BUNDLE", CA_BUNDLE_PATH),
            ("CURL_CA_BUNDLE", CA_BUNDLE_PATH),
            ("GIT_SSL_CAINFO", CA_BUNDLE_PATH),
            ("NODE_EXTRA_CA_CERTS", CA_CERT_PATH),
        ] {
            if !env.iter().any(|(n, _)| n == k) {
                env.push((k.to_string(), v.to_string()));
            }
        }
    }

    let desktop = if layer.on(Field::Desktop) {
        let d = DesktopSpec::default();
        // Every process sees the screen, as it would at a person's
        // desktop; the profile's own values win.
        for (k, v) in d.env() {
            if !env.iter().any(|(n, _)| n == k) {
                env.push((k.to_string(), v));
            }
        }
        Some(d)
    } else {
        None
    };
    (env, desktop)
}

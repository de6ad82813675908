//! The per-run certificate authority and the TLS configurations of the
//! terminator.
//!
//! This module owns the authority made at start (a self-signed CA, path
//! length 0, valid from a day back to thirty days ahead), the leaf certificate it mints for
//! each secret's host on first use and caches, the server configuration the
//! sandbox's side is accepted with, and the client configuration upstream
//! servers are verified with (the system's roots and `--upstream-ca`). The
//! authority's key stays in this process's memory: nothing here writes it
//! anywhere, and it never sees a secret's value.

use super::SecretError;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The per-sandbox authority: a self-signed CA made at start, and the leaf
/// certificates it signs for the secrets' hosts, made on first use.
pub(super) struct Authority {
    pub(super) cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authority")
    }
}

impl Authority {
    pub(super) fn generate() -> Result<Authority, rcgen::Error> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            "warden sandbox secrets (this run only)",
        );
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "warden");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params);
        let cert = params.self_signed(&key)?;
        Ok(Authority {
            cert,
            key,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    fn leaf(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        if let Some(k) = self.leaves.lock().ok()?.get(name) {
            return Some(k.clone());
        }
        let key = rcgen::KeyPair::generate().ok()?;
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).ok()?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::NoCa;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        set_validity(&mut params);
        let cert = params.signed_by(&key, &self.cert, &self.key).ok()?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = rustls::crypto::ring::sign::any_supported_type(&der).ok()?;
        let certified = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert.der().clone()],
            signer,
        ));
        self.leaves
            .lock()
            .ok()?
            .insert(name.to_string(), certified.clone());
        Some(certified)
    }
}

/// Valid from a day back (clocks differ) to thirty days ahead.
fn set_validity(params: &mut rcgen::CertificateParams) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (y, m, d) = civil(now - 86_400);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil(now + 30 * 86_400);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// Seconds since the epoch as a calendar date (Howard Hinnant's algorithm).
fn civil(secs: i64) -> (i32, u8, u8) {
    let days = secs.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

#[derive(Debug)]
struct LeafResolver(Arc<Authority>);

impl rustls::server::ResolvesServerCert for LeafResolver {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.leaf(&hello.server_name()?.to_ascii_lowercase())
    }
}

/// The configuration the sandbox's side is accepted with: a leaf of
/// `authority` per name, HTTP/2 and HTTP/1.1 offered.
pub(super) fn server_config(
    authority: Arc<Authority>,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<rustls::ServerConfig, SecretError> {
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(SecretError::Tls)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(LeafResolver(authority)));
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(server)
}

/// The configuration upstream servers are verified with: the system's
/// roots and the `upstream_ca` files; HTTP/2 and HTTP/1.1 offered, the
/// upstream chooses.
pub(super) fn client_config(
    provider: Arc<rustls::crypto::CryptoProvider>,
    upstream_ca: &[PathBuf],
) -> Result<rustls::ClientConfig, SecretError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    for path in upstream_ca {
        for cert in read_pem_certs(path)? {
            roots
                .add(cert)
                .map_err(|source| SecretError::BadCertificate {
                    path: path.clone(),
                    source,
                })?;
        }
    }
    if roots.is_empty() {
        return Err(SecretError::NoRoots);
    }
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(SecretError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(client)
}

fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, SecretError> {
    let data = std::fs::read(path).map_err(|source| SecretError::UpstreamCa {
        path: path.to_path_buf(),
        source,
    })?;
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut data.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|source| SecretError::UpstreamCa {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(SecretError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_dates_are_right() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(951_782_400), (2000, 2, 29));
        assert_eq!(civil(1_767_225_600), (2026, 1, 1));
    }

    #[test]
    fn the_authority_mints_a_leaf_per_name_once() {
        let a = Authority::generate().unwrap();
        let one = a.leaf("api.example.com").unwrap();
        let again = a.leaf("api.example.com").unwrap();
        assert!(Arc::ptr_eq(&one, &again));
        assert_eq!(one.cert.len(), 2);
        assert!(a.cert.pem().starts_with("-----BEGIN CERTIFICATE-----"));
    }
}

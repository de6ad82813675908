//! envd access tokens and signed file URLs.
//!
//! A sandbox the E2B door made answers each token that creates or
//! connects to it with an envd access token of its own ([`new_key`]): a
//! random key the daemon keeps whole, standing for that token's power
//! over that one sandbox and nothing else. The SDK sends it as
//! `X-Access-Token`, and signs file URLs with it
//! (`sandbox.download_url(path)`, `upload_url(path)`): the URL carries
//! `v1_` and the unpadded base64 of SHA-256 over
//! `PATH:OPERATION:USER:KEY[:EXPIRATION]` (the SDK's
//! `e2b/sandbox/signature.py`). With `E2B_SANDBOX_URL` the URL names no
//! sandbox, so the signature does: it is checked against the keys
//! ([`verify`]), each compared in constant time, and the key it matches
//! names the sandbox and the token. A signed URL therefore does only what
//! it was signed for: that path, that operation, that user, until that
//! time, as long as the key's token is not revoked and its sandbox is not
//! removed.

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How an envd access token begins (a warden token begins `wdn_`).
pub const KEY_PREFIX: &str = "wde_";

/// A new envd access token: 32 random bytes.
pub fn new_key() -> String {
    let mut bytes = [0u8; 32];
    // The kernel's generator; it fails only on kernels warden does not run
    // on. A failure leaves no key: the caller gets none rather than zeros.
    if getrandom::fill(&mut bytes).is_err() {
        return String::new();
    }
    format!(
        "{KEY_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// What a signed URL may do: `GET /files` reads, `POST /files` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
        }
    }
}

/// The v1 signature of a file URL, as the SDK computes it.
pub fn signature(
    path: &str,
    op: Operation,
    user: &str,
    key: &str,
    expiration: Option<i64>,
) -> String {
    let mut raw = format!("{path}:{}:{user}:{key}", op.as_str());
    if let Some(exp) = expiration {
        raw.push_str(&format!(":{exp}"));
    }
    let digest = Sha256::digest(raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

/// A request to `/files` that came with a signature instead of a token.
#[derive(Debug, Clone)]
pub struct Signed<'a> {
    pub path: &'a str,
    pub op: Operation,
    /// The `username` the URL names ("" when none).
    pub user: &'a str,
    pub signature: &'a str,
    /// `signature_expiration` as it came.
    pub expiration: Option<&'a str>,
}

/// Why a signed URL was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("the signed URL names no file: a signed URL is for ?path=FILE")]
    NoPath,
    #[error("signature {0:?} is not a v1 signature (v1_...): sign the URL with the SDK's download_url/upload_url")]
    NotV1(String),
    #[error("signature_expiration {0:?} is not a Unix time in seconds")]
    BadExpiration(String),
    #[error("the signature matches no envd access token: it was signed for another file, operation, user or expiry, its sandbox was killed, or it was altered")]
    NoMatch,
    #[error("the signed URL expired at {expired} (Unix time; it is now {now}): ask for a new one")]
    Expired { expired: i64, now: i64 },
}

/// Which of `keys` signed `req` (its index), with the expiry checked at
/// `now` (Unix seconds). Every key is compared, each in constant time, so
/// the time taken does not tell how much of a guess was right.
pub fn verify<K: AsRef<str>>(req: &Signed<'_>, keys: &[K], now: i64) -> Result<usize, SignError> {
    if req.path.is_empty() {
        return Err(SignError::NoPath);
    }
    if !req.signature.starts_with("v1_") {
        return Err(SignError::NotV1(req.signature.chars().take(16).collect()));
    }
    let expiration = match req.expiration {
        None => None,
        Some(s) => Some(
            s.parse::<i64>()
                .map_err(|_| SignError::BadExpiration(s.chars().take(32).collect()))?,
        ),
    };
    let given = req.signature.as_bytes();
    let mut found = None;
    for (i, key) in keys.iter().enumerate() {
        let key = key.as_ref();
        if key.is_empty() {
            continue;
        }
        let want = signature(req.path, req.op, req.user, key, expiration);
        let same: bool = want.as_bytes().ct_eq(given).into();
        if same && found.is_none() {
            found = Some(i);
        }
    }
    let found = found.ok_or(SignError::NoMatch)?;
    if let Some(exp) = expiration {
        if exp < now {
            return Err(SignError::Expired { expired: exp, now });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn signed<'a>(
        path: &'a str,
        op: Operation,
        user: &'a str,
        sig: &'a str,
        exp: Option<&'a str>,
    ) -> Signed<'a> {
        Signed {
            path,
            op,
            user,
            signature: sig,
            expiration: exp,
        }
    }

    #[test]
    fn the_signature_is_the_sdks() {
        // e2b.sandbox.signature.get_signature("/home/user/a.txt", "read",
        // None, "secret-token") in the pinned SDK.
        assert_eq!(
            signature(
                "/home/user/a.txt",
                Operation::Read,
                "",
                "secret-token",
                None
            ),
            "v1_oG8MeWunkA0k+JA9ryHxVcTNtkXm7z9NuWgYBImd3sA"
        );
        // ... with user="root" and an expiration of 1800000000.
        assert_eq!(
            signature(
                "/home/user/a.txt",
                Operation::Write,
                "root",
                "secret-token",
                Some(1_800_000_000)
            ),
            "v1_iSeeBxmwr6DJ3rGcNgkzUCMpcN3gyGvXybUn0bBIUsk"
        );
    }

    #[test]
    fn a_signature_names_the_key_that_made_it_among_many() {
        let keys = [new_key(), new_key(), new_key()];
        assert!(keys
            .iter()
            .all(|k| k.starts_with(KEY_PREFIX) && k.len() > 40));
        assert_ne!(keys[0], keys[1]);
        let sig = signature("a.bin", Operation::Read, "", &keys[1], None);
        let req = signed("a.bin", Operation::Read, "", &sig, None);
        assert_eq!(verify(&req, &keys, NOW), Ok(1));
    }

    #[test]
    fn a_signed_url_is_good_only_for_its_path_operation_user_and_key() {
        let keys = [new_key()];
        let sig = signature("a.bin", Operation::Read, "", &keys[0], None);
        let other_path = signed("b.bin", Operation::Read, "", &sig, None);
        assert_eq!(verify(&other_path, &keys, NOW), Err(SignError::NoMatch));
        let as_upload = signed("a.bin", Operation::Write, "", &sig, None);
        assert_eq!(verify(&as_upload, &keys, NOW), Err(SignError::NoMatch));
        let as_root = signed("a.bin", Operation::Read, "root", &sig, None);
        assert_eq!(verify(&as_root, &keys, NOW), Err(SignError::NoMatch));
        let other_key = [new_key()];
        let elsewhere = signed("a.bin", Operation::Read, "", &sig, None);
        assert_eq!(verify(&elsewhere, &other_key, NOW), Err(SignError::NoMatch));
        let none: [String; 0] = [];
        assert_eq!(verify(&elsewhere, &none, NOW), Err(SignError::NoMatch));
    }

    #[test]
    fn an_altered_signature_or_expiry_is_refused_and_an_expired_one_too() {
        let keys = [new_key()];
        let exp = (NOW + 60).to_string();
        let sig = signature("a", Operation::Read, "", &keys[0], Some(NOW + 60));
        let ok = signed("a", Operation::Read, "", &sig, Some(&exp));
        assert_eq!(verify(&ok, &keys, NOW), Ok(0));
        // Pushing the expiry further breaks the signature.
        let later = (NOW + 3600).to_string();
        let pushed = signed("a", Operation::Read, "", &sig, Some(&later));
        assert_eq!(verify(&pushed, &keys, NOW), Err(SignError::NoMatch));
        // So does dropping it.
        let dropped = signed("a", Operation::Read, "", &sig, None);
        assert_eq!(verify(&dropped, &keys, NOW), Err(SignError::NoMatch));
        let mut flipped = sig.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        let tampered = signed("a", Operation::Read, "", &flipped, Some(&exp));
        assert_eq!(verify(&tampered, &keys, NOW), Err(SignError::NoMatch));
        assert_eq!(
            verify(&ok, &keys, NOW + 61),
            Err(SignError::Expired {
                expired: NOW + 60,
                now: NOW + 61
            })
        );
        let junk = signed("a", Operation::Read, "", &sig, Some("soon"));
        assert!(matches!(
            verify(&junk, &keys, NOW),
            Err(SignError::BadExpiration(_))
        ));
        let v0 = signed("a", Operation::Read, "", "abc", None);
        assert!(matches!(verify(&v0, &keys, NOW), Err(SignError::NotV1(_))));
        let nopath = signed("", Operation::Read, "", &sig, None);
        assert_eq!(verify(&nopath, &keys, NOW), Err(SignError::NoPath));
    }

    #[test]
    fn an_empty_key_signs_nothing() {
        let sig = signature("a", Operation::Read, "", "", None);
        let req = signed("a", Operation::Read, "", &sig, None);
        assert_eq!(verify(&req, &[""], NOW), Err(SignError::NoMatch));
    }
}

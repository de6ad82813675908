//! The SNI reader on arbitrary first bytes: it must never panic, and a name
//! it returns must be a valid host name.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden_egress::tls::{peek, ClientHello};

fuzz_target!(|data: &[u8]| {
    if let ClientHello::Sni(name) = peek(data) {
        assert_eq!(warden_policy::normalize_name(&name).as_deref(), Ok(name.as_str()));
    }
});

//! The HTTP request-head reader on arbitrary first bytes: it must never
//! panic, and a destination it returns must be a valid host name.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden_egress::http::parse_request_head;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(head)) = parse_request_head(data, 80) {
        let host = &head.destination.host;
        assert_eq!(warden_policy::normalize_name(host).as_deref(), Ok(host.as_str()));
        assert!(head.destination.port != 0);
        assert!(head.head_len <= data.len());
    }
});

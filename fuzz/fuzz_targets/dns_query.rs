//! The resolver on arbitrary datagrams: it must never panic, and never give
//! an address to a name the allowlist does not hold.
#![no_main]
use libfuzzer_sys::fuzz_target;
use warden_egress::dns::{answer, NameAddresses};
use warden_egress::matcher::Matcher;
use warden_policy::DomainRule;

fuzz_target!(|data: &[u8]| {
    let rules = match DomainRule::parse(".allowed.test") {
        Ok(r) => vec![r],
        Err(_) => return,
    };
    let matcher = Matcher::new(rules);
    let mut addrs = NameAddresses::default();
    if let Some((_, Some(decision))) = answer(data, &matcher, false, &mut addrs) {
        if decision.allowed {
            assert!(decision.name == "allowed.test" || decision.name.ends_with(".allowed.test"));
        }
    }
});

//! The sandbox's resolver. It answers from the allowlist alone: an allowed
//! name gets an address from a private pool (198.18.0.0/15, reserved for
//! benchmarks and never routed) that stands for that name; any other name
//! gets NXDOMAIN. No query from the sandbox ever leaves the host, for denied
//! names or allowed ones, so DNS carries nothing out; the proxy, which
//! decides on the name a connection asks for, resolves the real address on
//! the host side. The pool address also tells the proxy which name a plain
//! TCP connection (no TLS, no HTTP) was made to.

use crate::decision::{domain_entry, Cause, Reason};
use crate::matcher::Matcher;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use warden_policy::normalize_name;

/// First address of the pool (198.18.0.0/15).
const POOL_START: u32 = u32::from_be_bytes([198, 18, 0, 1]);
/// Number of addresses in the pool.
const POOL_SIZE: u32 = (1 << 17) - 2;
/// TTL of the answers: short, the addresses are the sandbox's own.
const TTL: u32 = 60;

/// Pool addresses handed out, both ways.
#[derive(Debug, Default)]
pub struct NameAddresses {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
}

impl NameAddresses {
    /// The address that stands for `name` (the same one every time), or
    /// `None` when the pool is exhausted.
    pub fn address_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        let n = self.by_name.len() as u32;
        if n >= POOL_SIZE {
            return None;
        }
        let addr = Ipv4Addr::from(POOL_START + n);
        self.by_name.insert(name.to_string(), addr);
        self.by_addr.insert(addr, name.to_string());
        Some(addr)
    }

    /// The name an address of the pool stands for.
    pub fn name_of(&self, addr: Ipv4Addr) -> Option<&str> {
        self.by_addr.get(&addr).map(String::as_str)
    }
}

/// What the responder did with one query, for the decision log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsDecision {
    pub name: String,
    pub record_type: String,
    pub allowed: bool,
    pub rule: Option<String>,
    /// Why, as a code and what would change it.
    pub cause: Cause,
}

/// Answer one query. `None`: the datagram is not a DNS query and gets no
/// answer at all. With `ask` (ask or learning mode: the rule to record and
/// its reason), every name gets its pool address:
/// the person is asked when a connection is made, where its port and
/// protocol are known; the query still goes nowhere.
pub fn answer(
    query: &[u8],
    matcher: &Matcher,
    ask: Option<(&str, Reason)>,
    addresses: &mut NameAddresses,
) -> Option<(Vec<u8>, Option<DnsDecision>)> {
    let request = Message::from_vec(query).ok()?;
    if request.message_type() != MessageType::Query {
        return None;
    }
    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(request.op_code())
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true);
    let queries = request.queries();
    let [question] = queries else {
        // One question per message is all resolvers send.
        response.set_response_code(ResponseCode::FormErr);
        return response.to_vec().ok().map(|v| (v, None));
    };
    response.add_query(question.clone());
    if request.op_code() != OpCode::Query {
        response.set_response_code(ResponseCode::NotImp);
        return response.to_vec().ok().map(|v| (v, None));
    }
    let raw_name = question.name().to_ascii();
    let name = normalize_name(raw_name.trim_end_matches('.')).unwrap_or_default();
    let qtype = question.query_type();
    let allowed = if name.is_empty() {
        None
    } else {
        matcher
            .allows_name(&name)
            .map(|m| (m.rule.source.clone(), Reason::Allowed))
            .or_else(|| ask.map(|(rule, reason)| (rule.to_string(), reason)))
    };
    let mut decision = DnsDecision {
        name: name.clone(),
        record_type: qtype.to_string(),
        allowed: allowed.is_some(),
        rule: allowed.as_ref().map(|(rule, _)| rule.clone()),
        cause: match &allowed {
            Some((_, reason)) => Cause::new(*reason),
            // Any entry for the name answers its queries.
            None => Cause::with_entry(Reason::NotAllowed, domain_entry(&name, 443)),
        },
    };
    match (allowed, qtype) {
        (None, _) => {
            response.set_response_code(ResponseCode::NXDomain);
        }
        (Some(_), RecordType::A) => match addresses.address_for(&name) {
            Some(addr) => {
                response.add_answer(Record::from_rdata(
                    question.name().clone(),
                    TTL,
                    RData::A(A(addr)),
                ));
            }
            None => {
                response.set_response_code(ResponseCode::ServFail);
            }
        },
        // The sandbox has no IPv6 route: an empty answer sends clients to
        // IPv4. HTTPS and CNAME records: none to give.
        (Some(_), RecordType::AAAA | RecordType::HTTPS | RecordType::CNAME) => {}
        // TXT, NULL, ANY and the rest: what tunnels are made of.
        (Some(_), _) => {
            response.set_response_code(ResponseCode::Refused);
            decision.allowed = false;
            decision.rule = None;
            decision.record_type = format!("{qtype} (refused: not a type a sandbox needs)");
            decision.cause = Cause::new(Reason::RecordType);
        }
    }
    response.to_vec().ok().map(|v| (v, Some(decision)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::ASK_ON_CONNECTION;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use std::str::FromStr;
    use warden_policy::DomainRule;

    fn matcher() -> Matcher {
        Matcher::new(vec![
            DomainRule::parse(".example.com").unwrap(),
            DomainRule::parse("git.example.org:22").unwrap(),
        ])
    }

    fn query(name: &str, t: RecordType) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(4242)
            .set_message_type(MessageType::Query)
            .set_recursion_desired(true);
        m.add_query(Query::query(Name::from_str(name).unwrap(), t));
        m.to_vec().unwrap()
    }

    fn ask(name: &str, t: RecordType, addrs: &mut NameAddresses) -> Message {
        let (bytes, _) = answer(&query(name, t), &matcher(), None, addrs).unwrap();
        Message::from_vec(&bytes).unwrap()
    }

    #[test]
    fn allowed_names_get_a_stable_pool_address() {
        let mut addrs = NameAddresses::default();
        let r = ask("api.example.com.", RecordType::A, &mut addrs);
        assert_eq!(r.id(), 4242);
        assert_eq!(r.response_code(), ResponseCode::NoError);
        let a = match r.answers()[0].data() {
            RData::A(a) => a.0,
            other => panic!("{other:?}"),
        };
        assert_eq!(a.octets()[..2], [198, 18]);
        assert_eq!(addrs.name_of(a), Some("api.example.com"));
        let again = ask("API.example.com", RecordType::A, &mut addrs);
        assert_eq!(again.answers()[0].data(), &RData::A(A(a)));
        assert!(
            ask("git.example.org", RecordType::A, &mut addrs)
                .answers()
                .len()
                == 1
        );
    }

    #[test]
    fn in_ask_mode_unlisted_names_get_an_address_but_tunnel_types_are_still_refused() {
        let mut addrs = NameAddresses::default();
        let (bytes, decision) = answer(
            &query("unlisted.test.", RecordType::A),
            &matcher(),
            Some((ASK_ON_CONNECTION, Reason::AskOnConnection)),
            &mut addrs,
        )
        .unwrap();
        let r = Message::from_vec(&bytes).unwrap();
        assert_eq!(r.response_code(), ResponseCode::NoError);
        let a = match r.answers()[0].data() {
            RData::A(a) => a.0,
            other => panic!("{other:?}"),
        };
        assert_eq!(addrs.name_of(a), Some("unlisted.test"));
        let decision = decision.unwrap();
        assert_eq!(decision.rule.as_deref(), Some(ASK_ON_CONNECTION));
        assert_eq!(decision.cause.reason, Reason::AskOnConnection);
        let (bytes, _) = answer(
            &query("unlisted.test.", RecordType::TXT),
            &matcher(),
            Some((ASK_ON_CONNECTION, Reason::AskOnConnection)),
            &mut addrs,
        )
        .unwrap();
        assert_eq!(
            Message::from_vec(&bytes).unwrap().response_code(),
            ResponseCode::Refused
        );
    }

    #[test]
    fn denied_names_get_nxdomain_and_tunnel_types_are_refused() {
        let mut addrs = NameAddresses::default();
        assert_eq!(
            ask("evil.net", RecordType::A, &mut addrs).response_code(),
            ResponseCode::NXDomain
        );
        assert_eq!(
            ask("c2VjcmV0.tunnel.evil.net", RecordType::TXT, &mut addrs).response_code(),
            ResponseCode::NXDomain
        );
        for t in [
            RecordType::TXT,
            RecordType::NULL,
            RecordType::ANY,
            RecordType::MX,
        ] {
            assert_eq!(
                ask("www.example.com", t, &mut addrs).response_code(),
                ResponseCode::Refused,
                "{t}"
            );
        }
        let aaaa = ask("www.example.com", RecordType::AAAA, &mut addrs);
        assert_eq!(aaaa.response_code(), ResponseCode::NoError);
        assert!(aaaa.answers().is_empty());
    }

    #[test]
    fn garbage_gets_no_answer() {
        let mut addrs = NameAddresses::default();
        for junk in [&b""[..], b"\x00", b"hello world, not dns", &[0xff; 64]] {
            // Either no answer, or one without any address in it.
            if let Some((bytes, _)) = answer(junk, &matcher(), None, &mut addrs) {
                let m = Message::from_vec(&bytes).unwrap();
                assert!(m.answers().is_empty(), "{junk:?} got {m:?}");
            }
        }
        // A response sent to the resolver is not answered.
        let mut m = Message::new();
        m.set_message_type(MessageType::Response);
        assert!(answer(&m.to_vec().unwrap(), &matcher(), None, &mut addrs).is_none());
    }
}

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
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use warden_policy::normalize_name;

/// First address of the pool (198.18.0.0/15).
const POOL_START: u32 = u32::from_be_bytes([198, 18, 0, 1]);
/// Number of addresses in the pool.
const POOL_SIZE: u32 = (1 << 17) - 2;
/// TTL of the answers: short, the addresses are the sandbox's own.
const TTL: u32 = 60;

/// How long an address must have gone unused (neither answered for its
/// name nor connected to) before a full pool gives it to another name:
/// well past the answers' TTL, so that a program that keeps an answer as
/// long as it is told to never finds its address standing for another
/// name. An address with a connection still open is never given back
/// (see [`NameAddresses::hold`]), and its idle time starts when the last
/// one ends.
const RECYCLE_IDLE: Duration = Duration::from_secs(2 * TTL as u64);

/// Pool addresses handed out, both ways. A sandbox that asks for more
/// names than the pool holds (ask mode answers every name) gets the
/// addresses unused longest back, once they have been idle for
/// [`RECYCLE_IDLE`] with no connection made to them open; before that a
/// new name gets SERVFAIL, as when the pool never gave back.
#[derive(Debug)]
pub struct NameAddresses {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, Entry>,
    /// Addresses by when they were last used, oldest first.
    by_use: BTreeMap<u64, Ipv4Addr>,
    /// The next use's number.
    uses: u64,
    /// Addresses of the pool.
    size: u32,
}

#[derive(Debug)]
struct Entry {
    name: String,
    /// Its number in `by_use` (where it is only while `open` is 0).
    use_no: u64,
    last_used: Instant,
    /// Connections made to it still open.
    open: u32,
}

impl Default for NameAddresses {
    fn default() -> Self {
        NameAddresses::with_size(POOL_SIZE)
    }
}

impl NameAddresses {
    fn with_size(size: u32) -> Self {
        NameAddresses {
            by_name: HashMap::new(),
            by_addr: HashMap::new(),
            by_use: BTreeMap::new(),
            uses: 0,
            size,
        }
    }

    /// The address that stands for `name` (the same one every time it is
    /// asked while it is kept), or `None` when the pool is exhausted and
    /// none of its addresses has been idle long enough to be given back.
    pub fn address_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        self.address_for_at(name, Instant::now())
    }

    fn address_for_at(&mut self, name: &str, now: Instant) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name).copied() {
            self.touch(a, now);
            return Some(a);
        }
        let n = self.by_addr.len() as u32;
        let addr = if n < self.size {
            Ipv4Addr::from(POOL_START + n)
        } else {
            // The address unused longest, when it has been idle enough.
            let (&use_no, &addr) = self.by_use.iter().next()?;
            let idle = self
                .by_addr
                .get(&addr)
                .is_some_and(|e| now.saturating_duration_since(e.last_used) >= RECYCLE_IDLE);
            if !idle {
                return None;
            }
            self.by_use.remove(&use_no);
            if let Some(old) = self.by_addr.remove(&addr) {
                self.by_name.remove(&old.name);
            }
            addr
        };
        self.by_name.insert(name.to_string(), addr);
        self.by_addr.insert(
            addr,
            Entry {
                name: name.to_string(),
                use_no: 0,
                last_used: now,
                open: 0,
            },
        );
        self.touch(addr, now);
        Some(addr)
    }

    /// Mark `addr` as used now.
    fn touch(&mut self, addr: Ipv4Addr, now: Instant) {
        let Some(e) = self.by_addr.get_mut(&addr) else {
            return;
        };
        self.by_use.remove(&e.use_no);
        self.uses += 1;
        e.use_no = self.uses;
        e.last_used = now;
        if e.open == 0 {
            self.by_use.insert(self.uses, addr);
        }
    }

    /// A connection made to `addr` is open: until every such connection
    /// has ended ([`NameAddresses::release`]), the address is never given
    /// to another name, whose policy would otherwise be what a later look
    /// at the address finds. `false` when the pool gave the address to no
    /// name (nothing to hold; no release is owed).
    pub fn hold(&mut self, addr: Ipv4Addr) -> bool {
        let Some(e) = self.by_addr.get_mut(&addr) else {
            return false;
        };
        e.open += 1;
        // Only addresses with nothing open are candidates to give back.
        self.by_use.remove(&e.use_no);
        true
    }

    /// A connection [`NameAddresses::hold`] counted has ended.
    pub fn release(&mut self, addr: Ipv4Addr) {
        self.release_at(addr, Instant::now());
    }

    fn release_at(&mut self, addr: Ipv4Addr, now: Instant) {
        let Some(e) = self.by_addr.get_mut(&addr) else {
            return;
        };
        e.open = e.open.saturating_sub(1);
        // Idle from the end of its last connection.
        self.touch(addr, now);
    }

    /// The name an address of the pool stands for; a connection made to
    /// it is a use of it.
    pub fn name_of(&mut self, addr: Ipv4Addr) -> Option<&str> {
        self.touch(addr, Instant::now());
        self.by_addr.get(&addr).map(|e| e.name.as_str())
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
    // A name that is not a host name is recorded as it was asked,
    // escaped, so the record says what was asked and no remedy names a
    // blank entry.
    let (name, malformed) = match normalize_name(raw_name.trim_end_matches('.')) {
        Ok(n) if !n.is_empty() => (n, false),
        _ => (shown_name(question.name()), true),
    };
    let qtype = question.query_type();
    let allowed = if malformed {
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
            None if malformed => Cause::new(Reason::MalformedName),
            // The host itself is opened port by port, never by a name's
            // entry (which warden refuses for it).
            None if name == warden_policy::HOST_ALIAS => Cause {
                field: Some(warden_policy::Field::AllowHostPort),
                ..Cause::new(Reason::NotAllowed)
            },
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

/// A DNS question's name that is not a host name, as a record shows it:
/// each label's printable ASCII kept, every other byte (a control, a
/// quote, a space, a dot inside a label, a non-ASCII byte) as `%XX`, the
/// labels joined by `.`, at most 253 bytes of them, in angle brackets so
/// that no one reads it for a name to allow; `<root>` for none.
fn shown_name(name: &hickory_proto::rr::Name) -> String {
    let mut out = String::from("<");
    for (i, label) in name.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        for &b in label {
            if b.is_ascii_graphic() && !b"%<>\"'\\.".contains(&b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        if out.len() > 253 {
            break;
        }
    }
    if out.len() == 1 {
        return "<root>".into();
    }
    out.push('>');
    out
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
    fn a_full_pool_gives_back_the_address_idle_longest_and_never_a_recent_one() {
        let t0 = Instant::now();
        let mut pool = NameAddresses::with_size(3);
        let a = pool.address_for_at("a.test", t0).unwrap();
        let b = pool.address_for_at("b.test", t0).unwrap();
        let c = pool.address_for_at("c.test", t0).unwrap();
        // Full, and nothing idle long enough: SERVFAIL as before.
        assert_eq!(pool.address_for_at("d.test", t0 + TTL_SECS), None);
        // b is used again later (a connection to it), a is not.
        pool.touch(b, t0 + RECYCLE_IDLE);
        let later = t0 + RECYCLE_IDLE + Duration::from_secs(1);
        let d = pool.address_for_at("d.test", later).unwrap();
        assert_eq!(d, a, "the address unused longest is given back");
        assert_eq!(pool.name_of(a), Some("d.test"));
        assert!(!pool.by_name.contains_key("a.test"));
        // c is idle too; b was used a second before: c goes next.
        assert_eq!(pool.address_for_at("e.test", later), Some(c));
        assert_eq!(pool.address_for_at("f.test", later), None);
        // A name kept answers its own address still.
        assert_eq!(pool.address_for_at("b.test", later), Some(b));
    }

    const TTL_SECS: Duration = Duration::from_secs(TTL as u64);

    #[test]
    fn an_address_with_a_connection_open_is_never_given_to_another_name() {
        let t0 = Instant::now();
        let mut pool = NameAddresses::with_size(2);
        let a = pool.address_for_at("a.test", t0).unwrap();
        let b = pool.address_for_at("b.test", t0).unwrap();
        // A connection made to a.test's address, open for hours.
        assert!(pool.hold(a));
        let hours = t0 + 100 * RECYCLE_IDLE;
        // A full pool gives b (idle, nothing open) and never a.
        assert_eq!(pool.address_for_at("c.test", hours), Some(b));
        assert_eq!(pool.name_of(a), Some("a.test"));
        // Once it ends, a is idle from then on, not from its answer.
        pool.release_at(a, hours);
        let soon = hours + RECYCLE_IDLE / 2;
        assert_eq!(pool.address_for_at("c.test", soon), Some(b));
        assert_eq!(pool.address_for_at("d.test", soon), None);
        let later = hours + RECYCLE_IDLE + Duration::from_secs(1);
        assert_eq!(pool.address_for_at("d.test", later), Some(a));
        // Two connections: the address waits for the last one.
        let mut pool = NameAddresses::with_size(1);
        let a = pool.address_for_at("a.test", t0).unwrap();
        assert!(pool.hold(a) && pool.hold(a));
        pool.release_at(a, t0);
        assert_eq!(pool.address_for_at("b.test", hours), None);
        pool.release_at(a, hours);
        assert_eq!(pool.address_for_at("b.test", hours + RECYCLE_IDLE), Some(a));
        // An address the pool never gave is held by nothing.
        assert!(!pool.hold(Ipv4Addr::new(198, 18, 9, 9)));
    }

    #[test]
    fn a_flood_of_names_past_the_pool_is_answered_again_once_old_ones_are_idle() {
        let t0 = Instant::now();
        let mut pool = NameAddresses::with_size(1000);
        for i in 0..1000 {
            assert!(pool.address_for_at(&format!("n{i}.test"), t0).is_some());
        }
        assert!(pool.address_for_at("late.test", t0).is_none());
        let later = t0 + RECYCLE_IDLE;
        for i in 0..5000 {
            let t = later + Duration::from_secs(3 * i / 1000 * RECYCLE_IDLE.as_secs());
            assert!(
                pool.address_for_at(&format!("m{i}.test"), t).is_some(),
                "name {i}"
            );
        }
        assert!(pool.by_name.len() <= 1000 && pool.by_use.len() == pool.by_addr.len());
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

    /// Names no entry could allow (an escape, a newline, a quote, a dot
    /// or a NUL inside a label): answered NXDOMAIN, recorded under what
    /// was asked, escaped and printable, with their own reason and no
    /// entry to suggest, even in ask mode.
    #[test]
    fn a_question_whose_name_is_no_host_name_is_recorded_escaped_with_no_remedy() {
        let mut addrs = NameAddresses::default();
        for (label, shown) in [
            (&b"a\x1b[31mb"[..], "<a%1B[31mb.example.com>"),
            (b"a\nb", "<a%0Ab.example.com>"),
            (b"a\"b", "<a%22b.example.com>"),
            (b"a.b", "<a%2Eb.example.com>"),
            (b"a\0b", "<a%00b.example.com>"),
        ] {
            let name =
                Name::from_labels(vec![label.to_vec(), b"example".to_vec(), b"com".to_vec()])
                    .unwrap();
            let mut m = Message::new();
            m.set_id(7).set_message_type(MessageType::Query);
            m.add_query(Query::query(name, RecordType::A));
            for ask in [None, Some(("ask", Reason::AskOnConnection))] {
                let (bytes, decision) =
                    answer(&m.to_vec().unwrap(), &matcher(), ask, &mut addrs).unwrap();
                let reply = Message::from_vec(&bytes).unwrap();
                assert_eq!(reply.response_code(), ResponseCode::NXDomain, "{shown}");
                let d = decision.unwrap();
                assert_eq!(d.name, shown);
                assert!(!d.allowed);
                assert_eq!(d.cause.reason, Reason::MalformedName);
                assert_eq!(d.cause.entry, None);
            }
        }
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

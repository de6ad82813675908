//! Egress decided per request: rules over the method, path, query and
//! JSON-RPC methods of the requests to a name, each allowing, denying or
//! asking. The proxy terminates TLS for every name that has request rules
//! (as for a secret's hosts) and puts each request (each HTTP/1.1 request
//! of a kept-alive connection, each HTTP/2 stream, a WebSocket's upgrade)
//! to [`RequestRules::decide`]; names without rules are spliced as ever.
//!
//! The decision: a deny rule that matches wins, then an ask rule, then an
//! allow rule; once a name has request rules, a request that matches none
//! is refused. Order never matters, so rules from a profile, a preset and
//! flags compose as one list. A request is read every way a server may
//! read it (see `path`), and a rule must match under every reading to
//! allow and under any to deny or ask: ambiguity never widens what is
//! allowed. This module decides only; the terminator enforces and records.

mod held;
pub(crate) mod keys;
pub(crate) mod path;
mod rpc;
mod scope;

pub use held::{Held, HeldBody, Shown};
pub use path::Ambiguous;
pub use rpc::{labels as rpc_labels, MAX_RPC_BODY};
pub use scope::AskScope;
pub use warden_policy::requests::{QueryCondition, RequestAction, RequestRule, RuleError};

/// A request an ask rule holds, as the person asked about it sees it:
/// its method, its path and query (with the values, and its body's
/// length, type, digest and start: see [`Shown`]), the JSON-RPC call of
/// each message asked about, and the rule that asks (as written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskedRequest {
    pub method: String,
    /// Its path with the query's values redacted: what records say.
    pub target: String,
    /// What the question shows of the request as it will be sent;
    /// `None` where nothing was read of it (the question then shows
    /// [`AskedRequest::target`]).
    pub shown: Option<Shown>,
    pub rule: String,
    /// The label of each JSON-RPC message asked about (see [`AskScope`]).
    pub rpc: Vec<String>,
    /// Its body was to be read for JSON-RPC calls and could not be.
    pub unread_body: bool,
    /// Its body gives (or may give, unread) a parameter the asking rule's
    /// query condition looks at.
    pub body_params: bool,
}

impl AskedRequest {
    /// `METHOD target (JSON-RPC "tools/call:search")`, what a desk shows
    /// and what one answer covers. Each label is quoted (it is the
    /// sandbox's text: a tool named `a", "b` reads as one).
    /// With [`AskedRequest::shown`], the target with its values, and
    /// after the calls its body and the request's digest (`[body: 8
    /// bytes, TYPE, sha256 HEX: START] [request sha256 HEX]`): two lines
    /// alike are about byte-identical requests.
    pub fn line(&self) -> String {
        let mut calls = self.calls();
        // The calls are the body's (its digest tells two apart): a batch
        // of thousands is cut, the cut marked.
        if calls.len() > MAX_CALLS_SHOWN {
            let cut = calls.floor_char_boundary(MAX_CALLS_SHOWN);
            let left = calls.len() - cut;
            calls.truncate(cut);
            calls.push_str(&format!("...(+{left} bytes)"));
        }
        match &self.shown {
            Some(s) => format!("{} {}{calls}{}", self.method, s.target, s.tail()),
            None => format!("{} {}{calls}", self.method, self.target),
        }
    }

    /// What records and events say of it: [`AskedRequest::line`] with the
    /// query's values redacted and nothing of its body.
    pub fn recorded(&self) -> String {
        format!("{} {}{}", self.method, self.target, self.calls())
    }

    /// What follows the target in [`AskedRequest::line`]: the JSON-RPC
    /// calls asked about, or that the body could not be read for them.
    pub fn calls(&self) -> String {
        let mut out = String::new();
        if !self.rpc.is_empty() {
            let calls: Vec<String> = self.rpc.iter().map(|l| format!("{l:?}")).collect();
            out.push_str(&format!(" (JSON-RPC {})", calls.join(", ")));
        }
        if self.unread_body {
            out.push_str(" (a body that cannot be read as JSON-RPC)");
        }
        if self.body_params {
            out.push_str(" (its body gives parameters the rule looks at)");
        }
        out
    }
}

/// Bytes of a question's JSON-RPC calls shown ([`AskedRequest::line`]).
const MAX_CALLS_SHOWN: usize = 1024;

/// What ends the source of an allow rule the project's grants keep (a
/// request a person answered "always" about): such a rule lets its
/// request go without asking, where an ask rule would hold it.
pub const GRANTED: &str = " (answered always)";

/// What a request's body said of JSON-RPC, as far as the rules need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rpc {
    /// No body (or no rule of the name asks about one).
    NoBody,
    /// A body that is not JSON-RPC, or larger than [`MAX_RPC_BODY`].
    Unreadable,
    /// The label of each message (see [`rpc_labels`]).
    Labels(Vec<String>),
}

/// One request as the rules see it: on the connection's own name and
/// port, its method, its normalised path (what the upstream gets) and
/// its query as sent.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub name: &'a str,
    pub port: u16,
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub rpc: &'a Rpc,
    /// The parameters its body gives, where a rule needs them.
    pub params: &'a Params,
}

/// What a request's body gives of parameters (form fields, multipart
/// field names, a JSON object's top-level members), which many servers
/// merge with the query's (PHP's `$_REQUEST`, a servlet's
/// `getParameter`, Spring's `@RequestParam`, Rails' `params`, Flask's
/// `request.values`): a query condition is decided on both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Params {
    /// No body, one no server reads parameters from, or no rule of the
    /// name has a query condition that could match the request.
    None,
    /// Its `(key, value)` pairs under each way a server may read them.
    Read(Vec<Pairs>),
    /// A body a server may read parameters from that could not be read
    /// for certain (a content coding, past the limit, malformed): it may
    /// hold any key with any value.
    Unknown,
}

/// How a request was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An allow rule matches (and no deny or ask rule does).
    Allow,
    /// A deny rule matches.
    Deny,
    /// An ask rule matches (and no deny rule does).
    Ask,
    /// The name has request rules and none matches.
    NoRule,
    /// The path cannot be read one way only (see [`Ambiguous`]).
    Ambiguous,
}

/// A request's verdict: the outcome, the rule that decided (as written)
/// and why, in words that name no option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub outcome: Outcome,
    pub rule: Option<String>,
    pub why: String,
    /// For [`Outcome::Ask`]: what the ask is about; for
    /// [`Outcome::NoRule`]: the request as the one rule that would allow
    /// it alone states it (the JSON-RPC calls no rule allows).
    pub scope: Option<AskScope>,
}

/// The request rules of one sandbox.
#[derive(Debug, Clone, Default)]
pub struct RequestRules {
    rules: Vec<RequestRule>,
}

/// Matched to allow (as written, under every reading) or to deny and ask
/// (without case, under any reading).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Allow,
    Refuse,
}

impl RequestRules {
    pub fn new(rules: Vec<RequestRule>) -> RequestRules {
        RequestRules { rules }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The granted rule (see [`GRANTED`]) that states exactly `scope`, if
    /// one does: a request a person answered "always" about in an earlier
    /// run goes without asking, though the ask rule still matches it. A
    /// grant is the very scope asked about, never a rule that merely
    /// matches the request: one kept without the JSON-RPC call or query
    /// value asked about (as an older warden kept it) covers none.
    pub fn granted(&self, scope: &AskScope) -> Option<String> {
        self.rules
            .iter()
            .filter(|r| r.action == RequestAction::Allow && r.source.ends_with(GRANTED))
            .find(|r| scope.is(r))
            .map(|r| r.source.clone())
    }

    /// Whether some rule asks (a person is then needed to answer).
    pub fn asks(&self) -> bool {
        self.rules.iter().any(|r| r.action == RequestAction::Ask)
    }

    /// Whether `name:port` is ruled: its TLS is terminated and each
    /// request decided. A name with request rules is ruled on every port
    /// it is reached on, not only those its rules name: another port of
    /// the name allowed by an entry of its own (an ssh `github.com:22`
    /// beside a read-only preset) would otherwise reach the server with
    /// nothing decided. There, nothing but TLS naming it passes, and only
    /// the requests a rule for that port allows.
    pub fn covers(&self, name: &str, _port: u16) -> bool {
        self.rules.iter().any(|r| r.names(name))
    }

    /// Whether deciding a `method` request to `path` on `name:port` needs
    /// its body's JSON-RPC methods: some rule for the name that names
    /// JSON-RPC methods could match it on everything else.
    pub fn needs_body(&self, name: &str, port: u16, method: &str, path: &str) -> bool {
        let Ok(readings) = Readings::of(path) else {
            return false;
        };
        self.rules.iter().any(|r| {
            !r.rpc.is_empty()
                && r.is_for(name, port)
                && method_matches(r, method, Mode::Refuse)
                && paths_match(r, &readings, Mode::Refuse)
        })
    }

    /// Whether the method of a request to `path` on `name:port` can
    /// change its decision: some rule for the name that names methods
    /// could match its path. When none can, what other method a request
    /// may be taken as needs no reading.
    pub fn method_matters(&self, name: &str, port: u16, path: &str) -> bool {
        let Ok(readings) = Readings::of(path) else {
            return true;
        };
        self.rules.iter().any(|r| {
            !r.methods.is_empty() && r.is_for(name, port) && paths_match(r, &readings, Mode::Refuse)
        })
    }

    /// Whether a request to `path` on `name:port` may be decided on its
    /// body's parameters: some rule for the name with a query condition
    /// could match its path (under any method: a body may name another).
    /// A name without such rules never has its bodies read for them.
    pub fn params_matter(&self, name: &str, port: u16, path: &str) -> bool {
        let conditioned = |r: &RequestRule| !r.query.is_empty() && r.is_for(name, port);
        if !self.rules.iter().any(conditioned) {
            return false;
        }
        let Ok(readings) = Readings::of(path) else {
            return true;
        };
        self.rules
            .iter()
            .any(|r| conditioned(r) && paths_match(r, &readings, Mode::Refuse))
    }

    /// Every key a query condition of a rule for `name:port` names, each
    /// once.
    pub fn condition_keys(&self, name: &str, port: u16) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self
            .rules
            .iter()
            .filter(|r| r.is_for(name, port))
            .flat_map(|r| &r.query)
        {
            if !out.contains(&c.key) {
                out.push(c.key.clone());
            }
        }
        out
    }

    /// Every method a rule for `name:port` names, each once.
    pub fn methods_named(&self, name: &str, port: u16) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in self
            .rules
            .iter()
            .filter(|r| r.is_for(name, port))
            .flat_map(|r| &r.methods)
        {
            if !out.contains(m) {
                out.push(m.clone());
            }
        }
        out
    }

    /// Decide `req`: see the module's comment.
    pub fn decide(&self, req: &Request<'_>) -> Verdict {
        let target = redacted(req.path, req.query);
        let readings = match Readings::of(req.path) {
            Ok(r) => r,
            Err(e) => {
                return Verdict {
                    outcome: Outcome::Ambiguous,
                    rule: None,
                    why: format!("refused: {e}"),
                    scope: None,
                }
            }
        };
        let queries = path::query_readings(req.query.unwrap_or(""));
        let ruled: Vec<&RequestRule> = self
            .rules
            .iter()
            .filter(|r| r.is_for(req.name, req.port))
            .collect();
        // Each JSON-RPC message is decided on its own; the request is
        // what its most refused message is.
        let units: Vec<Option<&str>> = match req.rpc {
            Rpc::Labels(l) => l.iter().map(|l| Some(l.as_str())).collect(),
            _ => vec![None],
        };
        let mut worst: Option<(Outcome, Option<&RequestRule>, Option<&str>)> = None;
        // Each message an ask rule holds, and the rule: what an ask is about.
        let mut asked: Vec<(Option<&str>, &RequestRule)> = Vec::new();
        // Each message no rule decides.
        let mut unruled: Vec<&str> = Vec::new();
        for unit in units {
            let hit = |action: RequestAction, mode: Mode| {
                ruled.iter().copied().find(|r| {
                    r.action == action
                        && method_matches(r, req.method, mode)
                        && paths_match(r, &readings, mode)
                        && query_matches(r, &queries, req.params, mode)
                        && rpc_matches(r, req.rpc, unit, mode)
                })
            };
            let (outcome, rule) = if let Some(r) = hit(RequestAction::Deny, Mode::Refuse) {
                (Outcome::Deny, Some(r))
            } else if let Some(r) = hit(RequestAction::Ask, Mode::Refuse) {
                (Outcome::Ask, Some(r))
            } else if let Some(r) = hit(RequestAction::Allow, Mode::Allow) {
                (Outcome::Allow, Some(r))
            } else {
                (Outcome::NoRule, None)
            };
            match (&outcome, rule) {
                (Outcome::Ask, Some(r)) => asked.push((unit, r)),
                (Outcome::NoRule, _) => unruled.extend(unit),
                _ => {}
            }
            if worst
                .as_ref()
                .is_none_or(|(w, _, _)| rank(&outcome) > rank(w))
            {
                worst = Some((outcome, rule, unit));
            }
        }
        let (outcome, rule, unit) = worst.unwrap_or((Outcome::NoRule, None, None));
        let call = unit.map(|u| format!(" (JSON-RPC {u})")).unwrap_or_default();
        let body = match (req.params, rule) {
            (Params::Unknown, Some(r)) if !r.query.is_empty() => {
                " (a body whose parameters cannot be read, taken to hold any)"
            }
            _ => "",
        };
        let what = format!("{} {}{target}{call}{body}", req.method, req.name);
        let why = match (&outcome, rule) {
            (Outcome::Deny, Some(r)) => {
                format!("denied by the request rule {:?}: {what}", r.source)
            }
            (Outcome::Ask, Some(r)) => format!("the request rule {:?} asks about {what}", r.source),
            (Outcome::Allow, Some(r)) => {
                format!("allowed by the request rule {:?}: {what}", r.source)
            }
            _ => format!("no request rule for {} allows {what}", req.name),
        };
        let scope = match outcome {
            Outcome::Ask => Some(AskScope::of(req, &asked, &queries)),
            Outcome::NoRule => Some(AskScope::unruled(req, &unruled)),
            _ => None,
        };
        Verdict {
            outcome,
            rule: rule.map(|r| r.source.clone()),
            why,
            scope,
        }
    }
}

/// How refused an outcome is: a request is decided by its most refused
/// message.
fn rank(o: &Outcome) -> u8 {
    match o {
        Outcome::Allow => 0,
        Outcome::Ask => 1,
        Outcome::NoRule => 2,
        Outcome::Deny | Outcome::Ambiguous => 3,
    }
}

/// Whether `r` names `method` (as written to allow, any case to refuse).
/// A rule naming GET names HEAD too: Flask, Express, Rails, Spring and
/// Go's ServeMux answer HEAD with the GET handler, so what a rule denies
/// or asks of GET it denies or asks of HEAD, and what it allows of GET a
/// HEAD may read; a rule naming HEAD names only HEAD.
fn method_matches(r: &RequestRule, method: &str, mode: Mode) -> bool {
    let same = |a: &str, b: &str| match mode {
        Mode::Allow => a == b,
        Mode::Refuse => a.eq_ignore_ascii_case(b),
    };
    let head = same(method, "HEAD");
    r.methods.is_empty()
        || r.methods
            .iter()
            .any(|m| same(m, method) || (head && same(m, "GET")))
}

/// A path's segments under each way a server may read it: those an allow
/// rule must match all of, and those (a superset) any of which a refusing
/// rule matches (see `path`).
struct Readings {
    allow: Vec<Vec<String>>,
    refuse: Vec<Vec<String>>,
}

impl Readings {
    fn of(path: &str) -> Result<Readings, Ambiguous> {
        let allow = path::readings(path)?;
        let refuse = path::refusal_readings(&allow);
        Ok(Readings { allow, refuse })
    }
}

/// Under every reading (to allow) or any (to refuse), some path glob of
/// the rule matches: to refuse, with or without one trailing slash.
fn paths_match(r: &RequestRule, readings: &Readings, mode: Mode) -> bool {
    let one = |segments: &Vec<String>| {
        r.paths.iter().any(|p| match mode {
            Mode::Allow => path::matches(p, segments, false),
            Mode::Refuse => path::matches_either_slash(p, segments, true),
        })
    };
    match mode {
        Mode::Allow => readings.allow.iter().all(one),
        Mode::Refuse => readings.refuse.iter().any(one),
    }
}

/// A query's or a body's `(key, value)` pairs as one server reads them (a
/// key without `=` has no value).
pub type Pairs = Vec<(String, Option<String>)>;

/// Every condition holds on the query's parameters and the body's
/// together (servers merge them), under every pairing of a reading of
/// each (to allow: and every value given for a key, in either, matches)
/// or under any (to refuse: some value given for the key matches). A
/// body that may hold any parameter matches every condition to refuse
/// and none to allow. A key is read as every server reads
/// it (`keys`: `q[]`, `q[x]`, ` q`, `Q`, PHP's `q.x` for `q_x`): to
/// refuse, a value under any spelling counts; to allow, the key must be
/// given as the rule writes it, and every value under every spelling
/// must fit, so that a server reading another spelling (PHP the last
/// `q`, Rack `q[]`) never reads a value the rule did not allow.
fn query_matches(r: &RequestRule, readings: &[Pairs], params: &Params, mode: Mode) -> bool {
    if r.query.is_empty() {
        return true;
    }
    let no_body: &[Pairs] = &[Vec::new()];
    let bodies: &[Pairs] = match params {
        Params::Unknown => return mode == Mode::Refuse,
        Params::Read(b) if !b.is_empty() => b,
        _ => no_body,
    };
    let fold = mode == Mode::Refuse;
    let holds = |(query, body): (&Pairs, &Pairs), c: &QueryCondition| {
        let pairs = || query.iter().chain(body);
        let values: Vec<&str> = pairs()
            .filter(|(k, _)| keys::spells(k, &c.key))
            .map(|(_, v)| v.as_deref().unwrap_or(""))
            .collect();
        let written = pairs().any(|(k, _)| *k == c.key);
        let fits = |v: &&str| match &c.value {
            Some(want) => path::glob(want.as_bytes(), v.as_bytes(), fold),
            None => true,
        };
        match mode {
            Mode::Allow => written && values.iter().all(fits),
            Mode::Refuse => values.iter().any(fits),
        }
    };
    let mut pairings = readings
        .iter()
        .flat_map(|q| bodies.iter().map(move |b| (q, b)));
    let one = |p: (&Pairs, &Pairs)| r.query.iter().all(|c| holds(p, c));
    match mode {
        Mode::Allow => pairings.all(one),
        Mode::Refuse => pairings.any(one),
    }
}

/// A rule without JSON-RPC methods matches whatever the body; one with
/// them never matches a request without a body, matches an unreadable one
/// only to refuse, and a message by its label.
fn rpc_matches(r: &RequestRule, rpc: &Rpc, unit: Option<&str>, mode: Mode) -> bool {
    if r.rpc.is_empty() {
        return true;
    }
    match (rpc, unit) {
        (Rpc::NoBody, _) => false,
        (Rpc::Labels(_), Some(label)) => r
            .rpc
            .iter()
            .any(|p| path::glob(p.as_bytes(), label.as_bytes(), mode == Mode::Refuse)),
        _ => mode == Mode::Refuse,
    }
}

/// Every value given for `key` (any case) in `query` (or a form body),
/// under every way a server may split and decode it (see `path`), as
/// written: a key read more than one way gives each of its values.
pub fn field_values(query: &str, key: &str) -> Vec<String> {
    field_values_by(query, key, |k| k.eq_ignore_ascii_case(key))
}

/// Every value given in `query` (or a form body) for a key `is_key`
/// takes, read as [`field_values`] reads them; `needle` is what every
/// such key holds (any case) once decoded.
pub fn field_values_by(query: &str, needle: &str, is_key: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // Most queries cannot name the key at all: without an escape, the
    // needle (any case) must stand in them as written. Nothing more is
    // read then.
    let spelled = query
        .as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()));
    if query.is_empty() || !(spelled || query.contains('%')) {
        return out;
    }
    for pairs in path::query_readings(query) {
        for (k, v) in pairs {
            if is_key(&k) {
                let v = v.unwrap_or_default();
                if !out.contains(&v) {
                    out.push(v);
                }
            }
        }
    }
    out
}

/// `path?query` with each query value replaced by `…`: what events and
/// messages show of a request (values may be tokens; keys say what was
/// asked).
pub fn redacted(path: &str, query: Option<&str>) -> String {
    let Some(q) = query else {
        return path.to_string();
    };
    let keys: Vec<String> = q
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) => format!("{k}=…"),
            None => p.to_string(),
        })
        .collect();
    format!("{path}?{}", keys.join("&"))
}

#[cfg(test)]
mod presets;
#[cfg(test)]
mod tests;

//! What the proxy and the resolver decide, and the [`Observer`] that hears
//! each decision the moment it is made. Shared by the proxy, the resolver
//! and the secret terminator; it holds no logic of its own.

use warden_policy::Field;

/// What a decision was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A TLS connection, decided on its server name.
    Tls,
    /// A plain HTTP request, decided on its `Host`.
    Http,
    /// An explicit proxy's CONNECT, decided on its target.
    Connect,
    /// Another protocol to a `name:port` entry, or a connection that said
    /// nothing usable.
    Tcp,
    /// A DNS question to the sandbox's resolver.
    Dns,
    /// A request on a terminated connection, judged by its name's request
    /// rules, a secret's request rules or its `Host`.
    Request,
    /// What the secret proxy did with a secret.
    Secret(SecretAction),
}

/// What the secret proxy did with a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretAction {
    /// The real value was put in a request to one of the secret's hosts.
    Substituted,
    /// The real value was taken out of a response.
    Scrubbed,
    /// A placeholder or the real value was stopped on its way.
    Blocked,
}

impl Protocol {
    /// The short word used in logs: `tls`, `http`, `connect`, `tcp`, `dns`,
    /// `request`, `secret`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tls => "tls",
            Protocol::Http => "http",
            Protocol::Connect => "connect",
            Protocol::Tcp => "tcp",
            Protocol::Dns => "dns",
            Protocol::Request => "request",
            Protocol::Secret(_) => "secret",
        }
    }
}

/// One decision of the proxy or the resolver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub protocol: Protocol,
    /// The name asked for, when there was one.
    pub name: Option<String>,
    pub port: u16,
    /// The address the program inside connected to.
    pub original_destination: Option<String>,
    pub allowed: bool,
    /// The allowlist entry that allowed it (for a secret: its name).
    pub rule: Option<String>,
    /// Why it was denied, or where it went.
    pub detail: String,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub duration_ms: u64,
    /// Why, as a stable code and its data: what a door words in its own
    /// terms (the flag, the profile key, the API's JSON path). `detail`
    /// says the same in plain words, naming no option's spelling.
    pub reason: Option<Cause>,
}

impl Decision {
    /// A request to `name`:`port` on a terminated connection, refused
    /// before anything of it went upstream, for `cause`, in `detail`'s
    /// words.
    pub fn request_refused(name: &str, port: u16, detail: String, cause: Cause) -> Decision {
        Decision {
            protocol: Protocol::Request,
            name: Some(name.to_string()),
            port,
            original_destination: None,
            allowed: false,
            rule: None,
            detail,
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: Some(cause),
        }
    }
}

/// Why a decision went as it did, with what would change it: the code,
/// the option (a [`Field`]) whose entry would change the outcome where
/// one would, that entry, and the addresses the name led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: Reason,
    /// The owner's option that would change the outcome
    /// ([`Reason::field`] unless the case says otherwise).
    pub field: Option<Field>,
    /// The entry of `field` that would change it (`example.com:22`,
    /// `10.1.2.3/32`, `5432`); none where the option is a switch or no
    /// one entry would.
    pub entry: Option<String>,
    /// The addresses the name resolved to (or was pinned to).
    pub addresses: Vec<std::net::IpAddr>,
}

impl Cause {
    /// `reason` with its own field and no entry.
    pub fn new(reason: Reason) -> Cause {
        Cause {
            reason,
            field: reason.field(),
            entry: None,
            addresses: Vec::new(),
        }
    }

    /// `reason`, with the entry of its field that would change the outcome.
    pub fn with_entry(reason: Reason, entry: impl Into<String>) -> Cause {
        Cause {
            entry: Some(entry.into()),
            ..Cause::new(reason)
        }
    }

    /// `reason` for `name` on `port` wanting an entry: the
    /// `--allow-domain` entry that allows it, or for the host itself
    /// (`host.warden.internal`, which no such entry may name) the host
    /// port to open.
    pub fn for_want_of_entry(reason: Reason, name: &str, port: u16) -> Cause {
        if name.eq_ignore_ascii_case(warden_policy::HOST_ALIAS) {
            return Cause {
                field: Some(Field::AllowHostPort),
                ..Cause::with_entry(reason, port.to_string())
            };
        }
        Cause::with_entry(reason, domain_entry(name, port))
    }
}

/// The entry of `--allow-domain`'s field that allows `name` on `port`:
/// the name alone on a default port, `name:port` otherwise.
pub fn domain_entry(name: &str, port: u16) -> String {
    if warden_policy::DEFAULT_PORTS.contains(&port) {
        name.to_string()
    } else {
        format!("{name}:{port}")
    }
}

/// Declares [`Reason`] from one table: each code, the option that would
/// change such an outcome (`-` for none), and what the code means.
macro_rules! reasons {
    (@field -) => { None };
    (@field $f:ident) => { Some(Field::$f) };
    ($( $name:ident => $code:literal, $field:tt, $doc:literal; )*) => {
        /// Why the proxy or the resolver decided as it did, or why one of
        /// this crate's parts could not do its work: a stable code (as
        /// events and the `X-Warden-Reason` header carry it) that each door
        /// words for its own user, never a flag below the doors.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Reason {
            $( #[doc = $doc] $name, )*
        }

        impl Reason {
            /// Every reason, in the table's order.
            pub const ALL: &'static [Reason] = &[$(Reason::$name,)*];

            /// The stable code: `not_allowed`, `plain_http`, ...
            pub const fn code(self) -> &'static str {
                match self { $( Reason::$name => $code, )* }
            }

            /// The option whose entry (or switch) would change such an
            /// outcome, where one would.
            pub const fn field(self) -> Option<Field> {
                match self { $( Reason::$name => reasons!(@field $field), )* }
            }

            /// What the code means, in a sentence.
            pub const fn doc(self) -> &'static str {
                match self { $( Reason::$name => $doc, )* }
            }

            /// The reason a code stands for.
            pub fn from_code(code: &str) -> Option<Reason> {
                Reason::ALL.iter().copied().find(|r| r.code() == code)
            }
        }
    };
}

reasons! {
    // Allowed.
    Allowed => "allowed", -, "An allowlist entry allows the name on this port.";
    AskedOnce => "asked_once", AllowDomain, "A person allowed this one connection when asked.";
    AskedForRun => "asked_for_run", AllowDomain, "A person allowed the name and port for the rest of the run when asked.";
    AskedAlways => "asked_always", -, "The owner allowed the name and port when asked, and it is kept for later runs.";
    AskedAlwaysByCaller => "asked_always_by_caller", -, "A caller allowed the name and port when asked, kept on the sandbox's list as a caller's entry.";
    Learned => "learned", AllowDomain, "Learning mode allowed what no rule allows.";
    AskOnConnection => "ask_on_connection", -, "Ask mode answered a name on no list: its connections are asked about.";
    // Denied on what the connection or query asked for.
    NotAllowed => "not_allowed", AllowDomain, "No allowlist entry allows the name on this port.";
    PortNotAllowed => "port_not_allowed", AllowDomain, "No allowlist entry allows this port for any name: refused before a byte is read.";
    PlainHttp => "plain_http", AllowHttp, "Plain HTTP is denied; only TLS goes to allowed names.";
    NoServerName => "no_server_name", -, "A TLS connection without a server name, or to a raw address.";
    EncryptedClientHello => "encrypted_client_hello", -, "Encrypted Client Hello hides the name the decision is made on.";
    MalformedTls => "malformed_tls", -, "The TLS ClientHello could not be read.";
    NotTlsOrHttp => "not_tls_or_http", -, "Neither TLS nor HTTP, to an address that stands for no name with a port entry.";
    SaidNothing => "said_nothing", -, "The client said nothing a decision can rest on, in time (or closed, or could not be read).";
    BadRequest => "bad_request", -, "An HTTP request head that is too long or names no single host name.";
    TunnelMismatch => "tunnel_mismatch", -, "A CONNECT tunnel carries a connection for another name.";
    RecordType => "record_type", -, "A DNS record type a sandbox does not need (TXT, NULL, ANY...): what tunnels are made of.";
    MalformedName => "malformed_name", -, "A DNS question whose name is not a host name (a control character, an escape, a quote, an empty label): answered NXDOMAIN and recorded escaped; no entry could allow it.";
    // Ask mode.
    DeniedWhenAsked => "denied_when_asked", AllowDomain, "A person denied the connection when asked.";
    NoOneToAsk => "no_one_to_ask", AllowDomain, "Ask mode has no terminal or approvals desk to ask on.";
    HostNotAsked => "host_not_asked", AllowHostPort, "The host's own name is never put to a question: only host ports open it.";
    PinnedToHost => "pinned_to_host", AllowDomain, "The name is pinned to the host itself: only an entry with its port allows it, never a question.";
    // Refused after the verdict.
    StrayPlaceholder => "stray_placeholder", -, "A secret's placeholder on its way to a host that is not one of the secret's.";
    SecretValue => "secret_value", -, "A secret's real value in a request from inside the sandbox.";
    QuotaUsedUp => "quota_used_up", EgressQuota, "The egress quota is used up.";
    Removed => "removed", -, "The name was removed from the allowlist (the connection was cut or never registered).";
    NotPublic => "not_public", AllowCidr, "The name resolves only to non-public addresses in no allowed range.";
    HostItself => "host_itself", AllowHostPort, "The name resolves only to the host's own addresses, which no range opens.";
    CallersReach => "callers_reach", -, "Only a caller's entry allows the name, and such an entry reaches public addresses only.";
    Unresolved => "unresolved", -, "The name could not be resolved on the host.";
    Unreachable => "unreachable", -, "No address of the name could be connected to.";
    OwnAddressesUnknown => "own_addresses_unknown", -, "The host's own addresses cannot be read, so no resolved address can be told apart from them.";
    MemoryBudget => "memory_budget", -, "The proxy's memory budget for the sandbox is spent.";
    ProxyUnusable => "proxy_unusable", -, "A part of the proxy is unusable after a panic.";
    // A terminated connection's requests.
    Substituted => "substituted", -, "A secret's real value was put in a request to one of its hosts.";
    Scrubbed => "scrubbed", -, "A secret's real value was taken out of a response.";
    ResponseWithheld => "response_withheld", -, "A response from a secret's host was withheld: it could not be checked for the value.";
    DecodedTooLarge => "decoded_too_large", -, "A response from a secret's host decodes (its codings, declared or told by its first bytes) to more than warden reads of it: 16 MiB and 1,032 times its coded bytes past that (as far as one gzip layer can pack anything), all its codings together. The rest of the body was withheld and the response cut.";
    PackedValue => "packed_value", -, "A response from a secret's host holds a secret's value inside compressed data that is passed as the server sent it (from a host sent secrets in headers only): the rest of the body was withheld and the response cut.";
    SecretRule => "secret_rule", SecretRule, "No request rule of the secret's host allows the request.";
    MisdirectedRequest => "misdirected_request", -, "A request on a terminated connection names another host, or an ambiguous target.";
    // A request decided by its name's request rules.
    RequestAllowed => "request_allowed", -, "A request rule allows the request.";
    RequestDenied => "request_denied", -, "A request rule denies the request.";
    NoRequestRule => "no_request_rule", AllowRequest, "The name has request rules and none of them allows the request.";
    RequestNotAsked => "request_not_asked", -, "A request rule asks about the request, and there is no terminal or approvals desk to ask on.";
    RequestAskedOnce => "request_asked_once", AllowRequest, "A person allowed this one request when an ask rule asked about it.";
    RequestAskedForRun => "request_asked_for_run", AllowRequest, "A person allowed this request (its method, path, and the JSON-RPC calls and query values asked about) for the rest of the run when an ask rule asked.";
    RequestAskedAlways => "request_asked_always", AllowRequest, "The owner allowed this request (its method, path, and the JSON-RPC calls and query values asked about) when asked: for the rest of the run, and kept (or proposed at its end) as the request rule stating it.";
    HeldBodyTooLarge => "held_body_too_large", -, "A request an ask rule holds has a body too large to read whole, which a person could not be shown (its digest is of all of it): refused, never asked about blind.";
    RequestDeniedWhenAsked => "request_denied_when_asked", AllowRequest, "A person denied the request when an ask rule asked about it, or no answer came in time.";
    CredentialInBody => "credential_in_body", -, "A request body on a terminated connection carried a credential-shaped value that is not one of the sandbox's placeholders.";
    PackedBody => "packed_body", -, "A request body on a terminated connection is compressed data that cannot be read to check it for the secrets' values (a format warden cannot decode, stacked or costly codings, or too large to hold): refused.";
    CredentialInRequest => "credential_in_request", -, "A request's header, path or query on a terminated connection carried a credential-shaped value that is not one of the sandbox's placeholders.";
    UpgradeWithSecrets => "upgrade_with_secrets", -, "A WebSocket upgrade to a secret's host: the frames after it could not be checked for the secret.";
    BytesBeforeUpgrade => "bytes_before_upgrade", -, "The sandbox sent bytes behind a WebSocket upgrade request before the server's 101 answered it (read with its head, or first bytes after it that are not a client's masked frame, as no HTTP request is): never decided as a request, they were not relayed and the connection was closed.";
    RequestRulesNeedTls => "request_rules_need_tls", -, "A name with request rules is reached only over TLS, which the proxy terminates to decide each request.";
    SecretNeedsTls => "secret_needs_tls", SecretPlainPort, "A secret's host is reached only through a TLS ClientHello naming it, which the proxy terminates: silence, other bytes, plain HTTP or a CONNECT carrying them would reach it unscrubbed.";
    TerminatedAddress => "terminated_address", -, "Another name leads to the address and port of a name the proxy terminates TLS for (a secret's host, a name with request rules): bytes sent there would reach it unterminated.";
    UpstreamFailed => "upstream_failed", -, "The connection to a secret's host failed (its TLS included).";
    MalformedUpgrade => "malformed_upgrade", -, "A WebSocket upgrade that is not a GET without a body (RFC 6455): what it carries would reach the server on the upgrade's own connection, a request no rule decided.";
    BodyNotExpected => "body_not_expected", -, "A GET, HEAD or TRACE with a body, on a terminated connection to an HTTP/1.1 server: a server that does not read such a body would take it for a request of its own, one no rule decided.";
    // Errors of setting up.
    UpstreamCaUnreadable => "upstream_ca_unreadable", UpstreamCa, "An upstream authority file cannot be read.";
    UpstreamCaEmpty => "upstream_ca_empty", UpstreamCa, "An upstream authority file holds no PEM certificate.";
    UpstreamCaUntrusted => "upstream_ca_untrusted", UpstreamCa, "A certificate of an upstream authority file cannot be trusted.";
    NoRoots => "no_roots", UpstreamCa, "No authority to verify upstream servers with: the system has none and none was given.";
    SecretSetup => "secret_setup", -, "The secret proxy could not be set up (randomness, its authority, TLS).";
    NotListed => "not_listed", AllowDomain, "An entry to remove is not on the allowlist.";
    StartFailed => "start_failed", -, "The proxy or the publisher of ports could not start.";
}

/// Hears every decision as it is made. Called on the proxy's own threads:
/// an implementation should return at once (queue, aggregate repeats,
/// never write to a slow sink here), or it holds up the sandbox's
/// connections; it may wait only where the alternative is losing the
/// record (the runtime's bus waits when its queue is full, so that an
/// allowed connection moves no byte unrecorded). Repeated decisions may be
/// counted rather than kept one by one.
pub trait Observer: Send + Sync {
    /// A decision, at the moment it is made. An allowed connection carries
    /// `conn`, the number its [`Observer::closed`] will repeat.
    fn decision(&self, conn: Option<u64>, decision: &Decision);
    /// An allowed connection ended; `decision` now holds its bytes and
    /// duration.
    fn closed(&self, conn: u64, decision: &Decision);
}

/// An observer that hears nothing (tests, tools that only need the proxy).
pub struct Deaf;

impl Observer for Deaf {
    fn decision(&self, _: Option<u64>, _: &Decision) {}
    fn closed(&self, _: u64, _: &Decision) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn every_code_is_unique_and_is_what_serde_writes() {
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            assert!(seen.insert(r.code()), "{} twice", r.code());
            assert_eq!(
                serde_json::to_string(r).unwrap(),
                format!("\"{}\"", r.code())
            );
            assert_eq!(Reason::from_code(r.code()), Some(*r));
            assert!(r
                .code()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
    }

    #[test]
    fn a_field_a_reason_names_has_a_flag_a_profile_key_and_a_json_path() {
        // Each door words the remedy from the field: all three must exist.
        for r in Reason::ALL {
            if let Some(f) = r.field() {
                assert!(f.flag().is_some(), "{}: {f:?} has no flag", r.code());
                assert!(f.profile_key().is_some(), "{}: {f:?}", r.code());
                assert!(f.json_path().is_some(), "{}: {f:?}", r.code());
            }
        }
    }

    /// The string literals of Rust source, comments and char literals
    /// skipped (a lint's lexer, not a parser: enough for this crate).
    fn literals(src: &str) -> Vec<String> {
        let b = src.as_bytes();
        let (mut i, mut out) = (0, Vec::new());
        while i < b.len() {
            match b[i] {
                b'/' if b.get(i + 1) == Some(&b'/') => {
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                }
                b'/' if b.get(i + 1) == Some(&b'*') => {
                    i += 2;
                    while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                        i += 1;
                    }
                    i += 2;
                }
                // A char literal ('"', '\'', 'x'); a lifetime has no
                // closing quote two or three bytes on.
                b'\'' => {
                    if b.get(i + 1) == Some(&b'\\') {
                        i += 2;
                        while i < b.len() && b[i] != b'\'' {
                            i += 1;
                        }
                        i += 1;
                    } else if b.get(i + 2) == Some(&b'\'') {
                        i += 3;
                    } else {
                        i += 1;
                    }
                }
                b'r' if matches!(b.get(i + 1), Some(b'#') | Some(b'"'))
                    && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
                {
                    let mut j = i + 1;
                    while b.get(j) == Some(&b'#') {
                        j += 1;
                    }
                    if b.get(j) != Some(&b'"') {
                        i += 1;
                        continue;
                    }
                    let close: String = format!("\"{}", "#".repeat(j - i - 1));
                    let start = j + 1;
                    let end = src[start..].find(&close).map_or(b.len(), |e| start + e);
                    out.push(src[start..end].to_string());
                    i = end + close.len();
                }
                b'"' => {
                    let start = i + 1;
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    out.push(src[start..i.min(b.len())].to_string());
                    i += 1;
                }
                _ => i += 1,
            }
        }
        out
    }

    /// `text` holds `flag` as a word of its own (`--ask`, not `--ask-save`
    /// or `-----BEGIN`).
    fn names(text: &str, flag: &str) -> bool {
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-');
        text.match_indices(flag).any(|(at, _)| {
            !word(text[..at].chars().next_back()) && !word(text[at + flag.len()..].chars().next())
        })
    }

    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn the_lexer_finds_literals_and_skips_comments() {
        let src = "// \"--ask\"\nlet a = '\"'; let b = \"x --ask y\"; /* \"--no\" */ let c = r#\"--z \"q\"\"#; fn f<'a>() {}";
        assert_eq!(literals(src), vec!["x --ask y", "--z \"q\""]);
        assert!(names("pass --ask now", "--ask"));
        assert!(!names("pass --ask-save now", "--ask"));
        assert!(!names("-----BEGIN", "--BEGIN"));
    }

    /// Below the doors no message names a flag: the proxy's words say what
    /// happened, its reasons say which option would change it, and each
    /// door spells that option (the CLI's flag, a profile's key, the API's
    /// JSON path). Tests are left out: they may drive the real binary.
    #[test]
    fn no_string_literal_outside_tests_names_a_flag_of_the_field_table() {
        let flags: Vec<&str> = warden_policy::Field::all()
            .filter_map(|f| f.flag())
            .collect();
        assert!(flags.contains(&"--allow-domain"));
        let mut files = Vec::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // Test modules stand at the end of each file.
            let code = match text.find("#[cfg(test)]") {
                Some(at) => &text[..at],
                None => &text[..],
            };
            for lit in literals(code) {
                for flag in &flags {
                    if names(&lit, flag) {
                        found.push(format!("{}: {flag} in {lit:?}", file.display()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "flags named below the doors:\n{}",
            found.join("\n")
        );
    }
}

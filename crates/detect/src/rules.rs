//! The credential shapes warden looks for, one row each: a stable id, why
//! the shape is a credential, the pattern, which part of a match is the
//! value itself, and what the value must also pass.
//!
//! The shapes follow what the field's scanners publish (gitleaks' and
//! trufflehog's rules) for the providers an agent's project is most
//! likely to hold: cloud keys, forge tokens, chat and payment tokens,
//! private keys, signed tokens, and the generic `password = "..."`
//! assignment held to an entropy threshold. Patterns run on bytes with
//! Unicode off (`(?-u)`): `\b` and the classes are ASCII, and a file
//! that is not UTF-8 is scanned all the same.

/// What a match's value must pass besides its shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Check {
    /// The shape alone is the credential (a provider's prefix and length).
    Shape,
    /// At least this many bits of Shannon entropy per byte: a value after
    /// a word such as `Bearer` that could as well be prose or a variable.
    Entropy(f64),
    /// An assignment to a name that says "secret": the value holds a
    /// letter and a digit and at least this many bits per byte, so
    /// `password = "changeme"` or `token: os.environ` are not findings.
    Assignment(f64),
}

/// One credential shape.
#[derive(Debug)]
pub struct Rule {
    /// A short stable name (`aws-access-key-id`, ...): what findings,
    /// flags and redactions carry.
    pub id: &'static str,
    /// Why a match is a credential, for a person.
    pub reason: &'static str,
    pub(crate) pattern: &'static str,
    /// The capture group holding the value (0: the whole match).
    pub(crate) value: usize,
    pub(crate) check: Check,
    /// Literals of which every match holds at least one (written in lower
    /// case, compared ignoring ASCII case): a short text holding none of them
    /// cannot match, so the pattern is neither compiled nor run over it (compiling the
    /// whole table cost a few milliseconds, paid by every `warden run`
    /// at its first recorded command line). A test derives, from each
    /// pattern's syntax, that every match holds one of them.
    pub(crate) needs: &'static [&'static str],
}

/// The rules, most specific first: where two matches overlap, the earlier
/// rule's finding is kept (a GitHub token in `token = "ghp_..."` is a
/// `github-token`, not a `generic-secret`).
pub const RULES: &[Rule] = &[
    Rule {
        id: "private-key",
        reason: "a private key block (PEM): whoever holds it is the key's owner",
        // The block up to its END line; a block cut before its end still
        // counts when 64 characters of its body follow the header.
        pattern: r"(?-u)-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----(?:[A-Za-z0-9+/=\s:,.()-]*?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|\s*[A-Za-z0-9+/=\s]{64,})",
        value: 0,
        check: Check::Shape,
        needs: &["private key"],
    },
    Rule {
        id: "aws-access-key-id",
        reason: "an AWS access key id (AKIA..., ASIA...): half of an AWS credential, and the name of the other half",
        pattern: r"(?-u)\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})\b",
        value: 1,
        check: Check::Shape,
        needs: &["a3t", "akia", "asia", "abia", "acca"],
    },
    Rule {
        id: "aws-secret-access-key",
        reason: "an AWS secret access key assigned to its usual name",
        pattern: r#"(?-u)(?i)\baws[_.-]?secret[_.-]?(?:access[_.-]?)?key["']?\s*(?:=|:=|=>|:)\s*["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
        value: 1,
        check: Check::Shape,
        needs: &["secret"],
    },
    Rule {
        id: "github-token",
        reason: "a GitHub token (personal, OAuth, app or refresh: ghp_, gho_, ghu_, ghs_, ghr_)",
        pattern: r"(?-u)\b(gh[pousr]_[A-Za-z0-9]{36,251})\b",
        value: 1,
        check: Check::Shape,
        needs: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
    },
    Rule {
        id: "github-fine-grained-token",
        reason: "a GitHub fine-grained personal access token (github_pat_)",
        pattern: r"(?-u)\b(github_pat_[A-Za-z0-9_]{82})\b",
        value: 1,
        check: Check::Shape,
        needs: &["github_pat_"],
    },
    Rule {
        id: "gitlab-token",
        reason: "a GitLab token (personal, pipeline trigger, runner, deploy)",
        pattern: r"(?-u)\b(glpat-[A-Za-z0-9_-]{20,}|glptt-[0-9a-f]{40}|glrt-[A-Za-z0-9_-]{20,}|gldt-[A-Za-z0-9_-]{20,}|GR1348941[A-Za-z0-9_-]{20,})",
        value: 1,
        check: Check::Shape,
        needs: &["glpat-", "glptt-", "glrt-", "gldt-", "gr1348941"],
    },
    Rule {
        id: "slack-token",
        reason: "a Slack token (bot, user, app: xoxb-, xoxp-, xapp-)",
        pattern: r"(?-u)\b(xox[abposr]-[0-9]{8,}-[A-Za-z0-9-]{8,}|xapp-[0-9]-[A-Z0-9]{8,}-[0-9]{8,}-[a-z0-9]{16,})",
        value: 1,
        check: Check::Shape,
        needs: &["xox", "xapp-"],
    },
    Rule {
        id: "slack-webhook",
        reason: "a Slack incoming webhook URL: anyone holding it posts to the channel",
        pattern: r"(?-u)(https?://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,})",
        value: 1,
        check: Check::Shape,
        needs: &["hooks.slack.com/"],
    },
    Rule {
        id: "stripe-key",
        reason: "a Stripe secret or restricted key (sk_live_, rk_live_, sk_test_)",
        pattern: r"(?-u)\b((?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,247})\b",
        value: 1,
        check: Check::Shape,
        needs: &["k_live_", "k_test_"],
    },
    Rule {
        id: "google-api-key",
        reason: "a Google API key (AIza...)",
        pattern: r"(?-u)\b(AIza[0-9A-Za-z_-]{35})",
        value: 1,
        check: Check::Shape,
        needs: &["aiza"],
    },
    Rule {
        id: "jwt",
        reason: "a JSON Web Token: a signed bearer credential",
        pattern: r"(?-u)\b(ey[A-Za-z0-9_-]{10,}\.ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*)",
        value: 1,
        check: Check::Shape,
        needs: &[".ey"],
    },
    Rule {
        id: "authorization",
        reason: "a credential in an Authorization header or after Bearer",
        pattern: r#"(?-u)(?i)(?:\b(?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:bearer|token|basic)|\bbearer)\s+([A-Za-z0-9._~+/-]{16,}=*)"#,
        value: 1,
        check: Check::Entropy(3.0),
        needs: &["authorization", "bearer"],
    },
    Rule {
        id: "url-password",
        reason: "a password inside a URL (scheme://user:password@host)",
        pattern: r#"(?-u)\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/?#@"'$]{1,64}:([^\s/?#@"'$%{<]{1,128})@"#,
        value: 1,
        check: Check::Shape,
        needs: &["://"],
    },
    Rule {
        id: "generic-secret",
        reason: "a high-entropy value assigned to a name that says password, secret, token or key",
        pattern: r#"(?-u)(?i)\b[A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|auth[_-]?key|private[_-]?key|credentials?)[A-Za-z0-9_.-]*["']?\s*(?:=|:=|=>|:)\s*["']?([A-Za-z0-9_+/=.~!@#%^&*-]{8,200})"#,
        value: 1,
        check: Check::Assignment(3.0),
        needs: &["pass", "secret", "token", "key", "credential"],
    },
];

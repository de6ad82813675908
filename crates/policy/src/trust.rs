//! Who may ask for what: the trust rule every door goes through, once.
//!
//! A profile is the owner's configuration: it may name host programs for
//! secrets, host paths to bind, host ports, local networks, where records
//! go. So the rule has two halves, and both are decided here, on the values
//! of a composition with the trust of each source attached, never by a
//! door's own list of keys:
//!
//! 1. **Only the owner names files.** Anyone else names a profile or a
//!    preset only by a plain name of the owner's catalogue (the owner's
//!    profile and preset directories, then the built-in ones), at any depth
//!    of `extends` and `presets`: never a path, never a name the loader
//!    would read as a path (`x.yaml`), never a name that climbs (`..`).
//! 2. **Fields that reach the host come only from the owner**: the command
//!    line, the owner-only socket, or a file of the owner's catalogue. Which
//!    fields reach the host is a column of the field table
//!    ([`Reach`](crate::fields::Reach)), so a new option states it once.
//!
//! This module decides; it reads no file and prints nothing.

use crate::fields::{Field, Reach};
use crate::layer::Val;
// The trust of a value's source is part of the value's provenance, kept
// with it in the layer; this module holds what each trust may do.
pub use crate::layer::Trust;

/// Why a caller's value was refused: a stable reason code that each door
/// words in its own terms (an API's 403 with a JSON pointer, an OCI
/// annotation, a profile's line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A field whose effect reaches the host, from someone other than the
    /// owner.
    #[error("it reaches the host (host paths, programs, ports, networks or records), so only the owner sets it, in a profile of their own catalogue")]
    OwnerOnly,
    /// A path, or a name the loader would read as a path, where only a
    /// name of the owner's catalogue is taken.
    #[error("only the owner names files: name a profile or preset of the owner's catalogue, by its plain name")]
    NotAName,
    /// A value that loosens what the owner's profile set for the same
    /// field (a higher limit, a weaker isolation, a switch that widens).
    #[error("the owner's profile sets this, and a caller may only tighten it (a lower limit, a stronger isolation, a widening switch left off), never loosen it")]
    Loosens,
    /// A profile that exists for the daemon's own use ([`OWN_USE_PROFILES`]).
    #[error("this profile is the daemon's own (it runs a step of the daemon's, with reach no caller's sandbox is given), so only the owner names it")]
    OwnUse,
}

impl Refusal {
    /// The stable code of the refusal.
    pub const fn code(self) -> &'static str {
        match self {
            Refusal::OwnerOnly => "owner_only",
            Refusal::NotAName => "not_a_name",
            Refusal::Loosens => "loosens",
            Refusal::OwnUse => "owner_only",
        }
    }
}

/// Which way a field's value tightens, for a caller's value set over the
/// owner's: the owner's profile is a ceiling a token holder, an E2B client
/// or a pod's author may come under, never go above.
#[derive(Debug, Clone, Copy)]
enum Tighter {
    /// A limit: the smaller value is the tighter one.
    Lower,
    /// From weakest to strongest: a caller may not go down the list.
    Ranked(&'static [&'static str]),
    /// A switch that widens what the sandbox may do when on.
    Off,
}

/// The fields a caller may set that the owner's profile bounds, and why a
/// caller must not loosen each. A test walks the table both ways.
const BOUNDED: &[(Field, Tighter, &str)] = &[
    (
        Field::Memory,
        Tighter::Lower,
        "memory the host gives the sandbox",
    ),
    (
        Field::Pids,
        Tighter::Lower,
        "processes the sandbox may have",
    ),
    (
        Field::Cpus,
        Tighter::Lower,
        "CPU time the sandbox takes from the host",
    ),
    (
        Field::Timeout,
        Tighter::Lower,
        "how long the sandbox may live",
    ),
    (
        Field::OpenFiles,
        Tighter::Lower,
        "kernel file objects the sandbox holds",
    ),
    (Field::FileSize, Tighter::Lower, "disk one file may take"),
    (Field::TmpSize, Tighter::Lower, "memory /tmp may take"),
    (
        Field::Disk,
        Tighter::Lower,
        "disk warden keeps for the sandbox",
    ),
    (
        Field::EgressQuota,
        Tighter::Lower,
        "traffic the sandbox may send",
    ),
    (
        Field::EgressIdleTimeout,
        Tighter::Lower,
        "how long an idle connection stays open",
    ),
    (
        Field::Isolation,
        Tighter::Ranked(&["process", "gvisor", "vm"]),
        "a weaker isolation is a larger kernel surface",
    ),
    (
        Field::Overlay,
        Tighter::Ranked(&["direct", "overlay"]),
        "without the layer, writes land on the real workspace unreviewed",
    ),
    (
        Field::AllowHttp,
        Tighter::Off,
        "plain HTTP can be read and changed on the way",
    ),
    (
        Field::Ask,
        Tighter::Off,
        "asking lets a person allow what the profile does not",
    ),
];

/// Lists that allow only what they hold: the owner's list is the ceiling,
/// and a caller may keep to it but not add to it. (A caller's list where
/// the owner set none narrows what the sandbox may do, and is theirs.)
const NARROWING: &[(Field, &str)] = &[(Field::AllowExec, "programs the sandbox may execute")];

/// May a caller add `theirs` to a list the owner set as `owners`?
pub fn may_add(field: Field, owners: &[&Val], theirs: &Val) -> Result<(), Refusal> {
    if owners.is_empty() || !NARROWING.iter().any(|(f, _)| *f == field) {
        return Ok(());
    }
    if owners.contains(&theirs) {
        Ok(())
    } else {
        Err(Refusal::Loosens)
    }
}

/// How a caller is held on a list whose every value lets the sandbox do
/// more (a granting list). Every list field of the table is either here or
/// in [`NOT_GRANTING`], and a test says so: a new granting list cannot
/// come without its rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// [`NARROWING`]: the owner's list is the ceiling ([`may_add`]).
    Ceiling,
    /// Request rules: a caller's allow or ask rule stands only within an
    /// owner's rule for the same destination, or narrows a destination the
    /// owner set no rule for, never one the owner pinned
    /// ([`may_add_request`]).
    WithinOwners,
    /// A caller's entry keeps the caller's trust through composition and
    /// the stored spec, and reaches public addresses only (rule 3 of
    /// docs/threat-model.md: `DomainRule::caller`).
    CallerTrust,
    /// Names of the owner's catalogue only ([`may_name_profile`]): what a
    /// profile or preset grants is the owner's file.
    Catalog,
    /// Reaches the host: a caller sets none of it ([`may_set`]).
    OwnerOnly,
}

/// The granting lists and how a caller is held on each.
pub const GRANTING: &[(Field, Cap)] = &[
    (Field::AllowExec, Cap::Ceiling),
    (Field::AllowRequest, Cap::WithinOwners),
    (Field::AskRequest, Cap::WithinOwners),
    (Field::AllowDomain, Cap::CallerTrust),
    (Field::Extends, Cap::Catalog),
    (Field::Presets, Cap::Catalog),
    (Field::AllowCidr, Cap::OwnerOnly),
    (Field::AllowHostPort, Cap::OwnerOnly),
    (Field::SecretPlainPort, Cap::OwnerOnly),
    (Field::Publish, Cap::OwnerOnly),
    (Field::UpstreamCa, Cap::OwnerOnly),
    (Field::Ro, Cap::OwnerOnly),
    (Field::Rw, Cap::OwnerOnly),
    (Field::Caches, Cap::OwnerOnly),
    (Field::Volumes, Cap::OwnerOnly),
    (Field::PassEnv, Cap::OwnerOnly),
    (Field::SecretRule, Cap::OwnerOnly),
];

/// Lists whose values only take away or flag, and why: any door's to add.
pub const NOT_GRANTING: &[(Field, &str)] = &[
    (Field::DenyRequest, "each rule refuses requests"),
    (
        Field::RunsOnHost,
        "each path is flagged for review, never let through",
    ),
];

/// Is `field` a request-rule list a caller's rules are held on
/// ([`Cap::WithinOwners`])?
pub fn within_owners(field: Field) -> bool {
    GRANTING
        .iter()
        .any(|(f, c)| *f == field && *c == Cap::WithinOwners)
}

/// May a caller add the request rule `theirs` (an allow or ask rule),
/// given the owner's allow and ask rules `owners` and the names the owner
/// pinned to addresses? Within an owner's rule for the same destination;
/// where the owner set none for it, a caller's rule only narrows (a name
/// with rules refuses every other request), except on a pinned name,
/// which serves only the owner's rules. A text that is no rule is the
/// resolver's to refuse.
pub fn may_add_request(theirs: &Val, owners: &[&Val], pinned: &[&str]) -> Result<(), Refusal> {
    use crate::requests::{RequestAction, RequestRule};
    let rule = |v: &Val| match v {
        Val::Text(t) => RequestRule::parse(RequestAction::Allow, t).ok(),
        _ => None,
    };
    let Some(theirs) = rule(theirs) else {
        return Ok(());
    };
    let same: Vec<RequestRule> = owners
        .iter()
        .filter_map(|v| rule(v))
        .filter(|o| o.domain.same_destinations(&theirs.domain))
        .collect();
    if !same.is_empty() {
        return if same.iter().any(|o| theirs.within(o)) {
            Ok(())
        } else {
            Err(Refusal::Loosens)
        };
    }
    let name = &theirs.domain.name;
    let on_pinned = pinned.iter().any(|p| {
        let p = p.trim_end_matches('.').to_ascii_lowercase();
        p == *name || (theirs.domain.subdomains && p.ends_with(&format!(".{name}")))
    });
    if on_pinned {
        Err(Refusal::OwnerOnly)
    } else {
        Ok(())
    }
}

/// May a caller's `theirs` stand over the owner's `owners` for `field`?
/// Fields the table does not bound are any door's to set.
pub fn may_replace(field: Field, owners: &Val, theirs: &Val) -> Result<(), Refusal> {
    let Some((_, order, _)) = BOUNDED.iter().find(|(f, _, _)| *f == field) else {
        return Ok(());
    };
    let loosens = match (order, owners, theirs) {
        (Tighter::Lower, Val::Size { bytes: o, .. }, Val::Size { bytes: t, .. }) => t > o,
        (Tighter::Lower, Val::Count(o), Val::Count(t)) => t > o,
        (Tighter::Lower, Val::Cores(o), Val::Cores(t)) => t > o,
        (Tighter::Lower, Val::Duration { duration: o, .. }, Val::Duration { duration: t, .. }) => {
            t > o
        }
        (Tighter::Ranked(ranks), o, t) => {
            let rank = |v: &Val| {
                let text = match v {
                    Val::Text(s) => s.as_str(),
                    Val::Mode(crate::profile::WorkspaceMode::Overlay) => "overlay",
                    Val::Mode(crate::profile::WorkspaceMode::Direct) => "direct",
                    _ => "",
                };
                ranks.iter().position(|r| *r == text)
            };
            // A value off the list is the resolver's to refuse; here only
            // a known step down is.
            matches!((rank(o), rank(t)), (Some(o), Some(t)) if t < o)
        }
        (Tighter::Off, Val::Bool(false), Val::Bool(true)) => true,
        _ => false,
    };
    if loosens {
        Err(Refusal::Loosens)
    } else {
        Ok(())
    }
}

/// Is `s` a plain catalogue name: letters, digits, `_`, `-` and `.` (not
/// first), never a path, never ending as a YAML file's name (which the
/// owner's loader reads as a path)?
pub fn is_catalog_name(s: &str) -> bool {
    let first_ok = s
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    first_ok
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        && !s.contains("..")
        && !names_a_file(s)
}

/// Does the loader read `s` as a path rather than a catalogue name? (For
/// the owner only: anyone else is refused such a name.)
pub fn names_a_file(s: &str) -> bool {
    s.contains('/') || s.ends_with(".yaml") || s.ends_with(".yml")
}

/// May a source of `trust` set `field`?
pub fn may_set(field: Field, trust: Trust) -> Result<(), Refusal> {
    match (trust, field.reach()) {
        (Trust::Owner, _) | (Trust::Caller, Reach::Sandbox | Reach::Catalog) => Ok(()),
        (Trust::Caller, Reach::Host) => Err(Refusal::OwnerOnly),
    }
}

/// Profiles of the catalogue that exist for the daemon's own use: each
/// runs a step of the daemon's with reach a caller's sandbox must not get
/// (`code-interpreter-v1-setup` reaches PyPI to fetch the code
/// interpreter's packages). Only the owner names them, on every door: a
/// token holder naming one would get that reach for nothing.
pub const OWN_USE_PROFILES: &[&str] = &["code-interpreter-v1-setup"];

/// Is `name` one of the daemon's own profiles ([`OWN_USE_PROFILES`])?
pub fn is_own_use(name: &str) -> bool {
    OWN_USE_PROFILES.contains(&name)
}

/// May a source of `trust` name `name` as a profile (in `extends`, as the
/// profile of a request, a template, an annotation)?
pub fn may_name_profile(name: &str, trust: Trust) -> Result<(), Refusal> {
    match trust {
        Trust::Owner => Ok(()),
        Trust::Caller if is_own_use(name) => Err(Refusal::OwnUse),
        Trust::Caller if is_catalog_name(name) => Ok(()),
        Trust::Caller => Err(Refusal::NotAName),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod given_tests;

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;
    use crate::fields::FIELDS;

    #[test]
    fn every_list_field_is_either_granting_with_a_rule_for_callers_or_says_why_not() {
        use crate::fields::Shape;
        for info in FIELDS.iter().filter(|i| i.shape == Shape::List) {
            let cap = GRANTING
                .iter()
                .find(|(f, _)| *f == info.field)
                .map(|(_, c)| *c);
            let not = NOT_GRANTING.iter().any(|(f, _)| *f == info.field);
            assert!(
                cap.is_some() != not,
                "{:?}: a list field must be in GRANTING (with how a caller is held) or NOT_GRANTING (with why)",
                info.field
            );
            let expected = match info.reach {
                Reach::Host => Some(Cap::OwnerOnly),
                Reach::Catalog => Some(Cap::Catalog),
                Reach::Sandbox => None,
            };
            if let (Some(cap), Some(expected)) = (cap, expected) {
                assert_eq!(cap, expected, "{:?}: its reach decides", info.field);
            }
            if info.reach == Reach::Sandbox && cap.is_some() {
                assert!(
                    matches!(
                        cap,
                        Some(Cap::Ceiling | Cap::WithinOwners | Cap::CallerTrust)
                    ),
                    "{:?}: a caller may set it, so it must be held",
                    info.field
                );
            }
            if cap == Some(Cap::Ceiling) {
                assert!(NARROWING.iter().any(|(f, _)| *f == info.field));
            }
        }
    }

    #[test]
    fn a_callers_request_rule_stands_only_within_the_owners_and_never_on_a_pinned_name() {
        let t = |s: &str| Val::Text(s.into());
        let owner = t("GET,HEAD api.test:18443/**");
        let owners = [&owner];
        let pinned = ["api.test", "db.corp.internal"];
        assert_eq!(
            may_add_request(&t("GET api.test:18443/repos/**"), &owners, &pinned),
            Ok(())
        );
        for wider in [
            "POST,PUT,DELETE api.test:18443/**",
            "* api.test:18443/**",
            "GET api.test:18443/** rpc:tools/call",
        ] {
            let got = may_add_request(&t(wider), &owners, &pinned);
            if wider.contains("rpc:") {
                // A rule with rpc: matches fewer requests: within.
                assert_eq!(got, Ok(()), "{wider}");
            } else {
                assert_eq!(got, Err(Refusal::Loosens), "{wider}");
            }
        }
        // No owner rule for the name: a caller's rule narrows it, except
        // on a name the owner pinned (a destination of the owner's only).
        assert_eq!(
            may_add_request(&t("GET public.test/**"), &owners, &pinned),
            Ok(())
        );
        assert_eq!(
            may_add_request(&t("POST db.corp.internal/**"), &owners, &pinned),
            Err(Refusal::OwnerOnly)
        );
        assert_eq!(
            may_add_request(&t("POST .corp.internal/**"), &owners, &pinned),
            Err(Refusal::OwnerOnly)
        );
    }

    #[test]
    fn a_caller_may_name_only_plain_catalogue_names() {
        for ok in ["base", "feature-dev", "my_profile", "v1.2", "desktop"] {
            assert_eq!(may_name_profile(ok, Trust::Caller), Ok(()), "{ok}");
        }
        for bad in [
            "/etc/passwd",
            "./x",
            "../x",
            "..",
            ".",
            ".hidden",
            "x.yaml",
            "x.yml",
            "a/b",
            "a..b",
            "~/x",
            "~root",
            "",
            "x\0y",
            "x y",
            "x\\..\\y",
            "-P",
        ] {
            assert_eq!(
                may_name_profile(bad, Trust::Caller),
                Err(Refusal::NotAName),
                "{bad:?}"
            );
            assert_eq!(may_name_profile(bad, Trust::Owner), Ok(()), "{bad:?}");
        }
    }

    #[test]
    fn the_daemons_own_profiles_are_named_by_the_owner_only() {
        for own in OWN_USE_PROFILES {
            assert!(
                crate::compose::BUILTIN_PROFILES
                    .iter()
                    .any(|(n, _)| n == own),
                "{own} is no profile of the built-in catalogue"
            );
            assert_eq!(may_name_profile(own, Trust::Caller), Err(Refusal::OwnUse));
            assert_eq!(may_name_profile(own, Trust::Owner), Ok(()));
        }
    }

    #[test]
    fn every_field_that_reaches_the_host_is_refused_to_a_caller_and_only_those() {
        let host: Vec<Field> = FIELDS
            .iter()
            .filter(|i| i.reach == Reach::Host)
            .map(|i| i.field)
            .collect();
        // What the review found reachable, each of which must stay in the
        // host's column.
        for f in [
            Field::Secret,
            Field::Ro,
            Field::Rw,
            Field::Rootfs,
            Field::Workspace,
            Field::AllowHostPort,
            Field::SecretPlainPort,
            Field::AllowCidr,
            Field::AddHost,
            Field::AuditLog,
            Field::JsonEvents,
            Field::PassEnv,
            Field::UpstreamCa,
            Field::Caches,
            Field::AllowDegraded,
            Field::Publish,
            Field::EgressLearn,
            Field::OtlpEndpoint,
        ] {
            assert!(host.contains(&f), "{f:?} must reach the host");
        }
        for i in FIELDS {
            let refused = may_set(i.field, Trust::Caller).is_err();
            assert_eq!(refused, i.reach == Reach::Host, "{:?}", i.field);
            assert_eq!(may_set(i.field, Trust::Owner), Ok(()));
        }
    }

    /// A catalogue of the owner's in a fresh directory, and a file outside
    /// it that a caller would like read as configuration.
    pub(super) struct Planted {
        pub(super) dir: std::path::PathBuf,
    }

    impl Drop for Planted {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    pub(super) fn planted(tag: &str) -> (Planted, crate::compose::Catalog) {
        let dir = std::env::temp_dir().join(format!("warden-trust-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let profiles = dir.join("config/profiles");
        let presets = dir.join("config/presets");
        std::fs::create_dir_all(&profiles).unwrap();
        std::fs::create_dir_all(&presets).unwrap();
        // The owner's profile may pin names and hold secrets: the owner
        // wrote it.
        std::fs::write(
            profiles.join("owners.yaml"),
            "egress:\n  domains: [api.test]\n  hosts: {api.test: 127.0.0.1}\n",
        )
        .unwrap();
        std::fs::write(presets.join("mine.yaml"), "domains: [mine.test]\n").unwrap();
        // What a caller plants: a profile whose secret runs a program on
        // the host, and a "preset" beside the catalogue.
        let evil = "secrets:\n  X:\n    from_command: [touch, /tmp/pwned]\n    hosts: [evil.test]\negress:\n  domains: [evil.test]\n";
        std::fs::write(dir.join("evil.yaml"), evil).unwrap();
        std::fs::write(dir.join("config/evil.yaml"), evil).unwrap();
        let catalog = crate::compose::Catalog {
            home: Some(dir.clone()),
            config_dir: Some(dir.join("config")),
        };
        (Planted { dir }, catalog)
    }

    fn compose_as(
        catalog: &crate::compose::Catalog,
        doc: &str,
        trust: Trust,
    ) -> Result<crate::compose::Composed, crate::compose::ComposeError> {
        let src = crate::compose::SourceText {
            label: "request".into(),
            dir: None,
            text: doc.into(),
            body: None,
            trust,
        };
        crate::compose::compose_source(catalog, Some(src), &Default::default())?.into_valid()
    }

    #[test]
    fn a_callers_document_names_no_file_at_any_spelling_and_nothing_is_read() {
        let (p, catalog) = planted("names");
        let abs = p.dir.join("evil.yaml").display().to_string();
        for (doc, field) in [
            (format!("extends: [{abs:?}]"), Field::Extends),
            ("extends: [evil.yaml]".to_string(), Field::Extends),
            ("extends: [../evil]".to_string(), Field::Extends),
            ("extends: [owners, \"../evil\"]".to_string(), Field::Extends),
            ("extends: [\"~/evil.yaml\"]".to_string(), Field::Extends),
            ("egress:\n  presets: [../evil]".to_string(), Field::Presets),
            (
                "egress:\n  presets: [\"../../evil\"]".to_string(),
                Field::Presets,
            ),
            (format!("egress:\n  presets: [{abs:?}]"), Field::Presets),
        ] {
            let e = compose_as(&catalog, &doc, Trust::Caller).unwrap_err();
            let crate::compose::ComposeError::Invalid(diags) = &e else {
                panic!("{doc}: {e}");
            };
            assert!(
                diags.iter().any(|d| d.field == Some(field)),
                "{doc}: {diags:?}"
            );
            assert!(!e.to_string().contains("evil.test"), "{doc}: {e}");
        }
        // Presets are names for the owner too: none climbs out of its
        // directory.
        let e = compose_as(&catalog, "egress:\n  presets: [../evil]", Trust::Owner).unwrap_err();
        assert!(e.to_string().contains("plain name"), "{e}");
        // The owner names files.
        let ok = compose_as(&catalog, &format!("extends: [{abs:?}]"), Trust::Owner).unwrap();
        assert!(!ok.merged.map(Field::Secret).is_empty());
    }

    #[test]
    fn a_callers_document_sets_nothing_that_reaches_the_host_and_the_owners_profile_still_may() {
        let (_p, catalog) = planted("reach");
        for (doc, field) in [
            (
                "secrets:\n  X:\n    from_command: [id]\n    hosts: [a.test]",
                Field::Secret,
            ),
            (
                "secrets:\n  X:\n    from_env: HOME\n    hosts: [a.test]",
                Field::Secret,
            ),
            ("egress:\n  hosts: {a.test: 127.0.0.1}", Field::AddHost),
            ("egress:\n  allow_cidrs: [10.0.0.0/8]", Field::AllowCidr),
            ("egress:\n  host_ports: [22]", Field::AllowHostPort),
            ("egress:\n  publish: [\"8080:80\"]", Field::Publish),
            ("egress:\n  learn: true", Field::EgressLearn),
            (
                "egress:\n  upstream_ca: [/etc/ssl/x.pem]",
                Field::UpstreamCa,
            ),
            ("filesystem:\n  read_only: [/root]", Field::Ro),
            ("filesystem:\n  read_write: [/etc]", Field::Rw),
            ("filesystem:\n  rootfs: /", Field::Rootfs),
            ("filesystem:\n  workspace: /root", Field::Workspace),
            ("filesystem:\n  caches: [pip]", Field::Caches),
            ("env:\n  pass: [AWS_SECRET_ACCESS_KEY]", Field::PassEnv),
            ("audit_log: /etc/cron.d/x", Field::AuditLog),
            ("json_events: /root/.bashrc", Field::JsonEvents),
            ("no_audit_log: true", Field::NoAuditLog),
            ("allow_degraded: true", Field::AllowDegraded),
        ] {
            let e = compose_as(&catalog, doc, Trust::Caller).unwrap_err();
            assert_eq!(e.refusal(), Some(Refusal::OwnerOnly), "{doc}: {e}");
            let crate::compose::ComposeError::Invalid(diags) = &e else {
                panic!("{doc}");
            };
            assert!(
                diags
                    .iter()
                    .any(|d| d.field == Some(field) && d.refusal == Some(Refusal::OwnerOnly)),
                "{doc}: {diags:?}"
            );
        }
        // A caller names the owner's profile, whose pins are the owner's.
        let ok = compose_as(
            &catalog,
            "extends: [owners]\negress:\n  presets: [mine]\n  domains: [b.test]\nresources:\n  memory: 1G",
            Trust::Caller,
        )
        .unwrap();
        assert!(!ok.merged.map(Field::AddHost).is_empty());
        assert_eq!(ok.merged.list(Field::AllowDomain).len(), 3);
    }

    #[test]
    fn a_caller_is_not_shown_what_a_broken_profile_of_the_owners_holds_or_where_it_is() {
        let (p, catalog) = planted("conceal");
        std::fs::write(
            p.dir.join("config/profiles/broken.yaml"),
            "resources:\n  memory: hunter2-is-the-password\n",
        )
        .unwrap();
        let e = compose_as(&catalog, "extends: [broken]", Trust::Caller).unwrap_err();
        let text = e.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains(&p.dir.display().to_string()), "{text}");
        assert!(text.contains("warden profile validate"), "{text}");
        // The owner sees it all.
        let e = compose_as(&catalog, "extends: [broken]", Trust::Owner).unwrap_err();
        assert!(e.to_string().contains("broken.yaml"), "{e}");
        assert!(e.to_string().contains("hunter2"), "{e}");
    }

    /// The rules of a resolved spec, as `(entry, given by a caller)`.
    fn rules(composed: &crate::compose::Composed) -> Vec<(String, bool)> {
        let placement = crate::Placement {
            default_command: vec!["true".into()],
            ..crate::Placement::default()
        };
        let spec = composed
            .merged
            .resolve(
                &placement,
                &crate::Defaults::for_host(crate::HostFacts {
                    total_memory: 8 << 30,
                    cpus: 2,
                    pid_max: 1 << 22,
                }),
                &[],
            )
            .unwrap();
        let crate::NetworkSpec::Egress(e) = spec.network else {
            panic!("no egress");
        };
        e.domains
            .into_iter()
            .map(|d| (d.source, d.caller))
            .collect()
    }

    #[test]
    fn a_callers_names_stay_the_callers_through_composition_and_the_owners_stay_the_owners() {
        let (_p, catalog) = planted("kept");
        // The owner's profile pins api.test; a caller builds on it, names
        // the pinned name on another port, another name, a preset of the
        // owner's catalogue, and the owner's own entry again.
        let c = compose_as(
            &catalog,
            "extends: [owners]\negress:\n  domains: [\"api.test:22\", wild.test, api.test]\n  presets: [mine]",
            Trust::Caller,
        )
        .unwrap();
        let got = rules(&c);
        for (entry, caller) in [
            ("api.test", false),
            ("api.test:22", true),
            ("wild.test", true),
            ("mine.test", false),
        ] {
            assert!(
                got.contains(&(entry.to_string(), caller)),
                "{entry} given by a caller: {caller}; got {got:?}"
            );
        }
        assert_eq!(got.len(), 4, "{got:?}");
        // The owner's own document gives the owner's rules.
        let c = compose_as(
            &catalog,
            "extends: [owners]\negress:\n  domains: [\"api.test:22\"]",
            Trust::Owner,
        )
        .unwrap();
        assert!(
            rules(&c).iter().all(|(_, caller)| !caller),
            "{:?}",
            rules(&c)
        );
        // A pod's annotation (beside the node's own configuration) is a
        // caller's; the same entry from the node's owner is the owner's.
        use crate::compose::{Layer, Origin};
        let mut o = Layer::default();
        o.add_text(
            Field::AllowDomain,
            "node.test",
            Origin::CommandLine,
            Trust::Owner,
        )
        .unwrap();
        for d in ["pod.test:22", "node.test"] {
            let at = Origin::Annotation {
                key: "warden.dev/egress".into(),
            };
            o.add_text(Field::AllowDomain, d, at, Trust::Caller)
                .unwrap();
        }
        let src = catalog.profile("owners").unwrap();
        let c = crate::compose::compose_source(&catalog, Some(src), &o)
            .unwrap()
            .into_valid()
            .unwrap();
        let got = rules(&c);
        assert!(got.contains(&("pod.test:22".into(), true)), "{got:?}");
        assert!(got.contains(&("node.test".into(), false)), "{got:?}");
        assert!(got.contains(&("api.test".into(), false)), "{got:?}");
    }

    #[test]
    fn a_stored_rule_without_its_trust_reads_as_the_owners_and_a_callers_keeps_it() {
        let old: crate::DomainRule = serde_json::from_str(
            r#"{"name":"a.test","subdomains":false,"port":null,"source":"a.test"}"#,
        )
        .unwrap();
        assert!(!old.caller);
        let mut r = crate::DomainRule::parse("b.test:22").unwrap();
        r.caller = true;
        let back: crate::DomainRule =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert!(back.caller);
    }

    /// `a.b: v` as YAML.
    fn yaml(key: &str, value: &str) -> String {
        match key.split_once('.') {
            Some((a, b)) => format!("{a}:\n  {b}: {value}\n"),
            None => format!("{key}: {value}\n"),
        }
    }

    #[test]
    fn a_caller_may_tighten_what_the_owners_profile_bounds_and_never_loosen_it() {
        let (p, catalog) = planted("ceiling");
        // (owner's value, a looser one, a tighter one), by the table's rows.
        let values = |field: Field| match field {
            Field::Memory | Field::FileSize | Field::TmpSize | Field::Disk | Field::EgressQuota => {
                ("1G", "2G", "512M")
            }
            Field::Pids | Field::OpenFiles => ("1024", "2048", "512"),
            Field::Cpus => ("1", "2", "0.5"),
            Field::Timeout | Field::EgressIdleTimeout => ("10m", "1h", "1m"),
            Field::Isolation => ("vm", "process", "vm"),
            Field::Overlay => ("overlay", "direct", "overlay"),
            Field::AllowHttp | Field::Ask => ("false", "true", "false"),
            other => panic!("{other:?} is bounded but has no values in this test"),
        };
        for (field, _, why) in BOUNDED {
            let key = field.profile_name();
            let (owners, looser, tighter) = values(*field);
            std::fs::write(
                p.dir.join("config/profiles/ceiling.yaml"),
                yaml(key, owners),
            )
            .unwrap();
            let doc = |v: &str| format!("extends: [ceiling]\n{}", yaml(key, v));
            let e = compose_as(&catalog, &doc(looser), Trust::Caller).expect_err(&format!(
                "{key}: {looser} over the owner's {owners} ({why})"
            ));
            assert_eq!(e.refusal(), Some(Refusal::Loosens), "{key}: {e}");
            compose_as(&catalog, &doc(tighter), Trust::Caller)
                .unwrap_or_else(|e| panic!("{key}: {tighter} under {owners}: {e}"));
            // The owner's own command line or file is not bounded by it.
            compose_as(&catalog, &doc(looser), Trust::Owner)
                .unwrap_or_else(|e| panic!("{key}: the owner's {looser}: {e}"));
            // Nor is a caller where the owner set nothing.
            compose_as(&catalog, &yaml(key, looser), Trust::Caller)
                .unwrap_or_else(|e| panic!("{key}: {looser} with no owner's value: {e}"));
        }
    }

    #[test]
    fn a_caller_may_keep_to_the_owners_exec_allowlist_and_never_add_to_it() {
        let (p, catalog) = planted("ceiling-exec");
        std::fs::write(
            p.dir.join("config/profiles/tools.yaml"),
            "process:\n  allow_exec: [git, python3]\n",
        )
        .unwrap();
        let doc = |list: &str| format!("extends: [tools]\nprocess:\n  allow_exec: [{list}]\n");
        let e = compose_as(&catalog, &doc("git, curl"), Trust::Caller).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::Loosens), "{e}");
        compose_as(&catalog, &doc("git"), Trust::Caller).unwrap();
        // The owner's own document is not bounded by it.
        compose_as(&catalog, &doc("curl"), Trust::Owner).unwrap();
        // A caller's list where the owner set none only narrows.
        compose_as(&catalog, "process:\n  allow_exec: [curl]\n", Trust::Caller).unwrap();
    }

    #[test]
    fn a_pods_annotation_is_held_to_the_nodes_profile_as_a_callers_document_is() {
        let (p, catalog) = planted("ceiling-pod");
        std::fs::write(
            p.dir.join("config/profiles/node.yaml"),
            "resources:\n  timeout: 1h\n",
        )
        .unwrap();
        let compose = |timeout: &str, trust: Trust| {
            let mut flags = crate::compose::Layer::default();
            let origin = crate::compose::Origin::Annotation {
                key: "warden.dev/timeout".into(),
            };
            flags
                .add_text(Field::Timeout, timeout, origin, trust)
                .unwrap();
            let node = catalog.profile("node").unwrap();
            crate::compose::compose_source(&catalog, Some(node), &flags)?.into_valid()
        };
        let e = compose("10h", Trust::Caller).unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::Loosens), "{e}");
        compose("10m", Trust::Caller).unwrap();
        // The node's own configuration is the owner's.
        compose("10h", Trust::Owner).unwrap();
    }
}

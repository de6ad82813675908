//! Checks on a composed profile beyond its shape: names that do not parse,
//! domains that another entry already covers, paths a run could not
//! mount, each reported at the file, line and column where it was written
//! (what the resolver refuses is the resolver's to say, through the same
//! resolution `run` uses); and `warden profile check`, which says whether
//! a profile allows a destination and by which rule.

use crate::compose::{Composed, Diagnostic, Layer, Origin, Severity, Slot, Sourced, Val};
use crate::fields::Field;
use crate::profile::Pos;
use crate::{DomainRule, Problem, ResolveError};

/// Why `warden profile check` could not judge a destination.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckError {
    #[error("destination {0:?} is not NAME or NAME:PORT")]
    BadDestination(String),
}

fn diag(
    code: &'static str,
    severity: Severity,
    field: Option<Field>,
    origin: &Origin,
    fallback: &str,
    message: String,
) -> Diagnostic {
    let (file, pos) = origin
        .place()
        .map(|(f, p)| (f.to_string(), p))
        .unwrap_or_else(|| (fallback.to_string(), Pos { line: 1, column: 1 }));
    Diagnostic {
        severity,
        field,
        file,
        pos,
        pointer: origin.pointer().map(str::to_string),
        message,
        refusal: None,
        code,
    }
}

/// Add to `composed.diagnostics` the problems only a profile has, each at
/// its own place: every domain entry that does not parse (a run stops at
/// the first), entries another one covers, paths written in the file that
/// a run could not mount. What a run decides is not checked here: the
/// front door resolves the profile as run does, after these.
pub fn validate(composed: &mut Composed) {
    let fallback = composed
        .sources
        .last()
        .map(|(l, _)| l.clone())
        .unwrap_or_else(|| "profile".into());
    let merged = &composed.merged;
    let mut out = Vec::new();

    // Domains: each must parse, and none should be covered by another.
    // Every source's entries are looked at, duplicates included (the merge
    // drops those).
    let mut rules: Vec<(DomainRule, &Sourced)> = Vec::new();
    for (_, layer) in &composed.sources {
        for s in layer.list(Field::AllowDomain) {
            if let Val::Text(d) = &s.val {
                match DomainRule::parse(d) {
                    Ok(r) => rules.push((r, s)),
                    Err(e) => {
                        let e = Field::AllowDomain.invalid(Problem::Domain(e));
                        out.push(diag(
                            e.problem().code(),
                            Severity::Error,
                            Some(Field::AllowDomain),
                            &s.origin,
                            &fallback,
                            e.describe_for_profile(),
                        ))
                    }
                }
            }
        }
    }
    // (where, covering entry and its origin) -> the covered entries.
    let mut covered: Vec<(&Origin, String, Vec<&str>)> = Vec::new();
    for (i, (rule, s)) in rules.iter().enumerate() {
        let candidates = rules
            .iter()
            .enumerate()
            .filter(|(j, (other, o))| {
                *j != i && covers(other, rule) && !same_preset(&s.origin, &o.origin)
            })
            .filter(|(j, (other, _))| !covers(rule, other) || *j < i);
        // A broader entry is the better answer than an equal one.
        let best = candidates
            .clone()
            .find(|(_, (other, _))| !covers(rule, other))
            .or_else(|| candidates.clone().next());
        if let Some((_, (other, o))) = best {
            let verb = if covers(rule, other) {
                "duplicate"
            } else {
                "covered by"
            };
            let by = format!("{verb} `{}` ({})", other.source, o.origin);
            match covered
                .iter_mut()
                .find(|(w, b, _)| *w == &s.origin && *b == by)
            {
                Some(entry) => entry.2.push(&rule.source),
                None => covered.push((&s.origin, by, vec![&rule.source])),
            }
        }
    }
    for (origin, by, names) in covered {
        let list = names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let (verb, by) = match by.strip_prefix("duplicate") {
            Some(rest) if names.len() == 1 => ("duplicates".to_string(), rest.to_string()),
            Some(rest) => ("duplicate".to_string(), rest.to_string()),
            None if names.len() == 1 => ("is".to_string(), format!(" {by}")),
            None => ("are".to_string(), format!(" {by}")),
        };
        out.push(diag(
            "covered",
            Severity::Warning,
            Some(Field::AllowDomain),
            origin,
            &fallback,
            format!("{list}{} {verb}{by}", preset_note(origin)),
        ));
    }

    // Paths written in files are the host paths a run mounts: they must
    // be there, reached as the jail reaches them (it checks them only when
    // the sandbox is built, so a profile would pass here and fail there).
    for field in [Field::Workspace, Field::Rootfs, Field::Ro, Field::Rw] {
        let items: Vec<&Sourced> = match merged.slots.get(&field) {
            Some(Slot::One(s)) => vec![s],
            Some(Slot::List(items)) => items.iter().collect(),
            _ => vec![],
        };
        for s in items {
            if let (Val::Path(p), Some(_)) = (&s.val, s.origin.place()) {
                if let Some(why) = unmountable(p) {
                    out.push(diag(
                        "cannot_mount",
                        Severity::Error,
                        Some(field),
                        &s.origin,
                        &fallback,
                        format!("{}: {} {why}", field.profile_name(), p.display()),
                    ));
                }
            }
        }
    }

    // Everything else is what a run decides: `warden profile validate`
    // resolves the profile through run's own resolution after these
    // checks (a second copy of the resolver's checks here once accepted
    // what run refused, and refused what it accepts).
    composed.diagnostics.extend(out);
    // Read like the file: by place within each file (files in the order
    // they were first named), whichever check found what.
    let mut files: Vec<String> = Vec::new();
    for d in &composed.diagnostics {
        if !files.contains(&d.file) {
            files.push(d.file.clone());
        }
    }
    composed.diagnostics.sort_by_key(|d| {
        (
            files.iter().position(|f| *f == d.file),
            d.pos.line,
            d.pos.column,
        )
    });
}

/// Why the jail would refuse to mount host path `p` (a relative path of a
/// profile is already joined to the profile's directory): it is not
/// there, or it is reached through `..` or a symbolic link, which the jail
/// never follows (a link left by earlier sandbox code could redirect the
/// mount).
fn unmountable(p: &std::path::Path) -> Option<String> {
    use std::path::Component;
    if p.components().any(|c| c == Component::ParentDir) {
        return Some(
            "goes through '..' (after the profile's own directory, for a relative path), which warden does not follow to what it mounts; write the directory itself, and name the profile by a path without '..'"
                .into(),
        );
    }
    if std::fs::symlink_metadata(p).is_err() {
        return Some("does not exist".into());
    }
    let lexical: std::path::PathBuf = p.components().collect();
    match std::fs::canonicalize(&lexical) {
        Ok(real) if real != lexical => Some(format!(
            "goes through a symbolic link (to {}), which warden does not follow to what it mounts; write the real path",
            real.display()
        )),
        _ => None,
    }
}

fn same_preset(a: &Origin, b: &Origin) -> bool {
    matches!((a, b), (Origin::Preset { preset: x, .. }, Origin::Preset { preset: y, .. }) if x == y)
}

fn preset_note(o: &Origin) -> String {
    match o {
        Origin::Preset { preset, .. } => format!(" (from preset {preset})"),
        _ => String::new(),
    }
}

/// Does `a` allow everything `b` allows?
fn covers(a: &DomainRule, b: &DomainRule) -> bool {
    let names = if a.subdomains {
        b.name == a.name || b.name.ends_with(&format!(".{}", a.name))
    } else {
        !b.subdomains && a.name == b.name
    };
    let ports = match (a.port, b.port) {
        (None, None) => true,
        (None, Some(p)) => a.allows_port(p),
        (Some(x), Some(y)) => x == y,
        (Some(_), None) => false,
    };
    names && ports
}

/// The origin of the value a resolver error is about, found through the
/// error's field (and, for a list or map, the entry it names), so that a
/// front door can name the file, line and column it came from.
pub fn locate(l: &Layer, e: &ResolveError) -> Origin {
    e.field()
        .and_then(|field| origin_of(l, field, e.problem().entry().as_deref()))
        .unwrap_or(Origin::Default)
}

/// Where `field`'s value was written: the item equal to `entry` when the
/// field holds a list or map and one is, else its first.
fn origin_of(l: &Layer, field: Field, entry: Option<&str>) -> Option<Origin> {
    let matches_item = |v: &Val| match (v, entry) {
        (Val::Text(t) | Val::Named { text: t, .. }, Some(e)) => t.trim() == e.trim(),
        (Val::Path(p), Some(e)) => p.as_os_str() == e,
        (Val::Port(p), Some(e)) => p.to_string() == e,
        _ => false,
    };
    // A map entry is named by its key, or written whole as `KEY=...` or
    // `KEY@...` (a secret) by the error.
    let matches_key = |k: &str| {
        entry.is_some_and(|e| {
            e == k
                || e.strip_prefix(k)
                    .is_some_and(|rest| rest.starts_with('=') || rest.starts_with('@'))
        })
    };
    match l.slots.get(&field)? {
        Slot::One(s) => Some(s.origin.clone()),
        Slot::List(items) => items
            .iter()
            .find(|s| matches_item(&s.val))
            .or(items.first())
            .map(|s| s.origin.clone()),
        Slot::Map(items) => items
            .iter()
            .find(|(k, _)| matches_key(k))
            .or(items.first())
            .map(|(_, s)| s.origin.clone()),
    }
}

/// Which rule of a composed profile allows `destination` (`NAME` or
/// `NAME:PORT`, port 443 when none is given); `None` when nothing does.
pub fn check<'a>(
    merged: &'a Layer,
    destination: &str,
) -> Result<Option<(DomainRule, &'a Origin)>, CheckError> {
    let bad = || CheckError::BadDestination(destination.to_string());
    let (host, port) = match destination.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad())?),
        None => (destination, 443),
    };
    let name = crate::normalize_name(host).map_err(|_| bad())?;
    for s in merged.list(Field::AllowDomain) {
        let Val::Text(d) = &s.val else { continue };
        let Ok(rule) = DomainRule::parse(d) else {
            continue;
        };
        let names =
            name == rule.name || (rule.subdomains && name.ends_with(&format!(".{}", rule.name)));
        if names && rule.allows_port(port) {
            return Ok(Some((rule, &s.origin)));
        }
    }
    Ok(None)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;
    use crate::compose::{compose, Catalog, Layer, BUILTIN_PRESETS, BUILTIN_PROFILES};
    use crate::profile::parse_preset;
    use crate::{Defaults, HostFacts, Placement, SandboxSpec};
    use std::path::PathBuf;

    /// The command line of `warden run` as a layer: the command, and
    /// each flag's text.
    fn cli(command: Option<&[&str]>, flags: &[(Field, &str)]) -> Layer {
        let mut l = Layer::default();
        if let Some(argv) = command {
            let argv = argv.iter().map(|a| a.to_string()).collect();
            l.add_one(
                Field::Command,
                crate::compose::Val::Argv(argv),
                Origin::CommandLine,
            );
        }
        for (field, text) in flags {
            l.add_text(*field, text, Origin::CommandLine, crate::Trust::Owner)
                .unwrap();
        }
        l
    }

    fn defaults() -> Defaults {
        Defaults::for_host(HostFacts {
            total_memory: 8 << 30,
            cpus: 2,
            pid_max: 1 << 22,
        })
    }

    /// A directory of profile files, removed on drop.
    struct Dir(PathBuf);
    impl Dir {
        fn new(files: &[(&str, &str)]) -> Dir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let d = std::env::temp_dir().join(format!(
                "warden-policy-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&d).unwrap();
            for (name, text) in files {
                std::fs::write(d.join(name), text).unwrap();
            }
            Dir(d)
        }
        fn path(&self, name: &str) -> String {
            self.0.join(name).display().to_string()
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn catalog() -> Catalog {
        Catalog {
            home: Some("/home/alice".into()),
            config_dir: None,
        }
    }

    /// Every message of validating `file` in `dir`, with the directory
    /// written as `DIR`.
    /// Then, when it has no error, the resolver's refusal placed as the
    /// front doors place it (`file:line:col: error: ...`).
    fn messages(dir: &Dir, file: &str) -> Vec<String> {
        let mut c = compose(&catalog(), Some(&dir.path(file)), &Layer::default()).unwrap();
        validate(&mut c);
        let mut found: Vec<String> = c.diagnostics.iter().map(|d| d.to_string()).collect();
        if !c.has_errors() {
            if let Err(e) = resolved(&c.merged) {
                let (f, pos) = locate(&c.merged, &e)
                    .place()
                    .map(|(f, p)| (f.to_string(), p))
                    .unwrap();
                found.push(format!("{f}:{pos}: error: {}", e.describe_for_profile()));
            }
        }
        found
            .iter()
            .map(|m| m.replace(&dir.0.display().to_string(), "DIR"))
            .collect()
    }

    /// A composed layer resolved as a run resolves it, given `true` when
    /// it names no command.
    fn resolved(l: &Layer) -> Result<SandboxSpec, ResolveError> {
        let placement = Placement {
            default_command: vec!["true".into()],
            ..Placement::default()
        };
        l.resolve(&placement, &defaults(), &[])
    }

    /// The spec of a run from a terminal.
    fn spec(l: &Layer) -> SandboxSpec {
        let placement = Placement {
            stdin_is_terminal: true,
            ..Placement::default()
        };
        l.resolve(&placement, &defaults(), &[("TERM".into(), "xterm".into())])
            .unwrap()
    }

    #[test]
    fn every_preset_parses_and_each_host_is_a_valid_rule() {
        for (name, text) in BUILTIN_PRESETS {
            let p = parse_preset(text).unwrap_or_else(|e| panic!("preset {name}: {e}"));
            assert!(!p.domains.is_empty(), "preset {name} is empty");
            assert!(p.description.is_some(), "preset {name} has no description");
            for d in &p.domains {
                DomainRule::parse(&d.value).unwrap_or_else(|e| panic!("preset {name}: {e}"));
            }
        }
    }

    #[test]
    fn every_shipped_profile_validates_without_findings() {
        for (name, _) in BUILTIN_PROFILES {
            let mut c = compose(&catalog(), Some(name), &Layer::default()).unwrap();
            validate(&mut c);
            assert!(c.diagnostics.is_empty(), "{name}: {:?}", c.diagnostics);
            assert!(c.description.is_some(), "{name} has no description");
        }
    }

    #[test]
    fn the_github_preset_has_the_forge_hosts() {
        let c = compose(&catalog(), Some("feature-dev"), &Layer::default()).unwrap();
        let domains = c.merged.texts(Field::AllowDomain);
        for host in [
            "github.com",
            "api.github.com",
            "raw.githubusercontent.com",
            "codeload.github.com",
            "objects.githubusercontent.com",
            "pypi.org",
            "files.pythonhosted.org",
            "static.crates.io",
            "index.crates.io",
            "proxy.golang.org",
            "api.anthropic.com",
        ] {
            assert!(domains.iter().any(|d| d == host), "{host} missing");
        }
    }

    #[test]
    fn a_profile_and_the_equivalent_flags_give_the_same_spec() {
        let dir = Dir::new(&[(
            "p.yaml",
            "command: [bash, -l]\nhostname: agent\ntty: false\nallow_degraded: true\n\
             egress:\n  domains: [.example.dev, \"git.example.com:22\"]\n  allow_http: true\n\
             \x20 hosts: { registry.internal: 10.1.2.3 }\n  log: true\n  idle_timeout: 5m\n\
             filesystem:\n  workspace: ~/src/project\n  rootfs: /srv/root\n  read_only: [~/.gitconfig]\n\
             \x20 read_write: [/var/cache/x]\n  tmp_size: 512M\n\
             resources: { memory: 4G, cpus: 2, pids: 512, timeout: 2h, open_files: 1024, file_size: 1G, egress_quota: 5G }\n\
             env: { pass: [TERM], set: { EDITOR: vi } }\n",
        )]);
        let c = compose(&catalog(), Some(&dir.path("p.yaml")), &Layer::default()).unwrap();
        assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
        let from_profile = c.merged.clone();

        let flags = cli(
            Some(&["bash", "-l"]),
            &[
                (Field::Hostname, "agent"),
                (Field::Tty, "false"),
                (Field::AllowDegraded, "true"),
                (Field::AllowDomain, ".example.dev"),
                (Field::AllowDomain, "git.example.com:22"),
                (Field::AllowHttp, "true"),
                (Field::AddHost, "registry.internal=10.1.2.3"),
                (Field::NetLog, "true"),
                (Field::EgressIdleTimeout, "5m"),
                (Field::Workspace, "/home/alice/src/project"),
                (Field::Rootfs, "/srv/root"),
                (Field::Ro, "/home/alice/.gitconfig"),
                (Field::Rw, "/var/cache/x"),
                (Field::TmpSize, "512M"),
                (Field::Memory, "4G"),
                (Field::Cpus, "2"),
                (Field::Pids, "512"),
                (Field::Timeout, "2h"),
                (Field::OpenFiles, "1024"),
                (Field::FileSize, "1G"),
                (Field::EgressQuota, "5G"),
                (Field::PassEnv, "TERM"),
                (Field::Env, "EDITOR=vi"),
            ],
        );
        let c = compose(&catalog(), None, &flags).unwrap();
        assert_eq!(spec(&from_profile), spec(&c.merged));
    }

    #[test]
    fn the_command_line_wins_and_lists_are_added() {
        let dir = Dir::new(&[(
            "p.yaml",
            "command: [bash]\negress:\n  domains: [a.example.com]\nresources: { memory: 1G, pids: 100 }\n",
        )]);
        let flags = cli(
            Some(&["true"]),
            &[
                (Field::Memory, "2G"),
                (Field::AllowDomain, "b.example.com"),
                (Field::AllowDomain, "a.example.com"),
            ],
        );
        let c = compose(&catalog(), Some(&dir.path("p.yaml")), &flags).unwrap();
        let r = &c.merged;
        assert_eq!(r.argv(Field::Command), ["true"]);
        assert_eq!(r.bytes(Field::Memory), Some(2 << 30));
        assert_eq!(r.count(Field::Pids), Some(100));
        assert_eq!(
            r.texts(Field::AllowDomain),
            ["a.example.com", "b.example.com"]
        );
        assert_eq!(
            c.merged.get(Field::Memory).unwrap().origin,
            Origin::CommandLine
        );
    }

    #[test]
    fn extends_merges_lists_maps_and_scalars_in_order() {
        let dir = Dir::new(&[
            (
                "parent.yaml",
                "hostname: parent\negress:\n  domains: [a.example.com, b.example.com]\nenv:\n  set: { A: '1', B: '2' }\n",
            ),
            (
                "child.yaml",
                "extends: [parent.yaml]\nhostname: child\negress:\n  domains: [b.example.com, c.example.com]\nenv:\n  set: { B: '3' }\n",
            ),
        ]);
        let c = compose(&catalog(), Some(&dir.path("child.yaml")), &Layer::default()).unwrap();
        let r = &c.merged;
        assert_eq!(r.text(Field::Hostname).as_deref(), Some("child"));
        assert_eq!(
            r.texts(Field::AllowDomain),
            ["a.example.com", "b.example.com", "c.example.com"]
        );
        assert_eq!(r.pairs(Field::Env), ["A=1", "B=3"]);
        let origin = c.merged.list(Field::AllowDomain)[0].origin.to_string();
        assert!(origin.ends_with("parent.yaml:3:13"), "{origin}");
    }

    #[test]
    fn malformed_command_line_pairs_are_refused_not_dropped() {
        let flags = cli(
            Some(&["true"]),
            &[
                (Field::AllowDomain, "a.example.com"),
                (Field::AddHost, "nohost"),
            ],
        );
        let c = compose(&catalog(), None, &flags).unwrap();
        assert_eq!(
            resolved(&c.merged),
            Err(Field::AddHost.invalid(Problem::BadAddHost("nohost".into())))
        );
        let flags = cli(Some(&["true"]), &[(Field::Env, "NOEQUALS")]);
        let c = compose(&catalog(), None, &flags).unwrap();
        assert_eq!(
            resolved(&c.merged),
            Err(Field::Env.invalid(Problem::BadEnvAssignment("NOEQUALS".into())))
        );
    }

    #[test]
    fn reserved_egress_and_workspace_fields_are_carried_into_the_layer() {
        let dir = Dir::new(&[(
            "p.yaml",
            "egress:\n  allow_cidrs: [10.1.0.0/16]\n  host_ports: [5432]\n  publish: [\"8080:80\"]\n  ask: true\nfilesystem:\n  mode: overlay\njson_events: events.jsonl\n",
        )]);
        let c = compose(&catalog(), Some(&dir.path("p.yaml")), &Layer::default()).unwrap();
        let r = &c.merged;
        assert_eq!(r.texts(Field::AllowCidr), ["10.1.0.0/16"]);
        assert_eq!(r.ports(Field::AllowHostPort), [5432]);
        assert_eq!(r.texts(Field::Publish), ["8080:80"]);
        assert!(r.on(Field::Ask) && r.overlay());
        assert_eq!(r.path(Field::JsonEvents), Some(dir.0.join("events.jsonl")));
        let flags = cli(
            None,
            &[(Field::Ask, "false"), (Field::AllowHostPort, "6379")],
        );
        let c = compose(&catalog(), Some(&dir.path("p.yaml")), &flags).unwrap();
        let r = &c.merged;
        assert!(!r.on(Field::Ask));
        assert_eq!(r.ports(Field::AllowHostPort), [5432, 6379]);
    }

    #[test]
    fn relative_paths_resolve_against_the_profile_and_tilde_against_home() {
        let dir = Dir::new(&[(
            "p.yaml",
            "filesystem:\n  workspace: proj\n  read_only: [~/.gitconfig]\n",
        )]);
        let c = compose(&catalog(), Some(&dir.path("p.yaml")), &Layer::default()).unwrap();
        let r = &c.merged;
        assert_eq!(r.path(Field::Workspace), Some(dir.0.join("proj")));
        assert_eq!(
            r.paths(Field::Ro),
            [PathBuf::from("/home/alice/.gitconfig")]
        );
    }

    #[test]
    fn a_cycle_in_extends_is_an_error_naming_the_cycle() {
        let dir = Dir::new(&[
            ("a.yaml", "extends: [b.yaml]\n"),
            ("b.yaml", "name: b\nextends: [a.yaml]\n"),
        ]);
        assert_eq!(
            messages(&dir, "a.yaml"),
            ["DIR/b.yaml:2:11: error: `extends` makes a cycle: DIR/a.yaml -> DIR/b.yaml -> DIR/a.yaml"]
        );
    }

    #[test]
    fn a_profile_asked_for_as_a_preset_is_pointed_at_the_profile_flag() {
        let dir = Dir::new(&[("p.yaml", "egress:\n  presets: [desktop]\n")]);
        assert_eq!(
            messages(&dir, "p.yaml"),
            ["DIR/p.yaml:2:13: error: no preset named \"desktop\": presets are lists of names a sandbox may reach, and \"desktop\" is a profile: name it as the profile to start from, not as a preset"]
        );
    }

    #[test]
    fn an_unknown_preset_is_named_with_a_suggestion() {
        let dir = Dir::new(&[("p.yaml", "egress:\n  presets: [github, pipy]\n")]);
        assert_eq!(
            messages(&dir, "p.yaml"),
            ["DIR/p.yaml:2:21: error: no preset named \"pipy\" (did you mean \"pypi\"?); see `warden preset list`"]
        );
    }

    #[test]
    fn an_unknown_key_names_its_line_and_column() {
        let dir = Dir::new(&[("p.yaml", "name: x\nfilesystem:\n  worksapce: /tmp\n")]);
        let m = messages(&dir, "p.yaml");
        assert_eq!(m.len(), 1);
        assert!(
            m[0].starts_with(
                "DIR/p.yaml:3:3: error: unknown key `worksapce`; did you mean `workspace`?"
            ),
            "{m:?}"
        );
    }

    #[test]
    fn covered_and_duplicate_domains_are_warnings_naming_the_covering_entry() {
        let dir = Dir::new(&[(
            "p.yaml",
            "egress:\n  presets: [github]\n  domains:\n    - .github.com\n    - api.github.com\n    - x.example.com\n    - x.example.com\n",
        )]);
        let m = messages(&dir, "p.yaml");
        assert_eq!(
            m,
            [
                "DIR/p.yaml:2:13: warning: `github.com`, `api.github.com`, `uploads.github.com`, `codeload.github.com`, `gist.github.com` (from preset github) are covered by `.github.com` (DIR/p.yaml:4:7)",
                "DIR/p.yaml:5:7: warning: `api.github.com` is covered by `.github.com` (DIR/p.yaml:4:7)",
                "DIR/p.yaml:7:7: warning: `x.example.com` duplicates `x.example.com` (DIR/p.yaml:6:7)",
            ]
        );
    }

    #[test]
    fn a_malformed_domain_is_an_error_at_its_place() {
        let dir = Dir::new(&[("p.yaml", "egress:\n  domains:\n    - https://example.com\n")]);
        let m = messages(&dir, "p.yaml");
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with("DIR/p.yaml:3:7: error: egress.domains: \"https://example.com\": it looks like a URL"),
            "{m:?}"
        );
    }

    #[test]
    fn a_missing_path_is_an_error_at_its_place() {
        let dir = Dir::new(&[(
            "p.yaml",
            "filesystem:\n  read_only: [/nonexistent/warden-test]\n",
        )]);
        assert_eq!(
            messages(&dir, "p.yaml"),
            ["DIR/p.yaml:2:15: error: filesystem.read_only: /nonexistent/warden-test does not exist"]
        );
    }

    #[test]
    fn values_the_resolver_refuses_are_reported_where_written() {
        let dir = Dir::new(&[("p.yaml", "hostname: x\nresources:\n  memory: 1K\n")]);
        assert_eq!(
            messages(&dir, "p.yaml"),
            ["DIR/p.yaml:3:11: error: resources.memory: 1024 bytes is too small: a sandbox needs at least 16M"]
        );
        let dir = Dir::new(&[("p.yaml", "env:\n  set:\n    BAD-NAME: x\n")]);
        assert_eq!(
            messages(&dir, "p.yaml"),
            ["DIR/p.yaml:3:5: error: env.set: \"BAD-NAME\" is not a valid variable name: use letters, digits and '_', not starting with a digit"]
        );
    }

    /// The line of each key of a block-style YAML text, by its full key.
    fn key_lines(text: &str) -> Vec<(String, u64)> {
        let mut stack: Vec<(usize, String)> = Vec::new();
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let indent = line.len() - line.trim_start().len();
            let Some((name, _)) = line.trim_start().split_once(':') else {
                continue;
            };
            stack.retain(|(i, _)| *i < indent);
            stack.push((indent, name.to_string()));
            let key: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
            out.push((key.join("."), n as u64 + 1));
        }
        out
    }

    #[test]
    fn every_key_of_a_profile_reaches_its_own_field_from_its_own_line() {
        let text = r#"name: p
description: d
extends: []
command: [bash]
hostname: agent
isolation: vm
tty: true
allow_degraded: true
desktop: true
json_events: /tmp/e.jsonl
audit_log: /tmp/a.jsonl
no_audit_log: true
audit_budget: 64M
otlp_endpoint: http://127.0.0.1:4318
egress:
  presets: [pypi]
  domains: [a.example.com]
  allow_requests: ["GET a.example.com/x/**"]
  deny_requests: ["* a.example.com/x/y"]
  ask_requests: ["POST a.example.com/x/**"]
  allow_http: true
  hosts: { r.internal: 10.1.2.3 }
  allow_cidrs: [10.1.0.0/16]
  host_ports: [5432]
  secret_plain_ports: ["a.example.com:22"]
  publish: ["8080:80"]
  ask: true
  learn: false
  upstream_ca: [/etc/ca.pem]
  log: true
  idle_timeout: 5m
process:
  allow_exec: [/usr/bin/git]
  user: user
filesystem:
  workspace: /srv/ws
  workdir: /srv/ws/sub
  home: /home/user
  mode: overlay
  rootfs: /srv/root
  read_only: [/etc/r]
  read_write: [/var/w]
  volumes: ["/srv/v:/mnt/v:ro"]
  runs_on_host: [Makefile]
  caches: [pip]
  tmp_size: 512M
resources:
  memory: 4G
  cpus: 2
  pids: 512
  timeout: 2h
  open_files: 1024
  file_size: 1G
  disk: 2G
  egress_quota: 5G
env:
  pass: [TERM]
  set: { EDITOR: vi }
secrets:
  GH:
    from_env: GH
    hosts: [api.github.com]
    in_body: true
    allow: ["GET api.github.com/*"]
"#;
        let dir = Dir::new(&[("p.yaml", text)]);
        let c = compose(&catalog(), Some(&dir.path("p.yaml")), &Layer::default()).unwrap();
        assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
        assert_eq!(
            (c.name.as_deref(), c.description.as_deref()),
            (Some("p"), Some("d"))
        );
        let lines = key_lines(text);
        let line_of = |field: Field| {
            lines
                .iter()
                .find(|(k, _)| Field::from_profile_key(k) == Some(field))
                .map(|(_, n)| *n)
        };
        // The profile's own keys and presets go elsewhere than a field of
        // the layer (presets into `egress.domains`).
        let own = [
            Field::ProfileName,
            Field::Description,
            Field::Extends,
            Field::Presets,
        ];
        let from_preset = c.merged.list(Field::AllowDomain).iter().any(|s| {
            matches!(&s.origin, Origin::Preset { preset, pos, .. }
                if preset == "pypi" && Some(pos.line) == line_of(Field::Presets))
        });
        assert!(from_preset, "{:?}", c.merged.list(Field::AllowDomain));
        for info in crate::FIELDS {
            if info.profile_key.is_none() || own.contains(&info.field) {
                continue;
            }
            let written = match info.field {
                // A secret is where its name is written.
                Field::Secret => lines
                    .iter()
                    .find(|(k, _)| k == "secrets.GH")
                    .map(|(_, n)| *n),
                f => line_of(f),
            };
            let Some(written) = written else {
                panic!("{:?} is not in the test's profile", info.field);
            };
            let found: Vec<u64> = match c.merged.slots.get(&info.field) {
                Some(Slot::One(s)) => vec![&s.origin],
                Some(Slot::List(items)) => items.iter().map(|s| &s.origin).collect(),
                Some(Slot::Map(items)) => items.iter().map(|(_, s)| &s.origin).collect(),
                None => vec![],
            }
            .into_iter()
            .filter_map(|o| match o {
                Origin::File { pos, .. } => Some(pos.line),
                _ => None,
            })
            .collect();
            assert!(
                found.contains(&written),
                "{:?}: {found:?}, written on line {written}",
                info.field
            );
        }
    }

    #[test]
    fn a_bad_value_is_placed_through_its_field_in_a_profile_and_named_by_its_flag_on_the_command_line(
    ) {
        let dir = Dir::new(&[(
            "p.yaml",
            "egress:\n  domains: [a.example.com]\n  allow_cidrs:\n    - 10.0.0.0/8\n    - 10.1.2.3/40\nresources:\n  memory: 1K\n",
        )]);
        // In a profile: the entry's own line and column, and its key.
        let mut c = compose(&catalog(), Some(&dir.path("p.yaml")), &Layer::default()).unwrap();
        let e = resolved(&c.merged).unwrap_err();
        assert_eq!(e.field(), Some(Field::Memory));
        let (file, pos) = locate(&c.merged, &e)
            .place()
            .map(|(f, p)| (f.to_string(), p))
            .unwrap();
        assert_eq!(
            (file.as_str(), pos.line, pos.column),
            (dir.path("p.yaml").as_str(), 7, 11)
        );
        assert_eq!(
            e.describe_for_profile(),
            "resources.memory: 1024 bytes is too small: a sandbox needs at least 16M"
        );
        // What the resolver refuses is the resolver's to say.
        validate(&mut c);
        assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);

        let dir = Dir::new(&[(
            "p.yaml",
            "egress:\n  domains: [a.example.com]\n  allow_cidrs:\n    - 10.0.0.0/8\n    - 10.1.2.3/40\n",
        )]);
        let m = messages(&dir, "p.yaml");
        assert_eq!(
            m,
            ["DIR/p.yaml:5:7: error: egress.allow_cidrs: \"10.1.2.3/40\" must be an address range such as 10.1.0.0/16 or fd00::/8"]
        );

        // On the command line: the flag.
        let flags = cli(
            Some(&["true"]),
            &[
                (Field::AllowDomain, "a.example.com"),
                (Field::AllowCidr, "10.0.0.0/8"),
                (Field::AllowCidr, "10.1.2.3/40"),
            ],
        );
        let c = compose(&catalog(), None, &flags).unwrap();
        let e = resolved(&c.merged).unwrap_err();
        assert_eq!(e.field(), Some(Field::AllowCidr));
        assert_eq!(
            e.describe_for_cli(),
            "--allow-cidr \"10.1.2.3/40\" must be an address range such as 10.1.0.0/16 or fd00::/8"
        );
        assert_eq!(e.to_string(), e.describe_for_cli());
        assert_eq!(locate(&c.merged, &e), Origin::CommandLine);
        let flags = cli(Some(&["true"]), &[(Field::Memory, "1024")]);
        let c = compose(&catalog(), None, &flags).unwrap();
        let e = resolved(&c.merged).unwrap_err();
        assert_eq!(
            e.describe_for_cli(),
            "--memory 1024 bytes is too small: a sandbox needs at least 16M"
        );
    }

    #[test]
    fn a_secrets_file_is_found_like_every_other_path_of_a_profile() {
        let dir = Dir::new(&[(
            "p.yaml",
            "secrets:\n  A:\n    from_file: ~/.config/a\n    hosts: [a.test]\n  B:\n    from_file: b.token\n    hosts: [b.test]\n",
        )]);
        let c = compose(&catalog(), Some(&dir.path("p.yaml")), &Layer::default()).unwrap();
        assert!(c.diagnostics.is_empty(), "{:?}", c.diagnostics);
        let r = &c.merged;
        assert_eq!(
            r.pairs(Field::Secret),
            [
                "A=file:/home/alice/.config/a@a.test".to_string(),
                format!("B=file:{}@b.test", dir.0.join("b.token").display())
            ]
        );
        let doc = c.merged.document();
        assert_eq!(doc["secrets"]["A"]["from_file"], "/home/alice/.config/a");
        assert_eq!(doc["secrets"]["B"]["hosts"], serde_json::json!(["b.test"]));
    }

    #[test]
    fn show_puts_a_secrets_options_in_that_secret() {
        let dir = Dir::new(&[(
            "p.yaml",
            "secrets:\n  GH:\n    from_env: GH\n    hosts: [api.github.com]\n    in_body: true\n    allow: [\"GET api.github.com/*\", \"POST api.github.com/x\"]\n  NPM:\n    from_command: [pass, npm]\n    hosts: [registry.npmjs.org]\n    allow: [\"GET registry.npmjs.org/*\"]\n",
        )]);
        let c = compose(&catalog(), Some(&dir.path("p.yaml")), &Layer::default()).unwrap();
        let doc = c.merged.document();
        assert_eq!(
            doc["secrets"],
            serde_json::json!({
                "GH": {
                    "from_env": "GH",
                    "hosts": ["api.github.com"],
                    "in_body": true,
                    "allow": ["GET api.github.com/*", "POST api.github.com/x"],
                },
                "NPM": {
                    "from_command": ["pass", "npm"],
                    "hosts": ["registry.npmjs.org"],
                    "allow": ["GET registry.npmjs.org/*"],
                },
            })
        );
        // What `show` prints is a profile that reads back the same.
        let text = serde_json::to_string(&doc).unwrap();
        let again = Dir::new(&[("q.yaml", text.as_str())]);
        let c2 = compose(&catalog(), Some(&again.path("q.yaml")), &Layer::default()).unwrap();
        assert!(c2.diagnostics.is_empty(), "{:?}", c2.diagnostics);
        assert_eq!(c2.merged.document(), doc);
        let keys: Vec<String> = c.merged.entries().into_iter().map(|(k, _, _)| k).collect();
        assert_eq!(
            keys,
            [
                "secrets.GH",
                "secrets.NPM",
                "secrets.GH.in_body",
                "secrets.GH.allow[0]",
                "secrets.GH.allow[1]",
                "secrets.NPM.allow[0]",
            ]
        );
        let r = &c.merged;
        assert_eq!(r.names_set(Field::SecretInBody), ["GH"]);
        assert_eq!(r.texts(Field::SecretRule).len(), 3);
    }

    #[test]
    fn show_prints_a_profile_that_reads_back_as_the_same_profile() {
        for (name, _) in BUILTIN_PROFILES {
            let c = compose(&catalog(), Some(name), &Layer::default()).unwrap();
            let shown = c.show(&defaults());
            let text = serde_json::to_string(&shown).unwrap();
            let dir = Dir::new(&[("shown.yaml", text.as_str())]);
            let again =
                compose(&catalog(), Some(&dir.path("shown.yaml")), &Layer::default()).unwrap();
            assert!(
                again.diagnostics.is_empty(),
                "{name}: {:?}",
                again.diagnostics
            );
            assert_eq!(again.show(&defaults()), shown, "{name}");
        }
    }

    #[test]
    fn a_secret_error_is_placed_at_the_secret() {
        let dir = Dir::new(&[(
            "p.yaml",
            "hostname: x\nsecrets:\n  GH:\n    from_env: GH\n    from_file: /etc/hostname\n    hosts: [a.test]\n",
        )]);
        let m = messages(&dir, "p.yaml");
        assert_eq!(m.len(), 1, "{m:?}");
        // At the second source's own line, saying where the first is.
        assert!(
            m[0].starts_with("DIR/p.yaml:5:16: error: secret `GH` has a second source: `from_file` here and `from_env` at line 4"),
            "{m:?}"
        );
        let dir = Dir::new(&[(
            "p.yaml",
            "secrets:\n  GH:\n    from_env: GH\n    hosts: [api.github.com]\n    allow:\n      - GET api.github.com/*\n      - GET example.com/*\n",
        )]);
        let m = messages(&dir, "p.yaml");
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with(
                "DIR/p.yaml:7:9: error: secrets.*.allow: \"GET example.com/*\": example.com is not among the hosts of `secrets`"
            ),
            "{m:?}"
        );
    }

    #[test]
    fn type_errors_deep_in_the_tree_name_their_place() {
        let dir = Dir::new(&[(
            "p.yaml",
            "name: x\nresources:\n  memory: 4 GB\n  pids: -1\n",
        )]);
        let m = messages(&dir, "p.yaml");
        // Both, each at its own place, in one run.
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].starts_with("DIR/p.yaml:3:11: error: size \"4 GB\" is not valid"),
            "{m:?}"
        );
        assert!(m[1].starts_with("DIR/p.yaml:4:9: error: "), "{m:?}");
    }

    #[test]
    fn check_names_the_rule_that_allows_a_destination() {
        let c = compose(&catalog(), Some("feature-dev"), &Layer::default()).unwrap();
        let (rule, origin) = check(&c.merged, "api.github.com").unwrap().unwrap();
        assert_eq!(rule.source, "api.github.com");
        assert!(
            origin
                .to_string()
                .starts_with("preset github (builtin:feature-dev:"),
            "{origin}"
        );
        assert!(check(&c.merged, "api.github.com:22").unwrap().is_none());
        assert!(check(&c.merged, "evil.example").unwrap().is_none());
        assert!(check(&c.merged, "bad name").is_err());
    }

    #[test]
    fn show_fills_defaults_and_keeps_origins() {
        let c = compose(&catalog(), Some("researcher"), &Layer::default()).unwrap();
        let full = c.merged.with_defaults(&defaults());
        let doc = full.document();
        assert_eq!(doc["resources"]["timeout"], "2h");
        assert_eq!(doc["resources"]["memory"], "4G");
        assert_eq!(doc["hostname"], "warden");
        let entries = full.entries();
        let (_, _, origin) = entries
            .iter()
            .find(|(k, _, _)| k == "resources.memory")
            .unwrap();
        assert_eq!(**origin, Origin::Default);
        let (_, _, origin) = entries
            .iter()
            .find(|(k, _, _)| k == "resources.timeout")
            .unwrap();
        assert_eq!(origin.to_string(), "builtin:researcher:7:12");
    }

    #[test]
    fn a_user_preset_replaces_the_built_in_one() {
        let dir = Dir::new(&[]);
        std::fs::create_dir_all(dir.0.join("presets")).unwrap();
        std::fs::write(
            dir.0.join("presets/github.yaml"),
            "domains: [git.example.com]\n",
        )
        .unwrap();
        let cat = Catalog {
            home: None,
            config_dir: Some(dir.0.clone()),
        };
        let c = compose(&cat, Some("security"), &Layer::default()).unwrap();
        let r = &c.merged;
        assert!(r
            .texts(Field::AllowDomain)
            .contains(&"git.example.com".to_string()));
        assert!(!r
            .texts(Field::AllowDomain)
            .contains(&"api.github.com".to_string()));
        assert!(cat
            .preset_names()
            .iter()
            .any(|(n, l)| n == "github" && l.ends_with("github.yaml")));
    }

    #[test]
    fn the_committed_schema_is_the_generated_one() {
        let committed = include_str!("../../../schema/profile.schema.json");
        assert!(
            committed == crate::profile::profile_schema(),
            "schema/profile.schema.json is stale: regenerate it with `cargo run -p warden-cli -- profile schema > schema/profile.schema.json`"
        );
    }

    fn yaml_to_json(text: &str) -> serde_json::Value {
        serde_saphyr::from_str::<serde_json::Value>(text).unwrap()
    }

    #[test]
    fn the_schema_accepts_every_shipped_profile_and_rejects_a_broken_one() {
        let schema: serde_json::Value =
            serde_json::from_str(&crate::profile::profile_schema()).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        for (name, text) in BUILTIN_PROFILES {
            let doc = yaml_to_json(text);
            let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{name}: {errors:?}");
        }
        let example = "name: feature-dev\nextends: [base]\negress:\n  presets: [github]\n  domains: [.example.dev, \"git.example.com:22\"]\n  hosts: { registry.internal: 10.1.2.3 }\n  host_ports: [5432]\nfilesystem: { workspace: ~/src/project, mode: overlay, tmp_size: 512M }\nresources: { memory: 4G, cpus: 1.5, pids: 512, timeout: 2h, egress_quota: 5G }\nenv: { pass: [TERM], set: { EDITOR: vi } }\ncommand: [bash, -l]\n";
        assert!(validator.is_valid(&yaml_to_json(example)));
        for broken in [
            "egress:\n  domain: [a.example.com]\n",
            "resources: { memory: 4 GB }\n",
            "resources: { pids: -1 }\n",
            "filesystem: { mode: overlai }\n",
            "command: bash\n",
        ] {
            assert!(
                !validator.is_valid(&yaml_to_json(broken)),
                "{broken:?} was accepted"
            );
        }
    }
}

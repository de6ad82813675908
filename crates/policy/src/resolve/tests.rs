//! Resolution's own checks, each value given as a door gives it.

use super::*;
use crate::compose::{Origin, Val};
use crate::trust::Trust;
use crate::*;

fn defaults() -> Defaults {
    Defaults::for_host(HostFacts {
        total_memory: 8 * GIB,
        cpus: 2,
        pid_max: 1 << 22,
    })
}

/// The field and reason code of resolving `flags`, given at the command
/// line after a command, in `placement`: `None` when it resolves.
pub(super) fn refusal(
    flags: &[(Field, &str)],
    placement: &Placement,
) -> Option<(Field, &'static str)> {
    let mut layer = Layer::default();
    layer.add_one(
        Field::Command,
        Val::Argv(vec!["true".into()]),
        Origin::CommandLine,
    );
    for (field, text) in flags {
        layer
            .add_text(*field, text, Origin::CommandLine, Trust::Owner)
            .unwrap();
    }
    let e = layer.resolve(placement, &defaults(), &[]).err()?;
    Some((e.field()?, e.code()))
}

/// The field and problem of a failed resolution.
fn problem(r: Result<SandboxSpec, ResolveError>) -> Option<(Field, Problem)> {
    let e = r.err()?;
    Some((e.field()?, e.problem().clone()))
}

#[test]
fn a_system_directory_is_never_writable_and_a_project_below_home_is() {
    for dir in [
        "/etc",
        "/etc/ssh",
        "/usr",
        "/usr/lib",
        "/boot",
        "/var",
        "/var/lib",
        "/home",
        "/root",
        "/tmp/../etc/",
        "/./usr//bin",
    ] {
        let mut r = req(&["true"]);
        r.texts(Field::Rw, &[dir]);
        assert!(
            matches!(
                problem(r.resolve(&defaults(), &[])),
                Some((Field::Rw, Problem::ForbiddenPath { .. }))
            ),
            "writable {dir}"
        );
        let mut r = req(&["true"]);
        r.text(Field::Workspace, dir);
        assert!(
            matches!(
                problem(r.resolve(&defaults(), &[])),
                Some((Field::Workspace, Problem::ForbiddenPath { .. }))
            ),
            "-w {dir}"
        );
        // Read-only, they may be shown; all of /home would hide the
        // sandbox's own home, which is mounted there.
        let mut r = req(&["true"]);
        r.texts(Field::Ro, &[dir]);
        assert_eq!(
            r.resolve(&defaults(), &[]).is_ok(),
            dir != "/home",
            "read-only {dir}"
        );
    }
    for dir in [
        "/home/ann/project",
        "/var/lib/postgresql",
        "/srv/data",
        "/opt/tool/cache",
    ] {
        let mut r = req(&["true"]);
        r.texts(Field::Rw, &[dir]);
        assert!(r.resolve(&defaults(), &[]).is_ok(), "writable {dir}");
    }
}

#[test]
fn cpus_beyond_the_host_and_pids_beyond_the_kernel_are_refused_with_the_limit() {
    let mut r = req(&["true"]);
    r.set(Field::Cpus, Val::Cores(3.0));
    let e = r.resolve(&defaults(), &[]).unwrap_err();
    assert_eq!(e.field(), Some(Field::Cpus));
    assert!(e.to_string().contains("(2)"), "{e}");
    let mut r = req(&["true"]);
    r.set(Field::Cpus, Val::Cores(2.0));
    assert!(r.resolve(&defaults(), &[]).is_ok());
    let mut r = req(&["true"]);
    r.set(Field::Pids, Val::Count((1 << 22) + 1));
    let e = r.resolve(&defaults(), &[]).unwrap_err();
    assert_eq!(e.field(), Some(Field::Pids));
    assert!(e.to_string().contains("4194304"), "{e}");
}

#[test]
fn an_invalid_range_is_said_before_what_it_lacks() {
    let mut r = req(&["true"]);
    r.texts(Field::AllowCidr, &["10.0.0.0/33"]);
    assert!(matches!(
        problem(r.resolve(&defaults(), &[])),
        Some((Field::AllowCidr, Problem::BadCidr(_)))
    ));
}

/// A layer being filled, and the facts of warden's state it is
/// resolved with.
struct R {
    layer: Layer,
    placement: Placement,
}

impl R {
    /// Set a value: a field's one value, or an item of a list.
    fn set(&mut self, field: Field, val: Val) {
        match field.shape() {
            crate::fields::Shape::List => self.layer.add_item(field, val, Origin::CommandLine),
            _ => self.layer.add_one(field, val, Origin::CommandLine),
        }
    }
    /// Give a value as a flag gives it, the owner's.
    fn text(&mut self, field: Field, text: &str) {
        self.layer
            .add_text(field, text, Origin::CommandLine, Trust::Owner)
            .unwrap();
    }
    fn texts(&mut self, field: Field, texts: &[&str]) {
        for t in texts {
            self.text(field, t);
        }
    }
    /// Give a value as a caller's door gives it.
    fn caller(&mut self, field: Field, text: &str) {
        self.layer
            .add_text(field, text, Origin::CommandLine, Trust::Caller)
            .unwrap();
    }
    fn resolve(
        &self,
        defaults: &Defaults,
        env: &[(String, String)],
    ) -> Result<SandboxSpec, ResolveError> {
        self.layer.resolve(&self.placement, defaults, env)
    }
}

fn req(cmd: &[&str]) -> R {
    let mut layer = Layer::default();
    if !cmd.is_empty() {
        let argv = cmd.iter().map(|s| s.to_string()).collect();
        layer.add_one(Field::Command, Val::Argv(argv), Origin::CommandLine);
    }
    R {
        layer,
        placement: Placement::default(),
    }
}

fn size(bytes: u64) -> Val {
    Val::Size {
        bytes,
        text: bytes.to_string(),
    }
}

fn duration(duration: Duration) -> Val {
    Val::Duration {
        duration,
        text: format!("{duration:?}"),
    }
}

#[test]
fn a_request_without_limits_still_gets_limits() {
    let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
    assert_eq!(spec.resources.memory.value, 4 * GIB);
    assert!(!spec.resources.memory.explicit);
    assert_eq!(spec.resources.pids.value, 1024);
    assert_eq!(spec.resources.open_files, 4096);
}

#[test]
fn explicit_limits_are_marked_explicit() {
    let mut r = req(&["true"]);
    r.set(Field::Memory, size(64 * MIB));
    r.set(Field::Pids, Val::Count(32));
    let spec = r.resolve(&defaults(), &[]).unwrap();
    assert!(spec.resources.memory.explicit);
    assert_eq!(
        spec.resources.pids,
        Limit {
            value: 32,
            explicit: true
        }
    );
}

#[test]
fn an_empty_command_is_refused() {
    assert_eq!(
        req(&[]).resolve(&defaults(), &[]),
        Err(Field::Command.invalid(Problem::NoCommand))
    );
    assert_eq!(
        req(&[""]).resolve(&defaults(), &[]),
        Err(Field::Command.invalid(Problem::EmptyCommand))
    );
}

#[test]
fn a_nul_byte_in_an_argument_is_refused_at_the_command() {
    for argv in [&["sh\0x"][..], &["sh", "-c", "a\0b"][..]] {
        assert_eq!(
            req(argv).resolve(&defaults(), &[]),
            Err(Field::Command.invalid(Problem::NulInCommand)),
            "{argv:?}"
        );
    }
}

#[test]
fn globs_of_files_the_host_runs_reach_the_spec_and_bad_ones_are_refused() {
    let mut r = req(&["true"]);
    r.texts(Field::RunsOnHost, &["Makefile", "**/*.mk"]);
    let spec = r.resolve(&defaults(), &[]).unwrap();
    assert_eq!(spec.filesystem.runs_on_host, ["Makefile", "**/*.mk"]);
    for bad in ["", "/etc/Makefile", "../Makefile", "a/[b", "x**/y"] {
        let mut r = req(&["true"]);
        r.texts(Field::RunsOnHost, &[bad]);
        assert!(
            matches!(
                problem(r.resolve(&defaults(), &[])),
                Some((Field::RunsOnHost, Problem::BadGlob { .. }))
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn relative_and_root_paths_are_refused() {
    let mut r = req(&["true"]);
    r.text(Field::Workspace, "project");
    assert!(matches!(
        problem(r.resolve(&defaults(), &[])),
        Some((Field::Workspace, Problem::RelativePath(_)))
    ));
    let mut r = req(&["true"]);
    r.texts(Field::Rw, &["/"]);
    assert!(matches!(
        problem(r.resolve(&defaults(), &[])),
        Some((Field::Rw, Problem::ForbiddenPath { .. }))
    ));
    let mut r = req(&["true"]);
    r.texts(Field::Ro, &["/proc"]);
    assert!(matches!(
        problem(r.resolve(&defaults(), &[])),
        Some((Field::Ro, Problem::ForbiddenPath { .. }))
    ));
}

#[test]
fn impossible_limits_are_refused() {
    let mut r = req(&["true"]);
    r.set(Field::Pids, Val::Count(1));
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::Pids.invalid(Problem::PidsTooSmall(1)))
    );
    let mut r = req(&["true"]);
    r.set(Field::Cpus, Val::Cores(-1.0));
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::Cpus.invalid(Problem::BadCpus(-1.0)))
    );
    let mut r = req(&["true"]);
    r.set(Field::Timeout, duration(Duration::ZERO));
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::Timeout.invalid(Problem::ZeroTimeout))
    );
    let mut r = req(&["true"]);
    r.set(Field::Memory, size(1000));
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::Memory.invalid(Problem::MemoryTooSmall(1000)))
    );
}

#[test]
fn add_host_takes_both_the_equals_and_the_docker_form() {
    let mut r = req(&["true"]);
    r.texts(Field::AllowDomain, &["a.test"]);
    r.texts(
        Field::AddHost,
        &[
            "Reg.Internal=10.1.2.3",
            "db.internal:10.1.2.4",
            "v6.internal:::1",
            "br.internal=[fd00::1]",
        ],
    );
    let NetworkSpec::Egress(e) = r.resolve(&defaults(), &[]).unwrap().network else {
        panic!("no egress");
    };
    let hosts: Vec<String> = e.hosts.iter().map(|(n, ip)| format!("{n}={ip}")).collect();
    assert_eq!(
        hosts,
        [
            "reg.internal=10.1.2.3",
            "db.internal=10.1.2.4",
            "v6.internal=::1",
            "br.internal=fd00::1"
        ]
    );
    let mut r = req(&["true"]);
    r.texts(Field::AllowDomain, &["a.test"]);
    r.texts(Field::AddHost, &["nothing"]);
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::AddHost.invalid(Problem::BadAddHost("nothing".into())))
    );
}

#[test]
fn a_host_port_opens_egress_to_the_host_alias_on_that_port_only() {
    let mut r = req(&["true"]);
    r.set(Field::AllowHostPort, Val::Port(5432));
    r.set(Field::AllowHostPort, Val::Port(5432));
    let NetworkSpec::Egress(e) = r.resolve(&defaults(), &[]).unwrap().network else {
        panic!("no egress");
    };
    assert_eq!(e.host_ports, [5432]);
    assert_eq!(e.domains.len(), 1);
    assert_eq!(e.domains[0].name, HOST_ALIAS);
    assert_eq!(e.domains[0].port, Some(5432));
    let mut r = req(&["true"]);
    r.set(Field::AllowHostPort, Val::Port(0));
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::AllowHostPort.invalid(Problem::BadHostPort))
    );
}

#[test]
fn allow_cidr_never_names_a_range_that_holds_the_host() {
    for cidr in [
        "0.0.0.0/0",
        "::/0",
        "127.0.0.0/8",
        "0.0.0.0/8",
        "::ffff:0:0/96",
        "::ffff:127.0.0.1",
        "64:ff9b::/96",
        "2002::/16",
        "::1",
    ] {
        let mut r = req(&["true"]);
        r.texts(Field::AllowDomain, &["a.test"]);
        r.texts(Field::AllowCidr, &["10.0.0.0/8", cidr]);
        let e = r.resolve(&defaults(), &[]).unwrap_err();
        assert!(
            matches!(e.problem(), Problem::CidrCoversHost { cidr: c, .. } if c == cidr),
            "{cidr}: {e}"
        );
        assert_eq!(e.problem().entry().as_deref(), Some(cidr));
        assert!(
            e.to_string().contains(&Field::AllowHostPort.to_string()),
            "{e}"
        );
    }
}

#[test]
fn add_host_refuses_an_unspecified_address_but_keeps_an_explicit_loopback() {
    for entry in [
        "a.test=0.0.0.0",
        "a.test=::",
        "a.test=::ffff:0.0.0.0",
        "a.test=0.1.2.3",
    ] {
        let mut r = req(&["true"]);
        r.texts(Field::AllowDomain, &["a.test"]);
        r.texts(Field::AddHost, &[entry]);
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::AddHost.invalid(Problem::AddHostUnspecified(entry.into()))),
            "{entry}"
        );
    }
    let mut r = req(&["true"]);
    r.texts(Field::AllowDomain, &["a.test"]);
    r.texts(
        Field::AddHost,
        &["a.test=127.0.0.1", "b.test=::ffff:127.0.0.1"],
    );
    assert!(r.resolve(&defaults(), &[]).is_ok());
}

#[test]
fn cidrs_and_published_ports_are_checked() {
    let mut r = req(&["true"]);
    r.texts(Field::AllowDomain, &["a.test"]);
    r.texts(Field::AllowCidr, &["10.1.2.3/16", "fd00::1"]);
    let NetworkSpec::Egress(e) = r.resolve(&defaults(), &[]).unwrap().network else {
        panic!("no egress");
    };
    let cidrs: Vec<String> = e.cidrs.iter().map(|c| c.to_string()).collect();
    assert_eq!(cidrs, ["10.1.0.0/16", "fd00::1/128"]);
    let mut r = req(&["true"]);
    r.texts(Field::AllowDomain, &["a.test"]);
    r.texts(Field::AllowCidr, &["10.1.2.3/40"]);
    assert!(matches!(
        problem(r.resolve(&defaults(), &[])),
        Some((Field::AllowCidr, Problem::BadCidr(_)))
    ));
    let mut r = req(&["true"]);
    r.texts(Field::AllowCidr, &["10.0.0.0/8"]);
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::AllowCidr.invalid(Problem::EgressWithoutDomains))
    );

    let mut r = req(&["true"]);
    r.texts(Field::Publish, &["8080:3000", "9000"]);
    let spec = r.resolve(&defaults(), &[]).unwrap();
    assert_eq!(
        spec.publish,
        [
            PortMapping {
                host_port: 8080,
                sandbox_port: 3000
            },
            PortMapping {
                host_port: 9000,
                sandbox_port: 9000
            }
        ]
    );
    assert_eq!(spec.network, NetworkSpec::LoopbackOnly);
    for bad in ["0:80", "80:0", "a:b", "70000:1", "1:2:3"] {
        let mut r = req(&["true"]);
        r.texts(Field::Publish, &[bad]);
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::Publish.invalid(Problem::BadPublish(bad.into()))),
            "{bad}"
        );
    }
    let mut r = req(&["true"]);
    r.texts(Field::Publish, &["8080:1", "8080:2"]);
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::Publish.invalid(Problem::DuplicatePublish(8080)))
    );
}

#[test]
fn home_is_the_sandboxs_own_never_the_workspace() {
    let mut r = req(&["true"]);
    r.text(Field::Workspace, "/src/p");
    let spec = r.resolve(&defaults(), &[]).unwrap();
    assert!(spec.env.contains(&("HOME".into(), HOME_MOUNT.into())));
    assert_eq!(spec.filesystem.home, Home::Tmpfs);
    let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
    assert!(spec.env.contains(&("HOME".into(), HOME_MOUNT.into())));
    // A prepared root tree brings its own home: HOME stays as it was.
    let mut r = req(&["true"]);
    r.text(Field::Workspace, "/src/p");
    r.text(Field::Rootfs, "/srv/root");
    let spec = r.resolve(&defaults(), &[]).unwrap();
    assert!(spec.env.contains(&("HOME".into(), "/workspace".into())));
    assert_eq!(spec.filesystem.home, Home::None);
    for bad in ["/home", "/home/sandbox", "/home/sandbox/.cache"] {
        let mut r = req(&["true"]);
        r.texts(Field::Ro, &[bad]);
        let e = r.resolve(&defaults(), &[]).unwrap_err();
        assert!(
            matches!(e.problem(), Problem::ForbiddenPath { .. }),
            "{bad}"
        );
    }
}

#[test]
fn a_callers_secret_opens_its_hosts_as_a_callers_entries_and_the_owners_stay_the_owners() {
    let mut r = req(&["true"]);
    r.texts(Field::AllowDomain, &["api.example.com"]);
    // A pod's secrets are a caller's; the node's own, the owner's.
    r.caller(Field::Secret, "POD@internal.example:22");
    r.text(Field::Secret, "OWN@uploads.example.com");
    r.caller(Field::Secret, "BOTH@api.example.com");
    let spec = r.resolve(&defaults(), &[]).unwrap();
    let NetworkSpec::Egress(e) = &spec.network else {
        panic!("no egress");
    };
    let caller = |name: &str| {
        e.domains
            .iter()
            .find(|d| d.name == name)
            .map(|d| d.caller)
            .unwrap_or_else(|| panic!("{name} is not allowed"))
    };
    // A pod's secret host never uses the node owner's pins or ranges.
    assert!(caller("internal.example"));
    assert!(!caller("uploads.example.com"));
    // The owner allowed it already: the owner's.
    assert!(!caller("api.example.com"));
}

#[test]
fn a_secrets_hosts_are_allowed_and_its_tools_trust_the_sandbox_authority() {
    let mut r = req(&["true"]);
    r.texts(Field::AllowDomain, &["api.example.com"]);
    r.texts(
        Field::Secret,
        &["TOKEN@api.example.com,uploads.example.com"],
    );
    let spec = r.resolve(&defaults(), &[]).unwrap();
    let NetworkSpec::Egress(e) = &spec.network else {
        panic!("no egress");
    };
    let names: Vec<&str> = e.domains.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["api.example.com", "uploads.example.com"]);
    assert_eq!(e.secrets.len(), 1);
    assert!(spec
        .env
        .contains(&("SSL_CERT_FILE".into(), CA_BUNDLE_PATH.into())));
    assert!(!spec.env.iter().any(|(k, _)| k == "TOKEN"));
    let mut r = req(&["true"]);
    r.texts(Field::UpstreamCa, &["/etc/ca.pem"]);
    assert_eq!(
        r.resolve(&defaults(), &[]),
        Err(Field::UpstreamCa.invalid(Problem::EgressWithoutDomains))
    );
    let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
    assert!(!spec.env.iter().any(|(k, _)| k == "SSL_CERT_FILE"));
}

#[test]
fn disk_defaults_to_half_the_memory_within_the_state_free_space() {
    assert_eq!(limits::disk_limit(None, 4 * GIB, None).ok(), Some(2 * GIB));
    assert_eq!(
        limits::disk_limit(None, 4 * GIB, Some(GIB)).ok(),
        Some(GIB / 2)
    );
    assert_eq!(
        limits::disk_limit(None, 64 * MIB, None).ok(),
        Some(64 * MIB)
    );
    assert_eq!(
        limits::disk_limit(Some(MIB), 4 * GIB, Some(GIB)).ok(),
        Some(MIB)
    );
}

#[test]
fn disk_of_zero_above_memory_or_above_the_free_space_is_refused() {
    for (asked, free) in [(0, None), (5 * GIB, None), (2 * GIB, Some(GIB))] {
        assert!(
            limits::disk_limit(Some(asked), 4 * GIB, free).is_err(),
            "{asked}"
        );
    }
}

#[test]
fn a_callers_entry_reaches_public_addresses_only_and_the_owners_earlier_answers_are_the_owners() {
    let mut r = req(&["true"]);
    r.caller(Field::AllowDomain, "pod.test");
    r.text(Field::AllowDomain, "own.test");
    // A caller naming the owner's entry again does not take it over.
    r.caller(Field::AllowDomain, "own.test");
    r.placement.granted_domains = vec!["asked.test".into()];
    let NetworkSpec::Egress(e) = r.resolve(&defaults(), &[]).unwrap().network else {
        panic!("no egress");
    };
    let whose: Vec<(&str, bool)> = e
        .domains
        .iter()
        .map(|d| (d.name.as_str(), d.caller))
        .collect();
    assert_eq!(
        whose,
        [
            ("own.test", false),
            ("asked.test", false),
            ("pod.test", true)
        ]
    );
}

#[test]
fn a_home_elsewhere_and_a_user_name_reach_home_user_caches_and_binds() {
    let mut r = req(&["true"]);
    r.text(Field::HomeDir, "/home/user");
    r.text(Field::UserName, "user");
    r.texts(Field::Env, &["LOGNAME=mine"]);
    let spec = r.resolve(&defaults(), &[]).unwrap();
    assert_eq!(spec.filesystem.home_mount(), Path::new("/home/user"));
    assert_eq!(spec.user.as_deref(), Some("user"));
    assert!(spec.env.contains(&("HOME".into(), "/home/user".into())));
    assert!(spec.env.contains(&("USER".into(), "user".into())));
    assert!(spec.env.contains(&("LOGNAME".into(), "mine".into())));
    // A bind over the home moved is refused as over the default one.
    let mut r = req(&["true"]);
    r.text(Field::HomeDir, "/root");
    r.texts(Field::Rw, &["/root/x"]);
    assert!(matches!(
        problem(r.resolve(&defaults(), &[])),
        Some((Field::Rw, Problem::ForbiddenPath { .. }))
    ));
}

#[test]
fn a_home_outside_root_or_home_and_a_user_name_with_a_colon_are_refused() {
    for bad in [
        "/etc",
        "/home",
        "/home/",
        "/home/a/b",
        "/home/..",
        "home/user",
        "/tmp/h",
        "/workspace",
        "/home/a:b",
    ] {
        let mut r = req(&["true"]);
        r.text(Field::HomeDir, bad);
        assert_eq!(
            problem(r.resolve(&defaults(), &[])),
            Some((Field::HomeDir, Problem::BadHome(bad.into()))),
            "{bad}"
        );
    }
    for bad in ["root:x:0:0", "a\nb", "User", "", "1user", "a b"] {
        let mut r = req(&["true"]);
        r.text(Field::UserName, bad);
        assert_eq!(
            problem(r.resolve(&defaults(), &[])),
            Some((Field::UserName, Problem::BadUserName(bad.into()))),
            "{bad:?}"
        );
    }
    // A tree that brings its own home is not given one.
    let mut r = req(&["true"]);
    r.text(Field::Rootfs, "/srv/root");
    r.text(Field::UserName, "user");
    assert_eq!(
        problem(r.resolve(&defaults(), &[])),
        Some((Field::UserName, Problem::HomeWithoutMount))
    );
}

//! The comparison against the table: every field whose row says nothing
//! makes a running sandbox stale, and the rows that say otherwise do what
//! they say.

use super::*;
use crate::compose::{Layer, Origin, Val};
use crate::fields::Kind;
use crate::resolve::Placement;
use crate::trust::Trust;
use crate::{Defaults, HostFacts};

const GIB: u64 = 1 << 30;

fn defaults() -> Defaults {
    Defaults::for_host(HostFacts {
        total_memory: 8 * GIB,
        cpus: 2,
        pid_max: 1 << 22,
    })
}

/// A named sandbox's facts: a kept home (so it has a disk budget) and
/// `free` bytes of free space.
fn placement(free: u64) -> Placement {
    Placement {
        home_dir: Some("/var/lib/warden/sandboxes/sb-1/home".into()),
        disk_free: Some(free),
        ..Placement::default()
    }
}

/// The pool's layer: a command and one allowed name, the owner's.
fn base() -> Layer {
    let mut layer = Layer::default();
    layer.add_one(
        Field::Command,
        Val::Argv(vec!["true".into()]),
        Origin::CommandLine,
    );
    given(&mut layer, Field::AllowDomain, "base.test", Trust::Owner);
    layer
}

fn given(layer: &mut Layer, field: Field, text: &str, trust: Trust) {
    layer
        .add_text(field, text, Origin::CommandLine, trust)
        .unwrap();
}

fn spec(layer: &Layer, free: u64) -> SandboxSpec {
    layer.resolve(&placement(free), &defaults(), &[]).unwrap()
}

/// A value of `field` other than its default, as a door would give it.
fn sample(field: Field) -> &'static str {
    match field {
        Field::AllowDomain => "other.test",
        Field::Hostname | Field::UserName => "someone",
        Field::Isolation => "gvisor",
        Field::AllowExec => "/usr/bin/git",
        Field::AllowRequest | Field::DenyRequest | Field::AskRequest => "GET base.test/x/**",
        Field::AddHost => "pinned.test=10.1.2.3",
        Field::AllowCidr => "10.20.0.0/16",
        Field::Publish => "18080:8080",
        Field::Env => "SAMPLE=1",
        Field::PassEnv => "TERM",
        Field::Ro => "/srv/data",
        Field::Rw => "/srv/scratch",
        Field::Volumes => "/srv/data:/mnt/data",
        Field::RunsOnHost => "Makefile",
        Field::Caches => "pip",
        Field::Secret => "TOKEN=sample@api.base.test",
        Field::SecretRule => "GET api.base.test/**",
        Field::HomeDir => "/home/someone",
        Field::Workdir => "/srv",
        Field::Memory => "300M",
        Field::TmpSize => "65M",
        Field::Disk => "100M",
        Field::FileSize => "1G",
        Field::EgressQuota => "5G",
        Field::AuditBudget => "1M",
        Field::OpenFiles => "512",
        _ => match field.kind() {
            Kind::Bool | Kind::Switch => "true",
            Kind::Size => "123M",
            Kind::Duration => "17s",
            Kind::Count => "7",
            Kind::Cores => "0.5",
            Kind::Port => "5432",
            Kind::Path => "/srv/sample",
            _ => "sample",
        },
    }
}

#[test]
fn a_field_whose_row_says_nothing_makes_a_running_sandbox_stale_both_ways() {
    let have = spec(&base(), 64 * GIB);
    let mut judged = Vec::new();
    for row in FIELDS {
        let mut layer = base();
        if layer
            .add_text(
                row.field,
                sample(row.field),
                Origin::CommandLine,
                Trust::Owner,
            )
            .is_err()
        {
            continue;
        }
        let Ok(want) = layer.resolve(&placement(64 * GIB), &defaults(), &[]) else {
            continue;
        };
        if want == have {
            // Not a part of the spec (a door's own switch, a catalogue's
            // description, the sinks): nothing to compare.
            continue;
        }
        judged.push(row.field);
        let fits = (fit(&want, &have).is_some(), fit(&have, &want).is_some());
        match row.running {
            Running::Applied => assert_eq!(fits, (true, true), "{:?}", row.field),
            // Asked for, even a default-alike field is compared.
            Running::Stale | Running::DefaultAlike => {
                assert_eq!(fits, (false, false), "{:?} fits", row.field)
            }
        }
    }
    // The limits the pool's code never names are among them, and so is
    // the field it applies.
    for f in [
        Field::Memory,
        Field::Pids,
        Field::Cpus,
        Field::Timeout,
        Field::OpenFiles,
        Field::FileSize,
        Field::TmpSize,
        Field::EgressQuota,
        Field::EgressIdleTimeout,
        Field::AuditBudget,
        Field::Disk,
        Field::AllowHttp,
        Field::AddHost,
        Field::AllowCidr,
        Field::Hostname,
        Field::AllowExec,
        Field::Env,
        Field::Ro,
        Field::AllowDomain,
    ] {
        assert!(judged.contains(&f), "{f:?} was never judged: {judged:?}");
    }
}

#[test]
fn a_default_disk_of_another_size_still_fits_and_an_asked_one_does_not() {
    // The free space shrank by what the pool's own sandboxes took.
    let have = spec(&base(), 8 * GIB);
    let want = spec(&base(), GIB);
    assert_ne!(have.filesystem.disk, want.filesystem.disk);
    assert_eq!(
        fit(&want, &have),
        Some(AllowlistDelta::default()),
        "two defaults are the same choice"
    );
    let mut asked = base();
    given(&mut asked, Field::Disk, "100M", Trust::Owner);
    let asked = spec(&asked, GIB);
    assert_eq!(
        fit(&asked, &have),
        None,
        "an asked disk is compared as it is"
    );
    assert_eq!(fit(&have, &asked), None, "and made with one, as well");
}

#[test]
fn the_allowlist_difference_is_the_delta_and_a_callers_entry_is_not_the_owners() {
    let have = spec(&base(), 64 * GIB);
    // The claim drops the pool's name, and adds one of the owner's and
    // one of its own, and the pool's name again as the caller's.
    let mut layer = Layer::default();
    layer.add_one(
        Field::Command,
        Val::Argv(vec!["true".into()]),
        Origin::CommandLine,
    );
    given(&mut layer, Field::AllowDomain, "owner.test", Trust::Owner);
    given(&mut layer, Field::AllowDomain, "mine.test", Trust::Caller);
    let want = spec(&layer, 64 * GIB);
    assert_eq!(
        fit(&want, &have),
        Some(AllowlistDelta {
            allow: vec!["owner.test".into()],
            allow_by_caller: vec!["mine.test".into()],
            remove: vec!["base.test".into()],
        })
    );
    // The same name given by a caller is another entry: the owner's goes.
    let mut layer = Layer::default();
    layer.add_one(
        Field::Command,
        Val::Argv(vec!["true".into()]),
        Origin::CommandLine,
    );
    given(&mut layer, Field::AllowDomain, "base.test", Trust::Caller);
    let d = fit(&spec(&layer, 64 * GIB), &have).unwrap();
    assert_eq!(d.allow_by_caller, ["base.test"]);
    assert_eq!(d.remove, ["base.test"]);
    assert_eq!(fit(&have, &have), Some(AllowlistDelta::default()));
}

#[test]
fn no_names_at_all_is_another_network_not_an_allowlist_change() {
    let have = spec(&base(), 64 * GIB);
    let mut layer = Layer::default();
    layer.add_one(
        Field::Command,
        Val::Argv(vec!["true".into()]),
        Origin::CommandLine,
    );
    let want = spec(&layer, 64 * GIB);
    assert!(
        matches!(want.network, NetworkSpec::LoopbackOnly),
        "{:?}",
        want.network
    );
    assert_eq!(fit(&want, &have), None);
    assert_eq!(fit(&have, &want), None);
}

//! The profile a caller was given is the ceiling of every profile it names
//! beside it (outside review 32, F1): walked over the table's bounded
//! fields, its granting lists and every field that reaches the host, each
//! case generated from the field table, so a new row is covered here
//! without a new line.

use super::tests::{planted, Planted};
use super::*;
use crate::compose::{Catalog, ComposeError, Composed, SourceText};
use crate::fields::{Kind, Shape, FIELDS};
use serde_json::{json, Value};

/// A request's document, read as the API reads it (each value at its
/// JSON pointer).
fn compose_body(catalog: &Catalog, body: Value, trust: Trust) -> Result<Composed, ComposeError> {
    let src = SourceText {
        label: "request".into(),
        dir: None,
        text: String::new(),
        body: Some(body),
        trust,
    };
    crate::compose::compose_source(catalog, Some(src), &Default::default())?.into_valid()
}

/// `{"a": {"b": value}}` for the profile key `a.b` (a `*` segment is the
/// name `X`).
fn at_key(key: &str, value: Value) -> Value {
    key.rsplit('.').fold(value, |inner, part| {
        let name = if part == "*" { "X" } else { part };
        json!({ name: inner })
    })
}

/// Merge `b` into `a`, object by object.
fn merged(mut a: Value, b: Value) -> Value {
    if let (Value::Object(ma), Value::Object(mb)) = (&mut a, b.clone()) {
        for (k, v) in mb {
            let next = match ma.remove(&k) {
                Some(old) => merged(old, v),
                None => v,
            };
            ma.insert(k, next);
        }
        return a;
    }
    b
}

/// Write a profile of the owner's catalogue (JSON is YAML).
fn profile(p: &Planted, name: &str, doc: &Value) {
    std::fs::write(
        p.dir.join(format!("config/profiles/{name}.yaml")),
        doc.to_string(),
    )
    .unwrap();
}

/// `(the given profile's value, a looser one, a tighter one)` for a
/// bounded row, from its order and the field's kind.
fn bounded_values(field: Field, order: Tighter) -> (Value, Value, Value) {
    match order {
        Tighter::Lower => match field.kind() {
            Kind::Size => (json!("256M"), json!("4G"), json!("128M")),
            Kind::Count => (json!(32), json!(2000), json!(16)),
            Kind::Cores => (json!(1), json!(2), json!(0.5)),
            Kind::Duration => (json!("10m"), json!("8h"), json!("1m")),
            other => panic!("{field:?}: a limit of kind {other:?} has no values in this test"),
        },
        Tighter::Ranked(ranks) => {
            let (weak, strong) = (ranks[0], ranks[ranks.len() - 1]);
            (json!(strong), json!(weak), json!(strong))
        }
        Tighter::Off => (json!(false), json!(true), json!(false)),
    }
}

/// The diagnostics of a refused composition.
fn refused(e: &ComposeError) -> &[crate::compose::Diagnostic] {
    match e {
        ComposeError::Invalid(d) => d,
        other => panic!("not a refusal: {other}"),
    }
}

/// Was `e` refused `refusal` at `pointer`?
fn refused_at(e: &ComposeError, refusal: Refusal, pointer: &str) -> bool {
    refused(e)
        .iter()
        .any(|d| d.refusal == Some(refusal) && d.pointer.as_deref() == Some(pointer))
}

#[test]
fn a_profile_a_caller_names_beside_the_one_it_was_given_never_loosens_a_bounded_field() {
    let (p, catalog) = planted("given-bounded");
    for (field, order, why) in BOUNDED {
        let key = field.profile_name();
        let (given, looser, tighter) = bounded_values(*field, *order);
        profile(&p, "given", &at_key(key, given.clone()));
        profile(&p, "loose", &at_key(key, looser.clone()));
        profile(&p, "tight", &at_key(key, tighter.clone()));
        // Deeper: a profile of the owner's that extends the loose one.
        profile(&p, "deep", &json!({ "extends": ["loose"] }));
        for chosen in ["loose", "deep"] {
            let body = json!({ "extends": ["given", chosen] });
            let e = compose_body(&catalog, body.clone(), Trust::Caller).expect_err(&format!(
                "{key}: {chosen} ({looser}) beside the given {given} ({why})"
            ));
            assert!(
                refused_at(&e, Refusal::Loosens, "/extends/1"),
                "{key} {chosen}: {:?}",
                refused(&e)
            );
            // Before the given one, it is overridden, never a ceiling.
            let e = compose_body(
                &catalog,
                json!({ "extends": ["given", "tight", chosen] }),
                Trust::Caller,
            )
            .expect_err(&format!("{key}: {chosen} after a tighter one"));
            assert!(refused_at(&e, Refusal::Loosens, "/extends/2"), "{key}: {e}");
            // The owner's own composition is the owner's.
            compose_body(&catalog, body, Trust::Owner)
                .unwrap_or_else(|e| panic!("{key}: the owner's {chosen}: {e}"));
        }
        // A tighter or equal profile beside the given one composes and
        // tightens.
        for chosen in ["tight", "given"] {
            let c = compose_body(
                &catalog,
                json!({ "extends": ["given", chosen] }),
                Trust::Caller,
            )
            .unwrap_or_else(|e| panic!("{key}: {chosen} beside the given one: {e}"));
            assert!(c.merged.slots.contains_key(field), "{key}");
        }
        // The caller's own value is held to the given profile, not to one
        // it named beside it.
        let own = merged(
            json!({ "extends": ["given", "tight"] }),
            at_key(key, looser.clone()),
        );
        let e = compose_body(&catalog, own, Trust::Caller)
            .expect_err(&format!("{key}: the caller's own {looser}"));
        assert_eq!(e.refusal(), Some(Refusal::Loosens), "{key}: {e}");
    }
}

/// A value of `field` for the samples below, by its kind and shape (a
/// map whose key names its entry, `secrets.*.allow`, takes the entry's).
fn sample(field: Field) -> Value {
    let one = match field.kind() {
        Kind::Bool | Kind::Switch => json!(true),
        Kind::Path => json!("/srv/elsewhere"),
        Kind::Port => json!(2222),
        Kind::Size => json!("1M"),
        Kind::Count => json!(7),
        Kind::Cores => json!(1),
        Kind::Duration => json!("1m"),
        Kind::Argv => json!(["/bin/true"]),
        Kind::Mode => json!("direct"),
        Kind::Secret => json!({ "from_env": "HOME", "hosts": ["api.test"] }),
        Kind::Text => json!("10.9.8.0/24"),
    };
    match field.shape() {
        Shape::One => one,
        Shape::List => json!([one]),
        Shape::Map if field.profile_name().contains('*') => one,
        Shape::Map => json!({ "X": one }),
    }
}

#[test]
fn a_profile_a_caller_names_beside_the_one_it_was_given_adds_nothing_that_reaches_the_host() {
    let (p, catalog) = planted("given-host");
    // The given profile holds host-reach values of its own, which are the
    // owner's to combine and stay as they are.
    let given = json!({
        "egress": { "domains": ["api.test"], "hosts": { "api.test": "127.0.0.1" } },
        "secrets": { "API_TOKEN": { "from_env": "HOME", "hosts": ["api.test"] } },
        "resources": { "memory": "256M" }
    });
    profile(&p, "given", &given);
    let mut walked = 0;
    for info in FIELDS.iter().filter(|i| i.reach == Reach::Host) {
        let Some(key) = info.profile_key else {
            continue;
        };
        let doc = at_key(key, sample(info.field));
        profile(&p, "other", &doc);
        let body = json!({ "extends": ["given", "other"] });
        let e = compose_body(&catalog, body.clone(), Trust::Caller).expect_err(&format!(
            "{key}: another profile's {doc} beside the given one"
        ));
        assert!(
            refused_at(&e, Refusal::OwnerOnly, "/extends/1"),
            "{key}: {:?}",
            refused(&e)
        );
        // The owner combines the owner's profiles at will.
        compose_body(&catalog, body, Trust::Owner)
            .unwrap_or_else(|e| panic!("{key}: the owner's composition: {e}"));
        walked += 1;
    }
    assert!(walked > 10, "only {walked} host-reach fields walked");
    // A profile of the owner's that builds on the given one, with its
    // host-reach values as they are, and tightens: composes, the given
    // profile's pin and secret kept as the owner's.
    profile(
        &p,
        "narrower",
        &json!({ "extends": ["given"], "resources": { "memory": "128M" } }),
    );
    let c = compose_body(
        &catalog,
        json!({ "extends": ["given", "narrower"] }),
        Trust::Caller,
    )
    .unwrap_or_else(|e| panic!("a narrower profile on the given one: {e}"));
    assert_eq!(c.merged.bytes(Field::Memory), Some(128 << 20));
    let pins = c.merged.map(Field::AddHost);
    assert!(
        pins.iter().all(|(_, s)| s.trust == Trust::Owner) && pins.len() == 1,
        "{pins:?}"
    );
}

#[test]
fn a_caller_combines_no_secret_of_one_owners_profile_with_a_pin_of_another() {
    let (p, catalog) = planted("given-combine");
    profile(
        &p,
        "ownerh",
        &json!({
            "egress": { "domains": ["api.test"], "allow_requests": ["GET api.test/public/**"] },
            "secrets": { "API_TOKEN": { "from_env": "HOME", "hosts": ["api.test"] } }
        }),
    );
    profile(
        &p,
        "mocktest",
        &json!({ "egress": { "domains": ["api.test"], "hosts": { "api.test": "127.0.0.1" } } }),
    );
    for body in [
        json!({ "extends": ["ownerh", "mocktest"] }),
        json!({ "extends": ["mocktest", "ownerh"] }),
    ] {
        let e = compose_body(&catalog, body.clone(), Trust::Caller)
            .expect_err(&format!("{body}: a secret and a pin of two profiles"));
        assert!(
            refused_at(&e, Refusal::OwnerOnly, "/extends/1"),
            "{body}: {e}"
        );
        compose_body(&catalog, body, Trust::Owner).unwrap();
    }
}

#[test]
fn a_profile_a_caller_names_beside_the_given_one_is_held_on_every_granting_list() {
    let (p, catalog) = planted("given-lists");
    std::fs::write(
        p.dir.join("config/presets/wide.yaml"),
        "domains: [api.test]\nallow_requests: [\"* api.test/**\"]\n",
    )
    .unwrap();
    for (field, cap) in GRANTING {
        let key = field.profile_name();
        // (the given profile, one that loosens it, one that keeps to it)
        let (given, looser, within) = match cap {
            Cap::Ceiling => (
                at_key(key, json!(["git"])),
                at_key(key, json!(["git", "curl"])),
                at_key(key, json!(["git"])),
            ),
            Cap::WithinOwners => (
                json!({ "egress": { "domains": ["api.test"], "allow_requests": ["GET api.test/public/**"] } }),
                at_key(key, json!(["* api.test/**"])),
                at_key(key, json!(["GET api.test/public/docs/**"])),
            ),
            // A name another profile allows comes in as the caller's own
            // (public addresses only, rule 3), not as the owner's.
            Cap::CallerTrust => {
                profile(&p, "given", &json!({ "resources": { "memory": "1G" } }));
                profile(&p, "other", &at_key(key, json!(["wild.test"])));
                let c = compose_body(
                    &catalog,
                    json!({ "extends": ["given", "other"] }),
                    Trust::Caller,
                )
                .unwrap_or_else(|e| panic!("{key}: {e}"));
                let got = c.merged.list(*field);
                assert!(
                    got.iter().all(|s| s.trust == Trust::Caller) && !got.is_empty(),
                    "{key}: {got:?}"
                );
                continue;
            }
            Cap::Catalog => (
                json!({ "egress": { "domains": ["api.test"], "allow_requests": ["GET api.test/public/**"] } }),
                match field {
                    Field::Extends => json!({ "extends": ["wider"] }),
                    _ => at_key(key, json!(["wide"])),
                },
                json!({ "extends": ["given"] }),
            ),
            // Walked with every other host-reach field above.
            Cap::OwnerOnly => continue,
        };
        profile(&p, "given", &given);
        profile(
            &p,
            "wider",
            &json!({ "egress": { "allow_http": true, "allow_requests": ["* api.test/**"] } }),
        );
        profile(&p, "other", &looser);
        let e = compose_body(
            &catalog,
            json!({ "extends": ["given", "other"] }),
            Trust::Caller,
        )
        .expect_err(&format!("{key}: {looser} beside {given}"));
        assert!(
            refused_at(&e, Refusal::Loosens, "/extends/1"),
            "{key}: {:?}",
            refused(&e)
        );
        profile(&p, "other", &within);
        compose_body(
            &catalog,
            json!({ "extends": ["given", "other"] }),
            Trust::Caller,
        )
        .unwrap_or_else(|e| panic!("{key}: {within} beside {given}: {e}"));
    }
}

#[test]
fn a_shipped_profile_named_beside_the_given_one_raises_no_limit_and_composes_where_it_tightens() {
    let (p, catalog) = planted("given-shipped");
    profile(&p, "ten", &json!({ "resources": { "timeout": "10m" } }));
    let e = compose_body(
        &catalog,
        json!({ "extends": ["ten", "base"] }),
        Trust::Caller,
    )
    .expect_err("base's 8h over a profile of 10m");
    assert!(refused_at(&e, Refusal::Loosens, "/extends/1"), "{e}");
    // Over a profile that bounds none of base's values, base composes.
    profile(&p, "open", &json!({ "hostname": "box" }));
    let c = compose_body(
        &catalog,
        json!({ "extends": ["open", "base"] }),
        Trust::Caller,
    )
    .unwrap_or_else(|e| panic!("base beside a profile it does not loosen: {e}"));
    assert_eq!(c.name.as_deref(), Some("open"));
}

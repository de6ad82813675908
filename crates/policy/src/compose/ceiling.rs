//! The owner's profile as a ceiling (rule 4 of docs/threat-model.md): what
//! a caller chose is held to the profile it was given, and never reaches
//! above it.
//!
//! **The given profile.** A caller's document (a token's request, the
//! document a door makes of a caller's named profile, `{"extends":
//! [NAME]}`) names the profile it was given first in its `extends`: the
//! daemon puts the request's `profile` there, the E2B door its template,
//! MCP its `profile`. That first entry, with everything it extends, is the
//! ceiling. (Its name is also what the composition is called:
//! [`super::compose_source`].)
//!
//! **What the caller chose.** Every further entry of the caller's
//! `extends`, with everything it extends at any depth, is the caller's
//! choice even though each file is the owner's, and is held to the given
//! profile as the caller's own values are (option (a) of outside review
//! 32, F1; taking the meet of every profile named, option (b), would need
//! a meet for every kind of value, where holding needs only the rules
//! that already hold a caller's own document):
//!
//! - a bounded value no looser ([`trust::may_replace`]), a narrowing list
//!   within the given one ([`trust::may_add`]), request rules within the
//!   given profile's for the same destination ([`trust::may_add_request`]),
//!   each refused [`Refusal::Loosens`] at the `extends` entry;
//! - nothing that reaches the host the given profile does not hold
//!   already, as it holds it: a secret, pin, range, port, bind, CA, cache
//!   or variable of another profile of the owner's is refused
//!   [`Refusal::OwnerOnly`] at the entry, so a caller cannot combine the
//!   owner's host-reach values of two profiles (a secret of one, a pin of
//!   its host of another). What equals the given profile's adds nothing
//!   and is left out, so a profile built on the given one still composes;
//! - what is left is given the caller's trust, as if the caller had
//!   written it: its names reach public addresses only (rule 3), and a
//!   later value of the caller's is held to the given profile, not to it.
//!
//! The owner's own composition (the command line, the owner's socket) is
//! never held here.

use super::{Layer, Loader, Origin, Slot, Sourced, Val};
use crate::fields::Field;
use crate::layer::Trust;
use crate::read::Place;
use crate::trust::{self, Refusal};

/// Where a value was given: its pointer in a request's body, else its
/// line in a file.
fn place_of(s: &Sourced) -> Place {
    match &s.origin {
        Origin::Body { pointer, .. } => Place::Pointer(pointer.clone()),
        o => Place::Line(o.place().map(|(_, p)| p).unwrap_or_default()),
    }
}

impl Loader<'_> {
    /// The ceiling a caller's values are held to: the profile the caller
    /// was given when its document named one, else every source read so
    /// far (the owner's profile a pod's annotations come in beside).
    fn ceiling(&self) -> Layer {
        if let Some(given) = &self.given {
            return given.clone();
        }
        let mut owners = Layer::default();
        for (_, l) in &self.out.sources {
            owners.merge(l);
        }
        owners
    }

    /// The `index`th profile of a caller's `extends` has been read, as the
    /// sources from `first_source` on: the first is the given profile, and
    /// becomes the ceiling; any other is the caller's choice, held to it
    /// at `place` (the entry's place in the caller's document).
    pub(super) fn caller_named(
        &mut self,
        index: usize,
        first_source: usize,
        label: &str,
        place: &Place,
    ) {
        if index == 0 {
            let mut given = Layer::default();
            for (_, l) in &self.out.sources[first_source..] {
                given.merge(l);
            }
            self.given = Some(given);
            return;
        }
        let ceiling = self.given.clone().unwrap_or_default();
        let mut chosen = self.out.sources.split_off(first_source);
        for (_, layer) in &mut chosen {
            self.hold_reach_to_given(layer, &ceiling, label, place);
            self.hold_to_ceiling(&ceiling, layer, label, &|_| true, &|_| place.clone());
            layer.given_by(Trust::Caller);
        }
        self.out.sources.extend(chosen);
    }

    /// A chosen profile's values that reach the host are taken out of it:
    /// those the given profile holds as they are add nothing (and stay
    /// the given profile's, with the owner's trust); any other is refused.
    fn hold_reach_to_given(
        &mut self,
        layer: &mut Layer,
        given: &Layer,
        label: &str,
        place: &Place,
    ) {
        let reaching: Vec<Field> = layer
            .slots
            .keys()
            .copied()
            .filter(|f| trust::may_set(*f, Trust::Caller).is_err())
            .collect();
        for field in reaching {
            let Some(slot) = layer.slots.remove(&field) else {
                continue;
            };
            let adds = match (slot, given.slots.get(&field)) {
                (Slot::One(s), Some(Slot::One(g))) => s.val != g.val,
                (Slot::One(_), _) => true,
                (Slot::List(items), g) => {
                    let held: Vec<&Val> = match g {
                        Some(Slot::List(g)) => g.iter().map(|g| &g.val).collect(),
                        _ => Vec::new(),
                    };
                    items.iter().any(|s| !held.contains(&&s.val))
                }
                (Slot::Map(items), g) => {
                    let held: &[(String, Sourced)] = match g {
                        Some(Slot::Map(g)) => g,
                        _ => &[],
                    };
                    !items
                        .iter()
                        .all(|(k, s)| held.iter().any(|(gk, g)| gk == k && g.val == s.val))
                }
            };
            if adds {
                self.refuse(field, label, place, Refusal::OwnerOnly);
            }
        }
    }

    /// A caller's values over what the owner's files set for the same
    /// field: only tighter ([`trust::may_replace`]). The ceiling is the
    /// profile the caller was given ([`Loader::ceiling`]). `checked`
    /// picks the values to hold (a door's layer holds the owner's command
    /// line beside a caller's annotations).
    pub(super) fn hold_to_owners_ceiling(
        &mut self,
        layer: &Layer,
        label: &str,
        checked: impl Fn(&Sourced) -> bool,
    ) {
        let ceiling = self.ceiling();
        self.hold_to_ceiling(&ceiling, layer, label, &checked, &place_of);
    }

    /// [`Loader::hold_to_owners_ceiling`] against `ceiling`, each refusal
    /// said at `at` of the value refused.
    fn hold_to_ceiling(
        &mut self,
        ceiling: &Layer,
        layer: &Layer,
        label: &str,
        checked: &dyn Fn(&Sourced) -> bool,
        at: &dyn Fn(&Sourced) -> Place,
    ) {
        for (field, slot) in &layer.slots {
            if let (Slot::List(theirs), true) = (slot, trust::within_owners(*field)) {
                self.hold_request_rules(ceiling, *field, theirs, label, checked, at);
                continue;
            }
            if let (Slot::List(theirs), Some(Slot::List(mine))) = (slot, ceiling.slots.get(field)) {
                let mine: Vec<&Val> = mine
                    .iter()
                    .filter(|m| m.trust == Trust::Owner)
                    .map(|m| &m.val)
                    .collect();
                for t in theirs.iter().filter(|t| checked(t)) {
                    if let Err(refusal) = trust::may_add(*field, &mine, &t.val) {
                        self.refuse(*field, label, &at(t), refusal);
                    }
                }
                continue;
            }
            let (Slot::One(theirs), Some(Slot::One(mine))) = (slot, ceiling.slots.get(field))
            else {
                continue;
            };
            if !checked(theirs) || mine.trust != Trust::Owner {
                continue;
            }
            if let Err(refusal) = trust::may_replace(*field, &mine.val, &theirs.val) {
                self.refuse(*field, label, &at(theirs), refusal);
            }
        }
    }

    /// A caller's allow and ask request rules, held under the owner's
    /// (both kinds: an ask may become an allow) and off the names the
    /// owner pinned ([`trust::may_add_request`]).
    fn hold_request_rules(
        &mut self,
        owners: &Layer,
        field: Field,
        theirs: &[Sourced],
        label: &str,
        checked: &dyn Fn(&Sourced) -> bool,
        at: &dyn Fn(&Sourced) -> Place,
    ) {
        let mut rules: Vec<&Val> = Vec::new();
        for f in [Field::AllowRequest, Field::AskRequest] {
            if let Some(Slot::List(l)) = owners.slots.get(&f) {
                rules.extend(l.iter().filter(|m| m.trust == Trust::Owner).map(|m| &m.val));
            }
        }
        let pinned: Vec<&str> = match owners.slots.get(&Field::AddHost) {
            Some(Slot::Map(m)) => m
                .iter()
                .filter(|(_, v)| v.trust == Trust::Owner)
                .map(|(k, _)| k.as_str())
                .collect(),
            _ => Vec::new(),
        };
        for t in theirs.iter().filter(|t| checked(t)) {
            if let Err(refusal) = trust::may_add_request(&t.val, &rules, &pinned) {
                self.refuse(field, label, &at(t), refusal);
            }
        }
    }
}

//! The doors an option may come through (the command line, a profile file,
//! an API request's body): the `doors:` cell of a row ([`Doors`]), and how
//! each door words a field named in a message below the doors ([`word`]).
//!
//! This file never decides whether a caller may set a field (the trust
//! rule does, in [`crate::trust`]) and keeps no door's own spelling: each
//! is read from the field's row.

use super::Field;

/// A set of [`Door`]s: the `doors:` cell of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Doors(u8);

impl Doors {
    /// Every door: what a row without a `doors:` cell gets.
    pub const ALL: Doors = Doors::of(&[Door::Cli, Door::Profile, Door::Api]);

    /// The set of `doors`.
    pub const fn of(doors: &[Door]) -> Doors {
        let mut bits = 0u8;
        let mut i = 0;
        while i < doors.len() {
            bits |= doors[i].bit();
            i += 1;
        }
        Doors(bits)
    }

    /// Does the set hold `door`?
    pub const fn allows(self, door: Door) -> bool {
        self.0 & door.bit() != 0
    }

    /// The doors of the set, in the table's order.
    pub fn iter(self) -> impl Iterator<Item = Door> {
        [Door::Cli, Door::Profile, Door::Api]
            .into_iter()
            .filter(move |d| self.allows(*d))
    }
}

/// How a door names options in a message. Below the doors a message names
/// another option by its profile key in backticks (`` `resources.disk` ``),
/// the one spelling every door can read; each door words it for its own
/// user with [`word`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// The command line: `--disk`.
    Cli,
    /// A profile file: `resources.disk` (as written below the doors).
    Profile,
    /// The API's body: `/resources/disk`.
    Api,
}

impl Door {
    const fn bit(self) -> u8 {
        match self {
            Door::Cli => 1,
            Door::Profile => 2,
            Door::Api => 4,
        }
    }

    /// Where a value is given through this door, for a message saying
    /// where else to give it.
    pub const fn where_given(self) -> &'static str {
        match self {
            Door::Cli => "on warden's command line",
            Door::Profile => "in a profile file",
            Door::Api => "in an API request",
        }
    }
}

/// `text` with every `` `KEY` `` that is a field's profile key worded for
/// `door`: the flag on the command line (the key stays when the field has
/// no flag), the key in a profile, the JSON pointer in the API.
pub fn word(text: &str, door: Door) -> String {
    if door == Door::Profile {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('`') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        // `KEY` alone, or `KEY VALUE` (`resources.disk 2G`).
        let (key, tail) = match inner.split_once(' ') {
            Some((k, t)) => (k, Some(t)),
            None => (inner, None),
        };
        let worded = Field::from_profile_key(key).and_then(|f| match door {
            Door::Cli => f.flag().map(str::to_string),
            Door::Api => f.json_path().map(str::to_string),
            Door::Profile => None,
        });
        match worded {
            Some(w) => {
                out.push('`');
                out.push_str(&w);
                if let Some(t) = tail {
                    out.push(' ');
                    out.push_str(t);
                }
                out.push('`');
            }
            None => {
                out.push('`');
                out.push_str(inner);
                out.push('`');
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::FIELDS;

    /// Where a sandbox's events go is its runner's to decide: the person
    /// at the command line or in their profile files, never a request to
    /// the daemon (which keeps each sandbox's audit log itself). Every
    /// other field is any door's that spells it.
    #[test]
    fn the_doors_column_keeps_where_events_go_out_of_api_requests_and_only_that() {
        let sinks = [
            Field::AuditLog,
            Field::NoAuditLog,
            Field::JsonEvents,
            Field::OtlpEndpoint,
        ];
        for i in FIELDS {
            let over_api = i.field.settable_by(Door::Api);
            assert_eq!(
                over_api,
                i.json_path.is_some() && !sinks.contains(&i.field),
                "{:?}",
                i.field
            );
            assert_eq!(
                i.field.settable_by(Door::Cli),
                i.flag.is_some(),
                "{:?}",
                i.field
            );
            assert_eq!(
                i.field.settable_by(Door::Profile),
                i.profile_key.is_some(),
                "{:?}",
                i.field
            );
            // A pod's author is a request's author too.
            if i.annotation.is_some() {
                assert!(i.doors.allows(Door::Api), "{:?}", i.field);
            }
        }
        assert_eq!(
            Doors::of(&[Door::Cli, Door::Profile])
                .iter()
                .collect::<Vec<_>>(),
            [Door::Cli, Door::Profile]
        );
    }

    #[test]
    fn a_key_in_a_message_is_worded_for_each_door() {
        let text = "lower `resources.disk` or raise `resources.memory 4G`; see `warden doctor`";
        assert_eq!(
            word(text, Door::Cli),
            "lower `--disk` or raise `--memory 4G`; see `warden doctor`"
        );
        assert_eq!(
            word(text, Door::Api),
            "lower `/resources/disk` or raise `/resources/memory 4G`; see `warden doctor`"
        );
        assert_eq!(word(text, Door::Profile), text);
        assert_eq!(word("a ` alone", Door::Cli), "a ` alone");
        assert_eq!(
            word("`filesystem.runs_on_host`", Door::Cli),
            "`filesystem.runs_on_host`"
        );
    }
}

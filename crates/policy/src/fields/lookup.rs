//! What a field says of itself, read from its row ([`Field::info`] and
//! one accessor per cell), and the field a door's spelling names: a flag,
//! a profile key or JSON pointer (`*` matching any name), an annotation.
//!
//! This file holds no row and reads no value: the table is [`super`]'s,
//! a value is read by its kind ([`crate::layer`], [`crate::read`]).

use std::fmt;

use super::columns::{FieldInfo, Kind, Reach, Running, Shape};
use super::door::{Door, Doors};
use super::{Field, FIELDS};

impl Field {
    /// Every field, in the table's order.
    pub fn all() -> impl Iterator<Item = Field> {
        FIELDS.iter().map(|i| i.field)
    }

    /// This field's row of [`FIELDS`].
    pub const fn info(self) -> &'static FieldInfo {
        // The macro writes the enum and the table from one list, so a
        // variant's discriminant is its row (a test checks it too).
        &FIELDS[self as usize]
    }

    /// The long flag of `warden run`, e.g. `--memory`.
    pub const fn flag(self) -> Option<&'static str> {
        self.info().flag
    }

    /// The long flag without its dashes (`memory`), as clap's `long` takes it.
    pub const fn long(self) -> Option<&'static str> {
        match self.info().flag {
            Some(f) => match f.as_bytes().split_first_chunk::<2>() {
                Some((_, rest)) => match std::str::from_utf8(rest) {
                    Ok(s) => Some(s),
                    Err(_) => None,
                },
                None => None,
            },
            None => None,
        }
    }

    /// The one-letter flag, e.g. `w` for `-w`.
    pub const fn short(self) -> Option<char> {
        self.info().short
    }

    /// The key in a profile file, e.g. `resources.memory`.
    pub const fn profile_key(self) -> Option<&'static str> {
        self.info().profile_key
    }

    /// The JSON pointer in the API's request body, e.g. `/resources/memory`.
    pub const fn json_path(self) -> Option<&'static str> {
        self.info().json_path
    }

    /// The container annotation a pod's author sets it with, e.g.
    /// `warden.dev/egress`.
    pub const fn annotation(self) -> Option<&'static str> {
        self.info().annotation
    }

    /// The kind of value, e.g. "size".
    pub const fn ty(self) -> &'static str {
        self.info().ty
    }

    /// One line: what the field does.
    pub const fn doc(self) -> &'static str {
        self.info().doc
    }

    /// The doors through which it may be set (the `doors:` cell).
    pub const fn doors(self) -> Doors {
        self.info().doors
    }

    /// May `door` set this field: does the row let it, and does the door
    /// have a spelling for it (a flag, a profile key or JSON pointer)?
    pub const fn settable_by(self, door: Door) -> bool {
        let spelled = match door {
            Door::Cli => self.info().flag.is_some(),
            Door::Profile => self.info().profile_key.is_some(),
            Door::Api => self.info().json_path.is_some(),
        };
        spelled && self.info().doors.allows(door)
    }

    /// How far the field's effect reaches (who may set it).
    pub const fn reach(self) -> Reach {
        self.info().reach
    }

    /// What a difference in it means for a running sandbox (the
    /// `running:` cell).
    pub const fn running(self) -> Running {
        self.info().running
    }

    /// One value, a list or a map.
    pub const fn shape(self) -> Shape {
        self.info().shape
    }

    /// What each of its values is.
    pub const fn kind(self) -> Kind {
        self.info().kind
    }

    /// The field of a flag of `warden run`: `--memory`, or a short form
    /// such as `-w`.
    pub fn from_flag(flag: &str) -> Option<Field> {
        FIELDS
            .iter()
            .find(|i| {
                i.flag == Some(flag)
                    || i.short.is_some_and(|c| {
                        let mut rest = flag.strip_prefix('-').unwrap_or_default().chars();
                        rest.next() == Some(c) && rest.next().is_none()
                    })
            })
            .map(|i| i.field)
    }

    /// The field of a profile key: `resources.memory`; a key with a `*`
    /// in the table matches any name there (`secrets.GH_TOKEN.in_body`).
    pub fn from_profile_key(key: &str) -> Option<Field> {
        FIELDS
            .iter()
            .find(|i| i.profile_key.is_some_and(|k| key_matches(k, key)))
            .map(|i| i.field)
    }

    /// The field of a JSON pointer of the API's body, `*` as in
    /// [`Field::from_profile_key`].
    pub fn from_json_path(path: &str) -> Option<Field> {
        let key = path.strip_prefix('/')?.replace('/', ".");
        FIELDS
            .iter()
            .find(|i| {
                i.json_path
                    .and_then(|p| p.strip_prefix('/'))
                    .is_some_and(|p| key_matches(&p.replace('/', "."), &key))
            })
            .map(|i| i.field)
    }

    /// The field a container annotation sets (`warden.dev/egress`).
    pub fn from_annotation(key: &str) -> Option<Field> {
        FIELDS
            .iter()
            .find(|i| i.annotation == Some(key))
            .map(|i| i.field)
    }

    /// How a person names this field when writing it in a profile: the key,
    /// else the flag.
    pub fn profile_name(self) -> &'static str {
        self.profile_key()
            .or(self.flag())
            .or(self.info().value_name)
            .unwrap_or("")
    }
}

/// Is `key` an instance of the table's `pattern` (`*` matches one segment)?
fn key_matches(pattern: &str, key: &str) -> bool {
    let (mut p, mut k) = (pattern.split('.'), key.split('.'));
    loop {
        match (p.next(), k.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == b || (a == "*" && !b.is_empty()) => {}
            _ => return false,
        }
    }
}

/// The flag on the command line, else the profile key.
impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.flag().unwrap_or_else(|| self.profile_name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_find_each_field_by_its_flag_key_and_path() {
        for i in FIELDS {
            if let Some(f) = i.flag {
                assert_eq!(Field::from_flag(f), Some(i.field));
                assert_eq!(i.field.long().map(|l| format!("--{l}")).as_deref(), Some(f));
            }
            if let Some(s) = i.short {
                assert_eq!(Field::from_flag(&format!("-{s}")), Some(i.field));
            }
            if let Some(k) = i.profile_key {
                assert_eq!(Field::from_profile_key(k), Some(i.field));
            }
            if let Some(p) = i.json_path {
                assert_eq!(Field::from_json_path(p), Some(i.field));
            }
        }
        assert_eq!(Field::from_flag("--memory"), Some(Field::Memory));
        assert_eq!(Field::from_flag("-w"), Some(Field::Workspace));
        assert_eq!(Field::from_flag("memory"), None);
        assert_eq!(
            Field::from_profile_key("secrets.GH_TOKEN.in_body"),
            Some(Field::SecretInBody)
        );
        assert_eq!(
            Field::from_json_path("/secrets/GH_TOKEN/allow"),
            Some(Field::SecretRule)
        );
        assert_eq!(Field::from_profile_key("secrets..in_body"), None);
        assert_eq!(Field::from_profile_key("resources"), None);
        assert_eq!(Field::Memory.to_string(), "--memory");
        assert_eq!(Field::RunsOnHost.to_string(), "filesystem.runs_on_host");
    }
}

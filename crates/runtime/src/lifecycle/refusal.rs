//! A supervisor's refusal of a start (or of a resume: a share refused
//! when a VM paused to disk is restored), with its stable reason code and
//! the field it is about, carried from the supervisor to whoever started
//! it (a resume's, in its control answer: [`StartRefusal::to_wire`]):
//! the supervisor says it on the starter's pipe as one line before its
//! `error: why` ([`StartRefusal::line`]), and [`super::start`] reads it
//! back ([`StartRefusal::parse`]) so that each door words it (the API at
//! the field's JSON pointer, the command line at its flag or its
//! profile's file:line:col). Only codes of [`CODES`] are carried: a line
//! naming another is read as no code at all.

use warden_policy::Field;

/// Every code a supervisor's refusal of a start may carry.
pub const CODES: &[&str] = &[
    warden_jail::secrets::SECRET_UNSET,
    warden_jail::secrets::SECRET_UNREADABLE,
    warden_jail::secrets::SECRET_PROGRAM_FAILED,
    warden_jail::secrets::SECRET_EMPTY,
    warden_workspace::WORKSPACE_MOVED,
    warden_workspace::WORKSPACE_LINK,
    warden_vm::shares::SHARE_LINK,
    warden_vm::shares::SHARE_CHANGED,
    warden_vm::shares::SHARE_UNREADABLE,
];

/// The prefix of the line that carries a refusal's code.
const PREFIX: &str = "refused: ";

/// Why a supervisor refused a start, as a door words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartRefusal {
    /// One of [`CODES`].
    pub code: &'static str,
    /// The option it is about, if one.
    pub field: Option<Field>,
    /// The entry of that option (a secret's name), if one.
    pub item: Option<String>,
}

impl StartRefusal {
    /// A refusal about entry `item` of `field`, or `None` when `code` is
    /// not one of [`CODES`].
    pub fn new(code: &str, field: Option<Field>, item: Option<&str>) -> Option<StartRefusal> {
        Some(StartRefusal {
            code: CODES.iter().find(|c| **c == code)?,
            field,
            item: item.map(str::to_string),
        })
    }

    /// The line said on the starter's pipe: `refused: CODE [KEY [ITEM]]`,
    /// the field by its profile key.
    pub fn line(&self) -> String {
        let mut out = format!("{PREFIX}{}", self.code);
        if let Some(key) = self.field.and_then(Field::profile_key) {
            out.push(' ');
            out.push_str(key);
            if let Some(item) = &self.item {
                out.push(' ');
                out.push_str(item);
            }
        }
        out.push('\n');
        out
    }

    /// The refusal a line of the starter's pipe says, if it is one.
    pub fn parse(line: &str) -> Option<StartRefusal> {
        let mut words = line.strip_prefix(PREFIX)?.split(' ');
        let code = words.next()?;
        let field = words
            .next()
            .and_then(|key| Field::all().find(|f| f.profile_key() == Some(key)));
        let item = field.and(words.next());
        StartRefusal::new(code, field, item)
    }

    /// The refusal a supervisor's control answer carries (a share
    /// refused at a resume), if its code is one of [`CODES`].
    pub fn from_wire(r: &crate::protocol::Reason) -> Option<StartRefusal> {
        let field = r
            .option
            .as_deref()
            .and_then(|key| Field::all().find(|f| f.profile_key() == Some(key)));
        StartRefusal::new(&r.code, field, field.and(r.item.as_deref()))
    }

    /// As a supervisor's control answer carries it: the field by its
    /// profile key.
    pub fn to_wire(&self) -> crate::protocol::Reason {
        crate::protocol::Reason {
            code: self.code.to_string(),
            option: self.field.and_then(Field::profile_key).map(str::to_string),
            item: self.item.clone(),
        }
    }

    /// Its JSON pointer within a spec (`/secrets/NAME`), if it names a
    /// field.
    pub fn json_pointer(&self) -> Option<String> {
        let path = self.field?.json_path()?;
        Some(match &self.item {
            Some(item) => format!("{path}/{}", item.replace('~', "~0").replace('/', "~1")),
            None => path.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_crosses_the_starters_pipe_whole_and_an_unknown_code_does_not() {
        let r = StartRefusal::new("secret_unreadable", Some(Field::Secret), Some("TOKEN")).unwrap();
        assert_eq!(r.line(), "refused: secret_unreadable secrets TOKEN\n");
        assert_eq!(StartRefusal::parse(r.line().trim_end()), Some(r.clone()));
        assert_eq!(r.json_pointer().as_deref(), Some("/secrets/TOKEN"));
        let bare = StartRefusal::new("workspace_moved", None, None).unwrap();
        assert_eq!(StartRefusal::parse(bare.line().trim_end()), Some(bare));
        assert_eq!(StartRefusal::parse("refused: made_up secrets X"), None);
        assert_eq!(StartRefusal::parse("error: secret_unset"), None);
        let share = StartRefusal::new("share_link", Some(Field::Rw), Some("1")).unwrap();
        assert_eq!(
            share.line(),
            "refused: share_link filesystem.read_write 1\n"
        );
        assert_eq!(
            StartRefusal::parse(share.line().trim_end()),
            Some(share.clone())
        );
        assert_eq!(
            share.json_pointer().as_deref(),
            Some("/filesystem/read_write/1")
        );
        // The same refusal in a control answer, and back.
        assert_eq!(StartRefusal::from_wire(&share.to_wire()), Some(share));
        let made_up = crate::protocol::Reason {
            code: "made_up".into(),
            option: None,
            item: None,
        };
        assert_eq!(StartRefusal::from_wire(&made_up), None);
    }
}

//! The bounds a token is held to: its record's quotas, else the daemon's
//! `quotas:`, else the defaults here, less what the tokens it made were
//! given.

use crate::app::App;
use crate::db::TokenRow;
use crate::error::{chain, ApiError};
use crate::settings::Quotas;
use warden_runtime::lifecycle::granted::default_disk;

/// Sandboxes a token may have at once when nothing says otherwise.
const DEFAULT_SANDBOXES: u64 = 16;

/// How many default sandboxes a token's memory and disk quotas hold
/// when nothing says otherwise.
const DEFAULT_SHARE: u64 = 8;

/// The bounds one token is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) sandboxes: u64,
    pub(crate) memory: u64,
    pub(crate) pids: u64,
    pub(crate) disk: u64,
}

/// What `token` is held to now: its record's quotas, else the daemon's
/// `quotas:`, else the defaults, less what the tokens it made over the
/// API were given (a child's quotas are carved out of its maker's, so
/// the maker and its children together hold no more than the maker
/// alone). The disk goes with the memory (a sandbox's default disk is
/// half its memory): a token made by a token has the share of its
/// maker's disk quota that its memory quota is of its maker's, and the
/// maker keeps the rest. A token it makes over the API
/// is compared with these (`routes::tokens`).
pub(crate) fn bounds_of(app: &App, token: &TokenRow) -> Result<Bounds, ApiError> {
    let db = app.db()?;
    let internal = |e: crate::db::DbError| ApiError::internal(chain(&e));
    let maker = match db.maker_of(&token.id).map_err(internal)? {
        Some(id) => db.token(&id).map_err(internal)?,
        None => None,
    };
    let children = db.children_of(&token.id).map_err(internal)?;
    drop(db);
    Ok(carved(
        &app.quotas,
        &app.defaults,
        token,
        maker.as_ref(),
        &children,
    ))
}

/// `token`'s bounds, made by `maker`, having made `children` (see
/// [`bounds_of`]).
fn carved(
    quotas: &Quotas,
    defaults: &warden_policy::Defaults,
    token: &TokenRow,
    maker: Option<&TokenRow>,
    children: &[TokenRow],
) -> Bounds {
    let whole = quotas.for_token(defaults, token);
    let mut b = whole;
    if let Some(m) = maker {
        let of = quotas.for_token(defaults, m);
        b.disk = share(of.disk, whole.memory, of.memory);
    }
    for c in children {
        let given = quotas.for_token(defaults, c);
        b.sandboxes = b.sandboxes.saturating_sub(given.sandboxes);
        b.memory = b.memory.saturating_sub(given.memory);
        b.pids = b.pids.saturating_sub(given.pids);
    }
    b.disk = share(b.disk, b.memory, whole.memory);
    b
}

/// `part` of `of` parts of `total` (rounded down; 0 of 0 parts is 0).
pub(super) fn share(total: u64, part: u64, of: u64) -> u64 {
    if of == 0 {
        return 0;
    }
    (u128::from(total) * u128::from(part.min(of)) / u128::from(of)) as u64
}

impl Quotas {
    /// What `token` is held to, on a host whose sandboxes get
    /// `defaults` when they ask nothing.
    fn for_token(&self, defaults: &warden_policy::Defaults, token: &TokenRow) -> Bounds {
        let memory = defaults.memory;
        let sandboxes = token
            .max_sandboxes
            .or(self.sandboxes)
            .unwrap_or(DEFAULT_SANDBOXES);
        Bounds {
            sandboxes,
            memory: token
                .max_memory
                .or(self.memory)
                .unwrap_or(memory.saturating_mul(DEFAULT_SHARE)),
            // What the owner gave the token: its own quota, or the
            // configuration's, or room for as many default sandboxes as
            // it may have.
            pids: token
                .max_pids
                .map(std::num::NonZeroU64::get)
                .or(self.pids)
                .unwrap_or(defaults.pids.saturating_mul(sandboxes)),
            disk: self
                .disk
                .unwrap_or(default_disk(memory).saturating_mul(DEFAULT_SHARE)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_quotas_read_sizes_and_refuse_zero() {
        let q: Quotas =
            serde_saphyr::from_str("sandboxes: 3\nmemory: 2G\ndisk: 512M\npids: 4096\n").unwrap();
        assert_eq!(
            q,
            Quotas {
                sandboxes: Some(3),
                memory: Some(2 << 30),
                disk: Some(512 << 20),
                pids: Some(4096),
            }
        );
        assert!(q.check().is_ok());
        for zero in ["sandboxes: 0\n", "pids: 0\n"] {
            let zero: Quotas = serde_saphyr::from_str(zero).unwrap();
            assert!(zero.check().is_err());
        }
        assert!(serde_saphyr::from_str::<Quotas>("memory: lots\n").is_err());
    }

    #[test]
    fn a_token_s_processes_follow_its_sandboxes_unless_the_configuration_or_the_token_says_otherwise(
    ) {
        let defaults = warden_policy::Defaults::for_host(warden_policy::HostFacts {
            total_memory: 8 << 30,
            cpus: 2,
            pid_max: 1 << 22,
        });
        let (mut token, _) = crate::auth::new_token("t", &[], None);
        let none = Quotas::default();
        let pids = |q: &Quotas, t: &TokenRow| q.for_token(&defaults, t).pids;
        assert_eq!(pids(&none, &token), defaults.pids * DEFAULT_SANDBOXES);
        token.max_sandboxes = Some(32);
        assert_eq!(pids(&none, &token), defaults.pids * 32);
        let configured = Quotas {
            pids: Some(4096),
            ..Quotas::default()
        };
        assert_eq!(pids(&configured, &token), 4096);
        token.max_pids = std::num::NonZeroU64::new(100);
        assert_eq!(pids(&configured, &token), 100);
    }

    #[test]
    fn a_makers_children_are_carved_out_of_its_bounds_so_together_they_hold_no_more() {
        let defaults = warden_policy::Defaults::for_host(warden_policy::HostFacts {
            total_memory: 8 << 30,
            cpus: 2,
            pid_max: 1 << 22,
        });
        let q = Quotas::default();
        let (maker, _) = crate::auth::new_token("maker", &[], None);
        let whole = q.for_token(&defaults, &maker);
        let child = |sandboxes: u64, memory: u64, pids: u64| {
            let (mut t, _) = crate::auth::new_token("child", &[], None);
            t.max_sandboxes = Some(sandboxes);
            t.max_memory = Some(memory);
            t.max_pids = std::num::NonZeroU64::new(pids);
            t
        };
        let kids = [
            child(4, whole.memory / 4, 10),
            child(4, whole.memory / 4, 10),
        ];
        let left = carved(&q, &defaults, &maker, None, &kids);
        let given: Vec<Bounds> = kids
            .iter()
            .map(|k| carved(&q, &defaults, k, Some(&maker), &[]))
            .collect();
        let sum = |f: fn(&Bounds) -> u64| f(&left) + given.iter().map(f).sum::<u64>();
        assert_eq!(sum(|b| b.sandboxes), whole.sandboxes);
        assert_eq!(sum(|b| b.memory), whole.memory);
        assert_eq!(sum(|b| b.pids), whole.pids);
        assert!(sum(|b| b.disk) <= whole.disk);
        assert_eq!(given[0].disk, whole.disk / 4);
        // No children: the maker keeps all of it.
        assert_eq!(carved(&q, &defaults, &maker, None, &[]), whole);
    }
}

//! Whether a mode change may give the host's other users (group and
//! other) a bit a host file did not give them: one rule, judged by the
//! sandbox's supervisor on a live change to a lent file (the jail's
//! `modes`), and again wherever warden itself writes what a sandbox
//! changed onto a host file (a commit of a workspace's layer, the merge of
//! a volume's or a cache's layer): a change made on a copy (an overlay's
//! copy-up is a file born in the run) must not land on the original with
//! more than the rule gives the original. Pure: no system calls.
//!
//! A writable share is lent for writing, not for opening what is in it to
//! every local user. Through the owner swap the sandbox owns root's
//! `--rw` files, so the kernel alone would let it make root's `0600` file
//! `0644`, and the mode outlives the sandbox: root's later writes to the
//! file would be read by any local user. So a change may add a group or
//! other bit only where:
//! - the file already has it (narrowing, or setting what is there);
//! - it is execute on a regular file whose class may already read it
//!   (`chmod +x` of a `0644` script: who reads it could copy and run it
//!   anyway);
//! - the file is the sandbox's own: born while this sandbox runs (its
//!   birth time is not before the start), as everything `tar x`, `pip`,
//!   `npm` or `git` writes is; a mode it could have given at creation
//!   gives nothing more later;
//! - the sandbox itself took that bit away from the file earlier in the
//!   same run, through this rule (`0644` made `0640` and back).
//!
//! Write for group or other, and set-ID bits, never reach this rule: the
//! main filter refuses them outright.

/// The group and other bits a mode change is judged on.
pub const SHARED: u32 = 0o077;

/// What is known of the file when the change is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Its `st_mode`, type included.
    pub mode: u32,
    /// Born while this sandbox runs.
    pub own: bool,
    /// Group and other bits this sandbox took away from it this run.
    pub given_back: u32,
}

const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;

/// Whether `requested` (the call's mode) may be set on the file `seen`.
pub fn may_set(seen: Seen, requested: u32) -> bool {
    refused_bits(seen, requested) == 0
}

/// The group and other bits of `requested` the rule does not give the
/// file `seen`.
pub fn refused_bits(seen: Seen, requested: u32) -> u32 {
    let current = seen.mode & 0o7777;
    let mut added = requested & SHARED & !current;
    if seen.mode & S_IFMT == S_IFREG {
        // Execute where the class already reads: a copy could be run anyway.
        if current & 0o040 != 0 {
            added &= !0o010;
        }
        if current & 0o004 != 0 {
            added &= !0o001;
        }
    }
    if seen.own {
        0
    } else {
        added & !seen.given_back
    }
}

/// The permission bits `new` (a changed entry's) land with on the host
/// entry whose `st_mode` (type included) is `host`: the group and other
/// bits the rule would not give that entry are left out. `None`, or an
/// entry of another type, is a new entry: it lands as the sandbox made it.
pub fn landed(host: Option<u32>, new: u32, new_is_dir: bool) -> u32 {
    let Some(host) = host else { return new };
    let host_is_dir = host & S_IFMT == 0o040_000;
    if host_is_dir != new_is_dir || (!host_is_dir && host & S_IFMT != S_IFREG) {
        return new;
    }
    let seen = Seen {
        mode: host,
        own: false,
        given_back: 0,
    };
    new & !refused_bits(seen, new)
}

/// The permission bits a changed entry lands with, as [`landed`] says,
/// and for a new entry (none on the host, or one of another type) under
/// the committer's `umask`, as a file the committer made would be: a
/// sandbox that made `tools/` `0770` under `umask 0` does not hand every
/// member of the committer's group a directory of programs the owner
/// runs.
pub fn landed_under(host: Option<u32>, new: u32, new_is_dir: bool, umask: u32) -> u32 {
    let landed = landed(host, new, new_is_dir);
    let same_kind = host.is_some_and(|h| {
        let host_is_dir = h & S_IFMT == 0o040_000;
        host_is_dir == new_is_dir && (host_is_dir || h & S_IFMT == S_IFREG)
    });
    if same_kind {
        landed
    } else {
        landed & !(umask & 0o777)
    }
}

/// The group and other bits a permitted change takes away, for the
/// sandbox to give back later in the run.
pub fn taken_away(current: u32, requested: u32) -> u32 {
    current & SHARED & !requested
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: u32 = S_IFREG;
    const DIR: u32 = 0o040_000;

    fn seen(mode: u32) -> Seen {
        Seen {
            mode,
            own: false,
            given_back: 0,
        }
    }

    #[test]
    fn a_private_file_of_another_owner_cannot_be_opened_to_others() {
        for requested in [0o644, 0o604, 0o640, 0o611, 0o601] {
            assert!(!may_set(seen(FILE | 0o600), requested), "{requested:o}");
        }
        assert!(!may_set(seen(DIR | 0o700), 0o711));
        assert!(!may_set(seen(DIR | 0o700), 0o755));
    }

    #[test]
    fn narrowing_or_keeping_what_is_there_is_allowed() {
        assert!(may_set(seen(FILE | 0o644), 0o640));
        assert!(may_set(seen(FILE | 0o644), 0o644));
        assert!(may_set(seen(FILE | 0o755), 0o750));
        assert!(may_set(seen(DIR | 0o755), 0o705));
    }

    #[test]
    fn execute_follows_read_on_regular_files_only() {
        assert!(may_set(seen(FILE | 0o644), 0o755));
        assert!(may_set(seen(FILE | 0o640), 0o750));
        assert!(!may_set(seen(FILE | 0o640), 0o751));
        assert!(!may_set(seen(DIR | 0o744), 0o755));
    }

    #[test]
    fn the_sandboxs_own_files_take_any_read_or_execute_bits() {
        let own = Seen {
            own: true,
            ..seen(FILE | 0o600)
        };
        assert!(may_set(own, 0o644));
        assert!(may_set(own, 0o755));
    }

    #[test]
    fn a_change_lands_on_a_host_entry_without_the_bits_the_rule_would_not_give_it() {
        // Made 0644 on a copy of root's 0600 file: lands 0600.
        assert_eq!(landed(Some(FILE | 0o600), 0o644, false), 0o600);
        assert_eq!(landed(Some(DIR | 0o700), 0o755, true), 0o700);
        // Narrowing, execute where the class reads, and new entries land
        // as made.
        assert_eq!(landed(Some(FILE | 0o644), 0o600, false), 0o600);
        assert_eq!(landed(Some(FILE | 0o644), 0o755, false), 0o755);
        assert_eq!(landed(None, 0o644, false), 0o644);
        assert_eq!(landed(Some(DIR | 0o700), 0o644, false), 0o644);
    }

    #[test]
    fn a_new_entry_lands_under_the_committers_umask_and_a_changed_one_as_the_rule_says() {
        assert_eq!(landed_under(None, 0o770, true, 0o022), 0o750);
        assert_eq!(landed_under(None, 0o660, false, 0o022), 0o640);
        assert_eq!(landed_under(None, 0o755, false, 0o077), 0o700);
        // Over a host entry of another type: new.
        assert_eq!(landed_under(Some(DIR | 0o777), 0o666, false, 0o022), 0o644);
        // A host file's change keeps its own rule, whatever the umask.
        assert_eq!(landed_under(Some(FILE | 0o664), 0o664, false, 0o022), 0o664);
    }

    #[test]
    fn bits_the_sandbox_took_away_may_be_given_back_and_no_more() {
        let back = Seen {
            given_back: taken_away(0o644, 0o640),
            ..seen(FILE | 0o640)
        };
        assert!(may_set(back, 0o644));
        assert!(!may_set(back, 0o645));
    }
}

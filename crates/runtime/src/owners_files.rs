//! The files the owner's configuration is read from, with the owner's
//! trust: what nothing a token controls may write.
//!
//! A profile of the owner's catalogue is taken as the owner's word: it
//! may name host paths, run a program on the host for a secret
//! (`secrets.*.from_command`), trust an upstream authority, widen egress.
//! The file it is read from is not always in the configuration directory:
//! an entry there may be a symbolic link to a project's own `warden.yaml`,
//! a profile may `extends` a file by path (kept with a project), a secret
//! may be read from a file or produced by a program kept anywhere, and the
//! daemon reads its own settings (`--config`) from wherever the owner
//! keeps them. Whoever can write one of those files speaks with the
//! owner's trust the next time any door (the API, the E2B door's
//! templates, MCP, `warden-oci`'s pods, the owner's own command line)
//! names that profile. A token's sandbox over a project, once its changes
//! are committed, writes the project: so the files are computed here, as
//! one closure, and the daemon keeps every token's workspace and commit
//! away from them ([`OwnersFiles::held_by`], [`OwnersFiles::touched_by`]).
//!
//! The closure holds: the configuration directory and warden's state
//! (whole directories, but for the sandboxes' own workspaces in the
//! state's `workspaces/`, which the sandboxes write by design and nothing
//! reads with the owner's trust); every entry of the catalogue's `profiles/` and
//! `presets/`; each `extends` target named by path, at any depth, found or
//! not (a file that does not exist yet is read once someone makes it);
//! each secret's `from_file`, and each absolute path in a `from_command`
//! (the program and any script it is given); each `egress.upstream_ca`;
//! and the files a door adds (the daemon's `--config`). Each path is
//! resolved one component at a time, so that every symbolic link on the
//! way is in the closure as well as what it leads to (retargeting a link
//! is writing the file), and each file that exists is kept by its
//! identity (device and inode) too, so that a second name for it (a hard
//! link) is known as it.
//!
//! Computed afresh at each check: the owner's configuration may change
//! between a sandbox's create and its commit, or its stop, when what it
//! wrote into a writable volume is merged into the volume's directory
//! ([`OwnersFence`]: an entry the closure names is held back, not merged).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use warden_policy::compose::{compose, Catalog, Layer};
use warden_policy::{Field, SecretSource, SecretSpec};

use crate::lifecycle::withdrawn::{Withdrawn, NOT_GRANTED};
use crate::lifecycle::OWN_WORKSPACES;
use crate::pathwalk::walk;

/// The reason code of a refusal to let a token's workspace or commit
/// reach a file of the owner's configuration.
pub const HOLDS_CONFIGURATION: &str = "holds_configuration";

/// The flag a review puts on a change to one of them.
pub const FLAG: &str = "owner-config";

/// Where, in warden's state, the E2B door keeps the volumes tokens make:
/// `VOLUMES/ID/data/` is a volume's files, which its sandboxes write by
/// design and nothing reads with the owner's trust (as the state's
/// `workspaces/`); the rest of each (`VOLUMES/ID/meta.json`) is the
/// owner's.
pub const TOKEN_VOLUMES: &str = "e2b/volumes";

/// Where, in warden's state, what a volume's merge held back is kept
/// ([`OwnersFence`]).
pub const HELD_BACK: &str = "held-back";

/// Where, in the state `state`, what the merges of the volume directory
/// `dir` held back is kept (the jail's naming: [`HELD_BACK`]`/DEV-INO`,
/// the directory's identity, read without following a link); `None` when
/// `dir` cannot be read. What is there goes with the volume: counted with
/// it, removed with it.
pub fn held_back_of(state: &Path, dir: &Path) -> Option<PathBuf> {
    let st = std::fs::symlink_metadata(dir).ok()?;
    Some(
        state
            .join(HELD_BACK)
            .join(format!("{}-{}", st.dev(), st.ino())),
    )
}

/// The places, in the state `state`, where what the write-backs of the
/// caches below `caches` (an owner's directory of caches:
/// `PROFILE/NAME/LEAF`, each a cache's directory) held back is kept,
/// those there now; read without following a link. They go with the
/// caches: counted with them, removed with them.
pub fn held_back_of_caches(state: &Path, caches: &Path) -> Vec<PathBuf> {
    let mut leaves = vec![caches.to_path_buf()];
    for _ in 0..3 {
        leaves = leaves
            .iter()
            .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
    }
    leaves
        .iter()
        .filter_map(|leaf| held_back_of(state, leaf))
        .filter(|h| h.symlink_metadata().is_ok())
        .collect()
}

/// The owner's configuration, as files and directories on the host.
#[derive(Debug, Clone, Default)]
pub struct OwnersFiles {
    /// Directories wholly the owner's, real paths, each marked if it is a
    /// state, whose sandboxes' own places are not the owner's
    /// ([`sandboxes_own`]).
    dirs: Vec<(PathBuf, bool)>,
    /// Each file read with the owner's trust and each symbolic link on
    /// the way to it, by real path (the link's own, not its target's).
    paths: Vec<PathBuf>,
    /// The identity (device, inode) of each of them that exists.
    ids: Vec<(u64, u64)>,
}

impl OwnersFiles {
    /// The closure of what `catalog` reads with the owner's trust, with
    /// the directories `dirs` (warden's state, less its sandboxes' own
    /// workspaces) and the files `files` (a
    /// door's own settings file) added.
    pub fn of(catalog: &Catalog, dirs: &[&Path], files: &[PathBuf]) -> OwnersFiles {
        let mut out = OwnersFiles::default();
        let states = dirs.iter().map(|d| (*d, true));
        for (d, state) in catalog
            .config_dir
            .iter()
            .map(|d| (d.as_path(), false))
            .chain(states)
        {
            let real = match d.is_absolute() {
                true => walk(d).0,
                false => std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf()),
            };
            out.dirs.push((real, state));
        }
        let mut named: Vec<PathBuf> = files.to_vec();
        for kind in ["profiles", "presets"] {
            named.extend(entries(catalog, kind));
        }
        for (name, label) in catalog.profile_names() {
            if label.starts_with("builtin:") {
                continue;
            }
            named.extend(profile_names_files(catalog, &name));
        }
        for p in named {
            out.add(&p);
        }
        out.paths.sort();
        out.paths.dedup();
        out.ids.sort_unstable();
        out.ids.dedup();
        out
    }

    /// Every link on the way to `p` and what it leads to.
    fn add(&mut self, p: &Path) {
        if !p.is_absolute() {
            return;
        }
        let (real, links) = walk(p);
        self.paths.extend(links);
        if let Ok(m) = std::fs::metadata(&real) {
            self.ids.push((m.dev(), m.ino()));
        }
        self.paths.push(real);
    }

    /// Whether the directory `dir` (a real path) holds one of the owner's
    /// files or directories, or lies inside one of the owner's
    /// directories: a workspace there could write it.
    /// A sandbox's own workspace in the state (and what is below it) is
    /// not the owner's; the state's `workspaces/` itself, and the rest of
    /// the state, are.
    pub fn held_by(&self, dir: &Path) -> bool {
        self.dirs.iter().any(|(d, state)| {
            d.starts_with(dir) || (dir.starts_with(d) && !(*state && sandboxes_own(d, dir)))
        }) || self.paths.iter().any(|p| p.starts_with(dir))
    }

    /// Whether a volume's merge may not make, replace or remove the
    /// host's entry at the real path `path` (reached through no link),
    /// where the regular file `there` (device, inode) is now, if one is:
    /// it is one of the owner's files (by path or by identity), on the way
    /// to one, a directory holding one, or in one of the owner's
    /// directories.
    pub fn fences(&self, path: &Path, there: Option<(u64, u64)>) -> bool {
        self.held_by(path) || there.is_some_and(|id| self.ids.contains(&id))
    }

    /// Whether writing, removing or replacing the host's entry at `path`
    /// (which need not exist; a link there is not followed) changes one
    /// of the owner's files: it is one of them (by path, or by identity
    /// under another name), a directory holding one, or lies in one of
    /// the owner's directories.
    pub fn touched_by(&self, path: &Path) -> bool {
        let path = real_parent(path);
        if self.held_by(&path) {
            return true;
        }
        std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_file() && self.ids.contains(&(m.dev(), m.ino())))
    }
}

/// Whether `dir`, in the state `state`, is a place of the sandboxes'
/// own: anything below a sandbox's own workspace (`workspaces/NAME/...`,
/// the name included), below a token's volume's files
/// (`e2b/volumes/ID/data/...`, not `data` itself), or below one cache's
/// directory (`caches/PROFILE/NAME/LEAF/...`, a token's
/// `token-caches/tHEX/PROFILE/NAME/LEAF/...`: what sandboxes of the
/// profile write back at their stop, [`crate::lifecycle::Owner::caches_dir`]),
/// so that a cache's merge is fenced by the files the owner's
/// configuration names there, not by the whole state.
fn sandboxes_own(state: &Path, dir: &Path) -> bool {
    let Ok(rel) = dir.strip_prefix(state) else {
        return false;
    };
    let parts: Vec<&std::ffi::OsStr> = rel.iter().collect();
    let volumes: Vec<&std::ffi::OsStr> = Path::new(TOKEN_VOLUMES).iter().collect();
    match parts.as_slice() {
        [w, _, ..] if *w == OWN_WORKSPACES => true,
        [c, _, _, _, _, ..] if *c == OWNERS_CACHES => true,
        [c, _, _, _, _, _, ..] if *c == TOKENS_CACHES => true,
        [e, v, _, data, _, ..] => [*e, *v] == volumes.as_slice() && *data == "data",
        _ => false,
    }
}

/// Where, in warden's state, the machine's owner's caches and each
/// token's are ([`crate::lifecycle::Owner::caches_dir`]).
const OWNERS_CACHES: &str = "caches";
const TOKENS_CACHES: &str = "token-caches";

/// A volume's merge fenced by the owner's files as they are at the merge
/// (computed when it is made: at the sandbox's stop), what it holds back
/// kept under the state's [`HELD_BACK`].
#[derive(Debug, Clone)]
pub struct OwnersFence {
    files: OwnersFiles,
    /// Where held-back entries are kept: the state's [`HELD_BACK`];
    /// `None` for a run without a state (they are dropped, and still
    /// reported).
    keep: Option<PathBuf>,
    /// Volume directories (real paths) the owner no longer grants the
    /// sandbox: everything of theirs is held back; `None`: every entry
    /// is (the record of them could not be read).
    withdrawn: Option<Vec<PathBuf>>,
}

impl OwnersFence {
    /// The owner's files of `catalog` and of the state `state`, if there
    /// is one (with the daemons' settings files it records), as they are
    /// now.
    pub fn now(catalog: &Catalog, state: Option<&Path>) -> OwnersFence {
        let Some(state) = state else {
            return OwnersFence {
                files: OwnersFiles::of(catalog, &[], &[]),
                keep: None,
                withdrawn: Some(Vec::new()),
            };
        };
        let files = crate::state::daemon_configs(state);
        let state_real = std::fs::canonicalize(state).unwrap_or_else(|_| state.to_path_buf());
        OwnersFence {
            files: OwnersFiles::of(catalog, &[state_real.as_path()], &files),
            keep: Some(state_real.join(HELD_BACK)),
            withdrawn: Some(Vec::new()),
        }
    }

    /// This fence holding back, besides, all of each volume `withdrawn`
    /// names (read from the sandbox's record at the stop): the owner no
    /// longer grants it.
    pub fn withholding(mut self, withdrawn: Withdrawn) -> OwnersFence {
        self.withdrawn = match withdrawn {
            Withdrawn::These(hosts) => Some(
                hosts
                    .iter()
                    .map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.clone()))
                    .collect(),
            ),
            Withdrawn::All => None,
        };
        self
    }
}

impl warden_jail::cache::Fence for OwnersFence {
    fn fenced(&self, path: &Path, there: Option<(u64, u64)>) -> Option<&'static str> {
        let withdrawn = match &self.withdrawn {
            Some(hosts) => hosts.iter().any(|h| path.starts_with(h)),
            None => true,
        };
        if withdrawn {
            return Some(NOT_GRANTED);
        }
        self.files
            .fences(path, there)
            .then_some(HOLDS_CONFIGURATION)
    }

    fn keep(&self) -> Option<&Path> {
        self.keep.as_deref()
    }
}

/// The entries of the catalogue's `kind` directory (links as they are).
fn entries(catalog: &Catalog, kind: &str) -> Vec<PathBuf> {
    let Some(dir) = catalog.config_dir.as_ref().map(|d| d.join(kind)) else {
        return Vec::new();
    };
    let Ok(list) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    list.flatten().map(|e| e.path()).collect()
}

/// The files the owner's profile `name` names with the owner's trust:
/// its `extends` targets by path (at any depth), its secrets' files and
/// programs, its upstream authorities.
fn profile_names_files(catalog: &Catalog, name: &str) -> Vec<PathBuf> {
    let Ok(composed) = compose(catalog, Some(name), &Layer::default()) else {
        return Vec::new();
    };
    let mut out = composed.files;
    out.extend(composed.merged.paths(Field::UpstreamCa));
    for entry in composed.merged.pairs(Field::Secret) {
        match SecretSpec::parse(&entry).map(|s| s.source) {
            Ok(SecretSource::File(p)) => out.push(p),
            Ok(SecretSource::Command(argv)) => out.extend(argv.iter().flat_map(|a| paths_in(a))),
            _ => {}
        }
    }
    out
}

/// The absolute paths an argument of a secret's program names: itself,
/// or each word of it that is one (`sh -c "exec /proj/get.sh"`,
/// `--file=/proj/key`). A word that only looks like a path protects a
/// file more, never less.
fn paths_in(arg: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = arg
        .split(|c: char| c.is_whitespace() || ";|&<>()'\"=`$,".contains(c))
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    if arg.starts_with('/') {
        out.push(PathBuf::from(arg));
    }
    out
}

/// `path` with its parent directory resolved and its last component kept
/// as it is (a link there is the entry itself).
fn real_parent(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner_at(dir: &Path) -> Catalog {
        Catalog {
            home: None,
            config_dir: Some(dir.join("config")),
        }
    }

    #[test]
    fn an_extends_target_a_linked_profile_and_a_secret_program_are_the_owners() {
        let t = std::env::temp_dir().join(format!("warden-owners-files-{}", std::process::id()));
        let _ = warden_workspace::fsutil::remove_tree(&t);
        std::fs::create_dir_all(&t).unwrap();
        let root = t.canonicalize().unwrap();
        let profiles = root.join("config/profiles");
        let proj = root.join("proj");
        std::fs::create_dir_all(&profiles).unwrap();
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::write(proj.join("base.yaml"), "resources:\n  memory: 256M\n").unwrap();
        std::fs::write(
            profiles.join("four.yaml"),
            format!(
                "extends: [{}, {}]\nsecrets:\n  S:\n    from_command: [/bin/sh, {}]\n    hosts: [example.com]\n  T:\n    from_command: [/bin/sh, -c, \"exec {}\"]\n    hosts: [example.com]\n",
                proj.join("base.yaml").display(),
                proj.join("later.yaml").display(),
                proj.join("get.sh").display(),
                proj.join("inline.sh").display()
            ),
        )
        .unwrap();
        std::fs::write(proj.join("warden.yaml"), "resources:\n  memory: 256M\n").unwrap();
        std::os::unix::fs::symlink(proj.join("link.yaml"), profiles.join("five.yaml")).unwrap();
        std::os::unix::fs::symlink("warden.yaml", proj.join("link.yaml")).unwrap();
        std::fs::write(proj.join("other.txt"), "not the owner's").unwrap();
        std::fs::hard_link(proj.join("base.yaml"), root.join("second-name.yaml")).unwrap();

        let owners = OwnersFiles::of(&owner_at(&root), &[], &[]);
        for p in [
            "base.yaml",
            "later.yaml",
            "get.sh",
            "link.yaml",
            "warden.yaml",
        ] {
            assert!(owners.touched_by(&proj.join(p)), "{p} is the owner's");
        }
        assert!(
            owners.touched_by(&root.join("second-name.yaml")),
            "a hard link is the file"
        );
        assert!(!owners.touched_by(&proj.join("other.txt")));
        assert!(owners.touched_by(&proj), "the directory holding them");
        assert!(owners.held_by(&proj));
        assert!(owners.held_by(&root.join("config/profiles")));
        assert!(!owners.held_by(&root.join("elsewhere")));
        warden_workspace::fsutil::remove_tree(&t).unwrap();
    }

    #[test]
    fn a_sandboxes_own_workspace_in_the_state_is_not_the_owners_but_the_rest_of_the_state_is() {
        let t = std::env::temp_dir().join(format!("warden-owners-state-{}", std::process::id()));
        let _ = warden_workspace::fsutil::remove_tree(&t);
        let state = t.join("state");
        std::fs::create_dir_all(state.join("workspaces/own1")).unwrap();
        std::fs::create_dir_all(state.join("sandboxes/own1")).unwrap();
        std::fs::write(state.join("grants.json"), "{}").unwrap();
        let state = state.canonicalize().unwrap();
        let owners = OwnersFiles::of(&owner_at(&t), &[state.as_path()], &[]);
        let own = state.join("workspaces/own1");
        assert!(!owners.held_by(&own), "a sandbox's own workspace");
        assert!(!owners.touched_by(&own.join("notes.txt")));
        assert!(!owners.touched_by(&own.join("sub/warden.yaml")));
        for p in ["grants.json", "tokens.db", "sandboxes/own1/sandbox.json"] {
            assert!(owners.touched_by(&state.join(p)), "{p} is the owner's");
        }
        assert!(owners.held_by(&state.join("workspaces")), "all of them");
        assert!(owners.held_by(&state));
        // A link in a sandbox's workspace to the rest of the state leads
        // back to the owner's.
        std::os::unix::fs::symlink(&state, own.join("up")).unwrap();
        assert!(owners.touched_by(&own.join("up/grants.json")));
        // The configuration directory is the owner's wherever it is.
        let inside = OwnersFiles::of(
            &Catalog {
                home: None,
                config_dir: Some(own.join("config")),
            },
            &[state.as_path()],
            &[],
        );
        assert!(inside.touched_by(&own.join("config/profiles/x.yaml")));
        assert!(inside.held_by(&own));
        warden_workspace::fsutil::remove_tree(&t).unwrap();
    }

    #[test]
    fn a_tokens_volume_files_are_the_sandboxes_but_its_record_and_a_file_a_profile_names_there_are_the_owners(
    ) {
        let t = std::env::temp_dir().join(format!("warden-owners-vols-{}", std::process::id()));
        let _ = warden_workspace::fsutil::remove_tree(&t);
        let state = t.join("state");
        let vol = state.join(TOKEN_VOLUMES).join("vol-1");
        std::fs::create_dir_all(vol.join("data/sub")).unwrap();
        std::fs::create_dir_all(t.join("config/profiles")).unwrap();
        std::fs::write(vol.join("meta.json"), "{}").unwrap();
        let state = state.canonicalize().unwrap();
        let data = state.join(TOKEN_VOLUMES).join("vol-1/data");
        std::fs::write(
            t.join("config/profiles/p.yaml"),
            format!("extends: [{}]\n", data.join("named.yaml").display()),
        )
        .unwrap();
        let owners = OwnersFiles::of(&owner_at(&t), &[state.as_path()], &[]);
        assert!(!owners.fences(&data.join("note.txt"), None));
        assert!(!owners.fences(&data.join("sub/x"), None));
        assert!(owners.fences(&data.join("named.yaml"), None));
        assert!(owners.fences(&state.join(TOKEN_VOLUMES).join("vol-1/meta.json"), None));
        assert!(owners.fences(&state.join(HELD_BACK).join("1-2/x"), None));
        assert!(
            owners.held_by(&data),
            "a volume's data holds the file named"
        );
        // A cache's files are the sandboxes' too, but for one a profile
        // names there; the cache's own directories stay the owner's.
        let pip = state.join("caches/cachy/pip/pip");
        std::fs::create_dir_all(&pip).unwrap();
        std::fs::write(
            t.join("config/profiles/q.yaml"),
            format!("extends: [{}]\n", pip.join("conf.yaml").display()),
        )
        .unwrap();
        let owners = OwnersFiles::of(&owner_at(&t), &[state.as_path()], &[]);
        assert!(!owners.fences(&pip.join("wheels/x.whl"), None));
        assert!(owners.fences(&pip.join("conf.yaml"), None));
        assert!(owners.fences(&state.join("caches/cachy/pip"), None));
        let tok = state.join("token-caches/t61/cachy/pip/pip");
        assert!(!owners.fences(&tok.join("x"), None));
        assert!(owners.fences(&state.join("token-caches/t61/cachy/pip"), None));
        // A hard link to the owner's file, by identity.
        std::fs::write(t.join("owners.yaml"), "x").unwrap();
        let named = OwnersFiles::of(&owner_at(&t), &[], &[t.join("owners.yaml")]);
        let st = std::fs::metadata(t.join("owners.yaml")).unwrap();
        assert!(named.fences(&data.join("other"), Some((st.dev(), st.ino()))));
        warden_workspace::fsutil::remove_tree(&t).unwrap();
    }
}

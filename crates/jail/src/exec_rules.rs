//! The sandbox's exec allowlist (`process.allow_exec`): which files the
//! entries name inside the sandbox, which ELF interpreters those programs
//! need, and the mount layout that keeps the loader from running anything
//! else. Landlock's execute right (granted in [`crate::landlock`] to the
//! files found here) is what enforces the list; the supervisor refuses
//! executable memfds and records every refused exec
//! ([`crate::seccomp::EXEC_NOTIFY_RULES`], `modes::exec`).
//!
//! Runs in the sandbox's init once its root is built, so every path is the
//! sandbox's own. Never reads the host's tree for the sandbox.
//!
//! What the kernel does, and so what this module decides:
//! - `execve` of a file opens it for execution, and so does the kernel for
//!   a dynamic program's ELF interpreter (`PT_INTERP`, the loader) and for
//!   a script's `#!` interpreter: Landlock checks its execute right on all
//!   three. The loader of each allowed program is therefore granted too
//!   (without it no dynamic program starts); a `#!` interpreter only when
//!   an entry names it.
//! - The loader, granted, can be run directly (`ld.so PROGRAM`): it then
//!   maps PROGRAM with `mmap(PROT_EXEC)`, which Landlock does not govern.
//!   What it may map is cut two ways. The directories of programs
//!   ([`PROGRAM_DIRS`]) keep their mount, and their programs that the list
//!   does not name get no Landlock right at all, not even to be read
//!   ([`crate::landlock`]): the loader cannot open them, and each refusal,
//!   of an exec or of that open, is Landlock's, so it is logged. Every
//!   writable place is mounted `noexec` (the kernel refuses executable
//!   mappings from it): what the sandbox writes must stay readable to it,
//!   so only the mount can keep it from being mapped as code.
//! - The order of the kernel's checks: a mount's `noexec` is checked in
//!   `may_open`, before the file-open hook where Landlock decides, so an
//!   exec refused by the mount never reaches Landlock's audit; the
//!   supervisor's judge of execs (`modes::exec`) records it instead (see
//!   docs/allow-exec.md).

use nix::mount::{mount, MsFlags};
use nix::sys::statvfs::{statvfs, FsFlags};
use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The directories where a system keeps its programs (not its libraries):
/// under an allowlist their other programs can be neither executed nor
/// read (so the loader run directly cannot map them). Libraries stay
/// mappable where they are.
pub const PROGRAM_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/games",
    "/usr/local/games",
    "/usr/libexec",
    "/bin",
    "/sbin",
];

/// Why the allowlist could not be applied. The sandbox does not start.
#[derive(Debug, thiserror::Error)]
pub enum ExecRuleError {
    #[error("the exec allowlist's entry {entry:?} names no program in the sandbox")]
    NothingNamed { entry: String },
    #[error("the exec allowlist's entry {entry:?} is not a valid glob")]
    Glob {
        entry: String,
        #[source]
        source: glob::PatternError,
    },
    #[error("the exec allowlist names {program}, in {place}, which the sandbox can write: it could replace the program with any other (in place, or between two starts), so an allowed program must be read-only to it; allow a copy in a read-only bind (`filesystem.read_only`) or a system directory instead")]
    Writable { program: PathBuf, place: PathBuf },
    #[error("cannot make {path} unmappable as code for the exec allowlist")]
    Seal {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

/// The files the allowlist lets the kernel execute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed {
    /// The programs the entries name, each by its real path (links
    /// followed: the kernel checks the file it opens).
    pub programs: BTreeSet<PathBuf>,
    /// The ELF interpreters the programs need that no entry names: granted
    /// as interpreters, and refused as the command warden starts.
    pub loaders: BTreeSet<PathBuf>,
}

impl Allowed {
    /// Every file to grant the execute right.
    pub fn files(&self) -> impl Iterator<Item = &PathBuf> {
        self.programs.iter().chain(self.loaders.iter())
    }

    /// Is `program` (a path inside the sandbox) a loader that only an
    /// allowed program may use as its interpreter?
    pub fn is_loader_only(&self, program: &Path) -> bool {
        std::fs::canonicalize(program)
            .map(|real| self.loaders.contains(&real) && !self.programs.contains(&real))
            .unwrap_or(false)
    }
}

/// Refuse `program`, the resolved command (a path inside the sandbox),
/// when it is a loader the allowlist grants only as the interpreter of
/// allowed programs: as the command it would map and run any ELF it is
/// given, from anywhere the sandbox can read. EACCES, as the kernel's own
/// refusal. Every command the init starts comes through here: `warden
/// run`'s, and each spawned one (`warden exec`, the API, the E2B door,
/// MCP). An allowed program can still execve the loader itself: see
/// docs/allow-exec.md on shells and interpreters in an allowlist.
pub fn refuse_loader(allowed: Option<&Allowed>, program: &std::ffi::CStr) -> Result<(), i32> {
    use std::os::unix::ffi::OsStrExt;
    match allowed {
        Some(a) if a.is_loader_only(Path::new(std::ffi::OsStr::from_bytes(program.to_bytes()))) => {
            Err(libc::EACCES)
        }
        _ => Ok(()),
    }
}

/// Where a bare name is looked up: the system's program directories, never
/// the sandbox's own `PATH`. That one is the caller's to set (and the
/// sandbox can write the places it may name): `git` found first in
/// `/workspace/bin` would grant whatever the sandbox put there under that
/// name.
pub const BARE_NAME_SEARCH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Find what `entries` name inside the sandbox: an absolute path (a file,
/// or a directory whose executable files are all named), a glob of them,
/// or a bare name looked up on [`BARE_NAME_SEARCH`] (whatever the sandbox's
/// `PATH`, given as `_sandbox_path`, says). An entry that names nothing is
/// an error: a typo must not pass unnoticed.
pub fn find(entries: &[String], _sandbox_path: &str) -> Result<Allowed, ExecRuleError> {
    let path_var = BARE_NAME_SEARCH;
    let mut allowed = Allowed::default();
    for entry in entries {
        let before = allowed.programs.len();
        for path in candidates(entry, path_var)? {
            add_path(&mut allowed.programs, &path);
        }
        if allowed.programs.len() == before && !names_known(entry, path_var, &allowed) {
            return Err(ExecRuleError::NothingNamed {
                entry: entry.clone(),
            });
        }
    }
    let loaders: BTreeSet<PathBuf> = allowed
        .programs
        .iter()
        .filter_map(|p| elf_interpreter(p))
        .filter_map(|l| std::fs::canonicalize(l).ok())
        .filter(|l| !allowed.programs.contains(l))
        .collect();
    allowed.loaders = loaders;
    Ok(allowed)
}

/// An entry naming only programs another entry already named still names
/// something.
fn names_known(entry: &str, path_var: &str, allowed: &Allowed) -> bool {
    candidates(entry, path_var)
        .map(|c| {
            c.iter().any(|p| {
                std::fs::canonicalize(p).is_ok_and(|r| allowed.programs.contains(&r)) || p.is_dir()
            })
        })
        .unwrap_or(false)
}

/// The paths an entry stands for, before directories are opened.
fn candidates(entry: &str, path_var: &str) -> Result<Vec<PathBuf>, ExecRuleError> {
    if !entry.contains('/') {
        // A bare name: the first executable file on PATH, as a shell finds it.
        return Ok(path_var
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(entry))
            .find(|p| is_executable_file(p))
            .into_iter()
            .collect());
    }
    if entry.contains(['*', '?', '[']) {
        let paths = glob::glob(entry).map_err(|source| ExecRuleError::Glob {
            entry: entry.to_string(),
            source,
        })?;
        return Ok(paths.filter_map(Result::ok).collect());
    }
    Ok(vec![PathBuf::from(entry)])
}

/// Add a file, or a directory's executable files (not its subdirectories').
fn add_path(out: &mut BTreeSet<PathBuf>, path: &Path) {
    if path.is_dir() {
        let Ok(dir) = std::fs::read_dir(path) else {
            return;
        };
        for e in dir.flatten() {
            let p = e.path();
            if is_executable_file(&p) {
                if let Ok(real) = std::fs::canonicalize(&p) {
                    out.insert(real);
                }
            }
        }
    } else if is_executable_file(path) {
        if let Ok(real) = std::fs::canonicalize(path) {
            out.insert(real);
        }
    }
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The ELF interpreter (`PT_INTERP`) a program names, if it is a 64-bit
/// little-endian ELF that names one. Only the program headers are read: no
/// ELF library is needed for one entry of one table.
pub fn elf_interpreter(path: &Path) -> Option<PathBuf> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = vec![0u8; 64 * 1024];
    let n = read_up_to(&mut file, &mut head)?;
    interpreter_of(&head[..n])
}

fn read_up_to(file: &mut std::fs::File, buf: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(n)
}

/// `PT_INTERP` from the first bytes of an ELF file (its header and program
/// headers, which linkers place at the start).
fn interpreter_of(b: &[u8]) -> Option<PathBuf> {
    const PT_INTERP: u32 = 3;
    // Offsets come from the file: every sum is checked, never wrapped.
    let at = |o: usize, n: usize| b.get(o..o.checked_add(n)?);
    let u16_at = |o: usize| Some(u16::from_le_bytes(at(o, 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(at(o, 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(at(o, 8)?.try_into().ok()?));
    // "\x7fELF", 64-bit, little-endian.
    if b.get(0..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? != PT_INTERP {
            continue;
        }
        let off = usize::try_from(u64_at(ph.checked_add(8)?)?).ok()?;
        let size = usize::try_from(u64_at(ph.checked_add(32)?)?).ok()?;
        let raw = b.get(off..off.checked_add(size)?)?;
        let name = raw.split(|c| *c == 0).next()?;
        if name.first() != Some(&b'/') {
            return None;
        }
        return Some(PathBuf::from(std::str::from_utf8(name).ok()?));
    }
    None
}

/// Make every writable place unmappable as code (`noexec`). The program
/// directories are not sealed by the mount: their other programs are
/// refused by Landlock, which logs it (a `noexec` mount would refuse an
/// exec first, silently). An allowed program beneath a sealed place (a
/// read-only bind) is bound back over itself, executable. Needs the init's
/// mount namespace and its privilege there: called before the privileges
/// drop.
pub fn seal(allowed: &Allowed, writable: &[PathBuf]) -> Result<(), ExecRuleError> {
    refuse_writable(allowed, writable)?;
    let mut places: Vec<PathBuf> = Vec::new();
    for d in writable.iter() {
        // A link is sealed where it leads.
        let Ok(real) = std::fs::canonicalize(d) else {
            continue;
        };
        if real.is_dir() && !places.contains(&real) {
            places.push(real);
        }
    }
    for place in &places {
        // The allowed programs beneath: bound first, so that the recursive
        // bind below carries them, executable, over the sealed directory.
        for program in allowed.programs.iter().filter(|p| p.starts_with(place)) {
            bind_self(program, false)?;
        }
        bind_self(place, true)?;
    }
    Ok(())
}

/// Refuse an allowed file (a program, a loader) the sandbox can write:
/// Landlock's execute right is on the file, so the sandbox would overwrite
/// it with any binary and run that under the allowed name; and an entry is
/// found again at each start of a named sandbox, so a file (or a
/// directory's or glob's new files) the sandbox wrote in one run would be
/// allowed in the next.
pub fn refuse_writable(allowed: &Allowed, writable: &[PathBuf]) -> Result<(), ExecRuleError> {
    let places: Vec<PathBuf> = writable
        .iter()
        .filter_map(|w| std::fs::canonicalize(w).ok())
        .collect();
    for file in allowed.files() {
        // A read-only bind beneath a writable place (`--ro /tmp/tools`)
        // cannot be written, nor its mount point replaced while mounted,
        // and it is bound again from the host at each start.
        let read_only = statvfs(file).is_ok_and(|st| st.flags().contains(FsFlags::ST_RDONLY));
        if read_only {
            continue;
        }
        if let Some(place) = places.iter().find(|p| file.starts_with(p)) {
            return Err(ExecRuleError::Writable {
                program: file.clone(),
                place: place.clone(),
            });
        }
    }
    Ok(())
}

/// Bind `path` over itself and remount it with `noexec` set or not,
/// keeping the flags the kernel locks (read-only, nosuid, nodev, atime).
fn bind_self(path: &Path, noexec: bool) -> Result<(), ExecRuleError> {
    let err = |source| ExecRuleError::Seal {
        path: path.to_path_buf(),
        source,
    };
    mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(err)?;
    let current = statvfs(path).map_err(err)?.flags();
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND;
    for (st, ms) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if current.contains(st) {
            flags |= ms;
        }
    }
    if noexec {
        flags |= MsFlags::MS_NOEXEC;
    }
    mount(None::<&str>, path, None::<&str>, flags, None::<&str>).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_of_a_dynamic_program_is_read_from_its_program_headers() {
        let ls = Path::new("/bin/ls");
        if !ls.exists() {
            eprintln!("skipped: no /bin/ls on this host");
            return;
        }
        let loader = elf_interpreter(ls).expect("ls is a dynamic ELF program");
        assert!(loader.is_absolute());
        assert!(loader.to_string_lossy().contains("ld"), "{loader:?}");
    }

    #[test]
    fn a_file_that_is_no_elf_names_no_loader() {
        assert_eq!(interpreter_of(b"#!/bin/sh\necho hi\n"), None);
        assert_eq!(interpreter_of(b"\x7fELF\x02\x01"), None);
        let mut truncated = b"\x7fELF\x02\x01".to_vec();
        truncated.resize(0x40, 0xff);
        assert_eq!(interpreter_of(&truncated), None);
    }

    #[test]
    fn a_bare_name_is_found_among_the_system_programs_never_on_the_sandboxs_path() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path_var = dir.path().display().to_string();
        // On the sandbox's PATH only: not a system program, so not found.
        assert!(matches!(
            find(&["tool".into()], &path_var),
            Err(ExecRuleError::NothingNamed { .. })
        ));
        let found = find(&["sh".into()], &path_var).unwrap();
        assert!(found.programs.iter().all(|p| !p.starts_with(dir.path())));
        assert!(!found.programs.is_empty());
        assert!(matches!(
            find(&["absent-tool".into()], &path_var),
            Err(ExecRuleError::NothingNamed { .. })
        ));
    }

    #[test]
    fn a_directory_names_its_executable_files_only() {
        let dir = tempfile::tempdir().unwrap();
        for (name, mode) in [("run", 0o755), ("data", 0o644)] {
            let p = dir.path().join(name);
            std::fs::write(&p, b"x").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let found = find(&[dir.path().display().to_string()], "").unwrap();
        let names: Vec<_> = found
            .programs
            .iter()
            .filter_map(|p| p.file_name())
            .collect();
        assert_eq!(names, ["run"]);
    }
}

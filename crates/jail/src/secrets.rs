//! The supervisor's side of `--secret`: the placeholders the sandbox gets,
//! the real values it never gets, and the files through which it trusts the
//! per-sandbox authority of the secret proxy.
//!
//! The sandbox's init is a copy of the supervisor (a clone without exec), so
//! whatever the supervisor holds at the clone, the init holds too. Values
//! are therefore read only after the clone: files and commands are read
//! then; a value from the host's environment, which the supervisor has
//! from its start, is moved before the clone into memory marked
//! wipe-on-fork (the clone gets zeros there) and erased where the
//! environment held it. The authority is made after the clone as well.
//!
//! What substitutes the values (the egress proxy's secret terminator) is
//! the caller's, behind a [`Keeper`]: it gives the placeholders, takes the
//! values once they are read, and answers with the authority the sandbox
//! is to trust. The jail keeps the values from the sandbox; it never sees
//! a connection.

use nix::errno::Errno;
use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use warden_policy::{NetworkSpec, SandboxSpec, SecretSource, SecretSpec};
use zeroize::Zeroize;

/// The host's trust roots, when it has them where Debian-like systems do.
pub const HOST_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Why a secret could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("`secrets {name}`: the host's environment has no variable {variable}; set it, or read the value with {name}=file:PATH@HOSTS")]
    MissingVariable { name: String, variable: String },
    #[error("`secrets {name}`: cannot read {path}")]
    File {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`secrets {name}`: cannot run {program}")]
    Command {
        name: String,
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`secrets {name}`: {program} failed ({status}); the secret is not set")]
    CommandFailed {
        name: String,
        program: String,
        status: std::process::ExitStatus,
    },
    #[error("`secrets {name}`: the value is empty")]
    Empty { name: String },
    #[error("cannot set aside memory that the sandbox's init does not inherit (MADV_WIPEONFORK needs Linux 4.14)")]
    WipeOnFork(#[source] Errno),
    #[error("cannot create the sandbox's trust files")]
    TrustFile(#[source] std::io::Error),
    #[error(transparent)]
    Keeper(KeeperError),
}

impl SecretsError {
    /// The stable reason code of a secret that could not be read, and the
    /// secret's name: what each door words (the API at
    /// `/spec/secrets/NAME`, the command line at the secret's flag or
    /// profile line). `None` for a failure of the host, not of a secret.
    pub fn refusal(&self) -> Option<(&'static str, &str)> {
        match self {
            SecretsError::MissingVariable { name, .. } => Some((SECRET_UNSET, name)),
            SecretsError::File { name, .. } => Some((SECRET_UNREADABLE, name)),
            SecretsError::Command { name, .. } | SecretsError::CommandFailed { name, .. } => {
                Some((SECRET_PROGRAM_FAILED, name))
            }
            SecretsError::Empty { name } => Some((SECRET_EMPTY, name)),
            SecretsError::WipeOnFork(_) | SecretsError::TrustFile(_) | SecretsError::Keeper(_) => {
                None
            }
        }
    }
}

/// Reason code: a secret's variable is not set in the host's environment.
pub const SECRET_UNSET: &str = "secret_unset";
/// Reason code: a secret's file cannot be read.
pub const SECRET_UNREADABLE: &str = "secret_unreadable";
/// Reason code: a secret's program cannot be run, or failed.
pub const SECRET_PROGRAM_FAILED: &str = "secret_program_failed";
/// Reason code: a secret's value is empty.
pub const SECRET_EMPTY: &str = "secret_empty";

/// Why the caller's [`Keeper`] failed: its own error, said as it is.
pub type KeeperError = Box<dyn std::error::Error + Send + Sync>;

/// The custody of a sandbox's secrets once their values are read: the
/// caller's (the runtime's egress proxy substitutes them towards their
/// hosts).
pub trait Keeper {
    /// Before the clone: a fresh placeholder, which the sandbox holds in
    /// place of a value.
    fn placeholder(&mut self) -> Result<String, KeeperError>;
    /// After the clone, before the init builds its root: the values, read
    /// now. Returns the certificate (PEM) of the authority the sandbox is
    /// to trust.
    fn keep(&mut self, secrets: Vec<SecretValue>) -> Result<String, KeeperError>;
}

/// One secret's value, read on the host, with its placeholder and its spec
/// (the hosts it is for). The value is zeroed when dropped: a keeper takes
/// it with `std::mem::take`.
pub struct SecretValue {
    pub spec: SecretSpec,
    pub placeholder: String,
    pub value: Vec<u8>,
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretValue")
            .field("name", &self.spec.name)
            .field("placeholder", &self.placeholder)
            .finish_non_exhaustive()
    }
}

impl Drop for SecretValue {
    fn drop(&mut self) {
        self.value.zeroize();
    }
}

/// Memory the clone receives as zeros (`MADV_WIPEONFORK`); zeroed and
/// unmapped when dropped.
struct WipeOnFork {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
}

impl WipeOnFork {
    fn new(len: usize) -> Result<WipeOnFork, SecretsError> {
        let cap = len.max(1).div_ceil(4096) * 4096;
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(SecretsError::WipeOnFork(Errno::last()));
        }
        let Some(nn) = NonNull::new(ptr.cast::<u8>()) else {
            return Err(SecretsError::WipeOnFork(Errno::EINVAL));
        };
        let region = WipeOnFork { ptr: nn, cap, len };
        // SAFETY: the range is the mapping made above.
        let rc = unsafe { libc::madvise(ptr, cap, libc::MADV_WIPEONFORK) };
        if rc != 0 {
            return Err(SecretsError::WipeOnFork(Errno::last()));
        }
        Ok(region)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `cap >= len` bytes mapped read-write and
        // owned by this value alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for WipeOnFork {
    fn drop(&mut self) {
        self.bytes_mut().zeroize();
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.cap) };
    }
}

/// Move the value of the host variable `variable` out of the environment
/// into wipe-on-fork memory, and erase it where it was. `None` when the
/// variable is not set.
fn take_variable(variable: &str) -> Result<Option<WipeOnFork>, SecretsError> {
    let Ok(key) = CString::new(variable) else {
        return Ok(None);
    };
    // SAFETY: the supervisor is single-threaded here (no runtime or helper
    // thread exists before the clone), so nothing changes the environment
    // while it is read; `getenv` returns a pointer into the environment
    // block or NULL.
    let value = unsafe { libc::getenv(key.as_ptr()) };
    if value.is_null() {
        return Ok(None);
    }
    // SAFETY: `value` is a NUL-terminated string of the environment block.
    let len = unsafe { CStr::from_ptr(value) }.to_bytes().len();
    let region = WipeOnFork::new(len)?;
    // SAFETY: `value` has `len` readable and writable bytes (the
    // environment block is the process's own memory), `region` as many,
    // and the two do not overlap. The old bytes are overwritten with zeros
    // through volatile writes so the copy the clone inherits is erased.
    unsafe {
        std::ptr::copy_nonoverlapping(value.cast::<u8>(), region.ptr.as_ptr(), len);
        std::slice::from_raw_parts_mut(value.cast::<u8>(), len).zeroize();
    }
    Ok(Some(region))
}

/// The host's environment without the variables in `except`, whose values
/// are not copied anywhere (they may be secrets' sources).
pub fn host_environment(except: &[String]) -> Vec<(String, String)> {
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    let mut out = Vec::new();
    // SAFETY: called from the single-threaded front door, before any thread
    // that could change the environment exists; `environ` is a
    // NULL-terminated array of NUL-terminated strings.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let entry = CStr::from_ptr(*p).to_bytes();
            p = p.add(1);
            let Some(eq) = entry.iter().position(|b| *b == b'=') else {
                continue;
            };
            let (k, v) = (&entry[..eq], &entry[eq + 1..]);
            if except.iter().any(|e| e.as_bytes() == k) {
                continue;
            }
            if let (Ok(k), Ok(v)) = (std::str::from_utf8(k), std::str::from_utf8(v)) {
                out.push((k.to_string(), v.to_string()));
            }
        }
    }
    out
}

struct Entry {
    spec: SecretSpec,
    placeholder: String,
    taken: Option<WipeOnFork>,
}

/// The secrets of one run, between the time before the clone and the
/// start of the proxy.
pub struct SecretPlan {
    entries: Vec<Entry>,
    /// The trust bundle and the authority's certificate, as memory files
    /// the init copies into the sandbox's root; written after the clone.
    bundle: OwnedFd,
    ca: OwnedFd,
}

/// The sandbox's copies of the trust files' descriptors.
#[derive(Debug)]
pub struct TrustFiles {
    pub bundle: OwnedFd,
    pub ca: OwnedFd,
}

impl SecretPlan {
    /// Before the clone: a placeholder per secret (from `keeper`), values
    /// from the host's environment moved where the clone does not get
    /// them, and empty trust files.
    pub fn prepare<K: Keeper + ?Sized>(
        secrets: &[SecretSpec],
        keeper: &mut K,
    ) -> Result<SecretPlan, SecretsError> {
        let mut entries: Vec<Entry> = Vec::new();
        for spec in secrets {
            let taken = match &spec.source {
                SecretSource::Env(variable) => {
                    // A variable two secrets read was erased by the first.
                    let earlier = entries
                        .iter_mut()
                        .find(|e| e.taken.is_some() && e.spec.source_variable() == Some(variable));
                    let region = match earlier.and_then(|e| e.taken.as_mut()) {
                        Some(first) => {
                            let mut copy = WipeOnFork::new(first.len)?;
                            copy.bytes_mut().copy_from_slice(first.bytes_mut());
                            Some(copy)
                        }
                        None => take_variable(variable)?,
                    };
                    Some(region.ok_or_else(|| SecretsError::MissingVariable {
                        name: spec.name.clone(),
                        variable: variable.clone(),
                    })?)
                }
                _ => None,
            };
            entries.push(Entry {
                spec: spec.clone(),
                placeholder: keeper.placeholder().map_err(SecretsError::Keeper)?,
                taken,
            });
        }
        let memfd = |name: &CStr| {
            nix::sys::memfd::memfd_create(name, nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .map_err(|e| SecretsError::TrustFile(e.into()))
        };
        Ok(SecretPlan {
            entries,
            bundle: memfd(c"warden-ca-bundle")?,
            ca: memfd(c"warden-ca")?,
        })
    }

    /// Each secret's variable and the placeholder the sandbox gets in it.
    pub fn placeholders(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (e.spec.name.as_str(), e.placeholder.as_str()))
    }

    /// Put each secret's placeholder in `env`, in place of any value the
    /// variable had there.
    pub fn place(&self, env: &mut Vec<(String, String)>) {
        for (name, placeholder) in self.placeholders() {
            env.retain(|(k, _)| k != name);
            env.push((name.to_string(), placeholder.to_string()));
        }
    }

    /// For a backend whose sandbox takes its environment from a spec
    /// (gVisor, a microVM): the plan for `spec`'s secrets (none when it
    /// names none) and a copy of `spec` holding their placeholders.
    pub fn for_spec<K: Keeper + ?Sized>(
        spec: &SandboxSpec,
        keeper: &mut K,
    ) -> Result<(Option<SecretPlan>, SandboxSpec), SecretsError> {
        let plan = match &spec.network {
            NetworkSpec::Egress(e) if !e.secrets.is_empty() => {
                Some(SecretPlan::prepare(&e.secrets, keeper)?)
            }
            _ => None,
        };
        let mut own = spec.clone();
        if let Some(plan) = &plan {
            plan.place(&mut own.env);
        }
        Ok((plan, own))
    }

    /// Descriptors of the trust files for the sandbox's init.
    pub fn trust_files(&self) -> Result<TrustFiles, SecretsError> {
        Ok(TrustFiles {
            bundle: self.bundle.try_clone().map_err(SecretsError::TrustFile)?,
            ca: self.ca.try_clone().map_err(SecretsError::TrustFile)?,
        })
    }

    /// After the clone: read every value, hand them to `keeper`, and fill
    /// the trust files with the authority it answers with (before the init
    /// builds the root).
    pub fn hand_over<K: Keeper + ?Sized>(self, keeper: &mut K) -> Result<(), SecretsError> {
        let mut secrets = Vec::new();
        for mut e in self.entries {
            let name = e.spec.name.clone();
            let value = match (&e.spec.source, e.taken.as_mut()) {
                (SecretSource::Env(_), Some(region)) => region.bytes_mut().to_vec(),
                (SecretSource::Env(variable), None) => {
                    return Err(SecretsError::MissingVariable {
                        name,
                        variable: variable.clone(),
                    })
                }
                (SecretSource::File(path), _) => {
                    trimmed(std::fs::read(path).map_err(|source| SecretsError::File {
                        name: name.clone(),
                        path: path.clone(),
                        source,
                    })?)
                }
                (SecretSource::Command(argv), _) => run_command(&name, argv)?,
            };
            if value.is_empty() {
                return Err(SecretsError::Empty { name });
            }
            secrets.push(SecretValue {
                spec: e.spec.clone(),
                placeholder: e.placeholder.clone(),
                value,
            });
        }
        let ca = keeper.keep(secrets).map_err(SecretsError::Keeper)?;
        let ca = ca.as_bytes();
        let mut bundle = std::fs::read(Path::new(HOST_BUNDLE)).unwrap_or_default();
        if !bundle.is_empty() && !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(ca);
        let mut f = std::fs::File::from(self.bundle);
        f.write_all(&bundle).map_err(SecretsError::TrustFile)?;
        let mut f = std::fs::File::from(self.ca);
        f.write_all(ca).map_err(SecretsError::TrustFile)?;
        Ok(())
    }
}

/// One trailing newline (`\n` or `\r\n`) dropped, as files and programs end
/// their output.
fn trimmed(mut v: Vec<u8>) -> Vec<u8> {
    if v.ends_with(b"\n") {
        v.pop();
        if v.ends_with(b"\r") {
            v.pop();
        }
    }
    v
}

/// The search path of a secret's program: a bare program name is found
/// here, and the program gets it as its `PATH`, whatever the environment
/// of whoever started the supervisor (a daemon started from a project
/// directory with `PATH=.:...` or a venv's `bin/` first).
pub const PROGRAM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The working directory of a secret's program: fixed, so that a relative
/// word of its arguments means one thing wherever the supervisor was
/// started.
pub const PROGRAM_DIR: &str = "/";

/// Where a secret's program `program` is: itself when it names a path
/// (absolute; a relative one is refused when the profile is read), else
/// the first executable file of that name on [`PROGRAM_PATH`].
pub fn program_path(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    PROGRAM_PATH
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
}

/// Run a program (no shell) on the host and take its output as the value:
/// from [`PROGRAM_DIR`], with [`PROGRAM_PATH`] and only the variables of
/// [`crate::settings::PROGRAM_KEEPS`], so nothing about what it runs
/// depends on where the supervisor was started.
fn run_command(name: &str, argv: &[String]) -> Result<Vec<u8>, SecretsError> {
    let program = argv.first().cloned().unwrap_or_default();
    let found = program_path(&program).ok_or_else(|| SecretsError::Command {
        name: name.to_string(),
        program: program.clone(),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })?;
    // As the binary read them (`crate::settings`): a library reads no
    // environment.
    let kept = crate::settings::Settings::current()
        .program_env
        .iter()
        .cloned();
    let out = std::process::Command::new(&found)
        .args(argv.iter().skip(1))
        .current_dir(PROGRAM_DIR)
        .env_clear()
        .env("PATH", PROGRAM_PATH)
        .envs(kept)
        .stdin(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|source| SecretsError::Command {
            name: name.to_string(),
            program: program.clone(),
            source,
        })?;
    if !out.status.success() {
        let mut stdout = out.stdout;
        stdout.zeroize();
        return Err(SecretsError::CommandFailed {
            name: name.to_string(),
            program,
            status: out.status,
        });
    }
    Ok(trimmed(out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_trailing_newline_is_dropped() {
        assert_eq!(trimmed(b"tok\n".to_vec()), b"tok");
        assert_eq!(trimmed(b"tok\r\n".to_vec()), b"tok");
        assert_eq!(trimmed(b"tok\n\n".to_vec()), b"tok\n");
        assert_eq!(trimmed(b"tok".to_vec()), b"tok");
    }

    #[test]
    fn wipe_on_fork_memory_reaches_a_forked_child_as_zeros() {
        let mut r = WipeOnFork::new(5).unwrap();
        r.bytes_mut().copy_from_slice(b"hello");
        // SAFETY: the child only reads memory and calls _exit.
        match unsafe { libc::fork() } {
            0 => {
                let code = if r.bytes_mut() == [0u8; 5] { 0 } else { 1 };
                // SAFETY: ends the forked test process at once.
                unsafe { libc::_exit(code) }
            }
            pid if pid > 0 => {
                let mut status = 0;
                // SAFETY: waits for the child forked above.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
                assert_eq!(r.bytes_mut(), b"hello");
            }
            _ => panic!("fork failed"),
        }
    }
}

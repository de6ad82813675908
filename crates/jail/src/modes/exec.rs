//! The exec allowlist's calls, put to the supervisor so that every refused
//! exec is recorded (`exec_refused`), whichever layer of the kernel would
//! refuse it (see docs/allow-exec.md, "What is recorded").
//!
//! With an allowlist the notifying filter also holds `execve`, `execveat`
//! and an executable `memfd_create` ([`crate::seccomp::EXEC_NOTIFY_RULES`]).
//! For an exec, the judging thread finds the file as the caller would
//! ([`super::walk`]: its root, its working directory, its descriptors) and
//! looks at it: a file with no execute bit, on a `noexec` mount (everything
//! the sandbox writes), or not among the files the init granted Landlock's
//! execute right (their device and inode, sent by the init with the
//! listener), or a script whose `#!` interpreter is one of those, is
//! refused here with `EACCES` and a record naming it. Anything else is let
//! through (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`) for the kernel to decide as
//! it always did.
//!
//! Never an allow: the path is read from the caller's memory and resolved
//! before the kernel resolves it again, so a second thread, or a link
//! swapped meanwhile, can make the kernel open another file than the one
//! judged here. That only ever goes one way: what is let through is then
//! checked by the kernel (Landlock's execute right, the `noexec` mounts),
//! which holds whatever was judged here; what is refused here would at
//! worst have been a program the kernel allowed, and the sandbox refused
//! itself by the swap. The record can be wrong in such a race (a file
//! named that the kernel never opened, or a refusal the kernel made that
//! is not recorded here): the records describe the sandbox's attempts,
//! the kernel enforces the list.
//!
//! Anything this module cannot find out (a caller gone, a path it cannot
//! read or resolve, a mount it cannot ask) is let through to the kernel,
//! which refuses or runs it as before: the judge adds refusals and
//! records, never an exec.

use super::caller::Caller;
use super::walk::{self, Base, Named};
use libseccomp::ScmpNotifReq;
use rustix::fs::{fstat, fstatvfs, Mode, OFlags, StatVfsMountFlags};
use rustix::io::Errno;
use std::collections::HashSet;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The first byte of the message that hands the listener over: the
/// allowlist's files follow (see [`send_allowed`]).
pub(crate) const WITH_EXEC: u8 = b'x';
/// A message of allowed files: device and inode, 16 bytes each.
const FILES: u8 = b'i';
/// The last message: every allowed file was sent.
const END: u8 = b'e';
/// Allowed files per message, well within a socket's buffer.
const FILES_PER_MESSAGE: usize = 2048;
/// The longest name a record carries (the kernel's longest path); a
/// longer one is never cut (a prefix of a path is another path, which
/// would be asked about and kept): its record says it was too long.
const NAME_MAX: usize = 4096;
/// The length a record gives for a name too long to carry: the name's
/// real length follows (four bytes, little endian), the name does not.
const TOO_LONG: u16 = u16::MAX;
/// What the kernel reads of a script for its `#!` line.
const SHEBANG_MAX: usize = 256;

/// Why the supervisor refused an exec: the `by` of its `exec_refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum By {
    /// Not among the files the allowlist grants (Landlock would refuse).
    Allowlist = 1,
    /// On a `noexec` mount: a place the sandbox writes.
    Noexec = 2,
    /// No execute bit (a sealed memfd, a file written without one).
    Mode = 3,
    /// A memfd that could be executed (`memfd_create` without
    /// `MFD_NOEXEC_SEAL`).
    Seccomp = 4,
}

impl By {
    /// As the event names it.
    pub fn name(self) -> &'static str {
        match self {
            By::Allowlist => "allowlist",
            By::Noexec => "noexec",
            By::Mode => "mode",
            By::Seccomp => "seccomp",
        }
    }

    fn from_byte(b: u8) -> Option<By> {
        [By::Allowlist, By::Noexec, By::Mode, By::Seccomp]
            .into_iter()
            .find(|by| *by as u8 == b)
    }
}

/// In the init, after the listener: the device and inode of every file
/// the allowlist grants the execute right, as its own root shows them
/// (the supervisor sees the same files through the caller's root).
pub(crate) fn send_allowed(
    channel: &OwnedFd,
    allowed: &crate::exec_rules::Allowed,
) -> Result<(), String> {
    let files: Vec<(u64, u64)> = allowed
        .files()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        })
        .collect();
    let send = |bytes: &[u8]| {
        crate::fdpass::send(channel.as_fd(), bytes, &[])
            .map(drop)
            .map_err(|e| format!("cannot hand the allowlist's files to the supervisor: {e}"))
    };
    for chunk in files.chunks(FILES_PER_MESSAGE) {
        let mut msg = Vec::with_capacity(1 + chunk.len() * 16);
        msg.push(FILES);
        for (dev, ino) in chunk {
            msg.extend_from_slice(&dev.to_le_bytes());
            msg.extend_from_slice(&ino.to_le_bytes());
        }
        send(&msg)?;
    }
    send(&[END])
}

/// In the supervisor: the files [`send_allowed`] sent. `None` when the
/// init stopped before its last message: the judge then refuses only what
/// no list decides (no execute bit, a `noexec` mount).
fn receive_allowed(channel: &OwnedFd) -> Option<HashSet<(u64, u64)>> {
    let mut files = HashSet::new();
    let mut buf = vec![0u8; 1 + FILES_PER_MESSAGE * 16];
    loop {
        let n = match crate::fdpass::recv(channel.as_fd(), &mut buf) {
            Ok((n, _)) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        };
        match buf.get(..n) {
            Some([END]) => return Some(files),
            Some([FILES, rest @ ..]) if rest.len() % 16 == 0 => {
                for e in rest.chunks_exact(16) {
                    let (dev, ino) = e.split_at(8);
                    let num = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                    files.insert((num(dev), num(ino)));
                }
            }
            _ => return None,
        }
    }
}

/// What the judge answers.
pub(super) enum Verdict {
    /// The kernel decides, as without the judge.
    Continue,
    /// Refused here, recorded.
    Refuse(Errno),
}

/// The judge of one sandbox's execs.
pub(super) struct ExecJudge {
    /// The allowlist's files; `None` when they never came whole.
    allowed: Option<HashSet<(u64, u64)>>,
    records: Records,
}

impl ExecJudge {
    /// With the allowlist's files from `channel`, recording on `records`.
    pub fn receive(channel: &OwnedFd, records: OwnedFd) -> ExecJudge {
        let allowed = receive_allowed(channel);
        if allowed.is_none() {
            tracing::debug!(
                "the allowlist's files did not come whole: only noexec places and modes are judged"
            );
        }
        ExecJudge {
            allowed,
            records: Records(records),
        }
    }

    /// Is this call one of [`crate::seccomp::EXEC_NOTIFY_RULES`]?
    pub fn handles(req: &ScmpNotifReq) -> bool {
        matches!(
            i64::from(req.data.syscall.as_raw_syscall()),
            libc::SYS_execve | libc::SYS_execveat | libc::SYS_memfd_create
        )
    }

    pub fn judge(&self, listener: &OwnedFd, req: &ScmpNotifReq) -> Verdict {
        let nr = i64::from(req.data.syscall.as_raw_syscall());
        let args = req.data.args;
        let Ok(tid) = i32::try_from(req.pid) else {
            return Verdict::Continue;
        };
        let addr = if nr == libc::SYS_execveat {
            args[1]
        } else {
            args[0]
        };
        let read = read_string(tid, addr);
        // What was read was the caller's, not a successor's.
        if super::valid(listener, req.id).is_err() {
            return Verdict::Continue;
        }
        if nr == libc::SYS_memfd_create {
            // The filter only sends one that could be executed.
            let mut program = b"/memfd:".to_vec();
            program.extend_from_slice(&read.unwrap_or_default());
            self.records.write(By::Seccomp, &program);
            return Verdict::Refuse(Errno::ACCESS);
        }
        let Ok(path) = read else {
            return Verdict::Continue;
        };
        let at_cwd = nr == libc::SYS_execve || args[0] as u32 as i32 == libc::AT_FDCWD;
        let target = match at_cwd.then(|| in_root(tid, &path)).flatten() {
            Some(found) => found,
            None => match self.resolve_as_caller(req, &path) {
                Some(found) => found,
                None => return Verdict::Continue,
            },
        };
        // What was found was the caller's.
        if super::valid(listener, req.id).is_err() {
            return Verdict::Continue;
        }
        let refused = match self.refusal(&target) {
            Some(by) => Some((by, name_of(&target, &path))),
            None => self.interpreter_refusal(tid, &target),
        };
        match refused {
            Some((by, program)) => {
                self.records.write(by, &program);
                Verdict::Refuse(Errno::ACCESS)
            }
            None => Verdict::Continue,
        }
    }

    /// The file a call names, found one name at a time as the caller
    /// would ([`walk`]): a relative path, a descriptor, a path through
    /// `/proc`.
    fn resolve_as_caller(&self, req: &ScmpNotifReq, path: &[u8]) -> Option<OwnedFd> {
        let nr = i64::from(req.data.syscall.as_raw_syscall());
        let args = req.data.args;
        let caller = Caller::open(req.pid).ok()?;
        let named = if nr == libc::SYS_execveat {
            let flags = args[4] as u32 as i32;
            let dirfd = args[0] as u32 as i32;
            Named {
                base: if dirfd == libc::AT_FDCWD {
                    Base::Cwd
                } else {
                    Base::Fd(args[0])
                },
                path,
                follow: flags & libc::AT_SYMLINK_NOFOLLOW == 0,
                empty_is_base: flags & libc::AT_EMPTY_PATH != 0,
            }
        } else {
            Named {
                base: Base::Cwd,
                path,
                follow: true,
                empty_is_base: false,
            }
        };
        walk::resolve(&caller, &named).ok()
    }

    /// Why the kernel would refuse to execute `file`, when it would for
    /// sure; `None` otherwise (the kernel then decides).
    fn refusal(&self, file: &OwnedFd) -> Option<By> {
        let st = fstat(file).ok()?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return None;
        }
        if st.st_mode & 0o111 == 0 {
            return Some(By::Mode);
        }
        if fstatvfs(file)
            .ok()?
            .f_flag
            .contains(StatVfsMountFlags::NOEXEC)
        {
            return Some(By::Noexec);
        }
        let allowed = self.allowed.as_ref()?;
        (!allowed.contains(&(st.st_dev, st.st_ino))).then_some(By::Allowlist)
    }

    /// A script's `#!` interpreter the kernel would refuse to open for
    /// execution (Landlock checks it as it checks the script), named by
    /// its path as the script gives it.
    fn interpreter_refusal(&self, tid: i32, script: &OwnedFd) -> Option<(By, Vec<u8>)> {
        let interpreter = shebang(script)?;
        let file = in_root(tid, &interpreter)?;
        let by = self.refusal(&file)?;
        Some((by, name_of(&file, &interpreter)))
    }
}

/// The NUL-terminated string at `addr` in the memory of the thread `tid`
/// (on the host), without its NUL: one `process_vm_readv` per page it
/// spans, never across a page the caller may not have mapped.
fn read_string(tid: i32, addr: u64) -> Result<Vec<u8>, Errno> {
    use nix::sys::uio::{process_vm_readv, RemoteIoVec};
    const PATH_MAX: usize = 4096;
    let pid = nix::unistd::Pid::from_raw(tid);
    let mut out = Vec::new();
    let mut at = usize::try_from(addr).map_err(|_| Errno::FAULT)?;
    let mut page = [0u8; 4096];
    while out.len() < PATH_MAX {
        let want = 4096 - at % 4096;
        let mut local = [std::io::IoSliceMut::new(&mut page[..want])];
        let remote = [RemoteIoVec {
            base: at,
            len: want,
        }];
        let n = process_vm_readv(pid, &mut local, &remote).map_err(|_| Errno::FAULT)?;
        if n == 0 {
            return Err(Errno::FAULT);
        }
        if let Some(end) = page[..n].iter().position(|b| *b == 0) {
            out.extend_from_slice(&page[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&page[..n]);
        at = at.checked_add(n).ok_or(Errno::FAULT)?;
    }
    Err(Errno::NAMETOOLONG)
}

/// An absolute path, resolved by the kernel in one call beneath the
/// root of the thread `tid` as that thread would resolve it (`..` and
/// links held beneath it): what most execs name (a shell's search of its
/// `PATH`). `None` for anything else: a relative path, a path through
/// `/proc` (whose `self` would be the supervisor, and whose descriptor
/// links are the caller's: [`walk`] takes those), a magic link.
fn in_root(tid: i32, path: &[u8]) -> Option<OwnedFd> {
    use rustix::fs::{openat, openat2, ResolveFlags, CWD};
    if !path.starts_with(b"/") || path.starts_with(b"/proc/") || path == b"/proc" {
        return None;
    }
    let root = openat(
        CWD,
        format!("/proc/{tid}/root"),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    openat2(
        &root,
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()
}

/// The interpreter a script's `#!` line names, as the kernel reads it
/// (spaces and tabs around it, the line's first word).
fn shebang(script: &OwnedFd) -> Option<Vec<u8>> {
    // Only a regular file is opened to be read: opening a device, a FIFO or
    // a terminal has effects of its own, and as the supervisor it would
    // be the supervisor's (`/dev/tty` is the person's terminal, whose
    // typed-ahead line a read would take). The kernel runs nothing else.
    if fstat(script).ok()?.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let mut file = std::fs::File::from(
        rustix::fs::openat(
            rustix::fs::CWD,
            format!("/proc/self/fd/{}", script.as_raw_fd()),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .ok()?,
    );
    let mut head = [0u8; SHEBANG_MAX];
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let word = line
        .split(|b| *b == b' ' || *b == b'\t')
        .find(|w| !w.is_empty())?;
    Some(word.to_vec())
}

/// The file's path as the sandbox sees it: the kernel's name of the
/// descriptor (its path in the sandbox's own mount namespace, `/memfd:NAME
/// (deleted)` for a memfd), or the caller's own words when the kernel
/// gives no absolute one.
fn name_of(file: &OwnedFd, asked: &[u8]) -> Vec<u8> {
    match rustix::fs::readlinkat(
        rustix::fs::CWD,
        format!("/proc/self/fd/{}", file.as_raw_fd()),
        Vec::new(),
    ) {
        Ok(name) if name.as_bytes().starts_with(b"/") => name.into_bytes(),
        _ => asked.to_vec(),
    }
}

/// The write end of the records' pipe, read by the supervisor's loop
/// ([`RecordReader`]).
struct Records(OwnedFd);

impl Records {
    /// One record: the reason's byte, the name's length (two bytes, little
    /// endian), the name; for a name longer than [`NAME_MAX`], [`TOO_LONG`]
    /// and the name's length (four bytes) instead of the name, never a
    /// part of it. A full pipe holds the judge (and with it the sandbox's
    /// execs) until the loop has read: a record is never dropped.
    fn write(&self, by: By, program: &[u8]) {
        let mut frame = Vec::with_capacity(3 + program.len().min(NAME_MAX));
        frame.push(by as u8);
        match u16::try_from(program.len()) {
            Ok(len) if program.len() <= NAME_MAX => {
                frame.extend_from_slice(&len.to_le_bytes());
                frame.extend_from_slice(program);
            }
            _ => {
                let len = u32::try_from(program.len()).unwrap_or(u32::MAX);
                frame.extend_from_slice(&TOO_LONG.to_le_bytes());
                frame.extend_from_slice(&len.to_le_bytes());
            }
        }
        let mut rest = frame.as_slice();
        while !rest.is_empty() {
            match rustix::io::write(&self.0, rest) {
                Ok(0) => return,
                Ok(n) => rest = &rest[n..],
                Err(Errno::INTR) => {}
                // The loop has gone: the sandbox is over.
                Err(_) => return,
            }
        }
    }
}

/// The supervisor's end of the records' pipe: the judge's refusals, as
/// events.
pub struct RecordReader {
    fd: OwnedFd,
    pending: Vec<u8>,
}

impl RecordReader {
    /// A pipe: the reader (non-blocking), and the write end for
    /// [`super::watch`].
    pub fn pipe() -> std::io::Result<(RecordReader, OwnedFd)> {
        let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        rustix::fs::fcntl_setfl(&rd, OFlags::NONBLOCK)?;
        Ok((
            RecordReader {
                fd: rd,
                pending: Vec::new(),
            },
            wr,
        ))
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The records written so far, as events; `true` once the judge is
    /// gone (end of file: nothing more will come).
    pub fn drain(&mut self) -> (Vec<warden_audit::EventKind>, bool) {
        let mut ended = false;
        let mut buf = [0u8; 8192];
        loop {
            match rustix::io::read(&self.fd, &mut buf) {
                Ok(0) => {
                    ended = true;
                    break;
                }
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(Errno::INTR) => {}
                Err(_) => break,
            }
        }
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(&[b, lo, hi]) = self.pending.get(at..at + 3) {
            let len = u16::from_le_bytes([lo, hi]);
            let (program, size) = if len == TOO_LONG {
                let Some(&[a, b2, c, d]) = self.pending.get(at + 3..at + 7) else {
                    break;
                };
                (too_long(u32::from_le_bytes([a, b2, c, d])), 7)
            } else {
                let len = usize::from(len);
                let Some(name) = self.pending.get(at + 3..at + 3 + len) else {
                    break;
                };
                (PathBuf::from(std::ffi::OsStr::from_bytes(name)), 3 + len)
            };
            if let Some(by) = By::from_byte(b) {
                out.push(warden_audit::EventKind::ExecRefused {
                    program: Some(program),
                    rule: "allow_exec".into(),
                    by: by.name().into(),
                });
            }
            at += size;
        }
        self.pending.drain(..at);
        (out, ended)
    }
}

/// What a record names for a refused file whose name was too long to
/// carry: not a path (it never starts with `/`), so it is never asked
/// about nor kept as a program, and it says why.
fn too_long(len: u32) -> PathBuf {
    PathBuf::from(format!("[a name of {len} bytes, too long to judge]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_is_opened_for_its_interpreter_line() {
        // A FIFO's writer waits in open() until a reader comes: were the
        // judge to open it (as it would `/dev/tty`, the person's terminal),
        // the writer would go on.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = fifo.clone();
        std::thread::spawn(move || {
            let opened = std::fs::OpenOptions::new().write(true).open(&writer);
            let _ = tx.send(opened.is_ok());
        });
        let target = rustix::fs::openat(
            rustix::fs::CWD,
            &fifo,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        assert_eq!(shebang(&target), None);
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "the judge opened the FIFO"
        );
        // Let the writer go.
        let _reader = std::fs::File::open(&fifo).unwrap();
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(5)), Ok(true));
        // A script's line is still read.
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/usr/bin/python3 -u\nprint(1)\n").unwrap();
        let target = rustix::fs::openat(
            rustix::fs::CWD,
            &script,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        assert_eq!(shebang(&target), Some(b"/usr/bin/python3".to_vec()));
    }

    #[test]
    fn a_record_written_by_the_judge_is_read_whole_as_its_event_even_in_pieces() {
        let (mut reader, wr) = RecordReader::pipe().unwrap();
        let records = Records(wr);
        records.write(By::Noexec, b"/workspace/copy");
        records.write(By::Seccomp, b"/memfd:elf");
        let (events, ended) = reader.drain();
        assert!(!ended);
        let programs: Vec<_> = events
            .iter()
            .map(|e| match e {
                warden_audit::EventKind::ExecRefused { program, by, .. } => {
                    (program.clone().unwrap(), by.clone())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            programs,
            [
                (PathBuf::from("/workspace/copy"), "noexec".to_string()),
                (PathBuf::from("/memfd:elf"), "seccomp".to_string())
            ]
        );
        // Half a record waits for its other half.
        rustix::io::write(&records.0, &[By::Mode as u8, 3, 0, b'/']).unwrap();
        assert!(reader.drain().0.is_empty());
        rustix::io::write(&records.0, b"ab").unwrap();
        assert_eq!(reader.drain().0.len(), 1);
        drop(records);
        assert!(reader.drain().1, "the end of the judge is seen");
    }

    #[test]
    fn a_name_too_long_to_carry_is_recorded_as_too_long_never_as_a_part_of_it() {
        let (mut reader, wr) = RecordReader::pipe().unwrap();
        let records = Records(wr);
        let longest = format!("/{}", "a".repeat(NAME_MAX - 1));
        let longer = format!("/{}/id", "a".repeat(NAME_MAX));
        records.write(By::Allowlist, longest.as_bytes());
        records.write(By::Allowlist, longer.as_bytes());
        records.write(By::Allowlist, b"/usr/bin/id");
        let mut events = Vec::new();
        let start = std::time::Instant::now();
        while events.len() < 3 {
            assert!(start.elapsed() < std::time::Duration::from_secs(5));
            events.extend(reader.drain().0);
        }
        let programs: Vec<_> = events
            .iter()
            .map(|e| match e {
                warden_audit::EventKind::ExecRefused {
                    program: Some(p), ..
                } => p.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(programs[0], PathBuf::from(&longest));
        assert_eq!(
            programs[1],
            PathBuf::from(format!(
                "[a name of {} bytes, too long to judge]",
                longer.len()
            ))
        );
        assert!(!programs[1].is_absolute());
        // The records after it are read as before.
        assert_eq!(programs[2], PathBuf::from("/usr/bin/id"));
        // Half of a too-long record waits for its other half.
        rustix::io::write(&records.0, &[By::Allowlist as u8, 0xff, 0xff, 9]).unwrap();
        assert!(reader.drain().0.is_empty());
        rustix::io::write(&records.0, &[0x10, 0, 0]).unwrap();
        assert_eq!(reader.drain().0.len(), 1);
    }

    #[test]
    fn the_embedded_notifying_filters_are_the_ones_the_tables_build() {
        let Some(arch) = crate::seccomp::Arch::native() else {
            return;
        };
        for (exec, embedded) in [
            (false, super::super::NOTIFY_PROGRAM),
            (true, super::super::NOTIFY_EXEC_PROGRAM),
        ] {
            let file = tempfile::tempfile().unwrap();
            crate::seccomp::build_notify_filter_for(arch, exec)
                .unwrap()
                .export_bpf(&file)
                .unwrap();
            let built = std::fs::read(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
            assert!(!built.is_empty());
            assert_eq!(built, embedded, "exec: {exec}");
        }
        assert_ne!(
            super::super::NOTIFY_PROGRAM,
            super::super::NOTIFY_EXEC_PROGRAM
        );
    }

    #[test]
    fn a_scripts_interpreter_is_the_first_word_of_its_first_line() {
        let dir = tempfile::tempdir().unwrap();
        for (body, want) in [
            (&b"#!/bin/sh\necho\n"[..], Some(&b"/bin/sh"[..])),
            (b"#! \t/usr/bin/env python3 -u\n", Some(b"/usr/bin/env")),
            (b"#!\n", None),
            (b"\x7fELF", None),
        ] {
            let p = dir.path().join("s");
            std::fs::write(&p, body).unwrap();
            let fd: OwnedFd = std::fs::File::open(&p).unwrap().into();
            assert_eq!(shebang(&fd).as_deref(), want, "{body:?}");
        }
    }

    #[test]
    fn a_refused_file_is_named_by_the_kernels_path_of_it_not_the_callers_words() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prog");
        std::fs::write(&p, b"x").unwrap();
        let fd: OwnedFd = std::fs::File::open(&p).unwrap().into();
        assert_eq!(name_of(&fd, b"./prog"), p.as_os_str().as_bytes());
    }
}

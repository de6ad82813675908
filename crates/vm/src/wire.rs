//! The channel between the host side of a VM sandbox and the guest's init:
//! a byte stream (a virtio-serial port in the guest, a Unix socket on the
//! host) cut into frames.
//!
//! A frame is a 13-byte header, `kind` (1 byte), `id` (u64, little endian:
//! which process the frame is about; 0 for the machine itself) and the
//! payload's length (u32), then the payload: JSON for control frames, raw
//! bytes for a process's stdin, stdout and stderr. Unlike the process
//! backend's spawn protocol no descriptor can cross a VM's boundary, so the
//! host relays each process's streams through here.
//!
//! A connection into the guest (the daemon reaching a desktop's screen or
//! its browser's DevTools) is a stream of its own: `connect` names the
//! target on the guest's loopback, `connected` or `failed` answers, then
//! its bytes travel as `stdin` (towards the guest's service) and `stdout`
//! frames (back), its ends as `stdin_eof` and `ended`. Its id has
//! [`CONNECTION`] set, so that it never names a process.
//!
//! Both sides read the other's frames as untrusted input: a payload larger
//! than [`MAX_PAYLOAD`] or an unknown kind ends the channel.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Largest payload of one frame.
pub const MAX_PAYLOAD: usize = 256 * 1024;
/// Largest chunk of a stream in one frame.
pub const CHUNK: usize = 32 * 1024;
/// The bit of a frame's id that makes it a connection's, not a process's.
pub const CONNECTION: u64 = 1 << 63;
/// The name of the virtio-serial port the guest's init serves on.
pub const PORT_NAME: &str = "warden.0";

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Host to guest: start a process ([`Spawn`] as JSON).
    Spawn = 1,
    /// Host to guest: bytes for a process's stdin.
    Stdin = 2,
    /// Host to guest: the process's stdin is at its end.
    StdinEof = 3,
    /// Host to guest: a signal for a process and its group (i32 as JSON).
    Signal = 4,
    /// Host to guest: SIGTERM to every process of the guest.
    TermAll = 5,
    /// Host to guest: power off.
    Shutdown = 6,
    /// Host to guest: connect to a service on the guest's own loopback
    /// (a `warden_protocol::connect::Target`, as JSON).
    Connect = 7,
    /// Host to guest, once, to a guest parked at the template's point:
    /// this sandbox's own settings, seed and clock ([`Attach`] as JSON).
    Attach = 8,
    /// Guest to host: the init is parked at the template's point (kernel
    /// booted, modules loaded, channel open, nothing of a sandbox
    /// attached) and waits for [`Kind::Attach`].
    Parked = 9,
    /// Guest to host: the init serves ([`Ready`] as JSON).
    Ready = 10,
    /// Guest to host: the process runs (its PID in the guest, as JSON).
    Spawned = 11,
    /// Guest to host: it could not be started (an errno, as JSON).
    Failed = 12,
    /// Guest to host: bytes the process wrote to its stdout.
    Stdout = 13,
    /// Guest to host: bytes the process wrote to its stderr.
    Stderr = 14,
    /// Guest to host: the process ended ([`Ended`] as JSON), after every
    /// byte of its stdout and stderr.
    Ended = 15,
    /// Guest to host: the init cannot go on (a message, as JSON).
    Fatal = 16,
    /// Guest to host: the connection asked for is made.
    Connected = 17,
    /// Host to guest, before a pause to disk: freeze every process of the
    /// sandbox and unmount the shares, so that the VMM can save the guest.
    Release = 18,
    /// Guest to host: the answer to [`Kind::Release`] (`null` when the
    /// shares are released and the processes frozen, else why not, with
    /// nothing changed, as JSON).
    Released = 19,
    /// Host to guest, after a resume from disk (or a refused save): mount
    /// the shares again, step the clock and let the processes go on
    /// ([`Reattach`] as JSON).
    Reattach = 20,
    /// Guest to host: the answer to [`Kind::Reattach`] (`null`, or why
    /// not, as JSON).
    Reattached = 21,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        Some(match b {
            1 => Spawn,
            2 => Stdin,
            3 => StdinEof,
            4 => Signal,
            5 => TermAll,
            6 => Shutdown,
            7 => Connect,
            8 => Attach,
            9 => Parked,
            10 => Ready,
            11 => Spawned,
            12 => Failed,
            13 => Stdout,
            14 => Stderr,
            15 => Ended,
            16 => Fatal,
            17 => Connected,
            18 => Release,
            19 => Released,
            20 => Reattach,
            21 => Reattached,
            _ => return None,
        })
    }
}

/// A request to start a process in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spawn {
    pub argv: Vec<String>,
    /// The complete environment of the process.
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// A terminal of the guest's own as the process's controlling
    /// terminal and 0, 1, 2 (its output comes as `stdout` frames).
    #[serde(default)]
    pub tty: bool,
    /// The terminal's size, rows and columns.
    #[serde(default)]
    pub winsize: Option<(u16, u16)>,
}

/// What the guest's init says once it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// The guest kernel's release (`uname -r` in the guest).
    pub kernel: String,
    /// What the init could apply to the processes it starts, in words
    /// ("landlock", "seccomp", ...).
    pub layers: Vec<String>,
}

/// What a guest restored from a template is told before it builds its
/// file tree: what a cold boot reads from the kernel's command line, and
/// what must never be shared between two guests restored from one
/// snapshot (the random seed) or is stale after a restore (the clock).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attach {
    /// The `warden.KEY=VALUE` words a cold boot gets on its command line,
    /// as `KEY=VALUE`.
    pub params: Vec<String>,
    /// Fresh random bytes from the host, mixed into the guest kernel's
    /// pool (credited) before its generator is reseeded.
    pub seed: Vec<u8>,
    /// The host's wall clock: seconds and nanoseconds since the epoch.
    pub clock: (i64, u32),
}

impl std::fmt::Debug for Attach {
    // The seed is never written to a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attach")
            .field("params", &self.params)
            .field("seed", &format_args!("[{} bytes]", self.seed.len()))
            .field("clock", &self.clock)
            .finish()
    }
}

/// What a guest brought back from disk is told before its processes go on.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reattach {
    /// The host's wall clock (seconds and nanoseconds since the epoch):
    /// the guest's stood still while it was on disk.
    pub clock: (i64, u32),
    /// Fresh random bytes for the guest's generator, when the restored
    /// guest is a copy that must not share its source's randomness.
    #[serde(default)]
    pub seed: Option<Vec<u8>>,
    /// The copy's own hostname (its source's otherwise stays).
    #[serde(default)]
    pub hostname: Option<String>,
}

impl std::fmt::Debug for Reattach {
    // The seed is never written to a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reattach")
            .field("clock", &self.clock)
            .field("seed", &self.seed.as_ref().map(Vec::len))
            .field("hostname", &self.hostname)
            .finish()
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
}

impl Ended {
    /// The signals a Linux process can end by.
    pub const SIGNALS: std::ops::RangeInclusive<i32> = 1..=64;

    /// This end when a process can have ended so: a signal outside
    /// [`Ended::SIGNALS`] (a guest's forgery, which `128 + signal` would
    /// overflow) is malformed.
    pub fn checked(self) -> Option<Ended> {
        match self {
            Ended::Signaled(s) if !Ended::SIGNALS.contains(&s) => None,
            e => Some(e),
        }
    }

    /// The shell's status for this end: the code, or 128 + the signal;
    /// `None` for a malformed signal.
    pub fn status(self) -> Option<i32> {
        match self.checked()? {
            Ended::Exited(code) => Some(code),
            Ended::Signaled(s) => Some(128 + s),
        }
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    pub id: u64,
    pub payload: Vec<u8>,
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the VM's channel failed")]
    Io(#[from] std::io::Error),
    #[error("the VM's channel sent a frame of unknown kind {0}")]
    UnknownKind(u8),
    #[error("the VM's channel sent a frame of {0} bytes (at most {MAX_PAYLOAD})")]
    TooLarge(usize),
    #[error("cannot read the payload of a {kind:?} frame")]
    Payload {
        kind: Kind,
        #[source]
        source: serde_json::Error,
    },
}

impl Frame {
    pub fn new(kind: Kind, id: u64, payload: Vec<u8>) -> Frame {
        Frame { kind, id, payload }
    }

    /// A control frame with a JSON payload.
    pub fn json<T: Serialize>(kind: Kind, id: u64, value: &T) -> Frame {
        // Serializing these plain types cannot fail; an empty payload
        // would be refused by the reader, never misread.
        let payload = serde_json::to_vec(value).unwrap_or_default();
        Frame { kind, id, payload }
    }

    /// The payload read as JSON.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T, WireError> {
        serde_json::from_slice(&self.payload).map_err(|source| WireError::Payload {
            kind: self.kind,
            source,
        })
    }

    /// Write the frame (header and payload in one write, so that frames of
    /// several writers sharing a lock never interleave).
    pub fn write_to(&self, w: &mut impl Write) -> Result<(), WireError> {
        if self.payload.len() > MAX_PAYLOAD {
            return Err(WireError::TooLarge(self.payload.len()));
        }
        let mut buf = Vec::with_capacity(13 + self.payload.len());
        buf.push(self.kind as u8);
        buf.extend_from_slice(&self.id.to_le_bytes());
        buf.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        buf.extend_from_slice(&self.payload);
        w.write_all(&buf)?;
        w.flush()?;
        Ok(())
    }

    /// The first whole frame at the start of `buf` and how many bytes it
    /// took; `None` while `buf` holds only part of one. A reader that
    /// keeps what it has not parsed yet can go on from another stream
    /// (the restored VMM's, after a pause to disk) mid-frame.
    pub fn parse_prefix(buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
        if buf.len() < 13 {
            return Ok(None);
        }
        let kind = Kind::from_u8(buf[0]).ok_or(WireError::UnknownKind(buf[0]))?;
        let mut id = [0u8; 8];
        id.copy_from_slice(&buf[1..9]);
        let mut len = [0u8; 4];
        len.copy_from_slice(&buf[9..13]);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_PAYLOAD {
            return Err(WireError::TooLarge(len));
        }
        if buf.len() < 13 + len {
            return Ok(None);
        }
        let frame = Frame {
            kind,
            id: u64::from_le_bytes(id),
            payload: buf[13..13 + len].to_vec(),
        };
        Ok(Some((frame, 13 + len)))
    }

    /// Read one frame; `None` at the end of the stream.
    pub fn read_from(r: &mut impl Read) -> Result<Option<Frame>, WireError> {
        let mut head = [0u8; 13];
        let mut got = 0;
        while got < head.len() {
            match r.read(&mut head[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let kind = Kind::from_u8(head[0]).ok_or(WireError::UnknownKind(head[0]))?;
        let mut id = [0u8; 8];
        id.copy_from_slice(&head[1..9]);
        let mut len = [0u8; 4];
        len.copy_from_slice(&head[9..13]);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_PAYLOAD {
            return Err(WireError::TooLarge(len));
        }
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload)?;
        Ok(Some(Frame {
            kind,
            id: u64::from_le_bytes(id),
            payload,
        }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_forged_signal_from_the_guest_is_malformed_and_never_overflows() {
        let f = Frame::new(Kind::Ended, 1, br#"{"signaled":2147483647}"#.to_vec());
        let e = f.parse::<Ended>().expect("well-formed JSON");
        assert_eq!(e.checked(), None);
        assert_eq!(e.status(), None);
        for s in [0, -1, 65, i32::MIN] {
            assert_eq!(Ended::Signaled(s).checked(), None);
        }
        assert_eq!(Ended::Signaled(9).status(), Some(137));
        assert_eq!(Ended::Signaled(64).status(), Some(192));
        assert_eq!(Ended::Exited(3).status(), Some(3));
    }

    use super::*;

    #[test]
    fn frames_round_trip_through_a_stream() {
        let mut buf = Vec::new();
        Frame::new(Kind::Stdout, 7, b"hello".to_vec())
            .write_to(&mut buf)
            .unwrap();
        Frame::json(Kind::Ended, 7, &Ended::Exited(3))
            .write_to(&mut buf)
            .unwrap();
        let mut r = &buf[..];
        let a = Frame::read_from(&mut r).unwrap().unwrap();
        assert_eq!(
            (a.kind, a.id, &a.payload[..]),
            (Kind::Stdout, 7, &b"hello"[..])
        );
        let b = Frame::read_from(&mut r).unwrap().unwrap();
        assert_eq!(b.parse::<Ended>().unwrap(), Ended::Exited(3));
        assert!(Frame::read_from(&mut r).unwrap().is_none());
    }

    #[test]
    fn a_frame_cut_between_two_streams_is_parsed_whole_once_its_rest_arrives() {
        let mut buf = Vec::new();
        Frame::new(Kind::Stdout, 9, b"one frame".to_vec())
            .write_to(&mut buf)
            .unwrap();
        for cut in 0..buf.len() {
            assert!(Frame::parse_prefix(&buf[..cut]).unwrap().is_none());
        }
        let (f, used) = Frame::parse_prefix(&buf).unwrap().unwrap();
        assert_eq!((f.kind, f.id, used), (Kind::Stdout, 9, buf.len()));
        assert_eq!(f.payload, b"one frame");
        assert!(matches!(
            Frame::parse_prefix(&[99u8; 13]),
            Err(WireError::UnknownKind(99))
        ));
    }

    #[test]
    fn an_oversized_or_unknown_frame_ends_the_channel() {
        let mut big = vec![Kind::Stdout as u8];
        big.extend_from_slice(&1u64.to_le_bytes());
        big.extend_from_slice(&(u32::MAX).to_le_bytes());
        assert!(matches!(
            Frame::read_from(&mut &big[..]),
            Err(WireError::TooLarge(_))
        ));
        let mut odd = vec![99u8];
        odd.extend_from_slice(&[0u8; 12]);
        assert!(matches!(
            Frame::read_from(&mut &odd[..]),
            Err(WireError::UnknownKind(99))
        ));
    }
}

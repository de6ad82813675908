//! The client's side of an RFB (VNC) stream, read by the daemon before it
//! reaches a desktop sandbox's VNC server: this is what makes a view-only
//! session view-only. The VNC server cannot tell a watcher from a driver,
//! so the daemon, which knows the token's scope, parses every byte the
//! client sends and passes on only what a watcher may say.
//!
//! The handshake (RFB 3.7 or 3.8, security type None or VNC
//! authentication) is checked for everyone, and ClientInit's shared flag
//! is forced on: a client asking for exclusive access would disconnect
//! every other viewer, the person watching an agent's desktop included.
//! Past the handshake a session with `desktop:control` is passed through
//! unread; a view-only session keeps being parsed message by message:
//! SetPixelFormat, SetEncodings (less the pseudo-encodings that would make
//! a client send messages of other types or change the screen's size),
//! FramebufferUpdateRequest go on; KeyEvent, PointerEvent and
//! ClientCutText are dropped whole; anything else, or anything that does
//! not parse, ends the session (fail closed: a message the filter cannot
//! frame could hide input after it).

/// Most encodings one SetEncodings may list (noVNC sends about 25).
const MAX_ENCODINGS: usize = 1024;
/// Most bytes of clipboard text a view-only client's ClientCutText may
/// announce (it is dropped, never stored: this only bounds the skip).
const MAX_CUT_TEXT: u32 = 16 << 20;

/// Pseudo-encodings a view-only client may not announce: each one lets
/// the server accept a client message that the filter does not pass
/// (the client would then be cut off for sending it), or acts on the
/// desktop itself.
const STRIPPED_ENCODINGS: &[(i32, &str)] = &[
    (
        -258,
        "QEMU extended key events: keys by scancode (message 255)",
    ),
    (-259, "QEMU audio (message 255)"),
    (
        -308,
        "extended desktop size: SetDesktopSize resizes the screen (message 251)",
    ),
    (
        -309,
        "xvp: shut down, reboot or reset the machine (message 250)",
    ),
    (-312, "fence (message 248)"),
    (-313, "continuous updates (message 150)"),
    (
        0xC0A1_E5CEu32 as i32,
        "extended clipboard: clipboard requests in ClientCutText",
    ),
];

/// Why the client's stream was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RfbError {
    #[error("the client's protocol version {0:?} is not RFB 003.007 or 003.008, the versions the daemon relays")]
    Version(String),
    #[error("the client chose security type {0}; the daemon relays only None (1) and VNC authentication (2)")]
    Security(u8),
    #[error("a view-only session sent client message type {0}, which a watcher may not send")]
    Message(u8),
    #[error("a SetEncodings of {0} encodings (at most {MAX_ENCODINGS})")]
    Encodings(usize),
    #[error("a ClientCutText of {0} bytes in a view-only session")]
    CutText(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// ProtocolVersion: 12 bytes.
    Version,
    /// The security type the client chose: 1 byte.
    Security,
    /// The response to VNC authentication's challenge: 16 bytes.
    VncAuth,
    /// ClientInit: the shared flag, 1 byte.
    ClientInit,
    /// Client messages, parsed (view-only).
    Messages,
    /// The rest of a dropped ClientCutText's text.
    Skip(u32),
    /// Everything from here on goes through (control).
    Open,
}

/// The client-to-server half of one RFB session.
#[derive(Debug)]
pub struct ClientFilter {
    state: State,
    /// Bytes of a unit not yet complete.
    pending: Vec<u8>,
    control: bool,
    /// Input messages dropped so far (view-only).
    pub dropped: u64,
    /// Why the stream was refused, once it was.
    failed: Option<RfbError>,
}

impl ClientFilter {
    /// A filter for a session that may drive the desktop (`control`) or
    /// only watch it.
    pub fn new(control: bool) -> ClientFilter {
        ClientFilter {
            state: State::Version,
            pending: Vec::new(),
            control,
            dropped: 0,
            failed: None,
        }
    }

    /// Take bytes the client sent; append to `out` what the server may
    /// get. An error ends the session: from then on every call fails.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), RfbError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.take(data, out);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    fn take(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), RfbError> {
        let mut data = data;
        loop {
            match self.state {
                State::Open => {
                    out.extend_from_slice(data);
                    return Ok(());
                }
                State::Skip(left) => {
                    let n = data.len().min(left as usize);
                    data = &data[n..];
                    let left = left - n as u32;
                    if left > 0 {
                        self.state = State::Skip(left);
                        return Ok(());
                    }
                    self.state = State::Messages;
                }
                _ => {}
            }
            self.pending.extend_from_slice(data);
            data = &[];
            let Some(used) = self.step(out)? else {
                return Ok(());
            };
            self.pending.drain(..used);
            if matches!(self.state, State::Open | State::Skip(_)) {
                // What follows goes through, or is skipped, unbuffered.
                let rest = std::mem::take(&mut self.pending);
                return self.take(&rest, out);
            }
            if self.pending.is_empty() {
                return Ok(());
            }
        }
    }

    /// Parse one unit at the start of `pending`: how many bytes it took,
    /// or `None` when it is not complete yet.
    fn step(&mut self, out: &mut Vec<u8>) -> Result<Option<usize>, RfbError> {
        let p = &self.pending;
        match self.state {
            State::Version => {
                if p.len() < 12 {
                    return Ok(None);
                }
                let v = &p[..12];
                if v != b"RFB 003.008\n" && v != b"RFB 003.007\n" {
                    return Err(RfbError::Version(String::from_utf8_lossy(v).into_owned()));
                }
                out.extend_from_slice(v);
                self.state = State::Security;
                Ok(Some(12))
            }
            State::Security => {
                let Some(&t) = p.first() else {
                    return Ok(None);
                };
                self.state = match t {
                    1 => State::ClientInit,
                    2 => State::VncAuth,
                    other => return Err(RfbError::Security(other)),
                };
                out.push(t);
                Ok(Some(1))
            }
            State::VncAuth => {
                if p.len() < 16 {
                    return Ok(None);
                }
                out.extend_from_slice(&p[..16]);
                self.state = State::ClientInit;
                Ok(Some(16))
            }
            State::ClientInit => {
                if p.is_empty() {
                    return Ok(None);
                }
                // Shared, whatever the client asked: never disconnect the
                // other viewers.
                out.push(1);
                self.state = if self.control {
                    State::Open
                } else {
                    State::Messages
                };
                Ok(Some(1))
            }
            State::Messages => self.message(out),
            State::Skip(_) | State::Open => Ok(Some(0)),
        }
    }

    /// One client message of a view-only session.
    fn message(&mut self, out: &mut Vec<u8>) -> Result<Option<usize>, RfbError> {
        let p = &self.pending;
        let Some(&kind) = p.first() else {
            return Ok(None);
        };
        let whole = |n: usize| p.len() >= n;
        match kind {
            // SetPixelFormat: type, 3 padding, 16 bytes of pixel format.
            0 => {
                if !whole(20) {
                    return Ok(None);
                }
                out.extend_from_slice(&p[..20]);
                Ok(Some(20))
            }
            // SetEncodings: type, padding, count (u16), count * s32.
            2 => {
                if !whole(4) {
                    return Ok(None);
                }
                let count = u16::from_be_bytes([p[2], p[3]]) as usize;
                if count > MAX_ENCODINGS {
                    return Err(RfbError::Encodings(count));
                }
                let len = 4 + 4 * count;
                if !whole(len) {
                    return Ok(None);
                }
                let kept: Vec<[u8; 4]> = p[4..len]
                    .chunks_exact(4)
                    .map(|c| [c[0], c[1], c[2], c[3]])
                    .filter(|c| {
                        let e = i32::from_be_bytes(*c);
                        !STRIPPED_ENCODINGS.iter().any(|(s, _)| *s == e)
                    })
                    .collect();
                out.extend_from_slice(&[2, 0]);
                out.extend_from_slice(&(kept.len() as u16).to_be_bytes());
                for c in kept {
                    out.extend_from_slice(&c);
                }
                Ok(Some(len))
            }
            // FramebufferUpdateRequest: type, incremental, x, y, w, h.
            3 => {
                if !whole(10) {
                    return Ok(None);
                }
                out.extend_from_slice(&p[..10]);
                Ok(Some(10))
            }
            // KeyEvent (8 bytes) and PointerEvent (6): dropped whole.
            4 | 5 => {
                let n = if kind == 4 { 8 } else { 6 };
                if !whole(n) {
                    return Ok(None);
                }
                self.dropped += 1;
                Ok(Some(n))
            }
            // ClientCutText: type, 3 padding, length (u32), text: dropped,
            // its text skipped as it comes.
            6 => {
                if !whole(8) {
                    return Ok(None);
                }
                let len = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
                // A negative length (extended clipboard) was never offered
                // to the server, and a huge one is not text to skip.
                if len > MAX_CUT_TEXT {
                    return Err(RfbError::CutText(len));
                }
                self.dropped += 1;
                if len > 0 {
                    self.state = State::Skip(len);
                }
                Ok(Some(8))
            }
            other => Err(RfbError::Message(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake(f: &mut ClientFilter) -> Vec<u8> {
        let mut out = Vec::new();
        f.feed(b"RFB 003.008\n", &mut out).unwrap();
        f.feed(&[1], &mut out).unwrap();
        f.feed(&[0], &mut out).unwrap();
        out
    }

    fn key(down: u8, sym: u32) -> Vec<u8> {
        let mut m = vec![4, down, 0, 0];
        m.extend_from_slice(&sym.to_be_bytes());
        m
    }

    fn pointer(mask: u8, x: u16, y: u16) -> Vec<u8> {
        let mut m = vec![5, mask];
        m.extend_from_slice(&x.to_be_bytes());
        m.extend_from_slice(&y.to_be_bytes());
        m
    }

    fn update_request() -> Vec<u8> {
        vec![3, 0, 0, 0, 0, 0, 4, 0, 3, 0]
    }

    #[test]
    fn the_handshake_passes_and_the_shared_flag_is_forced_on() {
        for control in [false, true] {
            let mut f = ClientFilter::new(control);
            let out = handshake(&mut f);
            assert_eq!(out, b"RFB 003.008\n\x01\x01", "control: {control}");
        }
        // VNC authentication's 16-byte response goes through, in pieces.
        let mut f = ClientFilter::new(false);
        let mut out = Vec::new();
        f.feed(b"RFB 003.0", &mut out).unwrap();
        f.feed(b"07\n\x02", &mut out).unwrap();
        f.feed(&[9; 10], &mut out).unwrap();
        f.feed(&[9; 6], &mut out).unwrap();
        f.feed(&[0], &mut out).unwrap();
        let mut want = b"RFB 003.007\n\x02".to_vec();
        want.extend_from_slice(&[9; 16]);
        want.push(1);
        assert_eq!(out, want);
    }

    #[test]
    fn a_view_only_session_drops_input_and_keeps_the_picture() {
        let mut f = ClientFilter::new(false);
        let mut out = Vec::new();
        handshake(&mut f);
        let mut stream = Vec::new();
        stream.extend(key(1, 0x61));
        stream.extend(update_request());
        stream.extend(pointer(1, 10, 20));
        stream.extend([6, 0, 0, 0, 0, 0, 0, 5]);
        stream.extend(b"hello");
        stream.extend(key(0, 0x61));
        stream.extend(update_request());
        // Byte by byte: no message is cut wrongly at any boundary.
        for b in &stream {
            f.feed(&[*b], &mut out).unwrap();
        }
        let mut want = update_request();
        want.extend(update_request());
        assert_eq!(out, want);
        assert_eq!(f.dropped, 4);
        // All at once, the same.
        let mut g = ClientFilter::new(false);
        handshake(&mut g);
        let mut out2 = Vec::new();
        g.feed(&stream, &mut out2).unwrap();
        assert_eq!(out2, want);
    }

    #[test]
    fn a_controlling_session_passes_everything_after_the_handshake() {
        let mut f = ClientFilter::new(true);
        handshake(&mut f);
        let mut out = Vec::new();
        let mut stream = key(1, 0x61);
        stream.extend(pointer(1, 1, 1));
        stream.extend([250, 0, 1, 2]);
        f.feed(&stream, &mut out).unwrap();
        assert_eq!(out, stream);
    }

    #[test]
    fn set_encodings_loses_the_pseudo_encodings_that_open_other_messages() {
        let mut f = ClientFilter::new(false);
        handshake(&mut f);
        let encodings: [i32; 5] = [7, -313, 0, -312, -223];
        let mut m = vec![2, 0, 0, encodings.len() as u8];
        for e in encodings {
            m.extend_from_slice(&e.to_be_bytes());
        }
        let mut out = Vec::new();
        f.feed(&m, &mut out).unwrap();
        let mut want = vec![2, 0, 0, 3];
        for e in [7i32, 0, -223] {
            want.extend_from_slice(&e.to_be_bytes());
        }
        assert_eq!(out, want);
    }

    #[test]
    fn anything_the_filter_cannot_parse_ends_the_session() {
        let refused = |bytes: &[u8], control: bool| {
            let mut f = ClientFilter::new(control);
            let mut out = Vec::new();
            f.feed(bytes, &mut out).is_err()
        };
        assert!(refused(b"RFB 003.003\n", false));
        assert!(refused(b"GET / HTTP/1.1\r\n", true));
        assert!(refused(b"RFB 003.008\n\x10", true), "Tight security");
        assert!(refused(b"RFB 003.008\n\x13", false), "VeNCrypt");
        let after = |rest: &[u8]| {
            let mut m = b"RFB 003.008\n\x01\x00".to_vec();
            m.extend_from_slice(rest);
            refused(&m, false)
        };
        assert!(
            after(&[150, 1, 0, 0, 0, 0, 1, 0, 1, 0]),
            "continuous updates"
        );
        assert!(after(&[248, 0, 0, 0, 0, 0, 0, 0, 0]), "fence");
        assert!(after(&[251, 0, 4, 0, 3, 0, 1, 0]), "SetDesktopSize");
        assert!(
            after(&[255, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 30]),
            "QEMU key"
        );
        assert!(after(&[7]), "an unknown message");
        assert!(after(&[2, 0, 0xff, 0xff]), "65535 encodings");
        assert!(
            after(&[6, 0, 0, 0, 0xff, 0xff, 0xff, 0xf0]),
            "extended clipboard"
        );
        // And once refused, nothing more passes.
        let mut f = ClientFilter::new(false);
        let mut out = Vec::new();
        f.feed(b"RFB 003.008\n\x01\x00", &mut out).unwrap();
        assert!(f.feed(&[9], &mut out).is_err());
        out.clear();
        assert!(f.feed(&update_request(), &mut out).is_err());
        assert!(out.is_empty());
    }
}

//! Reading the name a TLS client asks for (SNI) from the first bytes of a
//! connection, without terminating TLS. The decision is made on this name,
//! never on the IP address the client chose; anything the parser cannot
//! read with certainty is refused.

use tls_parser::{
    parse_tls_client_hello_extensions, parse_tls_plaintext, TlsExtension, TlsMessage,
    TlsMessageHandshake, TlsRecordType,
};
use warden_policy::normalize_name;

/// Largest ClientHello accepted (one TLS record: 16 KiB, plus its header).
pub const MAX_CLIENT_HELLO: usize = 16384 + 5;

/// The encrypted_client_hello extension (RFC 9460 / draft-ietf-tls-esni).
const EXT_ECH: u16 = 0xfe0d;
/// The outer ECH extension of older drafts.
const EXT_ECH_OUTER_DRAFT: u16 = 0xfe08;

/// What the first bytes of a connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientHello {
    /// A ClientHello naming exactly one host (normalized).
    Sni(String),
    /// More bytes are needed; read on (up to [`MAX_CLIENT_HELLO`]).
    Incomplete,
    /// A ClientHello without a server name (or naming an IP address): there
    /// is no name to decide on.
    NoName,
    /// Encrypted Client Hello: the real name is hidden, so it is refused.
    EncryptedClientHello,
    /// Not a TLS handshake at all (plain HTTP, SSH, ...).
    NotTls,
    /// A TLS record that is not a well-formed ClientHello.
    Malformed(&'static str),
}

/// Examine the bytes received so far on a connection.
pub fn peek(buf: &[u8]) -> ClientHello {
    // Record header: type 22 (handshake), version 3.x, length.
    let Some(&first) = buf.first() else {
        return ClientHello::Incomplete;
    };
    if first != u8::from(TlsRecordType::Handshake) {
        return ClientHello::NotTls;
    }
    if buf.len() < 5 {
        return ClientHello::Incomplete;
    }
    if buf[1] != 3 {
        return ClientHello::NotTls;
    }
    let record_len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
    if record_len > 16384 {
        return ClientHello::Malformed("a TLS record longer than 16 KiB");
    }
    if buf.len() < 5 + record_len {
        return ClientHello::Incomplete;
    }
    let record = &buf[..5 + record_len];
    let Ok((_, plaintext)) = parse_tls_plaintext(record) else {
        // The record is complete, so a parse failure is not for want of
        // bytes: a ClientHello split over several records lands here too,
        // and is refused rather than guessed at.
        return ClientHello::Malformed("not a complete ClientHello in one TLS record");
    };
    let hello = match plaintext.msg.as_slice() {
        [TlsMessage::Handshake(TlsMessageHandshake::ClientHello(h))] => h,
        _ => return ClientHello::Malformed("the first handshake message is not a ClientHello"),
    };
    let Some(ext) = hello.ext else {
        return ClientHello::NoName;
    };
    let Ok((rest, extensions)) = parse_tls_client_hello_extensions(ext) else {
        return ClientHello::Malformed("unreadable ClientHello extensions");
    };
    if !rest.is_empty() {
        return ClientHello::Malformed("trailing bytes after the ClientHello extensions");
    }
    let mut names = Vec::new();
    for e in &extensions {
        match e {
            TlsExtension::SNI(list) => {
                for (kind, name) in list {
                    if kind.0 != 0 {
                        return ClientHello::Malformed("a server name of unknown type");
                    }
                    names.push(*name);
                }
            }
            TlsExtension::Unknown(t, _) if t.0 == EXT_ECH || t.0 == EXT_ECH_OUTER_DRAFT => {
                return ClientHello::EncryptedClientHello
            }
            _ => {}
        }
    }
    match names.as_slice() {
        [] => ClientHello::NoName,
        [one] => {
            let Ok(name) = std::str::from_utf8(one) else {
                return ClientHello::Malformed("a server name that is not text");
            };
            if name.parse::<std::net::IpAddr>().is_ok() {
                return ClientHello::NoName;
            }
            match normalize_name(name) {
                Ok(n) => ClientHello::Sni(n),
                Err(_) => ClientHello::Malformed("a server name that is not a host name"),
            }
        }
        _ => ClientHello::Malformed("several server names"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A TLS 1.2-style ClientHello record with the given extensions.
    pub(crate) fn client_hello(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut ext = Vec::new();
        for (t, data) in extensions {
            ext.extend_from_slice(&t.to_be_bytes());
            ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
            ext.extend_from_slice(data);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]); // random
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    pub(crate) fn sni(names: &[&str]) -> (u16, Vec<u8>) {
        let mut list = Vec::new();
        for n in names {
            list.push(0);
            list.extend_from_slice(&(n.len() as u16).to_be_bytes());
            list.extend_from_slice(n.as_bytes());
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        (0, data)
    }

    #[test]
    fn the_server_name_is_read_and_normalized() {
        let hello = client_hello(&[sni(&["API.Example.com."])]);
        assert_eq!(peek(&hello), ClientHello::Sni("api.example.com".into()));
    }

    #[test]
    fn every_truncation_asks_for_more_and_never_guesses() {
        let hello = client_hello(&[sni(&["example.com"])]);
        for cut in 0..hello.len() {
            assert_eq!(peek(&hello[..cut]), ClientHello::Incomplete, "cut at {cut}");
        }
    }

    #[test]
    fn hellos_without_a_usable_name_are_refused() {
        assert_eq!(peek(&client_hello(&[])), ClientHello::NoName);
        assert_eq!(
            peek(&client_hello(&[sni(&["10.0.0.1"])])),
            ClientHello::NoName
        );
        assert!(matches!(
            peek(&client_hello(&[sni(&["a.com", "b.com"])])),
            ClientHello::Malformed(_)
        ));
        assert!(matches!(
            peek(&client_hello(&[sni(&["bad name.com"])])),
            ClientHello::Malformed(_)
        ));
        assert_eq!(
            peek(&client_hello(&[
                sni(&["cover.example.com"]),
                (0xfe0d, vec![0; 8])
            ])),
            ClientHello::EncryptedClientHello
        );
    }

    #[test]
    fn other_protocols_and_garbage_are_not_mistaken_for_tls() {
        assert_eq!(
            peek(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            ClientHello::NotTls
        );
        assert_eq!(peek(b"SSH-2.0-OpenSSH_9.2\r\n"), ClientHello::NotTls);
        assert_eq!(peek(&[22, 9, 9, 0, 1, 0]), ClientHello::NotTls);
        assert!(matches!(
            peek(&[22, 3, 1, 0xff, 0xff]),
            ClientHello::Malformed(_)
        ));
        assert!(matches!(
            peek(&[22, 3, 1, 0, 4, 1, 0, 0, 9]),
            ClientHello::Malformed(_)
        ));
        // Deterministic pseudo-random garbage after a valid header.
        let mut x: u32 = 12345;
        for len in 1..300usize {
            let mut buf = vec![22, 3, 1, 0, len as u8];
            for _ in 0..len {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                buf.push((x >> 16) as u8);
            }
            assert!(
                !matches!(peek(&buf), ClientHello::Sni(_)),
                "garbage read as a name: {buf:?}"
            );
        }
    }

    #[test]
    fn a_real_client_hello_from_openssl_is_understood() {
        let script = "import ssl\n\
ctx = ssl.create_default_context()\n\
i, o = ssl.MemoryBIO(), ssl.MemoryBIO()\n\
s = ctx.wrap_bio(i, o, server_hostname='files.example.org')\n\
try:\n    s.do_handshake()\nexcept ssl.SSLWantReadError:\n    pass\n\
import sys; sys.stdout.buffer.write(o.read())\n";
        let Ok(out) = std::process::Command::new("python3")
            .args(["-c", script])
            .output()
        else {
            eprintln!("skipped: python3 is not installed");
            return;
        };
        assert!(out.status.success());
        assert_eq!(
            peek(&out.stdout),
            ClientHello::Sni("files.example.org".into())
        );
    }
}

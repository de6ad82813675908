//! What a body gives of fields, read as servers read it.

use super::*;

fn parts(ct: &str) -> http::request::Parts {
    http::Request::post("/x")
        .header("content-type", ct)
        .body(())
        .unwrap()
        .into_parts()
        .0
}

fn keys() -> Vec<String> {
    vec!["admin".to_string()]
}

/// Every pair of every reading: what a condition is matched on.
fn pairs(p: &Params) -> Vec<(String, Option<String>)> {
    match p {
        Params::Read(r) => r.iter().flatten().cloned().collect(),
        other => panic!("{other:?}"),
    }
}

fn has(p: &Params, k: &str, v: &str) -> bool {
    pairs(p)
        .iter()
        .any(|(pk, pv)| pk == k && pv.as_deref() == Some(v))
}

#[tokio::test]
async fn a_bodys_parameters_are_read_as_a_form_json_or_multipart() {
    let p = parts("application/x-www-form-urlencoded");
    let f = params(&p, &[Kind::Form], b"a=1&admin=1", &keys()).await;
    assert!(has(&f, "admin", "1"), "{f:?}");
    let j = params(
        &p,
        &[Kind::Json],
        br#"{"admin":1,"flag":true,"list":["x",2],"n":null,"o":{"a":1}}"#,
        &keys(),
    )
    .await;
    assert!(has(&j, "admin", "1") && has(&j, "flag", "true"), "{j:?}");
    assert!(has(&j, "list", "x") && has(&j, "list", "2"), "{j:?}");
    assert!(has(&j, "o", r#"{"a":1}"#), "{j:?}");
    assert!(pairs(&j).contains(&("n".into(), None)), "{j:?}");
    let mp = parts("multipart/form-data; boundary=XyZ");
    let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"admin\"\r\n\r\n1\r\n--XyZ--\r\n";
    let m = params(&mp, &[Kind::Multipart], body, &keys()).await;
    assert!(has(&m, "admin", "1"), "{m:?}");
}

/// What cannot be read for certain may hold any parameter: a coded
/// body, JSON serde cannot read, a multipart body whose parser reads
/// fewer names spelling the key than the body mentions, or one that
/// names a part in RFC 2231's way.
#[tokio::test]
async fn a_body_not_read_for_certain_may_give_any_parameter() {
    let p = parts("application/json");
    assert_eq!(params(&p, &[], b"admin=1", &keys()).await, Params::Unknown);
    for json in [&b"{\"admin\":1,}"[..], b"admin=1", br#"{"n":1e400}"#] {
        assert_eq!(
            params(&p, &[Kind::Json], json, &keys()).await,
            Params::Unknown,
            "{}",
            String::from_utf8_lossy(json)
        );
    }
    let mp = parts("multipart/form-data; boundary=XyZ");
    for odd in [
        // Mentioned in a value: another parser may read it as a name.
        "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nadmin=1\r\n--XyZ--\r\n",
        // A name escaped, percent-coded or in RFC 2231's way.
        "--XyZ\r\nContent-Disposition: form-data; name*=UTF-8''%61dmin\r\n\r\n1\r\n--XyZ--\r\n",
        "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"ADM\u{131}N\"\r\n\r\n1\r\n--XyZ--\r\n",
        // Not the boundary the request names.
        "--Q\r\nContent-Disposition: form-data; name=\"admin\"\r\n\r\n1\r\n--Q--\r\n",
    ] {
        assert_eq!(
            params(&mp, &[Kind::Multipart], odd.as_bytes(), &keys()).await,
            Params::Unknown,
            "{odd}"
        );
    }
    // A body that mentions no key gives no parameter a rule looks at.
    let plain = "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nhello\r\n--XyZ--\r\n";
    assert_eq!(
        params(&mp, &[Kind::Multipart], plain.as_bytes(), &keys()).await,
        Params::Read(vec![vec![]])
    );
}

/// `admin=1` in UTF-16, as ASP.NET Core and Tomcat read a form that
/// declares it.
fn utf16le(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

/// A body in a charset read otherwise than UTF-8 may hold any
/// parameter, whatever kind it is read as and however the charset is
/// spelled: UTF-16 and UTF-32 (NULs between the letters), UTF-7
/// (`+AGE-` is `a`), a name not known, one given twice, one after a
/// space or a comma, quoted, or with no value.
#[tokio::test]
async fn a_body_in_a_charset_not_read_as_utf8_may_give_any_parameter() {
    let le = utf16le("admin=1");
    let be: Vec<u8> = "admin=1"
        .encode_utf16()
        .flat_map(u16::to_be_bytes)
        .collect();
    for (ct, body) in [
        (
            "application/x-www-form-urlencoded; charset=utf-16le",
            &le[..],
        ),
        (
            "application/x-www-form-urlencoded; charset=UTF-16BE",
            &be[..],
        ),
        (
            "application/x-www-form-urlencoded;charset=\"utf-16\"",
            &le[..],
        ),
        ("application/x-www-form-urlencoded; charset=utf-32", &le[..]),
        (
            "application/x-www-form-urlencoded; charset=utf-7",
            b"+AGE-dmin=1",
        ),
        (
            "application/x-www-form-urlencoded; charset=x-unheard-of",
            b"admin=1",
        ),
        (
            "application/x-www-form-urlencoded; charset=utf-8; charset=utf-16le",
            &le[..],
        ),
        (
            "application/x-www-form-urlencoded charset=utf-16le",
            &le[..],
        ),
        (
            "application/x-www-form-urlencoded, text/plain;charset=utf-16le",
            &le[..],
        ),
        (
            "application/x-www-form-urlencoded; Charset = utf-16le",
            &le[..],
        ),
        (
            "application/x-www-form-urlencoded; charset=\"utf\\-16\"",
            &le[..],
        ),
        ("application/x-www-form-urlencoded; charset=", &le[..]),
        ("application/x-www-form-urlencoded; charset", &le[..]),
    ] {
        let p = parts(ct);
        assert_eq!(
            params(&p, &[Kind::Form], body, &keys()).await,
            Params::Unknown,
            "{ct}"
        );
    }
    let json = parts("application/json; charset=utf-16le");
    let body = utf16le(r#"{"admin":1}"#);
    assert_eq!(
        params(&json, &[Kind::Json], &body, &keys()).await,
        Params::Unknown
    );
    let mp = parts("multipart/form-data; boundary=XyZ");
    for charset in ["utf-32", "utf-16", "x-unheard-of"] {
        let body = format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"admin\"\r\nContent-Type: text/plain; charset={charset}\r\n\r\n\0\0\01\r\n--XyZ--\r\n"
        );
        assert_eq!(
            params(&mp, &[Kind::Multipart], body.as_bytes(), &keys()).await,
            Params::Unknown,
            "{charset}"
        );
    }
    let body = "--XyZ\r\nContent-Disposition: form-data; name=\"admin\"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n1\r\n--XyZ--\r\n";
    let m = params(&mp, &[Kind::Multipart], body.as_bytes(), &keys()).await;
    assert!(has(&m, "admin", "1"), "{m:?}");
    let mp = parts("multipart/form-data; boundary=XyZ; charset=utf-16le");
    let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n1\r\n--XyZ--\r\n";
    assert_eq!(
        params(&mp, &[Kind::Multipart], body, &keys()).await,
        Params::Unknown
    );
}

/// UTF-8 (any case, quoted or not) reads a body as it is read here;
/// Latin-1, Windows-1252 and US-ASCII do too for a body of ASCII
/// only, and not for one with a byte past it, plain or escaped
/// (`%E9` is `é` in Latin-1).
#[tokio::test]
async fn a_body_in_utf8_or_an_ascii_only_body_in_latin1_is_read() {
    for ct in [
        "application/x-www-form-urlencoded; charset=utf-8",
        "application/x-www-form-urlencoded; charset=\"UTF-8\"",
        "application/x-www-form-urlencoded; charset=iso-8859-1",
        "application/x-www-form-urlencoded; charset=windows-1252",
        "application/x-www-form-urlencoded; charset=US-ASCII",
    ] {
        let f = params(&parts(ct), &[Kind::Form], b"a=1&admin=%31", &keys()).await;
        assert!(has(&f, "admin", "1"), "{ct}: {f:?}");
    }
    let utf8 = parts("application/x-www-form-urlencoded; charset=utf-8");
    let f = params(&utf8, &[Kind::Form], "admin=\u{e9}".as_bytes(), &keys()).await;
    assert!(has(&f, "admin", "\u{e9}"), "{f:?}");
    let latin1 = parts("application/x-www-form-urlencoded; charset=latin1");
    for body in [&b"admin=%E9"[..], b"admin=\xe9"] {
        assert_eq!(
            params(&latin1, &[Kind::Form], body, &keys()).await,
            Params::Unknown,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

/// A form that declares no charset is read as UTF-8 here and as
/// ISO-8859-1 by Tomcat and Spring: a key with a byte past ASCII, plain
/// or escaped, reads otherwise there (`pa\xDF` is `paß`, which a reader
/// ignoring case takes as `pass`; `caf\xC3\xA9` is `cafÃ©`), so the body
/// may hold any parameter; a multipart part's name likewise.
#[tokio::test]
async fn a_form_without_a_charset_whose_keys_read_otherwise_in_latin1_may_give_any_parameter() {
    let pass = vec!["pass".to_string()];
    let form = parts("application/x-www-form-urlencoded");
    for body in [
        &b"pa\xdf=1"[..],
        b"pa%DF=1",
        b"pa%df=1&x=2",
        b"caf\xc3\xa9=1",
        b"caf%C3%A9=1",
    ] {
        assert_eq!(
            params(&form, &[Kind::Form], body, &pass).await,
            Params::Unknown,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    // No content type at all is a form too.
    let bare = http::Request::post("/x").body(()).unwrap().into_parts().0;
    assert_eq!(
        params(&bare, &[Kind::Form], b"pa\xdf=1", &pass).await,
        Params::Unknown
    );
    let mp = parts("multipart/form-data; boundary=XyZ");
    // (A multipart body whose readings mention no key at all holds none
    // of them, as before: `caf\xC3\xA9` is no `pass` either way.)
    for name in [&b"pa\xdf"[..], b"pa\xdf[]"] {
        let mut body = b"--XyZ\r\nContent-Disposition: form-data; name=\"".to_vec();
        body.extend_from_slice(name);
        body.extend_from_slice(b"\"\r\n\r\n1\r\n--XyZ--\r\n");
        assert_eq!(
            params(&mp, &[Kind::Multipart], &body, &pass).await,
            Params::Unknown,
            "{}",
            String::from_utf8_lossy(name)
        );
    }
}

/// Where both readings give the same keys (the bytes past ASCII are in
/// values only), the body is read both ways, each a reading: a value is
/// matched as UTF-8 and as Latin-1 read it. A body of ASCII only, or one
/// that declares UTF-8, is read once, as before.
#[tokio::test]
async fn a_form_without_a_charset_whose_keys_read_alike_is_read_both_ways() {
    let form = parts("application/x-www-form-urlencoded");
    let f = params(&form, &[Kind::Form], b"admin=%DF&n=Jos%C3%A9", &keys()).await;
    assert!(has(&f, "admin", "\u{df}"), "Latin-1: {f:?}");
    assert!(has(&f, "admin", "\u{fffd}"), "UTF-8: {f:?}");
    assert!(
        has(&f, "n", "Jos\u{e9}") && has(&f, "n", "Jos\u{c3}\u{a9}"),
        "{f:?}"
    );
    let f = params(&form, &[Kind::Form], b"admin=1", &keys()).await;
    assert_eq!(f, Params::Read(path::query_readings("admin=1")));
    let utf8 = parts("application/x-www-form-urlencoded; charset=utf-8");
    let f = params(&utf8, &[Kind::Form], "caf\u{e9}=1".as_bytes(), &keys()).await;
    assert!(has(&f, "caf\u{e9}", "1"), "{f:?}");
    assert!(
        !pairs(&f).iter().any(|(k, _)| k.contains('\u{c3}')),
        "{f:?}"
    );
    let mp = parts("multipart/form-data; boundary=XyZ");
    let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"admin\"\r\n\r\nJos\xc3\xa9\r\n--XyZ--\r\n";
    let m = params(&mp, &[Kind::Multipart], body, &keys()).await;
    assert!(has(&m, "admin", "Jos\u{e9}"), "{m:?}");
    assert!(has(&m, "admin", "Jos\u{c3}\u{a9}"), "{m:?}");
}

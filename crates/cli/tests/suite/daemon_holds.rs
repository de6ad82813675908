//! What one caller's requests may hold of the daemon once a good token let
//! them in (outside review 26): a body that stops coming, or trickles,
//! holds its connection and buffer only to the body's deadline, on the
//! API's listener and the E2B door's alike.

use crate::common::daemon::*;
use crate::common::tcp::open_for;
use crate::common::*;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// The daemon's `--body-timeout` below: small, so that the tests are quick.
const BODY: Duration = Duration::from_secs(2);
/// What the daemon may take beyond a deadline to close the connection.
const MARGIN: Duration = Duration::from_secs(3);

/// A head on `addr` announcing `length` bytes of body, and `first` of
/// them: the connection.
fn started_upload(addr: &str, head: &str, first: &[u8]) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(first).unwrap();
    c
}

#[test]
fn a_body_that_stops_coming_after_a_good_token_holds_its_connection_only_to_the_body_deadline() {
    let state = TempDir::new("held-body");
    let e2b = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--e2b", &e2b, "--body-timeout", "2s"],
        &[],
    );
    let t = api_token(
        &d,
        "a",
        &["sandboxes:read", "sandboxes:write", "exec"],
        None,
    );
    let tcp = d.tcp.clone().unwrap();
    let limit = BODY + MARGIN;
    let api = format!(
        "POST /v1/sandboxes HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    );
    let door = format!(
        "POST /sandboxes HTTP/1.1\r\nhost: localhost\r\nx-api-key: {t}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    );
    let chunked = format!(
        "POST /v1/sandboxes HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    std::thread::scope(|s| {
        for (what, addr, head) in [("the API", &tcp, &api), ("the E2B door", &e2b, &door)] {
            s.spawn(move || {
                // One byte of 100,000, then nothing.
                let mut c = started_upload(addr, head, b"{");
                let took = open_for(&mut c, limit + Duration::from_secs(6));
                assert!(
                    took <= limit,
                    "{what}: a token's upload of 1 byte of 100000 still open after {took:?}"
                );
            });
        }
        // A chunked body, a byte every 300 ms: never silent for the
        // stall bound, far below the least pace.
        s.spawn(|| {
            let mut c = started_upload(&tcp, &chunked, b"");
            let mut w = c.try_clone().unwrap();
            let trickle = std::thread::spawn(move || {
                for _ in 0..60 {
                    if w.write_all(b"1\r\n \r\n").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            });
            let took = open_for(&mut c, limit + Duration::from_secs(6));
            assert!(
                took <= limit,
                "a token's trickling chunked body still open after {took:?}"
            );
            let _ = c.shutdown(std::net::Shutdown::Both);
            trickle.join().unwrap();
        });
    });
    // A body sent whole is read as ever: the answer is about the request
    // (no such sandbox), not its pace.
    let (s, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes/sa1/exec",
        r#"{"argv":["true"]}"#,
    );
    assert_eq!(s, 404, "{b}");
}

/// The daemon's page of a files list (`LIST_PAGE` in the daemon).
const PAGE: usize = 10_000;

#[test]
fn a_list_of_a_directory_larger_than_a_page_answers_a_page_and_where_to_go_on() {
    if !curl_available() {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let state = TempDir::new("list-pages");
    let e2b = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), true, &["--e2b", &e2b], &[]);
    let t = api_token(
        &d,
        "lister",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
        None,
    );
    let (id, access) = e2b_sandbox_ids(&e2b, &t);
    let extra = 37;
    shell_as(
        &d,
        &t,
        &id,
        &format!(
            "mkdir -p /home/user/d && cd /home/user/d && seq -f f%05g 1 {} | xargs touch && echo hi > f00001",
            PAGE + extra
        ),
    );
    let list = |after: Option<&str>| {
        let mut path = format!("/v1/sandboxes/{id}/files/list?path=/home/user/d");
        if let Some(a) = after {
            path += &format!("&after={}", q(a));
        }
        let (s, b) = call_on(&d, true, "GET", &path, None, Some(&t));
        assert_eq!(s, 200, "{b}");
        json(&b)
    };
    let first = list(None);
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    let one = names(&first);
    assert_eq!(one.len(), PAGE);
    assert_eq!(one[0], "f00001");
    let next = first["next"]
        .as_str()
        .expect("a page says where the next begins");
    assert_eq!(next, one[PAGE - 1]);
    let second = list(Some(next));
    let two = names(&second);
    assert_eq!(two.len(), extra, "{:?}", &two[..3.min(two.len())]);
    assert!(two[0] > one[PAGE - 1], "pages in name order, none twice");
    assert!(second.get("next").is_none(), "{second}");
    // The E2B door has no pages: its list says why it cannot answer,
    // and a file's stat there is found without listing its directory.
    let rpc = |method: &str, body: &str| envd_files(&e2b, &id, &access, method, body);
    let (s, b) = rpc("ListDir", r#"{"path":"/home/user/d","depth":1}"#);
    assert_ne!(s, 200, "{}", &b[..b.len().min(300)]);
    assert!(
        b.contains("resource_exhausted") && b.contains("in pages"),
        "{s} {b}"
    );
    let (s, b) = rpc("Stat", r#"{"path":"/home/user/d/f00001"}"#);
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["entry"]["size"], "3", "{b}");
    // An ordinary directory is listed whole, as ever.
    let (s, b) = rpc("ListDir", r#"{"path":"/home/user","depth":1}"#);
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("\"d\""), "{b}");
}

#[test]
fn reviews_and_files_lists_are_among_a_tokens_places_through_the_api_and_the_e2b_door() {
    let Some((_state, d)) = with_config(
        "held-places",
        "sessions:\n  per_token: 1\n",
        &["--e2b", &format!("127.0.0.1:{}", free_port())],
        &[],
    ) else {
        return;
    };
    let e2b = d.e2b.clone().unwrap();
    let t = api_token(
        &d,
        "holder",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
        None,
    );
    let (id, access) = e2b_sandbox_ids(&e2b, &t);
    let review = format!("/v1/sandboxes/{id}/changes?content=true");
    let list = format!("/v1/sandboxes/{id}/files/list?path=/home/user");
    let as_t = calls_as(&d, t.clone());
    let list_dir = || {
        envd_files(
            &e2b,
            &id,
            &access,
            "ListDir",
            r#"{"path":"/home/user","depth":1}"#,
        )
    };
    // With the token's one place free, each is answered.
    for path in [&review, &list] {
        let (s, b) = as_t("GET", path, None);
        assert_eq!(s, 200, "{path}: {b}");
    }
    assert_eq!(list_dir().0, 200);
    // A command running in the background holds the token's one place:
    // a review and a list are refused, naming the bound, not run beside it.
    let body = r#"{"shell":"sleep 60","background":true}"#;
    let (s, b) = as_t("POST", &format!("/v1/sandboxes/{id}/exec"), Some(body));
    assert_eq!(s, 202, "{b}");
    for path in [&review, &list] {
        let (s, b) = as_t("GET", path, None);
        assert_eq!(s, 429, "{path}: {b}");
        assert!(b.contains("too_many_sessions"), "{path}: {b}");
    }
    let (s, b) = list_dir();
    assert_ne!(s, 200, "{b}");
    assert!(b.contains("resource_exhausted"), "{s} {b}");
    // The owner's own calls hold no place.
    let (s, b) = call(&d, "GET", &review, None, None);
    assert_eq!(s, 200, "{b}");
}

#[test]
fn one_token_filling_a_listener_with_held_uploads_never_keeps_out_another_token() {
    if !curl_available() {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let state = TempDir::new("token-places");
    // 128 descriptors: a listener of 32 places, 16 per address.
    let d = Daemon::start_under(
        &["prlimit", "--nofile=128:128"],
        state.path(),
        true,
        &["--body-timeout", "30s"],
    );
    let a = api_token(&d, "a", &["sandboxes:read", "sandboxes:write"], None);
    let b = api_token(&d, "b", &["sandboxes:read"], None);
    let port = d
        .tcp
        .as_ref()
        .unwrap()
        .rsplit_once(':')
        .unwrap()
        .1
        .to_string();
    let head = format!(
        "POST /v1/sandboxes HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {a}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    );
    // Token a takes every place, from two loopback addresses, each with a
    // let-in request whose body stops after a byte.
    let mut held = Vec::new();
    for i in 0..40 {
        let addr = format!("127.0.0.{}:{port}", 1 + i % 2);
        if let Ok(c) = TcpStream::connect(&addr) {
            let mut c = c;
            let _ = c.write_all(head.as_bytes());
            let _ = c.write_all(b"{");
            held.push(c);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    // Token b is answered, over and over, while a holds on.
    for _ in 0..3 {
        let (s, body) = call_on(&d, true, "GET", "/v1/sandboxes", None, Some(&b));
        assert_eq!(s, 200, "token b kept out: {s} {body}");
    }
    drop(held);
}

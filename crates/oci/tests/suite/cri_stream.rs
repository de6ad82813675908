//! Exec and Attach streams through containerd's CRI streaming server, as
//! kubectl reaches them through kubelet: the CRI answers with a URL, and
//! the client speaks Kubernetes' WebSocket channel protocol
//! (`v4.channel.k8s.io`: each message's first byte names its stream, 0
//! stdin, 1 stdout, 2 stderr, 3 the status) to it.

use crate::common::cri::{node, Handler, Spec};
use crate::common::cri_api as api;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::Message;

crate::suite::cri::both!(
    an_exec_stream_carries_stdin_stdout_stderr_and_the_exit_status,
    attach_reaches_the_containers_own_stdin_and_stdout,
);

/// What came back on each channel.
#[derive(Default, Debug)]
struct Streams {
    stdout: String,
    stderr: String,
    status: String,
}

/// Open the streaming URL, send `input` on stdin, read until `done` says
/// so or the stream ends.
fn stream(url: &str, input: &[u8], done: impl Fn(&Streams) -> bool) -> Streams {
    let url = url.replacen("http://", "ws://", 1);
    let mut req = url.as_str().into_client_request().unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "v4.channel.k8s.io".parse().unwrap(),
    );
    let (mut ws, _) = tungstenite::connect(req).unwrap_or_else(|e| panic!("{url}: {e}"));
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    }
    if !input.is_empty() {
        let mut m = vec![0u8];
        m.extend_from_slice(input);
        ws.send(Message::Binary(m.into())).unwrap();
    }
    let mut got = Streams::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !done(&got) {
        match ws.read() {
            Ok(Message::Binary(b)) if !b.is_empty() => {
                let data = String::from_utf8_lossy(&b[1..]).into_owned();
                match b[0] {
                    1 => got.stdout.push_str(&data),
                    2 => got.stderr.push_str(&data),
                    3 => got.status.push_str(&data),
                    _ => {}
                }
            }
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = ws.close(None);
    got
}

fn an_exec_stream_carries_stdin_stdout_stderr_and_the_exit_status(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "main",
        args: &["sleep", "600"],
        ..Default::default()
    });
    let req = api::ExecRequest {
        container_id: c.clone(),
        cmd: [
            "sh",
            "-c",
            "read line; echo got $line; echo oops >&2; exit 3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        tty: false,
        stdin: true,
        stdout: true,
        stderr: true,
    };
    let url = node
        .call(|mut cl| async move { cl.exec(req).await })
        .unwrap_or_else(|e| panic!("Exec: {e}"))
        .url;
    let got = stream(&url, b"hello\n", |s| !s.status.is_empty());
    assert_eq!(got.stdout, "got hello\n", "{got:?}");
    assert_eq!(got.stderr, "oops\n", "{got:?}");
    // The status of a process that exited 3: Failure, reason NonZeroExitCode,
    // the code among its causes.
    let status: serde_json::Value = serde_json::from_str(&got.status).unwrap();
    assert_eq!(status["status"], "Failure", "{got:?}");
    assert_eq!(status["reason"], "NonZeroExitCode", "{got:?}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{got:?}");
    pod.remove();
}

fn attach_reaches_the_containers_own_stdin_and_stdout(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "main",
        args: &[
            "sh",
            "-c",
            "while read line; do echo attached $line; done; sleep 600",
        ],
        stdin: true,
        ..Default::default()
    });
    let req = api::AttachRequest {
        container_id: c.clone(),
        stdin: true,
        tty: false,
        stdout: true,
        stderr: true,
    };
    let url = node
        .call(|mut cl| async move { cl.attach(req).await })
        .unwrap_or_else(|e| panic!("Attach: {e}"))
        .url;
    let got = stream(&url, b"hi\n", |s| s.stdout.contains("attached hi"));
    assert!(got.stdout.contains("attached hi"), "{got:?}");
    pod.remove();
}

//! A forge on the host for request rules to be tried against: an HTTPS
//! server for `forge.test` (certificate from a test authority) that
//! records every request it gets, and the flags that let a sandbox reach
//! it by that name with the authority trusted upstream.

use super::upstream::{https_server, TestCa};
use super::{egress_available, warden_bin};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

/// An HTTPS server on 127.0.0.1 for `name` (HTTP/2 and HTTP/1.1) that
/// records `VERSION METHOD path?query` of each request and answers `ok`.
pub struct Recorder {
    pub port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Recorder {
    pub fn start(ca: &TestCa, name: &str) -> Recorder {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let (port, runtime) = https_server(ca, &[name], &[b"h2", b"http/1.1"], move || {
            let s = s.clone();
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let s = s.clone();
                async move {
                    let line = format!(
                        "{:?} {} {}",
                        req.version(),
                        req.method(),
                        req.uri()
                            .path_and_query()
                            .map(|p| p.to_string())
                            .unwrap_or_default()
                    );
                    let _ = req.into_body().collect().await;
                    s.lock().unwrap().push(line);
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(
                        "ok\n",
                    ))))
                }
            })
        });
        Recorder {
            port,
            seen,
            _runtime: runtime,
        }
    }

    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests recorded, which must be `n`; `which` says which ones
    /// they are (`"only the allowed ones"`, `"nothing"`).
    pub fn arrived(&self, n: usize, which: &str) -> Vec<String> {
        let seen = self.requests();
        assert_eq!(seen.len(), n, "{which} arrived: {seen:?}");
        seen
    }
}

/// `--allow-domain forge.test:PORT --add-host forge.test=127.0.0.1
/// --upstream-ca CA`: the name reachable (pinned to the host's loopback),
/// and the test authority trusted upstream.
pub fn reach(ca: &TestCa, port: &str) -> Vec<String> {
    vec![
        "--allow-domain".into(),
        format!("forge.test:{port}"),
        "--add-host".into(),
        "forge.test=127.0.0.1".into(),
        "--upstream-ca".into(),
        ca.pem_path(),
    ]
}

/// A recording forge for `forge.test` and the authority its certificate
/// comes from: what each request-rule test starts from.
pub struct Forge {
    pub ca: TestCa,
    pub up: Recorder,
}

impl Forge {
    /// A fresh authority and its recording forge; `None` when this kernel
    /// cannot wire a sandbox's network (`egress_available` says why).
    pub fn start() -> Option<Forge> {
        if !egress_available() {
            return None;
        }
        let ca = TestCa::new();
        let up = Recorder::start(&ca, "forge.test");
        Some(Forge { ca, up })
    }

    /// `warden run --no-tty` with `args` and `sh -c script` (`PORT` in
    /// either is the forge's port), the name pinned to the host's loopback
    /// and the authority trusted upstream.
    pub fn run(&self, args: &[&str], script: &str) -> Output {
        Command::new(warden_bin())
            .args(self.run_args(&["--no-tty"], args, script))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The arguments of `warden run` with its own flags `lead`, the forge
    /// reached as [`reach`] says, `args` and `sh -c script` (`PORT` in
    /// `args` and the script is the forge's port).
    pub fn run_args(&self, lead: &[&str], args: &[&str], script: &str) -> Vec<String> {
        let port = self.up.port.to_string();
        let mut all: Vec<String> = ["run"].iter().chain(lead).map(|a| a.to_string()).collect();
        all.extend(reach(&self.ca, &port));
        all.extend(args.iter().map(|a| a.replace("PORT", &port)));
        all.extend([
            "--".into(),
            "sh".into(),
            "-c".into(),
            script.replace("PORT", &port),
        ]);
        all
    }
}

//! Cross-sandbox access: one sandbox reaching another's loopback, /tmp or
//! processes. The second sandbox's probes are `read-file` (fs),
//! `tcp-connect` (net) and `kill-all` (process).
use crate::lab::{free_port, from_run, Attack, Lab, Verdict};
use crate::probes::{arg, contained, escaped, port, Finding, Probe};
use crate::Category;
use std::time::Duration;

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        // ---- cross-sandbox access ----
        (
            "cross.loopback",
            Category::CrossSandbox,
            "connect to a server in another sandbox",
            |lab| {
                let port = free_port().to_string();
                let Some((a, start)) = lab.spawn(&[], "listen-once", &[&port]) else {
                    return Verdict::Skipped("cannot start the first sandbox".into());
                };
                std::thread::sleep(Duration::from_millis(300));
                let _ = lab.sandbox(&[], "tcp-connect", &["127.0.0.1", &port]);
                from_run(&Lab::finish(a, start))
            },
        ),
        (
            "cross.tmp",
            Category::CrossSandbox,
            "read another sandbox's /tmp",
            |lab| {
                let Some((a, start)) =
                    lab.spawn(&[], "write-then-wait", &["/tmp/cross-sandbox-marker"])
                else {
                    return Verdict::Skipped("cannot start the first sandbox".into());
                };
                std::thread::sleep(Duration::from_millis(300));
                let r = lab.sandbox(&[], "read-file", &["/tmp/cross-sandbox-marker"]);
                let _ = Lab::finish(a, start);
                from_run(&r)
            },
        ),
        (
            "cross.kill",
            Category::CrossSandbox,
            "kill every process it can see, hoping to reach another sandbox",
            |lab| {
                let Some((a, start)) = lab.spawn(&[], "write-then-wait", &["/tmp/alive"]) else {
                    return Verdict::Skipped("cannot start the first sandbox".into());
                };
                std::thread::sleep(Duration::from_millis(300));
                let _ = lab.sandbox(&[], "kill-all", &[]);
                let first = Lab::finish(a, start);
                match first.finding {
                    Some((true, _)) => Verdict::Contained("the other sandbox lived on".into()),
                    _ => Verdict::Escaped(format!(
                        "the other sandbox died (status {:?})",
                        first.status
                    )),
                }
            },
        ),
    ]
}

pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "listen-once",
        harmful: false,
        run: listen_once,
    },
    Probe {
        name: "write-then-wait",
        harmful: false,
        run: write_then_wait,
    },
];

fn listen_once(args: &[String]) -> Finding {
    let p = port(args, 0);
    match std::net::TcpListener::bind(("127.0.0.1", p)) {
        Err(e) => escaped(format!("cannot listen on {p}: {e}")),
        Ok(l) => {
            let _ = l.set_nonblocking(true);
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while std::time::Instant::now() < deadline {
                if l.accept().is_ok() {
                    return escaped("another sandbox connected");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            contained("nobody connected")
        }
    }
}

fn write_then_wait(args: &[String]) -> Finding {
    let _ = std::fs::write(arg(args, 0), b"sandbox-a");
    std::thread::sleep(Duration::from_secs(5));
    contained("still alive")
}

//! The runtime as a library, without the CLI: a spec resolved by the
//! policy crate, run by `run_once` in a real sandbox, its events seen by a
//! sink of the test's own. Runs in its own `main` (no test harness): a
//! sandbox is cloned from a process that has one thread.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Tests remove their own temporary directories (and a host's `rm -r`) with std's.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use warden_audit::{Event, EventKind, EventSink};
use warden_policy::compose::{Layer, Origin, Val};
use warden_policy::{Defaults, Field, HostFacts, Placement};

/// Keeps what it is sent, where the test can read it after the run.
struct Collect(Arc<Mutex<Vec<Event>>>);

impl EventSink for Collect {
    fn emit(&mut self, event: &Event) {
        self.0.lock().unwrap().push(event.clone());
    }
}

fn main() {
    let dir = std::env::temp_dir().join(format!("warden-runtime-lib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A real file in the caller's home, which the sandbox must not read.
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()));
    let planted = home.join(format!(
        ".warden-runtime-lib-planted-{}",
        std::process::id()
    ));
    std::fs::write(&planted, "host secret").unwrap();
    let defaults = Defaults::for_host(HostFacts {
        total_memory: 4 << 30,
        cpus: 2,
        pid_max: 1 << 22,
    });
    // The values a door would give, as one layer.
    let mut layer = Layer::default();
    let command = vec![
            "sh".into(),
            "-c".into(),
            format!(
                "echo made-inside > /workspace/out; cat {} > /workspace/leak 2>/dev/null; echo $? > /workspace/rc; exit 3",
                planted.display()
            ),
    ];
    layer.add_one(Field::Command, Val::Argv(command), Origin::CommandLine);
    layer.add_one(
        Field::Workspace,
        Val::Path(dir.clone()),
        Origin::CommandLine,
    );
    let path = std::env::var("PATH").unwrap_or_default();
    let spec = layer
        .resolve(&Placement::default(), &defaults, &[("PATH".into(), path)])
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let finished =
        warden_runtime::run_once(&spec, "libtest", vec![Box::new(Collect(seen.clone()))]);
    let finished = match finished {
        Ok(f) => f,
        Err(e) if e.to_string().contains("namespaces") => {
            eprintln!("skipped: this host gives no user namespaces: {e}");
            return;
        }
        Err(e) => panic!("the sandbox could not be run: {e}"),
    };
    // The command's own status, its write in the workspace.
    assert_eq!(finished.outcome.status, 3, "{:?}", finished.outcome);
    assert_eq!(
        std::fs::read_to_string(dir.join("out")).unwrap(),
        "made-inside\n"
    );
    // The planted file stayed unread.
    std::fs::remove_file(&planted).unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("leak")).unwrap(), "");
    assert_ne!(std::fs::read_to_string(dir.join("rc")).unwrap().trim(), "0");
    // Its lifecycle, in order, with real timestamps.
    let events = seen.lock().unwrap().clone();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds, ["created", "started", "exited"], "{events:?}");
    assert!(events.windows(2).all(|w| w[0].ts_ms <= w[1].ts_ms));
    match &events[2].kind {
        EventKind::Exited { status, .. } => assert_eq!(*status, 3),
        other => panic!("{other:?}"),
    }
    assert!(events.iter().all(|e| e.sandbox == "libtest"));
    std::fs::remove_dir_all(&dir).unwrap();
    println!("run_once: a sandbox ran as a library call, events in order: ok");
}

//! Where the libraries' own warnings go (they print nothing themselves):
//! stderr, one line each (`warden: warning: ...`, made printable), at the
//! level `WARDEN_LOG` names: `off`, `error`, `warn` (the default), `info`,
//! `debug` or `trace`. A detached supervisor's stderr is its
//! `supervisor.log`.
//!
//! The subscriber is this one small type rather than `tracing-subscriber`'s
//! registry, whose set-up alone (a pool of 4,096 span slots) cost the
//! one-shot `warden run` more than the rest of its argument handling:
//! warden's libraries record events, not spans.

use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span;
use tracing::{Event, Level, Metadata};

/// Writes each event at or above its level on stderr.
struct Stderr {
    max: LevelFilter,
}

/// An event's fields as `message key=value ...`.
struct Line(String);

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.0.push_str(value),
            name => {
                let _ = write!(self.0, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = match field.name() {
            "message" => write!(self.0, "{value:?}"),
            name => write!(self.0, " {name}={value:?}"),
        };
    }
}

impl tracing::Subscriber for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        // The HTTP libraries' warnings are about a peer's conduct (the
        // sandbox's HTTP/2 client resetting more streams than h2 allows),
        // which the egress record says as the connection's end; printed
        // on the terminal they read as warden's own and name no decision.
        // Shown when `WARDEN_LOG` asks for debug.
        if from_http_library(metadata.target()) && self.max < LevelFilter::DEBUG {
            return false;
        }
        *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        let mut line = Line(String::new());
        event.record(&mut line);
        // Libraries name options by their profile keys; here, by flags.
        let text = warden_policy::word(
            &warden_workspace::printable(&line.0),
            warden_policy::Door::Cli,
        );
        eprintln!("warden: {level}: {text}");
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// Whether an event's `target` is one of the HTTP libraries' (`h2`,
/// `hyper`, `hyper_util`).
fn from_http_library(target: &str) -> bool {
    ["h2", "hyper", "hyper_util"]
        .iter()
        .any(|l| target == *l || target.strip_prefix(l).is_some_and(|r| r.starts_with("::")))
}

/// The level `WARDEN_LOG` asks for; what it cannot read is said and the
/// default kept.
fn level() -> LevelFilter {
    let Some(asked) = std::env::var_os("WARDEN_LOG") else {
        return LevelFilter::WARN;
    };
    match asked.to_str().map(str::to_ascii_lowercase).as_deref() {
        Some("off") => LevelFilter::OFF,
        Some("error") => LevelFilter::ERROR,
        Some("warn") | Some("warning") | Some("") => LevelFilter::WARN,
        Some("info") => LevelFilter::INFO,
        Some("debug") => LevelFilter::DEBUG,
        Some("trace") => LevelFilter::TRACE,
        _ => {
            eprintln!(
                "warden: WARDEN_LOG={} is not a level (off, error, warn, info, debug, trace): warnings are shown",
                warden_workspace::printable(&asked.to_string_lossy())
            );
            LevelFilter::WARN
        }
    }
}

/// Installs the subscriber for this process (once; a second call does
/// nothing).
pub fn init() {
    let _ = tracing::subscriber::set_global_default(Stderr { max: level() });
}

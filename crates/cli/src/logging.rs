//! Where the libraries' own warnings go (they print nothing themselves):
//! stderr, one line each (`warden: warning: ...`), at the level
//! `WARDEN_LOG` names: `off`, `error`, `warn` (the default), `info`,
//! `debug` or `trace`. A detached supervisor's stderr is its
//! `supervisor.log`.

use tracing::Level;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `warden: LEVEL: message field=value`.
struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        write!(w, "warden: {level}: ")?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// The level `WARDEN_LOG` asks for; what it cannot read is said once and
/// the default kept.
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
                asked.to_string_lossy()
            );
            LevelFilter::WARN
        }
    }
}

/// Installs the subscriber for this process (once; a second call does
/// nothing).
pub fn init() {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level())
        .with_writer(std::io::stderr)
        .event_format(Line)
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
}

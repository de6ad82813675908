//! Progress of long host-side work the libraries report (they print
//! nothing): the VM backend's root image builds. On a terminal a bar that
//! redraws itself on stderr; otherwise one line at the start and one at
//! the end.

use std::io::{IsTerminal, Write};
use warden_vm::rootimage::Progress;

/// Have this process's image builds drawn on stderr.
pub fn install() {
    let tty = std::io::stderr().is_terminal();
    warden_vm::rootimage::observe(move |p| draw(p, tty));
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// The bar for `done` of `total`: 30 cells and a percentage.
fn bar(done: u64, total: u64) -> String {
    let frac = if total == 0 {
        1.0
    } else {
        (done as f64 / total as f64).clamp(0.0, 1.0)
    };
    let cells = (frac * 30.0).round() as usize;
    format!(
        "[{}{}] {:>3}% of {}",
        "#".repeat(cells),
        " ".repeat(30 - cells),
        (frac * 100.0).round() as u64,
        mb(total)
    )
}

fn draw(p: &Progress, tty: bool) {
    let mut err = std::io::stderr().lock();
    let _ = match p {
        Progress::Started {
            tree,
            entries,
            bytes,
            format,
        } => writeln!(
            err,
            "warden: building the guest's read-only root image of {} ({entries} entries, {}, {}); later runs of the same tree reuse it",
            tree.display(),
            mb(*bytes),
            format.as_str()
        ),
        Progress::Building { done, total } if tty => {
            write!(err, "\r\x1b[K{}", bar(*done, *total))
        }
        Progress::Building { .. } => Ok(()),
        Progress::Finished { image, size, took } => {
            if tty {
                let _ = write!(err, "\r\x1b[K");
            }
            writeln!(
                err,
                "warden: built the guest's root image {} ({}) in {:.1} s",
                image.display(),
                mb(*size),
                took.as_secs_f64()
            )
        }
    };
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_the_work_and_never_overflows() {
        assert!(bar(0, 100).starts_with("[                              ]   0%"));
        assert!(bar(50, 100).contains("] 50%") || bar(50, 100).contains("]  50%"));
        assert!(bar(200, 100).starts_with(&format!("[{}] 100%", "#".repeat(30))));
        assert!(bar(0, 0).contains("100%"));
    }
}

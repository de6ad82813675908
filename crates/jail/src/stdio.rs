//! How warden's own commands treat a standard output that closes under
//! them. Rust starts every program with SIGPIPE ignored, so a write to a
//! pipe whose reader went away (`warden audit list | head`) returns EPIPE
//! and `println!` panics. A command that only prints should end as `cat`
//! does: quietly, killed by the signal. The one-shot supervisor (`run`) and
//! the daemon keep SIGPIPE ignored: they must clean up a sandbox whatever
//! happens to the terminal they were started from.

/// Let a closed standard output end this process quietly, as it ends
/// other Unix tools. Call it before anything is printed, from a command
/// that supervises nothing.
pub fn quit_on_closed_stdout() {
    // SAFETY: SIG_DFL installs no handler, so nothing runs in signal
    // context; the disposition is process-wide, which is the point.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

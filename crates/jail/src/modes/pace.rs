//! The judge's CPU, held to the sandbox's own CPU limit.
//!
//! Every call the notifying filter holds (a mode change with a group or
//! other bit, `link`, the `*xattr` calls, an exec under an allowlist) is
//! judged and made by the supervisor's thread, on the host, outside the
//! sandbox's cgroup: 100-190 us of the supervisor's CPU per call. A
//! sandbox held to 5 % of a core by `--cpus 0.05` made its judge spend
//! 28 % of one with eight loops of `fchmod` (6-7 times its limit), and
//! up to a core per sandbox.
//!
//! The thread could not simply join the sandbox's cgroup: under cgroup v2
//! one thread of a process can only be moved within a threaded subtree
//! that holds the process itself, and the supervisor is not beneath the
//! sandbox's cgroup; under v1 a supervisor's thread in the sandbox's
//! `cpu` cgroup would be in reach of what kills, freezes and removes that
//! cgroup. So the judge keeps an account of its own CPU time instead (a
//! token bucket, filled at the sandbox's `cpus` rate, holding at most
//! [`BURST`]): once it has spent more than the sandbox may, it sleeps
//! until the account is even again, and the sandbox's calls wait in the
//! kernel meanwhile. A sandbox's calls then cost the host at most its own
//! CPU limit again (plus the burst), whatever cgroups the host has, and
//! the judging of a sandbox without a CPU limit is as it was.

use std::time::{Duration, Instant};

/// CPU time the judge may spend at once before it is paced: what a start
/// and an ordinary tool's bursts of calls (an `npm install`'s chmods)
/// take, never waited for.
pub(crate) const BURST: Duration = Duration::from_millis(100);

/// The judge's account of its CPU time.
pub(crate) struct Pace {
    /// Cores the sandbox may use (its `cpus`).
    rate: f64,
    /// CPU time the judge may still spend now, in seconds (negative: owed).
    tokens: f64,
    /// When the account was last brought up to date.
    at: Instant,
    /// The thread's CPU time then.
    cpu: Duration,
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl Pace {
    /// The account of the calling thread, for a sandbox limited to
    /// `cpus` cores; `None` (no pacing) without a limit.
    pub(crate) fn new(cpus: Option<f64>) -> Option<Pace> {
        let rate = cpus.filter(|c| c.is_finite() && *c > 0.0)?;
        Some(Pace {
            rate,
            tokens: BURST.as_secs_f64(),
            at: Instant::now(),
            cpu: thread_cpu(),
        })
    }

    /// After a call: charge what it cost, and how long to wait before the
    /// next one (nothing while the account is not overdrawn).
    pub(crate) fn charge(&mut self) -> Option<Duration> {
        let (now, cpu) = (Instant::now(), thread_cpu());
        let wait = self.settle(now.duration_since(self.at), cpu.saturating_sub(self.cpu));
        (self.at, self.cpu) = (now, cpu);
        wait
    }

    /// The account after `wall` time in which the thread `spent` CPU, and
    /// the wait that evens it.
    fn settle(&mut self, wall: Duration, spent: Duration) -> Option<Duration> {
        let earned = wall.as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(BURST.as_secs_f64()) - spent.as_secs_f64();
        (self.tokens < 0.0).then(|| Duration::from_secs_f64(-self.tokens / self.rate))
    }

    /// [`Pace::charge`], and the wait it asks for.
    pub(crate) fn after_call(&mut self) {
        if let Some(wait) = self.charge() {
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burn(d: Duration) {
        let start = thread_cpu();
        while thread_cpu().saturating_sub(start) < d {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn no_limit_no_pace() {
        assert!(Pace::new(None).is_none());
        assert!(Pace::new(Some(0.0)).is_none());
        assert!(Pace::new(Some(f64::NAN)).is_none());
    }

    #[test]
    fn a_burst_within_the_account_is_never_waited_for() {
        let mut p = Pace::new(Some(0.05)).unwrap();
        burn(BURST / 2);
        assert_eq!(p.charge(), None);
    }

    #[test]
    fn cpu_past_the_account_is_paid_back_at_the_sandboxes_rate() {
        let ms = Duration::from_millis;
        let mut p = Pace::new(Some(0.1)).unwrap();
        // The burst spent in no time: even, nothing to wait.
        assert_eq!(p.settle(ms(0), BURST), None);
        // 20 ms more at a tenth of a core: 200 ms to earn it back.
        let wait = p.settle(ms(0), ms(20)).expect("overdrawn");
        assert!(wait.abs_diff(ms(200)) < ms(1), "{wait:?}");
        // After that wait, even again; idle time fills no more than the
        // burst.
        assert_eq!(p.settle(ms(200), ms(0)), None);
        assert_eq!(p.settle(Duration::from_secs(3600), ms(0)), None);
        let wait = p
            .settle(ms(0), BURST + ms(1))
            .expect("only the burst was kept");
        assert!(wait.abs_diff(ms(10)) < ms(1), "{wait:?}");
    }

    #[test]
    fn a_paced_judge_spends_no_more_than_the_sandboxes_share_of_a_core() {
        let mut p = Pace::new(Some(0.2)).unwrap();
        let (start, cpu0) = (Instant::now(), thread_cpu());
        while start.elapsed() < Duration::from_millis(1500) {
            burn(Duration::from_millis(2));
            p.after_call();
        }
        let used = thread_cpu().saturating_sub(cpu0).as_secs_f64();
        let wall = start.elapsed().as_secs_f64();
        // The share (0.2) plus the burst, with room for the last call.
        let most = 0.2 * wall + BURST.as_secs_f64() + 0.01;
        assert!(used <= most, "used {used:.3} s of CPU in {wall:.3} s");
    }
}

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
//!
//! The same judge serves the calls of warden's helpers that change the
//! host's files for a sandbox: gVisor's runsc, and a VM's file servers
//! (QEMU's 9p server and virtiofsd, each with a judging thread of its
//! own). The account is a [`Budget`] shared by every thread that judges
//! for one sandbox, so a VM's two servers together spend no more than
//! its one limit. A stand-in file server calling `chmod` in a loop, as
//! one answering a fast guest does, made a VM's two judges spend 27 % of
//! a core under `--cpus 0.05` (1.8 cores without a limit); on one
//! account, 5 %.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// CPU time the judge may spend at once before it is paced: what a start
/// and an ordinary tool's bursts of calls (an `npm install`'s chmods)
/// take, never waited for.
pub(crate) const BURST: Duration = Duration::from_millis(100);

/// Why a sandbox's judges cannot be held to its CPU limit.
#[derive(Debug, thiserror::Error)]
pub enum PaceError {
    #[error("a CPU limit of {0} cores cannot pace the judge of the sandbox's calls: it must be a positive, finite number of cores")]
    Limit(f64),
}

/// The CPU time one sandbox's judges may spend: one account, filled at
/// the sandbox's `cpus` rate, shared by every thread that judges for it
/// (a VM's 9p server and its virtiofsd each have one), so that together
/// they spend no more than the sandbox may. Cloning it shares it.
#[derive(Debug, Clone)]
pub struct Budget(Arc<Mutex<Account>>);

/// The account itself.
#[derive(Debug)]
struct Account {
    /// Cores the sandbox may use (its `cpus`).
    rate: f64,
    /// CPU time the judges may still spend now, in seconds (negative:
    /// owed).
    tokens: f64,
    /// When the account was last brought up to date.
    at: Instant,
}

impl Budget {
    /// The account of a sandbox limited to `cpus` cores; `None` without a
    /// limit (its judges run unpaced, as its own processes do). A limit
    /// no account can be kept at is refused, never dropped: the judging
    /// would then run unbounded for a sandbox that asked for a bound.
    pub fn new(cpus: Option<f64>) -> Result<Option<Budget>, PaceError> {
        match cpus {
            None => Ok(None),
            Some(c) if c.is_finite() && c > 0.0 => {
                Ok(Some(Budget(Arc::new(Mutex::new(Account {
                    rate: c,
                    tokens: BURST.as_secs_f64(),
                    at: Instant::now(),
                })))))
            }
            Some(c) => Err(PaceError::Limit(c)),
        }
    }

    /// The calling thread's pace against this account: its CPU time is
    /// counted from now.
    pub(crate) fn pace(&self) -> Pace {
        Pace {
            account: self.0.clone(),
            cpu: thread_cpu(),
        }
    }
}

/// One judging thread's side of a [`Budget`].
pub(crate) struct Pace {
    account: Arc<Mutex<Account>>,
    /// The thread's CPU time when it last charged the account.
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

impl Account {
    /// The account at `now`, after a thread `spent` CPU since its last
    /// charge, and the wait that evens it.
    fn settle(&mut self, now: Instant, spent: Duration) -> Option<Duration> {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.at = self.at.max(now);
        self.tokens = (self.tokens + earned).min(BURST.as_secs_f64()) - spent.as_secs_f64();
        (self.tokens < 0.0).then(|| Duration::from_secs_f64(-self.tokens / self.rate))
    }
}

impl Pace {
    /// After a call: charge what it cost, and how long to wait before the
    /// next one (nothing while the account is not overdrawn).
    pub(crate) fn charge(&mut self) -> Option<Duration> {
        let (now, cpu) = (Instant::now(), thread_cpu());
        let spent = cpu.saturating_sub(self.cpu);
        self.cpu = cpu;
        // A judge that panicked while holding the account left it as
        // consistent as any other update: keep using it.
        let mut account = self
            .account
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        account.settle(now, spent)
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

    /// The calling thread's pace on an account of its own.
    fn paced(cpus: f64) -> Pace {
        Budget::new(Some(cpus))
            .ok()
            .flatten()
            .expect("a valid limit")
            .pace()
    }

    #[test]
    fn no_limit_no_pace() {
        assert!(matches!(Budget::new(None), Ok(None)));
    }

    #[test]
    fn a_limit_no_account_can_keep_is_refused_not_dropped() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(Budget::new(Some(bad)), Err(PaceError::Limit(_))),
                "{bad} was taken"
            );
        }
    }

    #[test]
    fn a_burst_within_the_account_is_never_waited_for() {
        let mut p = paced(0.05);
        burn(BURST / 2);
        assert_eq!(p.charge(), None);
    }

    #[test]
    fn cpu_past_the_account_is_paid_back_at_the_sandboxes_rate() {
        let ms = Duration::from_millis;
        let t = Instant::now();
        let mut a = Account {
            rate: 0.1,
            tokens: BURST.as_secs_f64(),
            at: t,
        };
        // The burst spent in no time: even, nothing to wait.
        assert_eq!(a.settle(t, BURST), None);
        // 20 ms more at a tenth of a core: 200 ms to earn it back.
        let wait = a.settle(t, ms(20)).expect("overdrawn");
        assert!(wait.abs_diff(ms(200)) < ms(1), "{wait:?}");
        // After that wait, even again; idle time fills no more than the
        // burst.
        assert_eq!(a.settle(t + ms(200), ms(0)), None);
        let later = t + ms(200) + Duration::from_secs(3600);
        assert_eq!(a.settle(later, ms(0)), None);
        let wait = a
            .settle(later, BURST + ms(1))
            .expect("only the burst was kept");
        assert!(wait.abs_diff(ms(10)) < ms(1), "{wait:?}");
        // A thread's reading taken before another's update (the account
        // is shared) does not set the account's clock back: the same
        // half second is never earned twice.
        assert!(a.settle(later - ms(500), ms(0)).is_some());
        assert!(a.settle(later, ms(0)).is_some(), "earned again");
    }

    #[test]
    fn a_paced_judge_spends_no_more_than_the_sandboxes_share_of_a_core() {
        let mut p = paced(0.2);
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

    #[test]
    fn two_judges_on_one_account_spend_together_no_more_than_the_sandboxes_share() {
        let budget = Budget::new(Some(0.2)).unwrap().unwrap();
        let start = Instant::now();
        let judges: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    let (mut p, cpu0) = (budget.pace(), thread_cpu());
                    while start.elapsed() < Duration::from_millis(1500) {
                        burn(Duration::from_millis(2));
                        p.after_call();
                    }
                    thread_cpu().saturating_sub(cpu0).as_secs_f64()
                })
            })
            .collect();
        let used: f64 = judges.into_iter().map(|j| j.join().unwrap()).sum();
        let wall = start.elapsed().as_secs_f64();
        // One share and one burst between them, with room for each one's
        // last call: not two shares.
        let most = 0.2 * wall + BURST.as_secs_f64() + 0.02;
        assert!(used <= most, "used {used:.3} s of CPU in {wall:.3} s");
    }
}

//! How much one body's decoding may produce: a small coded body can
//! stand for gigabytes (a "bomb": 1,958 bytes of gzip stacked three times
//! over are 4 GiB of zeros), and decoding a step at a time bounds what is
//! held, not what is read. A body may decode to [`FLOOR`] bytes, and
//! [`LAYER`] times its coded bytes past that: what one gzip or deflate
//! layer can stand for at most, so any single layer decodes at its own
//! ratio (a sparse disk image gzip'd once is a thousandth of its size),
//! while codings stacked on one another, which multiply, are held
//! together to what one layer could give. Every stage's output counts (a
//! middle coding that unpacks to gigabytes of empty blocks costs as much
//! as one that unpacks to data), so the work of a body's decoding is at
//! most [`LAYER`] bytes for each of its coded bytes, however many codings
//! it stacks. The scrub's reading inside runs of base64 and hexadecimal is
//! counted in the same bound, and held to a share of it ([`RATIO`] times
//! the coded bytes past [`FLOOR`]), so runs in a text its gzip gave cost
//! per byte the server sent, not per byte of the text. Past the bound
//! the decoding stops with an error, once said
//! to whoever set the bound. It never decides what happens to the body:
//! the caller cuts or refuses it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// What any body may decode to, whatever its coded length (a small JSON
/// answer compressed a hundred times over still reads).
pub(in crate::secrets) const FLOOR: u64 = 16 << 20;

/// How many decoded bytes each coded byte may stand for past [`FLOOR`],
/// every stage of a body's codings counted together: the most one
/// deflate layer (gzip, zlib, raw deflate) can give. A match of 258
/// bytes, the longest, costs at least two bits (a length code and a
/// distance code of one bit each), so no deflate stream decodes to more
/// than 1,032 times its bytes; text packs four to twenty times, a
/// package's tarball four or five, a sparse image or a log of one line
/// repeated about a thousand. A brotli stage, which has no such limit of
/// its own, is held to it too; a stack of codings (a bomb: a thousand
/// times for each coding stacked) is cut where one layer would have to
/// stop.
pub(in crate::secrets) const LAYER: u64 = 1032;

/// How many bytes of decoding each coded byte of a body (what the server
/// sent, not what its codings gave) may cost past [`FLOOR`] in what is
/// read inside it (runs of base64 or hexadecimal, decoded and inflated),
/// all its runs together: a share of the body's one bound, which the
/// runs' work is counted in too, so a gzip'd body of runs costs at most
/// this much per byte sent, not this much per byte its gzip gives.
pub(in crate::secrets) const RATIO: u64 = 64;

/// The most a body of `coded` bytes may decode to, every stage counted.
pub(in crate::secrets) fn allowed(coded: u64) -> u64 {
    FLOOR.saturating_add(coded.saturating_mul(LAYER))
}

/// Told once that a body went past its bound: its coded and decoded
/// bytes so far.
pub(in crate::secrets) type OnOver = Box<dyn FnOnce(u64, u64) + Send + Sync>;

/// One body's bound: its coded bytes read, what every stage of its
/// decoding produced, shared by every stage that decodes it (a coding
/// told by its first bytes is undone by a stage of its own).
pub(in crate::secrets) struct Budget {
    coded: AtomicU64,
    /// The most coded bytes a reader of them as they came has seen (the
    /// scrub of a body no stage decodes): the same bytes a stage may
    /// count, so the larger of the two counts.
    seen: AtomicU64,
    decoded: AtomicU64,
    /// What reading inside runs cost (counted in `decoded` too).
    runs: AtomicU64,
    over: AtomicBool,
    on_over: Mutex<Option<OnOver>>,
}

/// A body went past its bound.
#[derive(Debug, thiserror::Error)]
#[error("it decodes to more than {allowed} bytes ({coded} coded bytes may stand for {LAYER} times as many, past {FLOOR})")]
pub(in crate::secrets) struct Over {
    pub(in crate::secrets) coded: u64,
    pub(in crate::secrets) allowed: u64,
}

impl Budget {
    pub(in crate::secrets) fn new(on_over: Option<OnOver>) -> Budget {
        Budget {
            coded: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            decoded: AtomicU64::new(0),
            runs: AtomicU64::new(0),
            over: AtomicBool::new(false),
            on_over: Mutex::new(on_over),
        }
    }

    /// `n` more coded bytes read.
    pub(in crate::secrets) fn coded(&self, n: usize) {
        self.coded.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A reader of the coded bytes as they came has seen `n` of them in
    /// all (they may be counted by a stage too: the larger count holds).
    pub(in crate::secrets) fn seen(&self, n: usize) {
        self.seen.fetch_max(n as u64, Ordering::Relaxed);
    }

    /// The body's coded bytes read so far.
    fn coded_bytes(&self) -> u64 {
        self.coded
            .load(Ordering::Relaxed)
            .max(self.seen.load(Ordering::Relaxed))
    }

    /// The most work reading inside runs may do now: what is left of
    /// the runs' share ([`RATIO`] times the coded bytes past [`FLOOR`])
    /// and of the body's whole bound, whichever is less; none once the
    /// body went past its bound.
    pub(in crate::secrets) fn runs_left(&self) -> usize {
        if self.over.load(Ordering::Relaxed) {
            return 0;
        }
        let coded = self.coded_bytes();
        let share = FLOOR
            .saturating_add(coded.saturating_mul(RATIO))
            .saturating_sub(self.runs.load(Ordering::Relaxed));
        let whole = allowed(coded).saturating_sub(self.decoded.load(Ordering::Relaxed));
        usize::try_from(share.min(whole)).unwrap_or(usize::MAX)
    }

    /// `n` bytes of work done reading inside runs, counted in the runs'
    /// share and in the body's whole bound.
    pub(in crate::secrets) fn runs_spent(&self, n: usize) -> Result<(), Over> {
        self.runs.fetch_add(n as u64, Ordering::Relaxed);
        self.decoded(n)
    }

    /// `n` more bytes decoded by some stage: `Err` once past the bound
    /// (and every time after).
    pub(in crate::secrets) fn decoded(&self, n: usize) -> Result<(), Over> {
        let decoded = self.decoded.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        let coded = self.coded_bytes();
        if decoded <= allowed(coded) && !self.over.load(Ordering::Relaxed) {
            return Ok(());
        }
        if !self.over.swap(true, Ordering::Relaxed) {
            let told = self
                .on_over
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(f) = told {
                f(coded, decoded);
            }
        }
        Err(Over {
            coded,
            allowed: allowed(coded),
        })
    }

    /// What reading inside runs cost so far.
    #[cfg(test)]
    pub(in crate::secrets) fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// Whether the body went past its bound.
    #[cfg(test)]
    pub(in crate::secrets) fn is_over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_body_may_decode_to_the_floor_and_a_ratio_of_its_coded_bytes_and_no_more() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let t = told.clone();
        let b = Budget::new(Some(Box::new(move |c, d| t.lock().unwrap().push((c, d)))));
        b.coded(1000);
        assert!(b.decoded(FLOOR as usize).is_ok());
        assert!(b.decoded(1000 * LAYER as usize).is_ok());
        assert!(!b.is_over());
        assert!(b.decoded(1).is_err());
        assert!(b.is_over());
        // Said once, refused every time after (more coded bytes or not).
        b.coded(1 << 20);
        assert!(b.decoded(1).is_err());
        assert_eq!(
            told.lock().unwrap().as_slice(),
            &[(1000, FLOOR + 1000 * LAYER + 1)]
        );
        // A tarball that inflates five times over passes whatever its size.
        let tar = Budget::new(None);
        for _ in 0..100 {
            tar.coded(1 << 20);
            assert!(tar.decoded(5 << 20).is_ok());
        }
    }
}

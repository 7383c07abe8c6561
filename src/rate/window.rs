//! The window as the limiter sees it: one hash, the current and previous windows' counts, and
//! the exact sliding-window arithmetic on them.

use super::Rate;

/// One observation as the limiter sees it: the bucket it landed in and the key's counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WindowView {
    pub(crate) bucket: u64,
    /// The key's estimate in the previous window.
    pub(crate) prev: isize,
    /// The key's estimate in the current window, this observation included.
    pub(crate) curr: isize,
    /// Nanoseconds into the current window (less than `len`), and the window's length.
    pub(crate) into: u64,
    pub(crate) len: u64,
}

impl WindowView {
    /// Whether `prev·(1−f) + curr ≤ limit`, exactly, in integer nanoseconds.
    pub(crate) fn fits(&self, limit: isize) -> bool {
        let (i, x) = (i128::from(self.len), i128::from(self.into.min(self.len)));
        (self.prev.max(0) as i128) * (i - x) + (self.curr as i128) * i <= (limit as i128) * i
    }

    /// The sliding-window count: `prev·(1−f) + curr`, with `f = into / len`.
    pub(crate) fn sliding(&self) -> f64 {
        let fraction = self.into.min(self.len) as f64 / self.len as f64;
        self.prev as f64 * (1.0 - fraction) + self.curr as f64
    }
}

/// Hooks for the limiter, which hashes a key once for all its sketches. Plain windows only
/// (one sub-window).
impl Rate {
    /// Counts one event for an already-hashed key and returns the window as it stands after
    /// it.
    pub(crate) fn observe_hashed(&self, hash: u64) -> WindowView {
        let core = &*self.core;
        debug_assert_eq!(core.sub_windows, 1, "the limiter uses plain windows");
        let (bucket, elapsed) = core.now();
        let curr = core.slot_to_count_in(bucket).counts.incr_hashed(hash, 1);
        self.window_view(hash, bucket, elapsed, curr)
    }

    /// The sliding-window count that a counter carries on average now, `prev·(1−f) + curr`
    /// over the mean counts of the two windows' slots: the noise every key's estimate starts
    /// from. Reads a row of each slot: for reports, not the request path.
    pub(crate) fn noise(&self) -> f64 {
        let core = &*self.core;
        debug_assert_eq!(core.sub_windows, 1, "the limiter uses plain windows");
        let (bucket, elapsed) = core.now();
        let curr = core.slot(bucket).counts.mean_count();
        let prev = match bucket.checked_sub(1) {
            Some(prev) => core.slot(prev).counts.mean_count(),
            None => 0.0,
        };
        prev * (1.0 - core.fraction(bucket, elapsed)) + curr
    }

    /// The key's estimate in `bucket`.
    pub(crate) fn count_hashed(&self, hash: u64, bucket: u64) -> isize {
        self.core.count(hash, bucket)
    }

    /// The current window as `observe_hashed` would see it, without counting anything.
    pub(crate) fn view(&self, hash: u64) -> WindowView {
        let (bucket, elapsed) = self.core.now();
        self.window_view(hash, bucket, elapsed, self.core.count(hash, bucket))
    }

    /// The window of `bucket` at time `elapsed`, with the key's current count `curr` and its
    /// count in the bucket before (none before the Rate existed).
    fn window_view(&self, hash: u64, bucket: u64, elapsed: u64, curr: isize) -> WindowView {
        let core = &*self.core;
        let prev = match bucket.checked_sub(1) {
            Some(prev) => core.count(hash, prev),
            None => 0,
        };
        WindowView {
            bucket,
            prev,
            curr,
            into: elapsed.saturating_sub(bucket * core.bucket_nanos),
            len: core.bucket_nanos,
        }
    }
}

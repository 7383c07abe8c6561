//! What the promotion threshold proves of a key the exact stage promotes: a bound on what the
//! sketch admitted of it before, tighter than the sketch's estimate, which keys sharing its
//! counters inflate.
//!
//! A promoted key starts from what the sketches say of it at its promotion, `p`, an upper
//! bound on what it had (the sketch never under-counts). But a key whose counters all share
//! a heavy key's (with a key's rows in one cache line, that happens to about one key in 64 of
//! those that share a heavy key's line) would then be refused from its first request. The
//! threshold bounds it better: a request admitted by the sketch alone saw, after its own
//! increment, a count in its window below its promotion threshold `P` (the sliding count is
//! at least the current window's), and of m concurrent increments of a key the j-th to read
//! sees at least j; so at most `⌈P⌉ − 1` of a key's requests in a window were admitted that
//! way. A key promoted now is therefore bounded by that in this window and the one before,
//! unless it was admitted some other way in them: by the exact stage (it was promoted, then
//! left), or by the sketch alone while hot (no place, or a twin hash). Each set of the stage
//! records, for the last few keys it lost that way, the latest time each was, and the latest
//! time of a loss it no longer lists (`Set::lost`); the bound is used for a key only if
//! neither its own record nor that time falls in the window before this one or since
//! ([`kept_since`]). `P` is the highest rate threshold any request was judged by so far
//! ([`HighestRatePromotion`]: the limiter raises it before a request counts in the sketches,
//! and it is read after the promotion reads them), unbounded once a request was judged with
//! no rate limit; a fleet's limiter does not use the bound.

use crate::rate::WindowView;
use crate::sync::{AtomicU64, Ordering};

use super::limits::Thresholds;

/// The highest rate promotion threshold (rounded up) any decision may have been judged
/// against so far: the defaults' and every per-request limit's, `u64::MAX` once a request was
/// judged with no rate limit at all (it could be admitted past any threshold). Only raised.
/// Every request raises it, if it must, before it counts in the sketches, and a promotion
/// reads it after reading them (both `SeqCst`, so the read sees every raise whose request's
/// count the promotion's reads saw): the promotion knows the threshold of every admission its
/// counts include.
pub(crate) struct HighestRatePromotion(AtomicU64);

impl HighestRatePromotion {
    /// Starting from the defaults' threshold (0 without a rate limit).
    pub(crate) fn new(defaults: &Thresholds) -> Self {
        HighestRatePromotion(AtomicU64::new(
            defaults
                .rate
                .map_or(0, |rate| rate.promote_at.ceil() as u64),
        ))
    }

    /// Raises it to `t`'s threshold, if that is higher: a load, and a write only when a
    /// threshold is higher than every one before it. For a limiter that counts a rate.
    #[inline]
    pub(crate) fn note(&self, t: &Thresholds) {
        let threshold = t
            .rate
            .map_or(u64::MAX, |rate| rate.promote_at.ceil() as u64);
        if self.0.load(Ordering::Relaxed) < threshold {
            self.0.fetch_max(threshold, Ordering::SeqCst);
        }
    }

    /// The most often a key was admitted by the sketch alone in one rate window, below its
    /// promotion threshold: the highest threshold less one, `None` if unbounded, and `None` for
    /// a limiter in a fleet (`in_fleet`), whose shares and views the proof does not cover.
    pub(crate) fn proven(&self, in_fleet: bool) -> Option<isize> {
        if in_fleet {
            return None;
        }
        isize::try_from(self.0.load(Ordering::SeqCst))
            .ok()
            .map(|p| p - 1)
    }
}

/// Since when (nanoseconds on the limiter's clock) a key promoted by a request at `window`
/// must not have been lost for the bound to hold: the start of the window before the
/// request's (0 without a rate).
pub(crate) fn kept_since(window: Option<&WindowView>) -> u64 {
    window.map_or(0, |w| w.at.saturating_sub(w.into).saturating_sub(w.len))
}

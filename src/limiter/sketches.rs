//! The limiter's first stage: the in-flight and rate sketches, and every decision that is
//! arithmetic on their estimates, alone or lowered to what the exact stage proves.
//!
//! The exact stage (the `exact` module) owns which keys are promoted and their exact counts;
//! this module owns what those counts mean against the limits.

use std::hash::Hash;

use crate::estimator::{CountMin, KeyHasher};
use crate::rate::{ExactWindows, WindowView};
use crate::Rate;

use super::exact::{Counts, InflightCount};
use super::{Estimate, Rejected};

/// The in-flight sketch and its limit.
pub(crate) struct InflightLimit {
    pub(crate) sketch: CountMin,
    pub(crate) limit: isize,
    pub(crate) promote_at: isize,
}

/// The rate sketch (a sliding window) and its limit.
pub(crate) struct RateLimit {
    pub(crate) rate: Rate,
    pub(crate) limit: isize,
    pub(crate) promote_at: f64,
}

/// The sketches of one limiter, and the one hasher all of them are read with.
pub(crate) struct Sketches {
    pub(crate) hasher: KeyHasher,
    pub(crate) inflight: Option<InflightLimit>,
    pub(crate) rate: Option<RateLimit>,
}

/// What the sketches said about one request.
#[derive(Clone, Copy)]
pub(crate) struct Sketched {
    pub(crate) hash: u64,
    /// In-flight estimate, this request included.
    pub(crate) inflight: Option<isize>,
    /// Rate window, this request included.
    pub(crate) window: Option<WindowView>,
}

impl Sketches {
    /// The key's hash, the one every sketch and the exact stage are indexed by.
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash(key)
    }

    /// Counts a request in every sketch and returns what they say, this request included.
    #[inline]
    pub(crate) fn observe(&self, hash: u64) -> Sketched {
        Sketched {
            hash,
            inflight: self.inflight.as_ref().map(|l| l.sketch.incr(hash, 1)),
            window: self.rate.as_ref().map(|l| l.rate.observe_hashed(hash)),
        }
    }

    /// Gives back the in-flight count of a request that was rejected or has finished (and
    /// was not counted by the exact stage, whose release does this under its lock).
    #[inline]
    pub(crate) fn release(&self, hash: u64) {
        if let Some(l) = &self.inflight {
            l.sketch.decr(hash, 1);
        }
    }

    /// Whether an estimate reached its promotion threshold.
    #[inline]
    pub(crate) fn is_hot(&self, s: &Sketched) -> bool {
        let inflight =
            matches!((&self.inflight, s.inflight), (Some(l), Some(n)) if n >= l.promote_at);
        let rate =
            matches!((&self.rate, s.window), (Some(l), Some(w)) if w.sliding() >= l.promote_at);
        inflight || rate
    }

    /// The decision when the exact stage cannot help: the sketch estimates against the limits.
    pub(crate) fn decide_alone(&self, s: &Sketched) -> Result<(), Rejected> {
        if let (Some(l), Some(estimate)) = (&self.inflight, s.inflight) {
            if estimate > l.limit {
                return Err(Rejected::inflight(estimate, l.limit));
            }
        }
        if let (Some(l), Some(view)) = (&self.rate, s.window) {
            if !view.fits(l.limit) {
                // The sketch keeps this rejected request: a retry finds it counted.
                return Err(Rejected::rate(&view, l.limit, view.curr));
            }
        }
        Ok(())
    }

    /// The counts of a key being promoted now, read after its flag is set (the promotion's
    /// half of the handshake, see the `exact` module): upper bounds on what was admitted
    /// before the exact stage counts it.
    pub(crate) fn promoted_counts(&self, s: &Sketched) -> Counts {
        let inflight = InflightCount {
            base: self
                .inflight
                .as_ref()
                .map_or(0, |l| (l.sketch.get(s.hash) - 1).max(0)),
            tracked: 0,
        };
        let rate = match (&self.rate, s.window) {
            (Some(l), Some(w)) => {
                ExactWindows::new(w.bucket, l.rate.count_hashed(s.hash, w.bucket) - 1)
            }
            _ => ExactWindows::new(0, 0),
        };
        Counts { inflight, rate }
    }

    /// Decides with the smaller of the sketch estimates and the exact counts, under the exact
    /// stage's lock, and counts an admitted request in them. `Ok(true)` when the permit's
    /// in-flight slot is counted there.
    pub(crate) fn decide_exact(&self, counts: &mut Counts, s: &Sketched) -> Result<bool, Rejected> {
        let mut tracked = false;
        if let (Some(l), Some(_)) = (&self.inflight, s.inflight) {
            // Read the estimate again under the lock, so that it includes every request the
            // entry admitted before us (each counted itself in the sketch before taking the
            // lock we now hold): the estimate read before the lock may miss one admitted in
            // between, and the bound would then be one short.
            let estimate = l.sketch.get(s.hash);
            counts.inflight.rebase(estimate - 1);
            let bound = estimate.min(counts.inflight.bound() + 1);
            if bound > l.limit {
                return Err(Rejected::inflight(bound, l.limit));
            }
            tracked = true;
        }
        if let (Some(l), Some(mut view)) = (&self.rate, s.window) {
            // The same for the window counts.
            view.curr = l.rate.count_hashed(s.hash, view.bucket);
            if let Some(prev) = view.bucket.checked_sub(1) {
                view.prev = l.rate.count_hashed(s.hash, prev);
            }
            counts.rate.roll_to(view.bucket);
            view.lower_to(&counts.rate, 1);
            if !view.fits(l.limit) {
                // The exact stage does not keep a rejected request: a retry finds one less.
                return Err(Rejected::rate(&view, l.limit, view.curr - 1));
            }
            counts.rate.current += 1;
        }
        if tracked {
            counts.inflight.tracked += 1;
        }
        Ok(tracked)
    }

    /// Whether a promoted key has cooled down: nothing tracked in flight, estimates below
    /// half their promotion thresholds, and (for rates) no rejected request in the windows
    /// the sketch would still be read for, so that a demoted key is not judged later on
    /// windows that its rejected requests inflate. `request` is the request being decided, if
    /// any: counted in the sketches, not yet in `counts`, and not held against the key here.
    pub(crate) fn is_cool(&self, hash: u64, counts: &Counts, request: Option<&Sketched>) -> bool {
        let own = isize::from(request.is_some());
        let inflight_cool = self.inflight.as_ref().map_or(true, |l| {
            counts.inflight.tracked == 0 && (l.sketch.get(hash) - own) * 2 < l.promote_at
        });
        let rate_cool = self.rate.as_ref().map_or(true, |l| {
            let w = request
                .and_then(|s| s.window)
                .unwrap_or_else(|| l.rate.view(hash));
            let mut exact = counts.rate;
            exact.roll_to(w.bucket);
            let clean_prev = w
                .bucket
                .checked_sub(1)
                .map_or(true, |b| exact.bound(b).map_or(true, |n| w.prev <= n));
            let clean_curr = exact.bound(w.bucket).map_or(true, |n| w.curr - own <= n);
            clean_prev && clean_curr && (w.sliding() - own as f64) * 2.0 < l.promote_at
        });
        inflight_cool && rate_cool
    }

    /// A key's counts as the limiter judges them now, without counting a request: the sketch
    /// estimates, lowered to the exact counts if the key is promoted.
    pub(crate) fn estimate(&self, hash: u64, counts: Option<&Counts>) -> Estimate {
        Estimate {
            inflight: self.inflight.as_ref().map(|l| {
                let estimate = l.sketch.get(hash);
                counts.map_or(estimate, |c| estimate.min(c.inflight.bound()))
            }),
            rate: self.rate.as_ref().map(|l| {
                let mut view = l.rate.view(hash);
                if let Some(c) = counts {
                    let mut exact = c.rate;
                    exact.roll_to(view.bucket);
                    view.lower_to(&exact, 0);
                }
                view.sliding()
            }),
        }
    }

    /// Bytes of the sketches.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.inflight
            .as_ref()
            .map_or(0, |l| l.sketch.memory_bytes())
            + self.rate.as_ref().map_or(0, |l| l.rate.memory_bytes())
    }
}

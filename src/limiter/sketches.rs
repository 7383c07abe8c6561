//! The limiter's first stage: the in-flight and rate sketches, and every decision that is
//! arithmetic on their estimates, alone or lowered to what the exact stage proves.
//!
//! The exact stage (the `exact` module) owns which keys are promoted and their exact counts;
//! this module owns what those counts mean against the limits.

use std::hash::Hash;

use crate::estimator::{Blocked, KeyHasher};
use crate::rate::{ExactWindows, WindowView};
use crate::Rate;

use super::exact::{Counts, InflightCount};
use super::limits::{RateThreshold, Thresholds};
use super::{Estimate, Rejected};

/// The sketches of one limiter, and the one hasher all of them are read with. Which sketches
/// exist (the kinds the limiter counts) is fixed by its builder; the limits they are judged
/// against come with each decision, as [`Thresholds`].
pub(crate) struct Sketches {
    pub(crate) hasher: KeyHasher,
    /// Requests in flight per key: a key's rows in one cache line.
    pub(crate) inflight: Option<Blocked>,
    /// Requests per key in a sliding window.
    pub(crate) rate: Option<Rate>,
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
            inflight: self.inflight.as_ref().map(|sketch| sketch.incr(hash, 1)),
            window: self.rate.as_ref().map(|rate| rate.observe_hashed(hash)),
        }
    }

    /// Gives back the in-flight count of a request that was rejected or has finished (and
    /// was not counted by the exact stage, whose release does this under its lock).
    #[inline]
    pub(crate) fn release(&self, hash: u64) {
        if let Some(sketch) = &self.inflight {
            sketch.decr(hash, 1);
        }
    }

    /// Whether an estimate reached its promotion threshold.
    #[inline]
    pub(crate) fn is_hot(&self, s: &Sketched, t: &Thresholds) -> bool {
        let inflight = matches!((t.inflight, s.inflight), (Some(t), Some(n)) if n >= t.promote_at);
        let rate = matches!((t.rate, s.window), (Some(t), Some(w)) if w.reaches(t.promote_at));
        inflight || rate
    }

    /// The decision when the exact stage cannot help: the sketch estimates against the limits.
    pub(crate) fn decide_alone(&self, s: &Sketched, t: &Thresholds) -> Result<(), Rejected> {
        if let (Some(t), Some(estimate)) = (t.inflight, s.inflight) {
            if estimate > t.limit {
                return Err(Rejected::inflight(estimate, t.limit));
            }
        }
        if let (Some(t), Some(view)) = (t.rate, s.window) {
            if !view.fits(t.limit) {
                // The sketch keeps this rejected request: a retry finds it counted.
                return Err(Rejected::rate(&view, t.limit, view.curr));
            }
        }
        Ok(())
    }

    /// The counts of a key being promoted now, read after its flag is set (the promotion's
    /// half of the handshake, see the `exact` module): upper bounds on what was admitted
    /// before the exact stage counts it. `proven`: a bound on the key's admissions in this
    /// rate window and the one before that the promotion threshold proves, when it holds
    /// (see the `exact` module), asked for after the counts are read; they are lowered to it.
    pub(crate) fn promoted_counts(
        &self,
        s: &Sketched,
        proven: impl FnOnce() -> Option<isize>,
    ) -> Counts {
        let inflight = InflightCount {
            base: self
                .inflight
                .as_ref()
                .map_or(0, |sketch| (sketch.get(s.hash) - 1).max(0)),
            tracked: 0,
        };
        let rate = match (&self.rate, s.window) {
            (Some(rate), Some(w)) => {
                let (previous, current) = rate.counts_in(s.hash, &w);
                let current = current - 1;
                let previous = w.bucket.checked_sub(1).map(|_| previous);
                // After the reads: the thresholds of every admission they include are known.
                let proven = proven();
                let mut exact =
                    ExactWindows::new(w.bucket, proven.map_or(current, |p| current.min(p)));
                exact.before = proven.zip(previous).map(|(p, n)| n.min(p));
                exact
            }
            _ => ExactWindows::new(0, 0),
        };
        Counts {
            inflight,
            rate,
            #[cfg(feature = "redis")]
            fleet: Default::default(),
        }
    }

    /// Decides with the smaller of the sketch estimates and the exact counts, under the exact
    /// stage's lock, and counts an admitted request in them. `Ok(true)` when the permit's
    /// in-flight slot is counted there.
    pub(crate) fn decide_exact(
        &self,
        counts: &mut Counts,
        s: &Sketched,
        t: &Thresholds,
    ) -> Result<bool, Rejected> {
        let mut tracked = false;
        if let (Some(sketch), Some(_)) = (&self.inflight, s.inflight) {
            // Read the estimate again under the lock, so that it includes every request the
            // entry admitted before us (each counted itself in the sketch before taking the
            // lock we now hold): the estimate read before the lock may miss one admitted in
            // between, and the bound would then be one short.
            let estimate = sketch.get(s.hash);
            counts.inflight.rebase(estimate - 1);
            let bound = estimate.min(counts.inflight.bound() + 1);
            if let Some(t) = t.inflight.filter(|t| bound > t.limit) {
                return Err(Rejected::inflight(bound, t.limit));
            }
            // Tracked whatever the limit, so that the release finds it counted here.
            tracked = true;
        }
        if let (Some(rate), Some(mut view)) = (&self.rate, s.window) {
            // The same for the window counts.
            (view.prev, view.curr) = rate.counts_in(s.hash, &view);
            counts.rate.roll_to(view.bucket);
            view.lower_to(&counts.rate, 1);
            if let Some(t) = t.rate {
                // A fleet's: the same limit on the fleet's counts as well.
                #[cfg(feature = "redis")]
                let judged = if t.in_fleet {
                    super::fleet::judge(counts, &view, &t)
                } else {
                    judge_alone(&view, &t)
                };
                #[cfg(not(feature = "redis"))]
                let judged = judge_alone(&view, &t);
                judged?;
            }
            counts.rate.count_one();
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
    /// `t` are the key's thresholds (its last request's); a kind it has no limit of is cool
    /// once nothing is tracked.
    pub(crate) fn is_cool(
        &self,
        hash: u64,
        counts: &Counts,
        request: Option<&Sketched>,
        t: &Thresholds,
    ) -> bool {
        let own = isize::from(request.is_some());
        let inflight_cool = self.inflight.as_ref().map_or(true, |sketch| {
            counts.inflight.tracked == 0
                && t.inflight
                    .map_or(true, |t| (sketch.get(hash) - own) * 2 < t.promote_at)
        });
        let rate_cool = self.rate.as_ref().map_or(true, |rate| {
            let Some(t) = t.rate else { return true };
            let w = request
                .and_then(|s| s.window)
                .unwrap_or_else(|| rate.view(hash));
            let mut exact = counts.rate;
            exact.roll_to(w.bucket);
            let clean_prev = w
                .bucket
                .checked_sub(1)
                .map_or(true, |b| exact.bound(b).map_or(true, |n| w.prev <= n));
            let clean_curr = exact.bound(w.bucket).map_or(true, |n| w.curr - own <= n);
            clean_prev && clean_curr && (w.sliding() - own as f64) * 2.0 < t.promote_at
        });
        inflight_cool && rate_cool
    }

    /// A key's counts as the limiter judges them now, without counting a request: the sketch
    /// estimates, lowered to the exact counts if the key is promoted.
    pub(crate) fn estimate(&self, hash: u64, counts: Option<&Counts>) -> Estimate {
        Estimate {
            inflight: self.inflight.as_ref().map(|sketch| {
                let estimate = sketch.get(hash);
                counts.map_or(estimate, |c| estimate.min(c.inflight.bound()))
            }),
            rate: self.rate.as_ref().map(|rate| {
                let mut view = rate.view(hash);
                if let Some(c) = counts {
                    let mut exact = c.rate;
                    exact.roll_to(view.bucket);
                    view.lower_to(&exact, 0);
                }
                view.sliding()
            }),
        }
    }

    /// The time now on the rate windows' clock (0 without a rate: nothing is judged by it).
    pub(crate) fn now(&self) -> u64 {
        self.rate.as_ref().map_or(0, Rate::now_at)
    }

    /// Bytes of the sketches.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.inflight.as_ref().map_or(0, Blocked::memory_bytes)
            + self.rate.as_ref().map_or(0, Rate::memory_bytes)
    }
}

/// The rate decision on this node's own counts (`view`, this request included) against the
/// limit of `t`.
#[inline]
pub(super) fn judge_alone(view: &WindowView, t: &RateThreshold) -> Result<(), Rejected> {
    if view.fits(t.limit) {
        Ok(())
    } else {
        // The exact stage does not keep a rejected request: a retry finds one less.
        Err(Rejected::rate(view, t.limit, view.curr - 1))
    }
}

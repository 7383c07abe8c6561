//! A promoted key's exact counts: what the decision judges a key in the exact stage by.

use super::fleet::FleetView;
use crate::rate::ExactWindows;

/// A promoted key's exact counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) inflight: InflightCount,
    pub(crate) rate: ExactWindows,
    /// What the fleet last said of the key (feature `redis`; nothing without a fleet).
    pub(crate) fleet: FleetView,
}

/// In-flight requests of a promoted key, beside those the exact stage counts it (its
/// *tracked* units, in its place's word, which releases give back without the set's lock).
#[derive(Debug, Clone, Copy)]
pub(crate) struct InflightCount {
    /// An upper bound on the key's requests in flight that are not tracked (those admitted
    /// before the promotion).
    pub(crate) base: isize,
}

impl InflightCount {
    /// An upper bound on the key's requests in flight, `tracked` of them tracked.
    pub(crate) fn bound(&self, tracked: isize) -> isize {
        self.base.saturating_add(tracked)
    }

    /// Lowers `base` with a fresh sketch estimate `estimate` of all in flight (≥ the true
    /// number), `tracked` read after it: the untracked ones are at most `estimate − tracked`.
    /// In that order, against a release that gives its tracked unit back before its sketch
    /// unit, the difference is never under the untracked units (see the exact stage's
    /// `lane.rs`).
    pub(crate) fn rebase(&mut self, estimate: isize, tracked: isize) {
        self.base = self.base.min(estimate.saturating_sub(tracked)).max(0);
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn rebase_never_raises_the_bound_and_never_goes_below_what_is_tracked() {
        let mut c = InflightCount { base: 10 };
        let tracked = 3;
        c.rebase(20, tracked);
        assert_eq!(c.bound(tracked), 13);
        c.rebase(5, tracked);
        assert_eq!((c.base, c.bound(tracked)), (2, 5));
        c.rebase(0, tracked);
        assert_eq!((c.base, c.bound(tracked)), (0, 3));
    }
}

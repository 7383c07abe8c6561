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

/// In-flight requests of a promoted key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InflightCount {
    /// An upper bound on the key's requests in flight that are not counted in `tracked`
    /// (those admitted before the promotion).
    pub(crate) base: isize,
    /// Requests admitted here and not yet released.
    pub(crate) tracked: isize,
}

impl InflightCount {
    /// An upper bound on the key's requests in flight.
    pub(crate) fn bound(&self) -> isize {
        self.base.saturating_add(self.tracked)
    }

    /// Lowers `base` with a fresh sketch estimate `estimate` of all in flight (≥ the true
    /// number): the untracked ones are at most `estimate − tracked`.
    pub(crate) fn rebase(&mut self, estimate: isize) {
        self.base = self.base.min(estimate.saturating_sub(self.tracked)).max(0);
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn rebase_never_raises_the_bound_and_never_goes_below_what_is_tracked() {
        let mut c = InflightCount {
            base: 10,
            tracked: 3,
        };
        c.rebase(20);
        assert_eq!(c.bound(), 13);
        c.rebase(5);
        assert_eq!((c.base, c.bound()), (2, 5));
        c.rebase(0);
        assert_eq!((c.base, c.bound()), (0, 3));
    }
}

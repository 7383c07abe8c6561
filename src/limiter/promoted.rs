//! What the limiter keeps for a key the exact stage holds ([`Promoted`]): its exact counts, the
//! limits it was last judged by, its refusals, what the over-limit cache holds for it, and
//! the in-flight limit it may be learning. The stage stores it and knows it only as a
//! [`Tenant`].

use super::adaptive::Learning;
use super::counts::Counts;
use super::exact::{Tenant, Units};
use super::key_lines::KeyLine;
use super::limits::Thresholds;
use super::overlimit::OverLimit;

/// A promoted key's state, beside what the stage keeps of its place.
#[derive(Debug)]
pub(crate) struct Promoted {
    pub(crate) counts: Counts,
    /// The key's limits at its last decision: what the sweep judges it cool by.
    pub(crate) thresholds: Thresholds,
    /// Requests rejected while promoted: by the exact stage, the runs the over-limit cache
    /// refused on a deadline an admission held (`held`), once settled, and those its lane
    /// refused without the lock, once taken (`take_lane_refusals`).
    pub(crate) rejected: u64,
    /// Until when (nanoseconds on the limiter's clock) the key's requests are rejected by the
    /// over-limit cache, which counts no hits: the entry keeps its place until then.
    pub(crate) over_until: u64,
    /// The over-limit cache's word for the deadline the key's admission held there, until
    /// the run of refusals on it is counted in `rejected` (`OverLimit::settle`); 0 if none.
    pub(crate) held: u64,
    /// The in-flight limit the key is learning from its latency, once its in flight reached
    /// its promotion threshold under a limiter with adaptive in-flight limits.
    pub(crate) learning: Learning,
    /// The units of the lease its lane was last granted, until it is taken back (0: none),
    /// in a limiter whose lanes lease rate units: see `Shared::lease_returned`.
    pub(crate) lease: u32,
}

impl Promoted {
    /// A key promoted with `counts` under the limits `thresholds`.
    pub(crate) fn new(counts: Counts, thresholds: Thresholds) -> Self {
        Promoted {
            counts,
            thresholds,
            rejected: 0,
            over_until: 0,
            held: 0,
            learning: Learning::default(),
            lease: 0,
        }
    }

    /// Counts the run of refusals the over-limit cache answered on the deadline the key's
    /// admission held there (on its `line`), if that run came (see `OverLimit::settle`).
    pub(crate) fn settle(&mut self, line: KeyLine<'_>) {
        OverLimit::settle(line, &mut self.held, &mut self.rejected);
    }

    /// Counts the requests its lane (`units`) refused without the lock since they were last
    /// taken: under the lock, at the clock's sweep and as the key leaves.
    pub(crate) fn take_lane_refusals(&mut self, units: Units<'_>) {
        let refused = u64::from(units.take_refused());
        self.rejected = self.rejected.saturating_add(refused);
    }

    /// Its refusals, with a run [`settle`](Self::settle) would count now and those its lane
    /// (`units`) refused since they were last taken (for reports, which change nothing).
    pub(crate) fn rejected_by_now(&self, line: KeyLine<'_>, units: Units<'_>) -> u64 {
        let unsettled = OverLimit::unsettled(line, self.held);
        self.rejected
            .saturating_add(unsettled)
            .saturating_add(u64::from(units.refused()))
    }
}

impl Tenant for Promoted {
    fn kept_until(&self) -> u64 {
        self.over_until
    }

    fn refused(&self) -> u64 {
        self.rejected
    }
}

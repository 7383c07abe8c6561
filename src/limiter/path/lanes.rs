//! What a promoted key's requests do without the lock: which lanes a limiter's keys have, a
//! request admitted in its key's lane, and a lane closed for a decision under the lock and
//! opened again after it, with what the key's next requests without the lock judge by. The
//! lane itself (its word, and the protocols' proofs) is the exact stage's `lane.rs`.

use super::CountedExactly;
use crate::limiter::counts::Counts;
use crate::limiter::decision::Admitted;
use crate::limiter::exact::{Ask, Closed, LeaseAsk, Units, MAX_LEASE};
use crate::limiter::limits::{Promotion, Thresholds};
use crate::limiter::promoted::Promoted;
use crate::limiter::shared::Shared;
use crate::limiter::sketches::{less_own, Sketched, SATURATED};
use crate::limiter::tally::{Tally, NEAR_LIMIT};

/// What a limiter's promoted keys are admitted by without the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::limiter) enum Lanes {
    /// Nothing: every request of a promoted key is decided under its set's lock. A limiter
    /// that counts both requests in flight and a rate (one word cannot hold both), that
    /// learns in-flight limits (a key learning its limit, or starting to, is judged under the
    /// lock), or whose rate a fleet holds (its view of the key is judged there).
    Locked,
    /// Units in flight, within the key's in-flight limit: a limiter that counts requests in
    /// flight and no rate.
    InFlight,
    /// Rate units, out of a lease of room its last decision under the lock counted ahead: a
    /// limiter that counts a rate and nothing in flight, alone.
    Rate,
}

/// Unbounded: the release and the reports ask too.
impl<K> Shared<K> {
    /// What this limiter's promoted keys are admitted by without the lock.
    #[inline]
    pub(in crate::limiter) fn lanes(&self) -> Lanes {
        if self.adaptive.is_some() {
            return Lanes::Locked;
        }
        match (
            self.sketches.inflight.is_some(),
            self.sketches.rate.is_some(),
        ) {
            (true, false) => Lanes::InFlight,
            (false, true) if !self.fleet.is_joined() => Lanes::Rate,
            _ => Lanes::Locked,
        }
    }

    /// Closes a promoted key's lane (`units`, of `entry`) for a decision under its set's lock,
    /// in a limiter whose lanes admit: no request passes it until the guard drops or the
    /// decision opens it. In one whose lanes lease rate units, what is left of the lease is
    /// taken back in the same swap and uncounted from the key's window (see "A lease" in the
    /// exact stage's `lane.rs`): the decision judges the key by what it admitted.
    pub(in crate::limiter) fn close_lane<'a>(
        &self,
        entry: &mut Promoted,
        units: Units<'a>,
    ) -> Option<Closed<'a>> {
        match self.lanes() {
            Lanes::Locked => None,
            Lanes::InFlight => Some(units.close()),
            Lanes::Rate => {
                let (closed, lease) = units.reclaim();
                if let Some((window, left)) = lease {
                    entry.counts.rate.uncount(window, left as isize);
                }
                Some(closed)
            }
        }
    }

    /// After a decision under the lock of a request (`s`, judged by `t`) of the key `entry`
    /// (its lane `units`, closed): what the key's next requests without the lock judge by.
    /// Its in-flight base just lowered and the limits it admits under; in a limiter whose
    /// lanes lease rate units, a lease of the room the decision found for more in its window
    /// (`admitted`), counted in the key's window now, which opens the lane.
    pub(in crate::limiter) fn open_lane(
        &self,
        entry: &mut Promoted,
        units: Units<'_>,
        s: &Sketched,
        t: &Thresholds,
        admitted: Option<&Admitted>,
    ) {
        match self.lanes() {
            Lanes::Locked => {}
            Lanes::InFlight => {
                units.set_base(entry.counts.inflight.base);
                units.admit_under(inflight_limits(t).map_or(0, |(limits, _)| limits));
            }
            Lanes::Rate => {
                let limits = t.rate.and_then(|rate| lease_limits(rate.limit));
                units.admit_under(limits.unwrap_or(0));
                let (Some(admitted), Some(w), Some(_)) = (admitted, s.window.as_ref(), limits)
                else {
                    return;
                };
                // Not while the over-limit cache may hold the key: its deadline assumed that
                // nothing more is admitted. And less the room of one more request of this
                // cost, left to the lock: the admission that fills the key is decided there,
                // and holds the key's next refusals in the over-limit cache (`full_until`), so
                // that a key over its limit is refused without the lock, its first refusal
                // included.
                let room = admitted.room.saturating_sub(s.cost as u64);
                if room == 0 || admitted.over_until.is_some() {
                    return;
                }
                let lease = room.min(u64::from(MAX_LEASE)) as u32;
                let window = entry.counts.rate.count(lease as isize);
                // The room is of the request's window, which the counts reached.
                debug_assert_eq!(window, w.bucket);
                // The key's count once the lease is all taken, for the near-limit tally: the
                // limit less the room not leased.
                let top = rate_limit(t).saturating_sub(admitted.room - u64::from(lease));
                units.grant(window, w.at, lease, u32::try_from(top).unwrap_or(u32::MAX));
            }
        }
    }

    /// A promoted key's counts as its reports show them (`state`, its lane `units`), and its
    /// units in flight: a lease's units left are not admitted, and are uncounted.
    pub(in crate::limiter) fn counts_now(
        &self,
        state: &Promoted,
        units: Units<'_>,
    ) -> (Counts, isize) {
        let mut counts = state.counts;
        match self.lanes() {
            Lanes::Rate => {
                if let Some((window, left)) = units.lease() {
                    counts.rate.uncount(window, left as isize);
                }
                (counts, 0)
            }
            Lanes::Locked | Lanes::InFlight => (counts, units.in_flight() as isize),
        }
    }
}

impl<K> Shared<K> {
    /// A request of a promoted key (`s`, judged by `t`; `hot`: whether its own counts reach
    /// its promotion threshold) admitted in its lane without the lock, if its limiter's lanes
    /// admit and it fits there. `None`: decided under the lock.
    #[inline]
    pub(super) fn admit_in_lane(
        &self,
        s: &Sketched,
        t: &Thresholds,
        hot: bool,
    ) -> Option<CountedExactly> {
        match self.lanes() {
            Lanes::Locked => None,
            Lanes::InFlight => self.admit_in_flight(s, t, hot),
            Lanes::Rate => self.take_lease(s, t, hot),
        }
    }

    /// [`admit_in_lane`](Self::admit_in_lane) in a limiter whose lanes count units in flight:
    /// counted within the in-flight limit, with the key's base. A request below its promotion
    /// threshold (`hot` false) is, only while the key has units in flight counted there: with
    /// none, its key is judged for cooling down under the lock.
    #[inline]
    fn admit_in_flight(&self, s: &Sketched, t: &Thresholds, hot: bool) -> Option<CountedExactly> {
        let (limits, limit) = inflight_limits(t)?;
        // The others in flight by the sketch, for whether the key's base would be lowered
        // (a saturated estimate lowers nothing, as under the lock).
        let others = s
            .inflight
            .filter(|&estimate| estimate < SATURATED)
            .map_or(u32::MAX, |estimate| {
                u32::try_from(less_own(estimate, s.cost).max(0)).unwrap_or(u32::MAX)
            });
        let ask = Ask {
            limits,
            cost: s.cost as u32,
            limit,
            others,
            while_tracked: !hot,
        };
        let (way, generation, bound) = self.exact.admit(s.hash, &ask)?;
        if Tally::ON {
            let bound = s.inflight.map_or(bound as isize, |e| e.min(bound as isize));
            if bound as f64 >= NEAR_LIMIT * limit as f64 {
                self.tally.near();
            }
        }
        Some(CountedExactly {
            generation,
            way,
            window: None,
            admitted_at: 0,
        })
    }

    /// [`admit_in_lane`](Self::admit_in_lane) in a limiter whose lanes lease rate units: its
    /// cost taken out of its key's lease, if the lease is of its window and covers it. A
    /// request below its promotion threshold whose key may have cooled down (half its
    /// threshold, less its own units: see `decision::is_cool`) is judged under the lock.
    #[inline]
    fn take_lease(&self, s: &Sketched, t: &Thresholds, hot: bool) -> Option<CountedExactly> {
        let rate = t.rate.as_ref()?;
        self.take_lease_under(s, rate.limit, rate.promote_at, hot)
    }

    /// A request of one unit under the default limits (`s`; `limit` their rate limit, as
    /// the over-limit cache's tag word holds it, `promotion` their promotion word) taken out
    /// of its key's lease, in a limiter whose lanes lease rate units: the request path of a
    /// promoted key's usual request, which reads neither the thresholds whole (a copy of 56
    /// bytes behind a sequence lock) nor anything else of the exact stage than its lane.
    /// `None`: decided the usual way.
    #[inline]
    pub(super) fn take_default_lease(
        &self,
        s: &Sketched,
        limit: isize,
        promotion: Promotion,
        hot: bool,
    ) -> Option<CountedExactly> {
        if self.lanes() != Lanes::Rate {
            return None;
        }
        self.take_lease_under(s, limit, promotion.rate(), hot)
    }

    /// A request's cost taken out of its key's lease granted under the rate limit `limit`
    /// (`promote_at`: its promotion threshold; `hot`: whether the request's counts reach it).
    #[inline]
    fn take_lease_under(
        &self,
        s: &Sketched,
        limit: isize,
        promote_at: f64,
        hot: bool,
    ) -> Option<CountedExactly> {
        let w = s.window.as_ref()?;
        if !hot && (w.sliding() - s.cost as f64) * 2.0 < promote_at {
            return None;
        }
        let ask = LeaseAsk {
            limits: lease_limits(limit)?,
            cost: u32::try_from(s.cost).ok()?,
            window: w.bucket,
            at: w.at,
        };
        let (way, generation, count) = self.exact.take_lease(s.hash, &ask)?;
        // Near by the count the lease's grant found, with what it gave since: at the grant's
        // time (later, the sliding count is lower, and this an upper bound).
        if Tally::ON && f64::from(count) >= NEAR_LIMIT * limit as f64 {
            self.tally.near();
        }
        Some(CountedExactly {
            generation,
            way,
            window: Some(w.bucket),
            admitted_at: 0,
        })
    }
}

/// The limits `t` as a promoted key's lane admits units in flight under them without the
/// lock: the fingerprint the lane keeps and the in-flight limit, for an in-flight limit alone.
fn inflight_limits(t: &Thresholds) -> Option<(u64, u32)> {
    if t.rate.is_some() {
        return None;
    }
    let inflight = t.inflight?;
    let limit = u32::try_from(inflight.limit).ok()?;
    let promote_at = u32::try_from(inflight.promote_at).ok()?;
    // Both under 2^31, the limit at least 1: never 0.
    Some(((u64::from(limit) << 32) | u64::from(promote_at), limit))
}

/// The rate limit of `t` (0 without one).
fn rate_limit(t: &Thresholds) -> u64 {
    t.rate
        .map_or(0, |rate| u64::try_from(rate.limit).unwrap_or(0))
}

/// The fingerprint of a rate limit `limit` as a promoted key's lease is taken under it: a
/// lease was counted as room under one limit, and is no room under a lower one. The high bit
/// set: never 0, and never an in-flight fingerprint (whose limit is under 2^31).
fn lease_limits(limit: isize) -> Option<u64> {
    let limit = u32::try_from(limit).ok()?;
    Some((1 << 63) | u64::from(limit))
}

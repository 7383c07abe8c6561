//! What a promoted key's requests do without the lock: which lanes a limiter's keys have, a
//! request admitted in its key's lane, and a lane closed for a decision under the lock and
//! opened again after it, with what the key's next requests without the lock judge by. The
//! lane itself (its word, and the protocols' proofs) is the exact stage's `lane.rs`.

use super::CountedExactly;
use crate::limiter::counts::Counts;
use crate::limiter::decision::Admitted;
use crate::limiter::exact::{Ask, Closed, GivenBack, InLane, LaneOf, LeaseAsk, Units, MAX_LEASE};
use crate::limiter::key_lines::spread;
use crate::limiter::limits::{BothLimits, InflightAlone, Thresholds};
use crate::limiter::promoted::Promoted;
use crate::limiter::shared::Shared;
use crate::limiter::sketches::{less_own, Reread, Sketched, SATURATED, UNCOUNTED};
use crate::limiter::tally::{Tally, NEAR_LIMIT};
use crate::limiter::Rejected;
use crate::rate::WindowView;

/// What a limiter's promoted keys are admitted by without the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::limiter) enum Lanes {
    /// Nothing: every request of a promoted key is decided under its set's lock. A limiter
    /// that learns in-flight limits (a key learning its limit, or starting to, is judged
    /// under the lock), or whose rate a fleet holds (its view of the key is judged there).
    Locked,
    /// Units in flight, within the key's in-flight limit: a limiter that counts requests in
    /// flight and no rate.
    InFlight,
    /// Rate units, out of a lease of room its last decision under the lock counted ahead: a
    /// limiter that counts a rate and nothing in flight, alone.
    Rate,
    /// Both: units in flight within the key's in-flight limit, and rate units out of its
    /// lease, in that order (a request its lease cannot take gives its units in flight back
    /// and goes to the lock): a limiter that counts requests in flight and a rate.
    Both,
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
            _ if self.fleet.is_joined() => Lanes::Locked,
            (false, true) => Lanes::Rate,
            (true, true) => Lanes::Both,
            (false, false) => Lanes::Locked,
        }
    }

    /// The in-flight estimate below which a release that leaves a promoted key (judged by
    /// `t`, its request `s` decided under the lock) nothing in flight takes the lock, to see
    /// whether the key has cooled down and leaves (see `may_be_cool`): below its in-flight
    /// promotion threshold.
    ///
    /// In a limiter whose lanes count both, never (0) while the request found the key hot by
    /// its rate, which a release does not lower: a key whose requests come one at a time has
    /// nothing in flight after each, and each release took the lock, found the key hot, and
    /// took its lease back, so that its next request was decided under the lock too
    /// (callgrind, the fresh-limiter Zipf trace at 100k requests a second with both limits:
    /// the limiter's part 465 instructions a request, 367 without those looks). Whether such
    /// a key has cooled down is judged as a lease's: at its next decision under the lock, or
    /// at the clock's sweep.
    pub(in crate::limiter) fn release_looks_below(&self, t: &Thresholds, s: &Sketched) -> u32 {
        let hot_by_rate = s.window.is_some_and(|w| w.reaches(t.promotion().rate()));
        if self.lanes() == Lanes::Both && hot_by_rate {
            return 0;
        }
        let cool_at = t.inflight.map_or(isize::MAX, |i| i.promote_at);
        u32::try_from(cool_at).unwrap_or(u32::MAX)
    }

    /// Closes a promoted key's lane (`units`, of `entry`, the key of hash `hash`) for a
    /// decision under its set's lock, in a limiter whose lanes admit: no request passes it
    /// until the guard drops or the decision opens it. In one whose lanes lease rate units,
    /// the lease is taken back as the lane closes ([`lease_returned`](Self::lease_returned)):
    /// the decision judges the key by what it admitted, on sketch counts that hold it.
    pub(in crate::limiter) fn close_lane<'a>(
        &self,
        hash: u64,
        entry: &mut Promoted,
        units: Units<'a>,
    ) -> Option<Closed<'a>> {
        match self.lanes() {
            Lanes::Locked => None,
            Lanes::InFlight => Some(units.close()),
            Lanes::Rate | Lanes::Both => {
                let (closed, left) = units.reclaim();
                let left = left.map_or(0, |(_, left)| left);
                self.lease_returned(hash, entry, units.lease_window(), left);
                Some(closed)
            }
        }
    }

    /// The lease `entry` (the key of hash `hash`) was last granted, of window `window`, taken
    /// back from its lane with `left` units left: under the lock, as the lane closes for a
    /// decision or the key leaves the stage. The units left are uncounted from the key's
    /// window; those its requests took are counted in the rate sketch's window of the lease,
    /// where they counted nothing when taken (see [`take_lease_first`](Self::take_lease_first)).
    ///
    /// Counted here, not when granted: a lease counted whole in the sketch would leave what
    /// is not taken of it there, and a key's estimate could pass every request offered (a
    /// key's sketch counts only grow; units are never taken back out of a slot, which the
    /// ring may have cleared and given to a later window meanwhile). Until then the sketch
    /// lacks the units taken, and nothing reads it for the key but under this lock, after
    /// this, the reports, which add them ([`reported`](Self::reported)), and a request of
    /// the key that counts itself in the sketch: one that finds the key flagged goes to the
    /// lock, and one that does not finds the key left since its first look, or read counts
    /// this left complete (see "Leaving between two reads" in the exact stage's module docs).
    /// Another key sharing its counters still has its own units there.
    fn lease_returned(&self, hash: u64, entry: &mut Promoted, window: u64, left: u32) {
        let granted = std::mem::take(&mut entry.lease);
        debug_assert!(left <= granted, "{left} left of a lease of {granted}");
        if granted == 0 {
            return;
        }
        entry.counts.rate.uncount(window, left as isize);
        let taken = granted.saturating_sub(left);
        if let (Some(rate), true) = (&self.sketches.rate, taken > 0) {
            if let Some(count) = rate.add_at(hash, window, taken) {
                let line = self.exact.lines().key_line(spread(hash));
                self.defaults.rate_mark().note(line, window, count);
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
        let lanes = self.lanes();
        if let Lanes::InFlight | Lanes::Both = lanes {
            units.set_base(entry.counts.inflight.base);
        }
        match lanes {
            Lanes::Locked => {}
            Lanes::InFlight => {
                units.admit_under(t.inflight_alone().map_or(0, InflightAlone::bits));
            }
            Lanes::Rate | Lanes::Both => {
                let limits = match lanes {
                    Lanes::Both => t.both_limits().map(BothLimits::bits),
                    _ => t.rate.and_then(|rate| lease_limits(rate.limit)),
                };
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
                // Taken back before any other grant: `close_lane` precedes every decision.
                debug_assert_eq!(entry.lease, 0, "a lease not taken back");
                entry.lease = lease;
                // The key's count once the lease is all taken, for the near-limit tally: the
                // limit less the room not leased.
                let top = rate_limit(t).saturating_sub(admitted.room - u64::from(lease));
                units.grant(window, w.at, lease, u32::try_from(top).unwrap_or(u32::MAX));
            }
        }
    }

    /// A promoted key (of hash `hash`; `state`, its lane `units`) as its reports show it:
    /// the sketches' estimates, its exact counts and its units in flight. In a limiter whose
    /// lanes lease rate units, a lease's units left are not admitted, and are uncounted; the
    /// units its requests took are admitted, and counted in the sketch's window of the lease
    /// (they are counted there only when the lease is taken back: see
    /// [`lease_returned`](Self::lease_returned)).
    pub(in crate::limiter) fn reported(
        &self,
        hash: u64,
        state: &Promoted,
        units: Units<'_>,
    ) -> (Reread, Counts, isize) {
        let mut counts = state.counts;
        let lanes = self.lanes();
        // The lease's units left first: a take after it is in neither figure, as a request
        // admitted after the report.
        let leases = matches!(lanes, Lanes::Rate | Lanes::Both);
        let lease = (leases && state.lease > 0).then(|| {
            let left = units.lease().map_or(0, |(_, left)| left);
            (units.lease_window(), left)
        });
        let mut now = self.sketches.reread(hash);
        let in_flight = units.in_flight() as isize;
        if let Some((window, left)) = lease {
            counts.rate.uncount(window, left as isize);
            let taken = state.lease.saturating_sub(left) as isize;
            if let Some(view) = now.window.as_mut() {
                if view.bucket == window {
                    view.curr = view.curr.saturating_add(taken);
                } else if view.bucket == window.wrapping_add(1) {
                    view.prev = view.prev.saturating_add(taken);
                }
            }
        }
        (now, counts, in_flight)
    }
}

impl<K> Shared<K> {
    /// A request of a promoted key (`s`, judged by `t`; `hot`: whether its own counts reach
    /// its promotion threshold) admitted or refused in its lane without the lock, if its
    /// limiter's lanes admit and the lane can decide it (see "A refusal without the lock" in
    /// the exact stage's `lane.rs`). `None`: decided under the lock.
    #[inline]
    pub(super) fn admit_in_lane(
        &self,
        s: &Sketched,
        t: &Thresholds,
        hot: bool,
    ) -> Option<Result<CountedExactly, Rejected>> {
        match self.lanes() {
            Lanes::Locked => None,
            Lanes::InFlight => self.admit_in_flight(s, t.inflight_alone()?, hot, true),
            // Its units are in the sketch already, and a lease's takes are counted there when
            // it is taken back: taken now, they would be counted twice. A promoted key's
            // requests take their lease before they count themselves (`take_lease_first`).
            Lanes::Rate | Lanes::Both => None,
        }
    }

    /// A promoted key's request (`s`, counted in the in-flight sketch, its cell flagged) in a
    /// limiter whose lanes count units in flight alone, admitted in its lane under the default
    /// limits' one word of them ([`Defaults::inflight_alone`]): the request path past the
    /// sketch of a promoted key's usual request, without the thresholds read whole (a
    /// 56-byte copy under a sequence lock) or the path to the lock. `None`: decided the usual
    /// way, by the thresholds whole, where a request that does not fit is refused in the lane
    /// (by [`admit_in_lane`](Self::admit_in_lane)) if the lock would refuse it: not here, so
    /// that this path, every promoted key's admission, stays short enough to be inlined.
    ///
    /// [`Defaults::inflight_alone`]: crate::limiter::defaults::Defaults::inflight_alone
    #[inline]
    pub(super) fn admit_in_flight_first(&self, s: &Sketched) -> Option<CountedExactly> {
        if self.lanes() != Lanes::InFlight || s.inflight == Some(UNCOUNTED) {
            return None;
        }
        let limits = self.defaults.inflight_alone()?;
        // Hot by the word's own threshold: the decision is made on one `set_limits` whole.
        let hot = s.inflight.is_some_and(|n| limits.promotes(n));
        self.admit_in_flight(s, limits, hot, false)?.ok()
    }

    /// [`admit_in_lane`](Self::admit_in_lane) in a limiter whose lanes count units in flight:
    /// counted within the in-flight limit `limits`, with the key's base, or (if it `refuses`)
    /// refused. A request below its promotion threshold (`hot` false) is decided there only
    /// while the key has units in flight counted there: with none, its key is judged for
    /// cooling down under the lock.
    #[inline]
    fn admit_in_flight(
        &self,
        s: &Sketched,
        limits: InflightAlone,
        hot: bool,
        refuses: bool,
    ) -> Option<Result<CountedExactly, Rejected>> {
        let limit = limits.limit();
        let ask = Ask {
            limits: limits.bits(),
            cost: s.cost as u32,
            limit,
            others: others_in_flight(s.inflight, s.cost),
            while_tracked: !hot,
            last: true,
            refuses,
        };
        let (way, generation, bound) = match self.exact.admit(s.hash, &ask)? {
            (way, generation, InLane::Admitted(bound)) => (way, generation, bound),
            (_, _, InLane::Full(bound)) => {
                return Some(Err(Rejected::inflight(bound as isize, limit as isize)));
            }
            (_, _, InLane::Lock) => return None,
        };
        if Tally::ON {
            let bound = s.inflight.map_or(bound as isize, |e| e.min(bound as isize));
            if bound as f64 >= NEAR_LIMIT * limit as f64 {
                self.tally.near();
            }
        }
        Some(Ok(CountedExactly {
            generation,
            way,
            window: None,
            admitted_at: 0,
        }))
    }

    /// A request of `cost` units of a flagged key (of hash `hash`), under the rate limit
    /// `limit`, taken out of its key's lease before it counts itself anywhere, in a limiter
    /// whose lanes lease rate units: the request path of a promoted key's usual request,
    /// which reads the time, the key's lane, and swaps its word, nothing else. The lease was
    /// counted in the key's exact window at its grant, and what its requests take is counted
    /// in the rate sketch when it is taken back ([`lease_returned`](Self::lease_returned)).
    /// Taken if the lease is of the request's window, granted at its time or before, under
    /// this limit, with the units. Returns the request as the path carries it on (its
    /// window, no counts read) and its admission; `None`: decided the usual way, counted in
    /// the sketches first.
    ///
    /// Whether the key has cooled down is judged under the lock, at its next decision there
    /// (a lease runs out, or is of an older window) or at the clock's sweep.
    ///
    /// In a limiter whose lanes count both units in flight and rate units, the request is
    /// judged by the limits `both` gives, and counted in flight first: see
    /// [`admit_both_first`](Self::admit_both_first).
    #[inline]
    pub(super) fn take_lease_first(
        &self,
        hash: u64,
        cost: u32,
        limit: isize,
        both: impl FnOnce() -> Option<BothLimits>,
    ) -> Option<(Sketched, CountedExactly)> {
        match self.lanes() {
            Lanes::Rate => {}
            Lanes::Both => return self.admit_both_first(hash, cost, both()?),
            Lanes::Locked | Lanes::InFlight => return None,
        }
        let (rate, limits) = self.sketches.rate.as_ref().zip(lease_limits(limit))?;
        // The key's place before the time: a request of a key not in the stage (another key
        // flagged its cell, up to one in eight cells in a full stage) reads the time once,
        // as it counts itself in the sketches. One of a promoted key with no lease that covers
        // it reads it twice, on its way to the lock.
        let place = self.exact.lane_of(hash)?;
        let window = rate.window_now();
        let count = place.take_lease(&lease_ask(limits, cost, &window))?;
        // Near by the count the lease's grant found, with what it gave since: at the grant's
        // time (later, the sliding count is lower, and this an upper bound).
        if Tally::ON && f64::from(count) >= NEAR_LIMIT * limit as f64 {
            self.tally.near();
        }
        Some(taken(&place, hash, cost, None, window))
    }
}

impl<K> Shared<K> {
    /// [`take_lease_first`](Self::take_lease_first) in a limiter whose lanes count both units
    /// in flight and rate units: a request of `cost` units of a flagged key (of hash `hash`),
    /// judged by `limits`, counted in the in-flight sketch, then admitted in flight in its key's
    /// lane, then taken out of its lease, before it counts itself in the rate sketch. Its
    /// permit gives its units in flight back to the lane and the sketch, as any admitted in
    /// the lane. `None`: decided the usual way, counted in the sketches first.
    ///
    /// In the sketch first, as every admission in flight without the lock (see "The base" in
    /// the exact stage's `lane.rs`). A request the lane admits and its lease does not take
    /// gives its units back, the lane's then the sketch's, as a release does, and goes the
    /// usual way (which counts them again): until then they are counted for the key, and
    /// another request of it may find the lane full with them and go to the lock, where it
    /// may be refused by them. So the refusals concurrent requests cause each other are at
    /// most those of their units in flight while each is between its admission and its take,
    /// never an admission more.
    #[inline(never)]
    fn admit_both_first(
        &self,
        hash: u64,
        cost: u32,
        limits: BothLimits,
    ) -> Option<(Sketched, CountedExactly)> {
        let rate = self.sketches.rate.as_ref()?;
        let in_flight = self.sketches.inflight.as_ref()?;
        let limit = limits.inflight();
        let place = self.exact.lane_of(hash)?;
        // Nothing counted for a key with no lease for it (one near its rate limit, say).
        if !place.may_lease(cost) {
            return None;
        }
        // `None`: its counters cannot hold it, and nothing was counted.
        let estimate = in_flight.try_incr(hash, cost)?;
        let ask = Ask {
            limits: limits.bits(),
            cost,
            limit,
            others: others_in_flight(Some(estimate), cost as isize),
            // Whether it has cooled down is judged as a lease's: at its next decision under
            // the lock, or at the clock's sweep.
            while_tracked: false,
            // Counted as admitted as its lease takes it.
            last: false,
            // Under the lock, a refusal is counted in the rate sketch too.
            refuses: false,
        };
        let Some(bound) = place.admit(&ask).admitted() else {
            self.sketches.release(hash, cost);
            return None;
        };
        let window = rate.window_now();
        let Some(count) = place.take_lease(&lease_ask(limits.bits(), cost, &window)) else {
            let given = place.give_back(cost);
            // No lane that counts both is watched: no key of its limiter learns.
            debug_assert_ne!(given, GivenBack::Watched);
            self.sketches.release(hash, cost);
            return None;
        };
        if Tally::ON
            && (f64::from(bound) >= NEAR_LIMIT * limit as f64
                || f64::from(count) >= NEAR_LIMIT * f64::from(limits.rate()))
        {
            self.tally.near();
        }
        Some(taken(&place, hash, cost, Some(estimate), window))
    }
}

/// A request of `cost` units of the key of hash `hash` taken out of the lease of its place
/// `place` in the rate window `window` (its in-flight estimate `inflight`, if it counted
/// itself in flight): as the path carries it on (its window, no rate counts read), and its
/// admission.
#[inline(always)] // the request path of a promoted key, from its two callers
fn taken(
    place: &LaneOf<'_>,
    hash: u64,
    cost: u32,
    inflight: Option<isize>,
    window: WindowView,
) -> (Sketched, CountedExactly) {
    let s = Sketched {
        hash,
        cost: cost as isize,
        inflight,
        window: Some(window),
    };
    let counted = CountedExactly {
        generation: place.generation,
        way: place.way,
        window: Some(window.bucket),
        admitted_at: 0,
    };
    (s, counted)
}

/// The key's units in flight but a request's own (of `cost` units), by its in-flight estimate
/// with them, for whether the key's base would be lowered (see "The base" in the exact
/// stage's `lane.rs`): `u32::MAX`, which lowers nothing, without one or for a saturated one
/// (as under the lock).
fn others_in_flight(estimate: Option<isize>, cost: isize) -> u32 {
    estimate
        .filter(|&estimate| estimate < SATURATED)
        .map_or(u32::MAX, |estimate| {
            u32::try_from(less_own(estimate, cost).max(0)).unwrap_or(u32::MAX)
        })
}

/// What a request of `cost` units asks of its key's lease under the fingerprint `limits`, in
/// the window `window` it read: a lease of that window, granted at its time or before.
#[inline(always)] // the request path of a promoted key, from its two callers
fn lease_ask(limits: u64, cost: u32, window: &WindowView) -> LeaseAsk {
    LeaseAsk {
        limits,
        cost,
        window: window.bucket,
        at: window.at,
    }
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

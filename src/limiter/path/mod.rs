//! The request path: the storage (over-limit cache, sketches, exact stage) read and written
//! around the decision (the `decision` module), for one request and for its release.
//!
//! Here, every kind of request up to the exact stage: refused before anything is counted,
//! refused from the over-limit cache, decided by the sketches alone, and the answer.
//! `hot.rs` is a request of a key that is hot or flagged (its lane, or the exact stage
//! under its set's lock); `lanes.rs` what a promoted key's requests do without the lock, and
//! a lane closed and opened around a decision under it; `release.rs` is what comes back: a permit's release, a refund, and
//! whether a promoted key has cooled down and leaves.

mod hot;
mod lanes;
mod release;

use std::borrow::Borrow;
use std::hash::Hash;

use super::decision::{self, Refusal};
use super::exact::{self, CellBefore};
use super::key_lines::{spread, KeyLine};
use super::limits::Thresholds;
use super::overlimit::{cost_mix, OverLimit};
use super::quiet;
use super::shared::Shared;
use super::sketches::{Sketched, UNCOUNTED};
use super::ticket::{shadow_admission, Held, Receipt, Ticket};
use super::Rejected;

/// One request as the path carries it: its key and the key's hash, its cost, and how its
/// answer is given.
pub(super) struct Request<'a, Q: ?Sized> {
    pub(super) key: &'a Q,
    pub(super) hash: u64,
    pub(super) cost: u32,
    /// Whether its plan's limits are in shadow (the whole limiter may be too: see
    /// `Shared::in_shadow`).
    pub(super) plan_shadow: bool,
    /// Whether the metrics count this decision (a waiting request's attempts are not: its
    /// answer is, once).
    pub(super) counted: bool,
}

impl<'a, Q: ?Sized> Request<'a, Q> {
    /// A request of one unit under the default limits, counted in the metrics.
    #[inline(always)]
    fn one(key: &'a Q, hash: u64) -> Self {
        Request {
            key,
            hash,
            cost: 1,
            plan_shadow: false,
            counted: true,
        }
    }
}

impl<K> Shared<K>
where
    K: Hash + Eq,
{
    /// The whole decision for one request of `cost` units against `t`: the over-limit cache,
    /// then the sketches, then (for hot or promoted keys) the exact stage. A cost of 0 is
    /// admitted at once, counting nothing (the check folds away for a constant cost).
    #[inline]
    pub(super) fn acquire<Q, P>(
        &self,
        key: &Q,
        cost: u32,
        t: &Thresholds,
        plan_shadow: bool,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if cost == 0 && self.admits_for_nothing(t, true) {
            return Ok(permit(Ticket::nothing(), Receipt::default()));
        }
        let hash = self.sketches.hash(key);
        let request = Request {
            key,
            hash,
            cost,
            plan_shadow,
            counted: true,
        };
        self.acquire_hashed(request, t, permit)
    }

    /// [`acquire`](Self::acquire) for a `request` whose key's hash is known. In shadow (its
    /// plan's, or the whole limiter's), a refusal is an admission that says so, counted as the
    /// refusal it stands for.
    ///
    /// Shadow is looked at only where a refusal is made, never on an admission's way nor on
    /// the over-limit cache's (a flood's): a decision in shadow puts no deadline in the cache,
    /// so its refusals are always decided anew, and the cache's refusals are never shadow. It
    /// is not a field of the thresholds, which every request copies.
    pub(super) fn acquire_hashed<Q, P>(
        &self,
        request: Request<'_, Q>,
        t: &Thresholds,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let Request { cost, .. } = request;
        if let Some(rejected) = t.refuses(cost) {
            return self.refused_uncounted(request.plan_shadow, request.counted, rejected, permit);
        }
        // One line for the over-limit cache and the filter.
        let line = self.exact.lines().key_line(spread(request.hash));
        let refused = t
            .rate
            .and_then(|rate| self.over_limit_now(line, rate.tag_mix, rate.limit, cost));
        if let Some(rejected) = refused {
            if request.counted {
                self.tally.refused(&rejected, false);
            }
            return Err(rejected);
        }
        self.decide(request, line, t, permit)
    }

    /// [`acquire`](Self::acquire) of one unit against the default limits, reading of them
    /// only what the request needs (see `defaults.rs`): the over-limit cache looked up by
    /// their rate limit's tag, then, outside a fleet, the sketches' estimates judged by their
    /// promotion thresholds; the thresholds whole only for a key that is hot or flagged.
    #[inline]
    pub(super) fn acquire_one<Q, P>(
        &self,
        key: &Q,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.sketches.hash(key);
        let line = self.exact.lines().key_line(spread(hash));
        let tag = self.defaults.tag();
        let refused = tag.and_then(|(mix, limit)| self.over_limit_now(line, mix, limit, 1));
        if let Some(rejected) = refused {
            self.tally.refused(&rejected, false);
            return Err(rejected);
        }
        // No `refuses(1)` on the defaults: it refuses a request of one unit only under a limit
        // of 0, and the builder and `set_limits` refuse such defaults.
        if self.fleet.is_joined() {
            let t = self.defaults.load();
            debug_assert!(t.refuses(1).is_none(), "defaults that refuse every request");
            return self.decide(Request::one(key, hash), line, &t, permit);
        }
        // A promoted key's usual request: out of its lease, before it counts itself.
        let cell = exact::cell_before(line);
        if cell.flagged() {
            let leased = tag.and_then(|(_, limit)| {
                self.take_lease_first(hash, 1, limit, || self.defaults.both())
            });
            if let Some((s, counted)) = leased {
                return Ok(self.admitted(&s, 1, Some(counted), true, permit));
            }
        }
        // Its previous rate window unread where its line allows (`quiet.rs`): then a key is
        // hot by its current window alone, and read whole before it goes on.
        let promotion = self.defaults.promotion();
        let through = quiet::read_previous_through(line, promotion);
        let sketched = self
            .sketches
            .observe_reading_previous_through(hash, 1, through);
        self.defaults
            .rate_mark()
            .note_view(line, sketched.window.as_ref());
        // The request's half of the promotion handshake: after the sketch increments.
        if !decision::is_hot(&sketched, promotion) && !cell.flagged_since() {
            return Ok(self.admitted(&sketched, 1, None, true, permit));
        }
        let sketched = self.sketches.with_previous(sketched, through);
        // A promoted key's usual request counted in flight alone: admitted in its lane. (One
        // that does not fit there is refused in it on the way below, out of line.)
        if cell.flagged() {
            if let Some(counted) = self.admit_in_flight_first(&sketched) {
                return Ok(self.admitted(&sketched, 1, Some(counted), true, permit));
            }
        }
        self.acquire_one_hot(key, line, cell, sketched, permit)
    }

    /// [`acquire_one`](Self::acquire_one) for a key the promotion word found hot, or that is
    /// flagged: judged whole, on the thresholds read now (`set_limits` may have run since).
    ///
    /// Out of line, with `sketched` passed by value: then the request path keeps what the
    /// sketches said in registers, where a reference to it had every request write it all to
    /// the stack.
    #[inline(never)]
    fn acquire_one_hot<Q, P>(
        &self,
        key: &Q,
        line: KeyLine<'_>,
        cell: CellBefore<'_>,
        sketched: Sketched,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let t = self.defaults.load();
        let hot = decision::is_hot(&sketched, t.promotion());
        let request = Request::one(key, sketched.hash);
        self.conclude(request, (line, cell), &sketched, &t, hot, permit)
    }

    /// The decision past the over-limit cache of the limits `t`: the fleet's, the sketches',
    /// and for hot or flagged keys the exact stage's.
    #[inline(always)] // the request path, from its two callers
    fn decide<Q, P>(
        &self,
        request: Request<'_, Q>,
        line: KeyLine<'_>,
        t: &Thresholds,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // In a fleet, after the cache: a flooded key's refusal costs nothing more. A share
        // (Redis away) is a limit of its own, whose deadlines the cache holds under its tag.
        let in_fleet = self
            .fleet
            .state()
            .map(|fleet| decision::in_fleet(t, &fleet));
        let t = match &in_fleet {
            Some(fleet) => {
                let tag = |t: &Thresholds| t.rate.map(|rate| rate.tag_mix);
                if tag(fleet) != tag(t) {
                    let refused = fleet.rate.and_then(|rate| {
                        self.over_limit_now(line, rate.tag_mix, rate.limit, request.cost)
                    });
                    if let Some(rejected) = refused {
                        if request.counted {
                            self.tally.refused(&rejected, false);
                        }
                        return Err(rejected);
                    }
                }
                fleet
            }
            None => t,
        };
        // A promoted key's request: out of its lease, before it counts itself.
        let cell = exact::cell_before(line);
        if cell.flagged() {
            let leased = t.rate.and_then(|rate| {
                self.take_lease_first(request.hash, request.cost, rate.limit, || t.both_limits())
            });
            if let Some((s, counted)) = leased {
                let Request {
                    cost,
                    counted: tally,
                    ..
                } = request;
                return Ok(self.admitted(&s, cost, Some(counted), tally, permit));
            }
        }
        let sketched = self.sketches.observe(request.hash, request.cost);
        self.defaults
            .rate_mark()
            .note_view(line, sketched.window.as_ref());
        let hot = decision::is_hot(&sketched, t.promotion());
        self.conclude(request, (line, cell), &sketched, t, hot, permit)
    }

    /// The decision on what the sketches said of a request (`hot`: by `t`'s promotion
    /// thresholds; `line`, its key's, and its cell as read before the sketches): by the
    /// sketch alone for a key that is neither hot nor flagged (nor left its cell since), by
    /// the exact stage otherwise; then the answer, and for a refusal its deadline in the
    /// over-limit cache.
    #[inline(always)] // the request path, from its two callers
    fn conclude<Q, P>(
        &self,
        request: Request<'_, Q>,
        (line, cell): (KeyLine<'_>, CellBefore<'_>),
        sketched: &Sketched,
        t: &Thresholds,
        hot: bool,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let Request {
            key,
            cost,
            plan_shadow,
            counted,
            ..
        } = request;
        // The request's half of the promotion handshake: after the sketch increments.
        let decision = if !hot && !cell.flagged_since() {
            Ok(None)
        } else {
            if sketched.inflight == Some(UNCOUNTED) {
                // Its counters could not hold it: nothing counted in flight, nothing to give
                // back (hot: past every threshold).
                let rejected = decision::uncountable(t);
                return self.refused_uncounted(plan_shadow, counted, rejected, permit);
            }
            self.decide_hot(key, line, sketched, t, hot, plan_shadow)
        };
        match decision {
            Ok(exact) => Ok(self.admitted(sketched, cost, exact, counted, permit)),
            Err(Refusal { rejected, .. }) => {
                self.refused(sketched, rejected, plan_shadow, counted, permit)
            }
        }
    }

    /// Whether a request of `cost` units for `hash`, refused a moment ago for its in-flight
    /// limit, would be refused again now under the limits `t` by the sketches alone, reading
    /// without counting: not in shadow (its plan's, `plan_shadow`, or the limiter's), its key
    /// not promoted (its filter cell not flagged), and the key's in-flight estimate (the
    /// others' units: the refused request gave its own back) plus `cost` past `t`'s in-flight
    /// limit. For a waiter's attempt after it counted itself (see the `wait` module): an
    /// attempt of an unpromoted key at its limit is decided by the sketches alone unless the
    /// exact stage finds it a place, and this one would not knock at the door again (its
    /// request knocked once) nor take a place freed since.
    ///
    /// The sketch's loads are `SeqCst`, after the waiter's count: a release that gave units
    /// back before it is seen here, or sees the waiter. The cell's read only chooses between
    /// this and an attempt: read just before a promotion shows, the sketch's estimate (never
    /// below what the key's lane would count) may refuse where the lane would admit, as it
    /// may for a key whose counters others share; the waiter then waits for its key's next
    /// release or its deadline.
    pub(super) fn refused_again_in_flight(
        &self,
        hash: u64,
        cost: u32,
        t: &Thresholds,
        plan_shadow: bool,
    ) -> bool {
        let Some(inflight) = t.inflight else {
            return false;
        };
        if self.in_shadow(plan_shadow) {
            return false;
        }
        if self.promoted_now(hash) {
            return false;
        }
        self.sketches
            .inflight_now(hash)
            .is_some_and(|others| others.saturating_add(cost as isize) > inflight.limit)
    }

    /// Whether the key of `hash` may be promoted now (its filter cell flagged; false:
    /// certainly not), by an `Acquire` read of its cell.
    pub(super) fn promoted_now(&self, hash: u64) -> bool {
        let line = self.exact.lines().key_line(spread(hash));
        exact::cell_before(line).flagged()
    }

    /// The answer to a request refused after it counted itself in the sketches (`s`): its
    /// units in flight given back, and in shadow (its plan's, or the whole limiter's) an
    /// admission that says so.
    fn refused<P>(
        &self,
        s: &Sketched,
        rejected: Rejected,
        plan_shadow: bool,
        counted: bool,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected> {
        self.sketches.release(s.hash, s.cost as u32);
        let shadow = self.in_shadow(plan_shadow);
        if counted {
            self.tally.refused(&rejected, shadow);
        }
        if shadow {
            return shadow_admission(rejected, permit);
        }
        Err(rejected)
    }

    /// Puts in the over-limit cache that the key on `line` stays over its rate limit under `t`
    /// until `deadline` for requests of its cost (`s`: the decision's count, for its time and
    /// cost), unless the decision is in shadow (`plan_shadow`, or the whole limiter), which
    /// holds none: its refusals are decided anew.
    ///
    /// Under the key's set lock, with the deadline kept in its entry: a refund, which takes
    /// the lock, then either forgets it or comes before it. Returns the slot's word (0 if none
    /// was put there).
    fn hold_over_limit(
        &self,
        line: KeyLine<'_>,
        s: &Sketched,
        t: &Thresholds,
        plan_shadow: bool,
        deadline: u64,
    ) -> u64 {
        match (s.window, t.rate) {
            (Some(window), Some(rate)) if !self.in_shadow(plan_shadow) => self.over_limit().insert(
                line.spread(),
                rate.tag_mix ^ cost_mix(s.cost as u32),
                window.at,
                deadline,
            ),
            _ => 0,
        }
    }

    /// The permit of an admitted request of `cost` units, which the exact stage counted if
    /// `exact` says so (the sketches did in any case).
    #[inline(always)] // the request path
    fn admitted<P>(
        &self,
        sketched: &Sketched,
        cost: u32,
        exact: Option<CountedExactly>,
        counted: bool,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> P {
        if counted {
            self.tally.admitted();
        }
        let ticket = Ticket {
            hash: sketched.hash,
            held: Held::of(exact.map(|e| (e.generation, e.way, e.admitted_at)), cost),
        };
        let window = match exact {
            Some(exact) => exact.window,
            None => sketched.window.map(|w| w.bucket),
        };
        permit(ticket, Receipt { window })
    }

    /// The rejection of a key still over its rate limit `limit` (whose over-limit tags mix in
    /// `tag_mix`) from an earlier rejection under the same limit.
    ///
    /// Always inlined: once the request's cost was among its arguments, the compiler stopped
    /// inlining it into `try_acquire`'s path (it has several callers), and the single-key
    /// flood's path, which is this function, took 25 instructions more a request (213 to 238,
    /// callgrind).
    #[inline(always)]
    fn over_limit_now(
        &self,
        line: KeyLine<'_>,
        tag_mix: u64,
        limit: isize,
        cost: u32,
    ) -> Option<Rejected> {
        let rate = self.sketches.rate.as_ref()?;
        // Most keys hold no deadline: one load says so, before the time is worked out.
        let word = OverLimit::held(line, tag_mix ^ cost_mix(cost))?;
        // The time the usual path would decide on; near a window's end that is the exact time,
        // and the request goes the usual way.
        let now = rate.settled_now()?;
        let remaining = self.over_limit().remaining_of(word, now)?;
        // The run's first refusal, on a deadline an admission held, is counted for the key.
        OverLimit::mark_used(line, word);
        Some(Rejected::still_over(limit, remaining))
    }
}

/// An admission the exact stage counted: by the entry of `generation` in way `way` of its set,
/// its rate units in `window`; when, if its key was learning its in-flight limit (0 if not).
#[derive(Debug, Clone, Copy)]
pub(super) struct CountedExactly {
    pub(super) generation: u32,
    pub(super) way: u8,
    pub(super) window: Option<u64>,
    pub(super) admitted_at: u64,
}

/// What needs no look at the key itself. Unbounded, so that permits and their `Drop` need no
/// bound on the key type.
impl<K> Shared<K> {
    /// A request refused before anything was counted (limits the limiter cannot judge, or
    /// of 0): in shadow, an admission that says so.
    #[cold]
    pub(super) fn refused_uncounted<P>(
        &self,
        plan_shadow: bool,
        counted: bool,
        rejected: Rejected,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected> {
        let shadow = self.in_shadow(plan_shadow);
        if counted {
            self.tally.refused(&rejected, shadow);
        }
        if shadow {
            shadow_admission(rejected, permit)
        } else {
            Err(rejected)
        }
    }

    /// The over-limit cache, whose slots are in the exact stage's filter lines.
    #[inline(always)] // the flood path
    pub(super) fn over_limit(&self) -> OverLimit<'_> {
        OverLimit {
            lines: self.exact.lines(),
            unit: self.deadline_unit,
        }
    }
}

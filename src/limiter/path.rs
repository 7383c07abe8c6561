//! The request path: the storage (over-limit cache, sketches, exact stage) read and written
//! around the decision (the `decision` module), for one request and for its release.

use std::borrow::Borrow;
use std::hash::Hash;

use super::adaptive::Completion;
use super::decision::{self, Refusal};
use super::exact::{self, Ask, GivenBack, Locked, Place};
use super::key_lines::{spread, KeyLine};
use super::limits::{InflightThreshold, Thresholds};
use super::overlimit::{cost_mix, OverLimit};
use super::promoted::Promoted;
use super::proof;
use super::shared::Shared;
use super::sketches::{less_own, Sketched, SATURATED, UNCOUNTED};
use super::tally::{Tally, NEAR_LIMIT};
use super::ticket::{shadow_admission, Held, Receipt, Ticket};
use super::{Reason, Rejected};

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
        let refused = self
            .defaults
            .tag()
            .and_then(|(mix, limit)| self.over_limit_now(line, mix, limit, 1));
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
        let promotion = self.defaults.promotion();
        let sketched = self.sketches.observe(hash, 1);
        // The request's half of the promotion handshake: after the sketch increments.
        if !decision::is_hot(&sketched, promotion) && !exact::flagged(line) {
            return Ok(self.admitted(&sketched, 1, None, true, permit));
        }
        self.acquire_one_hot(key, line, sketched, permit)
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
        self.conclude(request, line, &sketched, &t, hot, permit)
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
        let sketched = self.sketches.observe(request.hash, request.cost);
        let hot = decision::is_hot(&sketched, t.promotion());
        self.conclude(request, line, &sketched, t, hot, permit)
    }

    /// The decision on what the sketches said of a request (`hot`: by `t`'s promotion
    /// thresholds): by the sketch alone for a key that is neither hot nor flagged, by the exact
    /// stage otherwise; then the answer, and for a refusal its deadline in the over-limit
    /// cache.
    #[inline(always)] // the request path, from its two callers
    fn conclude<Q, P>(
        &self,
        request: Request<'_, Q>,
        line: KeyLine<'_>,
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
        let decision = if !hot && !exact::flagged(line) {
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
                let hash = sketched.hash;
                self.sketches.release(hash, cost);
                let shadow = self.in_shadow(plan_shadow);
                if counted {
                    self.tally.refused(&rejected, shadow);
                }
                if shadow {
                    return shadow_admission(rejected, permit);
                }
                Err(rejected)
            }
        }
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

    /// Decides a request that the sketches could not decide alone: its key is hot, or
    /// flagged. `Ok(Some(_))` when the exact stage counted it (its in-flight units, if the
    /// limiter counts them, and its rate units): by the entry of which generation, in which
    /// rate window.
    ///
    /// Never inlined: inlined into `try_acquire`, this path for the few hot keys made every
    /// request's path larger and measurably slower (3-6% on the simulated groups).
    #[inline(never)]
    fn decide_hot<Q>(
        &self,
        key: &Q,
        line: KeyLine<'_>,
        s: &Sketched,
        t: &Thresholds,
        hot: bool,
        plan_shadow: bool,
    ) -> Result<Option<CountedExactly>, Refusal>
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        // A promoted key whose lane admits under these limits, with room: counted there,
        // without the lock. Anything else (a refusal among it) is decided under the lock.
        if let Some(counted) = self.admit_in_lane(s, t, hot) {
            return Ok(Some(counted));
        }
        let at = s.window.map_or_else(|| self.time.coarse(), |w| w.at);
        // In a limiter whose lanes admit, a promoted key's lane is closed while it is judged
        // here (see "The base" in the exact stage's `lane.rs`), and while it is judged cool
        // and leaves: an admission in its lane meanwhile would not see this request, which
        // the sketch then admits alone.
        let lanes = self.lanes_admit();
        let (mut held, closed) = match self.exact.place(key, s.hash, at) {
            Place::Twin => return self.alone_now(s, t),
            Place::Held(held) => {
                let closed = held.units().filter(|_| lanes).map(exact::Units::close);
                // A request the sketch admits alone, for a key that has cooled down apart
                // from it: demote the key. Cool by the sketches now, this request included:
                // its own count may be from before the key was hot (its thread held up
                // between counting and this lock), and would demote a key still hot.
                let cool = !hot
                    && held.entry().is_some_and(|e| {
                        let tracked = held.in_flight() as isize;
                        let now = self.sketches.reread_in(s);
                        decision::is_cool(&e.state.counts, tracked, &now, s.cost, t)
                            && self.may_leave(&e.state)
                    });
                if cool {
                    if let Some(closed) = closed {
                        closed.until_it_leaves();
                    }
                    held.demote();
                    return Ok(None);
                }
                (held, closed)
            }
            // Flagged by another key in the same filter cell, or promoted and gone since it
            // counted itself, and not hot: the sketch admits, on its counts now.
            Place::Free(_) if !hot => return self.alone_now(s, t),
            Place::Free(free) => {
                // What the threshold proves holds only if the key was not admitted otherwise
                // since the window before this one began.
                let kept_since = proof::kept_since(s.window.as_ref());
                // The promotion's half of the handshake: flagged, then the sketches read.
                let promoted = free.promote(key, s.hash, kept_since, |kept| {
                    let now = self.sketches.recount(s);
                    // After the reads: the thresholds of every admission they include are
                    // known.
                    let proven = self
                        .highest_rate_promotion
                        .proven(self.fleet.is_joined())
                        .filter(|_| kept);
                    Promoted::new(decision::promoted(s, &now, proven), *t)
                });
                match promoted {
                    Some(held) => (held, None),
                    None => return self.alone_now(s, t),
                }
            }
        };
        let way = held.way();
        let Some(Locked { entry, units }) = held.decided() else {
            return decision::alone(s, t).map(|()| None); // unreachable: a held place has its entry
        };
        let generation = entry.generation;
        let entry = &mut entry.state;
        // What the sweep judges the key cool by, and a release without the lock looks at it
        // by (`may_be_cool`: twice the estimate against this).
        entry.thresholds = *t;
        if self.sketches.inflight.is_some() {
            let cool_at = t.inflight.map_or(isize::MAX, |i| i.promote_at);
            units.look_below(u32::try_from(cool_at).unwrap_or(u32::MAX));
        }
        // A run of refusals the cache answered since the key's last admission is counted
        // before a deadline of this decision replaces the one they were refused on.
        entry.settle(line);
        // Closed to admissions without the lock (in a limiter whose lanes admit) while its base
        // is lowered and the request decided; then the sketches read again, then the key's
        // units in flight: in that order, no unit is in the count and not in the estimate
        // (see `InflightCount::rebase`).
        let closed = closed.or_else(|| lanes.then(|| units.close()));
        let now = self.sketches.recount(s);
        // A key learning its in-flight limit is judged by the learnt one too, and its
        // admissions timed.
        let learnt = self
            .adaptive
            .as_ref()
            .zip(t.inflight)
            .and_then(|(config, ceiling)| {
                let tracked = Self::watched_in_flight(entry, units, s.cost, &ceiling);
                let learning = &mut entry.learning;
                learning.judge(config, &ceiling, &entry.counts, tracked, s.cost, &self.time)
            })
            .map(|limit| Thresholds::with_inflight_limit(t, limit));
        let judged = learnt.as_ref().unwrap_or(t);
        // (Nothing to read in a limiter that counts no requests in flight.)
        let tracked = match self.sketches.inflight {
            Some(_) => units.in_flight() as isize,
            None => 0,
        };
        let near = Tally::ON.then_some(NEAR_LIMIT);
        let decided = decision::exact(&mut entry.counts, tracked, s, &now, judged, near);
        // What the key's next admissions without the lock judge by: the base just lowered,
        // and the limits they may pass under.
        if lanes {
            units.set_base(entry.counts.inflight.base);
            units.admit_under(lane_limits(t).map_or(0, |(limits, _)| limits));
        }
        match decided {
            Ok(admitted) => {
                if admitted.tracked {
                    // Opens the lane too, in the same swap.
                    units.add(s.cost as u32);
                }
                drop(closed);
                if admitted.near {
                    self.tally.near();
                }
                // A learning key's request carries its admission time, for its latency.
                let admitted_at =
                    entry
                        .learning
                        .admitted(learnt.is_some(), tracked, s.cost as u32, &self.time);
                if let Some(deadline) = admitted.over_until {
                    // Full for this cost: its next requests are refused by the cache (over
                    // whatever the key's slot held), and their run counted once settled.
                    entry.over_until = deadline;
                    entry.held = self.hold_over_limit(line, s, t, plan_shadow, deadline);
                } else if entry.over_until != 0 {
                    // A request of another cost fitted while the cache may hold a deadline for
                    // the key's refusals of one cost: that deadline assumed nothing more would
                    // be admitted, and is now early. The slot goes (another key's, sharing it,
                    // is then decided the usual way); the next refusal sets a new one.
                    entry.over_until = 0;
                    entry.held = 0;
                    self.over_limit().forget(spread(s.hash));
                }
                Ok(Some(CountedExactly {
                    generation,
                    way,
                    window: admitted.window,
                    admitted_at,
                }))
            }
            Err(refusal) => {
                if refusal.rejected.reason == Reason::Inflight {
                    entry.learning.refused();
                }
                // Counted here, with the run its deadline holds.
                entry.rejected += 1;
                entry.over_until = refusal.over_until.unwrap_or(0);
                entry.held = 0;
                if let Some(deadline) = refusal.over_until {
                    self.hold_over_limit(line, s, t, plan_shadow, deadline);
                }
                Err(refusal)
            }
        }
    }
}

/// The limits `t` as a promoted key's lane admits under them without the lock (in a limiter
/// whose lanes admit: see `Shared::lanes_admit`): the fingerprint the lane keeps and the
/// in-flight limit, for an in-flight limit alone.
fn lane_limits(t: &Thresholds) -> Option<(u64, u32)> {
    if t.rate.is_some() {
        return None;
    }
    let inflight = t.inflight?;
    let limit = u32::try_from(inflight.limit).ok()?;
    let promote_at = u32::try_from(inflight.promote_at).ok()?;
    // Both under 2^31, the limit at least 1: never 0.
    Some(((u64::from(limit) << 32) | u64::from(promote_at), limit))
}

/// An admission the exact stage counted: by the entry of `generation` in way `way` of its set,
/// its rate units in `window`; when, if its key was learning its in-flight limit (0 if not).
#[derive(Debug, Clone, Copy)]
pub(super) struct CountedExactly {
    generation: u32,
    way: u8,
    window: Option<u64>,
    admitted_at: u64,
}

/// What needs no look at the key itself: a permit's release, a refund, and what the sweep asks
/// of a promoted key. Unbounded, so that permits and their `Drop` need no bound on the key
/// type.
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

    /// Gives back what an admitted request took, and wakes a waiter of its key if any.
    #[inline]
    pub(super) fn release(&self, ticket: &Ticket) {
        // A limiter that counts no requests in flight has nothing to give back: no call; nor
        // has a request admitted in shadow, counted as refused, nor one of cost 0.
        if self.sketches.inflight.is_some() {
            self.release_inflight(ticket);
        }
    }

    /// [`release`](Self::release) for a limiter that counts requests in flight.
    fn release_inflight(&self, ticket: &Ticket) {
        let hash = ticket.hash;
        let units = match ticket.held {
            Held::Exact {
                generation,
                way,
                cost,
                outcome,
                measured,
                admitted_at,
            } => {
                let completion = Completion {
                    cost,
                    outcome,
                    measured,
                    admitted_at,
                };
                // Room a learnt limit gained with this completion, beyond its own units.
                let rise = match self.exact.give_back(hash, way, generation, cost) {
                    GivenBack::Done { left } => {
                        // The entry's units first, then the sketch's (see
                        // `InflightCount::rebase`).
                        self.sketches.release(hash, cost);
                        if left == 0 && self.may_be_cool(hash, way) {
                            self.leave_if_cool(hash, way, generation);
                        }
                        0
                    }
                    // Counted by an entry that left: its units left with it.
                    GivenBack::Gone => {
                        self.sketches.release(hash, cost);
                        0
                    }
                    GivenBack::Watched => self.release_watched(hash, way, generation, completion),
                };
                cost.saturating_add(rise)
            }
            Held::Sketch { cost } => {
                self.sketches.release(hash, cost);
                cost
            }
            Held::Shadow(_) | Held::Nothing => return,
        };
        // After the count is given back: the release's half of the wake-up handshake.
        self.waiters.released(hash, units);
    }

    /// Whether a promoted key (`hash`, in way `way` of its set), with nothing in flight counted
    /// by its entry now, may have cooled down: its in-flight estimate is below its promotion
    /// threshold (which its last decision left in its place). Without the lock: a stale answer
    /// costs a lock for nothing, or leaves the key in the stage until its next request or the
    /// clock's sweep finds it cool.
    #[inline]
    fn may_be_cool(&self, hash: u64, way: u8) -> bool {
        let look_below = self.exact.look_below(hash, way);
        let estimate = self.sketches.inflight_now(hash).unwrap_or(0);
        estimate.saturating_mul(2) < look_below as isize
    }

    /// Takes the entry of `hash`, `generation` and `way`, with nothing in flight now, out of the
    /// exact stage if it has cooled down: under its set's lock, the one release of a key that
    /// takes it without being watched.
    #[cold]
    fn leave_if_cool(&self, hash: u64, way: u8, generation: u32) {
        self.exact.update_or_leave(
            hash,
            way,
            generation,
            |locked| {
                locked.is_some_and(|Locked { entry, units }| {
                    self.closed_while_cool(units, || {
                        self.is_cool(entry.hash, &entry.state, units.in_flight())
                    })
                })
            },
            || self.now(),
        );
    }

    /// Whether `cool` says a promoted key has cooled down, its lane (`units`) closed meanwhile in
    /// a limiter whose lanes admit, and kept closed if it has, until the key leaves: an
    /// admission in its lane between the judgement and the leaving would go uncounted by the
    /// key's next requests, which the sketch decides alone.
    pub(super) fn closed_while_cool(
        &self,
        units: exact::Units<'_>,
        cool: impl FnOnce() -> bool,
    ) -> bool {
        let closed = self.lanes_admit().then(|| units.close());
        let cool = cool();
        if cool {
            if let Some(closed) = closed {
                closed.until_it_leaves();
            }
        }
        cool
    }

    /// The answer of the sketches alone, on their counts now (`s` read again, in its windows),
    /// for a request of a key that the exact stage does not hold now: it may have held it when
    /// the request counted itself, and admitted others since that the request's own counts do
    /// not show.
    fn alone_now(&self, s: &Sketched, t: &Thresholds) -> Result<Option<CountedExactly>, Refusal> {
        let now = self.sketches.reread_in(s);
        let s = Sketched {
            inflight: now.inflight,
            window: now.window,
            ..*s
        };
        decision::alone(&s, t).map(|()| None)
    }

    /// The release of a permit whose key's place is watched (it is learning its in-flight
    /// limit): under the set's lock, its units given back there, then the sketch's, and the
    /// learner told of its `completion` with the units in flight before it. The entry leaves
    /// if it has cooled down after. Returns the room the learnt limit gained.
    #[cold]
    fn release_watched(&self, hash: u64, way: u8, generation: u32, completion: Completion) -> u32 {
        let cost = completion.cost;
        let mut rise = 0;
        self.exact.update_or_leave(
            hash,
            way,
            generation,
            |locked| {
                let Some(Locked { entry, units }) = locked else {
                    // Gone since: its units left with it.
                    self.sketches.release(hash, cost);
                    return false;
                };
                let tracked = units.give_back(cost);
                self.sketches.release(hash, cost);
                let promoted = &mut entry.state;
                rise = self.completed(promoted, tracked as isize, completion);
                // A learner that rests lets its key's releases go without the lock again.
                units.watch(promoted.learning.is_active());
                self.is_cool(entry.hash, promoted, units.in_flight())
            },
            || self.now(),
        );
        rise
    }

    /// [`decide_hot`](Self::decide_hot) for a request of a promoted key whose lane admits
    /// under its limits, if it fits there: counted without the lock. A request below its
    /// promotion threshold (`hot` false) is, only while the key has units in flight counted
    /// there: with none, its key is judged for cooling down under the lock.
    #[inline]
    fn admit_in_lane(&self, s: &Sketched, t: &Thresholds, hot: bool) -> Option<CountedExactly> {
        if !self.lanes_admit() {
            return None;
        }
        let (limits, limit) = lane_limits(t)?;
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

    /// Whether the lanes of this limiter's promoted keys admit without the lock: it counts
    /// requests in flight, and no rate (whose windows, the fleet and the over-limit cache are
    /// judged under the lock), and learns no in-flight limits (a key hot for its in flight
    /// learns its limit, or starts to, under the lock).
    #[inline]
    fn lanes_admit(&self) -> bool {
        self.sketches.inflight.is_some() && self.sketches.rate.is_none() && self.adaptive.is_none()
    }

    /// The units in flight of a promoted key `entry` for its learner, before a request of
    /// `cost` units judged under `ceiling`: a key that learns, or starts to with this request,
    /// is watched first, so that each release after is made under the lock and told to its
    /// learner, and the units read after the watch are exact for it (see the exact stage's
    /// `lane.rs`).
    fn watched_in_flight(
        entry: &Promoted,
        units: exact::Units<'_>,
        cost: isize,
        ceiling: &InflightThreshold,
    ) -> isize {
        let tracked = units.in_flight() as isize;
        if !entry.learning.takes(tracked, cost, ceiling) {
            return tracked;
        }
        units.watch(true);
        units.in_flight() as isize
    }

    /// Takes back the rate units a promoted key's entry counted for an admission (`ticket`,
    /// counted in `receipt`'s window) that another key then refused: a key is charged only for
    /// what it admitted. The entry must be the one that counted it (the same generation) and
    /// its counts must still reach that window. The rate sketch keeps the units, as it keeps
    /// every refused request's: it measures offered load, and a key its exact counts do not
    /// decide is below its promotion threshold. The in-flight units come back when the permit
    /// drops.
    pub(super) fn refund(&self, ticket: &Ticket, receipt: Receipt) {
        if let (
            Held::Exact {
                generation, cost, ..
            },
            Some(bucket),
        ) = (&ticket.held, receipt.window)
        {
            let units = *cost as isize;
            let mut held = false;
            self.exact.update(ticket.hash, *generation, |entry, line| {
                let entry = &mut entry.state;
                entry.counts.rate.uncount(bucket, units);
                // A run of refusals on the deadline it forgets is counted first.
                entry.settle(line);
                entry.held = 0;
                // A deadline held for the key (its admission may have filled it) assumed these
                // units stay: it is late now, and would refuse the room they leave.
                held = std::mem::take(&mut entry.over_until) != 0;
            });
            if held {
                self.over_limit().forget(spread(ticket.hash));
            }
        }
    }

    /// Tells a key learning its in-flight limit of a `completion`, `tracked` in flight before
    /// its units were given back (under its set's lock). Returns the room its learnt limit
    /// gained (see `Learning::completed`).
    fn completed(&self, entry: &mut Promoted, tracked: isize, completion: Completion) -> u32 {
        let Some(config) = &self.adaptive else {
            return 0;
        };
        // Its ceiling: the in-flight limit of the last request it was judged under.
        let ceiling = entry.thresholds.inflight;
        entry
            .learning
            .completed(config, ceiling, tracked, completion, &self.time)
    }

    /// Whether a promoted key of hash `hash`, `tracked` units in flight, has cooled down, by
    /// the sketches now and its last thresholds.
    pub(super) fn is_cool(&self, hash: u64, entry: &Promoted, tracked: u32) -> bool {
        let now = self.sketches.reread(hash);
        let tracked = tracked as isize;
        decision::is_cool(&entry.counts, tracked, &now, 0, &entry.thresholds)
            && self.may_leave(entry)
    }

    /// Whether a cooled entry may leave the exact stage (see `Learning::may_leave`).
    fn may_leave(&self, entry: &Promoted) -> bool {
        entry.learning.may_leave(self.adaptive.as_ref(), &self.time)
    }

    /// The time now: on the rate windows' clock, or without a rate the limiter's coarse time
    /// (for when keys left the exact stage, which the reports show).
    pub(super) fn now(&self) -> u64 {
        match &self.sketches.rate {
            Some(rate) => rate.now_at(),
            None => self.time.coarse(),
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::Limiter;

    /// A request counted in the sketch early, then held up before the exact stage's lock
    /// (its thread preempted) while the key's other requests promoted it, reaches the lock
    /// with a count from before the key was hot. The key is still hot: that old count must
    /// not demote it, or its exact counts are lost and it is judged by the sketch again,
    /// which keeps every request refused further in (several keys) as offered load.
    #[test]
    fn a_request_that_counted_its_key_before_it_was_hot_does_not_demote_it() {
        let clock = ManualClock::new();
        let limiter: Limiter<String> = Limiter::builder()
            .max_rate(100, Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap();
        let shared = &*limiter.shared;
        let hash = shared.sketches.hash("host");
        for _ in 0..16 {
            drop(limiter.try_acquire("host").unwrap());
        }
        // The 17th request counts itself, then waits.
        let early = shared.sketches.observe(hash, 1);
        for _ in 0..60 {
            drop(limiter.try_acquire("host").unwrap());
        }
        assert_eq!(limiter.stats().promoted, 1, "promoted at 50");
        let t = shared.defaults.load();
        let hot = decision::is_hot(&early, t.promotion());
        assert!(!hot, "its own count was from before the key was hot");
        let line = shared.exact.lines().key_line(spread(hash));
        let decided = shared.decide_hot("host", line, &early, &t, hot, false);
        assert!(
            matches!(decided, Ok(Some(_))),
            "decided and counted by the exact stage"
        );
        assert_eq!(limiter.stats().promoted, 1, "demoted by a stale count");
    }
}

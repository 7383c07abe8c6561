//! What comes back from a request: a permit's release (without the lock, but where its key
//! may have cooled down or is learning), a refund of rate units another key's refusal took
//! back, and whether a promoted key has cooled down and leaves the exact stage.

use crate::limiter::adaptive::Completion;
use crate::limiter::decision;
use crate::limiter::exact::{self, GivenBack, Locked};
use crate::limiter::key_lines::{spread, KeyLine};
use crate::limiter::promoted::Promoted;
use crate::limiter::shared::Shared;
use crate::limiter::ticket::{Held, Receipt, Ticket};

impl<K> Shared<K> {
    /// Gives back what an admitted request took, and wakes a waiter of its key if any.
    #[inline]
    pub(in crate::limiter) fn release(&self, ticket: &Ticket) {
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
                    let hash = entry.hash;
                    self.closed_while_cool(hash, &mut entry.state, units, |state| {
                        self.is_cool(hash, state, units.in_flight())
                    })
                })
            },
            self,
        );
    }

    /// Whether `cool` says a promoted key (`entry`, of hash `hash`) has cooled down, its lane (`units`)
    /// closed meanwhile in a limiter whose lanes admit (its lease taken back, in one whose
    /// lanes lease), and kept closed if it has, until the key leaves: an admission in its lane
    /// between the judgement and the leaving would go uncounted by the key's next requests,
    /// which the sketch decides alone.
    pub(in crate::limiter) fn closed_while_cool(
        &self,
        hash: u64,
        entry: &mut Promoted,
        units: exact::Units<'_>,
        cool: impl FnOnce(&Promoted) -> bool,
    ) -> bool {
        let closed = self.close_lane(hash, entry, units);
        let cool = cool(entry);
        if cool {
            if let Some(closed) = closed {
                closed.until_it_leaves();
            }
        }
        cool
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
            self,
        );
        rise
    }

    /// Takes back the rate units a promoted key's entry counted for an admission (`ticket`,
    /// counted in `receipt`'s window) that another key then refused: a key is charged only for
    /// what it admitted. The entry must be the one that counted it (the same generation) and
    /// its counts must still reach that window. The rate sketch keeps the units, as it keeps
    /// every refused request's: it measures offered load, and a key its exact counts do not
    /// decide is below its promotion threshold. The in-flight units come back when the permit
    /// drops.
    pub(in crate::limiter) fn refund(&self, ticket: &Ticket, receipt: Receipt) {
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
    pub(in crate::limiter) fn is_cool(&self, hash: u64, entry: &Promoted, tracked: u32) -> bool {
        let now = self.sketches.reread(hash);
        let tracked = tracked as isize;
        decision::is_cool(&entry.counts, tracked, &now, 0, &entry.thresholds)
            && self.may_leave(entry)
    }

    /// Whether a cooled entry may leave the exact stage (see `Learning::may_leave`).
    pub(super) fn may_leave(&self, entry: &Promoted) -> bool {
        entry.learning.may_leave(self.adaptive.as_ref(), &self.time)
    }

    /// The time now: on the rate windows' clock, or without a rate the limiter's coarse time
    /// (for when keys left the exact stage, which the reports show).
    pub(in crate::limiter) fn now(&self) -> u64 {
        match &self.sketches.rate {
            Some(rate) => rate.now_at(),
            None => self.time.coarse(),
        }
    }
}

/// The stage asks the limiter the time of a key's loss, and tells it of a key leaving.
impl<K> exact::Keeper<Promoted> for Shared<K> {
    fn now(&self) -> u64 {
        Shared::now(self)
    }

    /// The refusals the over-limit cache answered for it are counted in what the reports keep
    /// of it, and its lane is closed, its lease taken back (what its requests took out of it
    /// is counted in the rate sketch before the key is judged by the sketch alone), then the
    /// refusals its lane made are counted too.
    fn leaving(&self, hash: u64, entry: &mut Promoted, units: exact::Units<'_>, line: KeyLine<'_>) {
        entry.settle(line);
        if let Some(closed) = self.close_lane(hash, entry, units) {
            closed.until_it_leaves();
        }
        // After the close: a request that finds the lane closed refuses nothing there.
        entry.take_lane_refusals(units);
    }
}

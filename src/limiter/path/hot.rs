//! A request of a key that is hot or flagged: counted in its promoted key's lane without
//! the lock when it fits there, else decided by the exact stage under its set's lock, or by
//! the sketches alone on their counts now when the stage holds no place for it.

use std::borrow::Borrow;
use std::hash::Hash;

use super::CountedExactly;
use crate::limiter::decision::{self, Refusal};
use crate::limiter::exact::{self, Locked, Place};
use crate::limiter::key_lines::{spread, KeyLine};
use crate::limiter::limits::{InflightThreshold, Thresholds};
use crate::limiter::promoted::Promoted;
use crate::limiter::proof;
use crate::limiter::shared::Shared;
use crate::limiter::sketches::Sketched;
use crate::limiter::tally::{Tally, NEAR_LIMIT};
use crate::limiter::Reason;

impl<K> Shared<K>
where
    K: Hash + Eq,
{
    /// Decides a request that the sketches could not decide alone: its key is hot, or
    /// flagged. `Ok(Some(_))` when the exact stage counted it (its in-flight units, if the
    /// limiter counts them, and its rate units): by the entry of which generation, in which
    /// rate window.
    ///
    /// Never inlined: inlined into `try_acquire`, this path for the few hot keys made every
    /// request's path larger and measurably slower (3-6% on the simulated groups).
    #[inline(never)]
    pub(super) fn decide_hot<Q>(
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
        // without the lock; without room by a bound the lock would not lower: refused there.
        // Anything else is decided under the lock.
        if let Some(decided) = self.admit_in_lane(s, t, hot) {
            return decided.map(Some).map_err(Refusal::from);
        }
        let at = s.window.map_or_else(|| self.time.coarse(), |w| w.at);
        // In a limiter whose lanes admit, a promoted key's lane is closed while it is judged
        // here (see "The base" and "A lease" in the exact stage's `lane.rs`), and while it is
        // judged cool and leaves: an admission in its lane meanwhile would not see this
        // request, which the sketch then admits alone.
        let (mut held, closed) = match self.exact.place(key, s.hash, at) {
            Place::Twin => return self.alone_now(s, t),
            Place::Held(mut held) => {
                let units = held.units();
                let closed = units
                    .zip(held.entry_mut())
                    .and_then(|(units, entry)| self.close_lane(s.hash, &mut entry.state, units));
                // A request the sketch admits alone, for a key that has cooled down apart
                // from it: demote the key. Cool, and below its threshold, by the sketches now,
                // this request included: its own count may be from before the key was hot
                // (its thread held up between counting and this lock), and would demote a key
                // still hot; and it lacks what the key's lease gave, which the sketch counts
                // only now that the lane is closed. Not a request whose window the key's
                // counts have passed: judged in its own window, it would miss the newer
                // window's admissions, which the exact counts hold and the sketch's older
                // windows were lowered to (it is decided below, in the window now).
                let cool = !hot
                    && held.entry().is_some_and(|e| {
                        let passed = s
                            .window
                            .is_some_and(|w| w.bucket < e.state.counts.rate.windows.at);
                        if passed {
                            return false;
                        }
                        let tracked = held.in_flight() as isize;
                        let now = self.sketches.reread_in(s);
                        let counted_now = Sketched {
                            inflight: now.inflight,
                            window: now.window,
                            ..*s
                        };
                        !decision::is_hot(&counted_now, t.promotion())
                            && decision::is_cool(&e.state.counts, tracked, &now, s.cost, t)
                            && self.may_leave(&e.state)
                    });
                if cool {
                    if let Some(closed) = closed {
                        closed.until_it_leaves();
                    }
                    held.demote(self);
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
                let promoted = free.promote(key, s.hash, kept_since, self, |kept| {
                    let now = self.sketches.recount(s);
                    let past = self.sketches.window_past(s);
                    // After the reads: the thresholds of every admission they include are
                    // known.
                    let proven = self
                        .highest_rate_promotion
                        .proven(self.fleet.is_joined())
                        .filter(|_| kept);
                    Promoted::new(decision::promoted(s, &now, past, proven), *t)
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
            units.look_below(self.release_looks_below(t, s));
        }
        // A run of refusals the cache answered since the key's last admission is counted
        // before a deadline of this decision replaces the one they were refused on.
        entry.settle(line);
        // Closed to admissions without the lock (in a limiter whose lanes admit) while its base
        // is lowered and the request decided; then the sketches read again, then the key's
        // units in flight: in that order, no unit is in the count and not in the estimate
        // (see `InflightCount::rebase`).
        let closed = closed.or_else(|| self.close_lane(s.hash, entry, units));
        // A request whose window the key's counts have passed (it read its time before a
        // window's end, and a request of the next was decided first) is decided in the window
        // of the time now, counted again there (see `Sketches::again_after`).
        let again = self.sketches.again_after(s, entry.counts.rate.windows.at);
        if let Some(again) = &again {
            self.defaults
                .rate_mark()
                .note_view(line, again.window.as_ref());
        }
        let s = again.as_ref().unwrap_or(s);
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
        // What the key's next admissions without the lock judge by.
        self.open_lane(entry, units, s, t, decided.as_ref().ok());
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
                // A refusal with no deadline (for its in-flight limit, or with no wait) leaves
                // the slot as it was, and the entry's note of it: a deadline an admission held
                // there for another cost stays for the next admission or refund to forget.
                if let Some(deadline) = refusal.over_until {
                    entry.over_until = deadline;
                    entry.held = 0;
                    self.hold_over_limit(line, s, t, plan_shadow, deadline);
                }
                Err(refusal)
            }
        }
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
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::{Limiter, Limits};

    /// A limiter of 100 requests a second (promoted at 50), on `clock`.
    fn hundred_a_second(clock: &ManualClock) -> Limiter<String> {
        Limiter::builder()
            .max_rate(100, Duration::from_secs(1))
            .clock(clock)
            .build()
            .unwrap()
    }

    /// A request counted in the sketch early, then held up before the exact stage's lock
    /// (its thread preempted) while the key's other requests promoted it, reaches the lock
    /// with a count from before the key was hot. The key is still hot: that old count must
    /// not demote it, or its exact counts are lost and it is judged by the sketch again,
    /// which keeps every request refused further in (several keys) as offered load.
    #[test]
    fn a_request_that_counted_its_key_before_it_was_hot_does_not_demote_it() {
        let clock = ManualClock::new();
        let limiter = hundred_a_second(&clock);
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

    /// A promoted key's requests taken out of its lease count nothing in the rate sketch as
    /// they are taken (the request path is the lane's one swap), and the reports count them
    /// all the same; when the lease is taken back under the lock, the sketch counts what was
    /// taken of it, and nothing of what was not: the key's sketch count is then exactly what
    /// it was offered.
    #[test]
    fn a_lease_counts_in_the_sketch_what_was_taken_of_it_when_taken_back() {
        let clock = ManualClock::new();
        let limiter: Limiter<String> = Limiter::builder()
            .max_rate(1_000, Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap();
        let shared = &*limiter.shared;
        let hash = shared.sketches.hash("host");
        let rate = shared.sketches.rate.as_ref().unwrap();
        // Promoted at 500, whose decision under the lock grants a lease; the 501st takes
        // out of it.
        for _ in 0..501 {
            drop(limiter.try_acquire("host").unwrap());
        }
        assert_eq!(rate.view(hash).curr, 500);
        for n in 0..100 {
            drop(limiter.try_acquire("host").unwrap());
            drop(limiter.with_cost(2).try_acquire("host").unwrap());
            assert_eq!(rate.view(hash).curr, 500, "after {n} pairs");
        }
        assert_eq!(
            limiter.estimate("host").rate,
            Some(801.0),
            "the reports count them"
        );
        // A request of another plan's limit is decided under the lock, which takes the lease
        // back first.
        let other = Limits::new().max_rate(2_000);
        drop(limiter.with_limits(other).try_acquire("host").unwrap());
        assert_eq!(
            rate.view(hash).curr,
            802,
            "counted: what was offered, no more"
        );
        assert_eq!(limiter.estimate("host").rate, Some(802.0));
    }

    /// A request reads its key's counts in the sketch between two loads of its filter cell.
    /// If its key was promoted, took units out of a lease, and left between them (the
    /// request's thread held up), the counts it read lack those units, which the key's
    /// departure counted in the sketch only after: decided by them alone, it would be admitted
    /// below its threshold where the key is near its limit. The cell's count of promoted keys
    /// is back where it was; its count of departures is not, and the request goes to the lock.
    #[test]
    fn a_request_whose_key_left_between_its_two_reads_of_its_cell_goes_to_the_lock() {
        let clock = ManualClock::new();
        let limiter = hundred_a_second(&clock);
        let shared = &*limiter.shared;
        let hash = shared.sketches.hash("host");
        let line = shared.exact.lines().key_line(spread(hash));
        // The request reads the cell, then is held up.
        let before = exact::cell_before(line);
        assert!(!before.flagged());
        // Promoted at 50 in the first window. A tenth into the second (past the clock's
        // sweep at its start), its first request is decided under the lock, which leases the
        // room left (53); all of it is taken. Then the clock moves on, short of the next sweep.
        for _ in 0..50 {
            drop(limiter.try_acquire("host").unwrap());
        }
        clock.advance(Duration::from_millis(1_100));
        for _ in 0..54 {
            drop(limiter.try_acquire("host").unwrap());
        }
        clock.advance(Duration::from_millis(600));
        // The request counts itself, its count lacking the lease's units: below the key's
        // threshold.
        let early = shared.sketches.observe(hash, 1);
        let t = shared.defaults.load();
        assert!(
            !decision::is_hot(&early, t.promotion()),
            "{:?}",
            early.window
        );
        // The key leaves: the units taken out of its lease are counted in the sketch.
        let Place::Held(held) = shared.exact.place("host", hash, 0) else {
            panic!("promoted");
        };
        held.demote(shared);
        let now = shared.sketches.reread_in(&early);
        let now = Sketched {
            window: now.window,
            ..early
        };
        assert!(decision::is_hot(&now, t.promotion()), "{:?}", now.window);
        assert!(
            decision::alone(&now, &t).is_ok(),
            "within the limit: {:?}",
            now.window
        );
        // The request's second load finds no promoted key in the cell, as its first did.
        assert!(
            before.flagged_since(),
            "decided by the sketch alone, on counts that lack 53 admitted units"
        );
    }

    /// A request counted itself late in one window, below its key's threshold, and was held
    /// up; the key's requests of the next window filled it. Reaching the lock, the request
    /// finds the key cool in its own window, whose admissions the sketch's counts were lowered
    /// to the exact ones from; judged there and admitted by the sketch alone, it would take
    /// the key past its limit in the window now (139.6 against 100, found by a review on the
    /// code before). It is decided in the window now instead.
    #[test]
    fn a_request_of_a_passed_window_does_not_demote_its_key_and_pass_alone() {
        let clock = ManualClock::new();
        let limiter = hundred_a_second(&clock);
        let shared = &*limiter.shared;
        let hash = shared.sketches.hash("host");
        for _ in 0..60 {
            drop(limiter.try_acquire("host").unwrap());
        }
        assert_eq!(limiter.stats().promoted, 1, "promoted at 50");
        // 99% into the second window, a request of 40 units counts itself (0.6 + 40: not
        // hot), then waits.
        clock.advance(Duration::from_millis(1_990));
        let late = shared.sketches.observe(hash, 40);
        let t = shared.defaults.load();
        let hot = decision::is_hot(&late, t.promotion());
        assert!(!hot);
        // 1% into the third window, the key's other requests fill it.
        clock.advance(Duration::from_millis(20));
        assert_eq!(limiter.stats().promoted, 1, "kept by the sweep");
        let mut filled = 0u64;
        while limiter.try_acquire("host").is_ok() {
            filled += 1;
        }
        let line = shared.exact.lines().key_line(spread(hash));
        let decided = shared.decide_hot("host", line, &late, &t, hot, false);
        // The true sliding count now, 1% into the third window: the second window's 40, if
        // admitted, weigh 0.99.
        let sliding = if decided.is_ok() { 40.0 * 0.99 } else { 0.0 } + filled as f64;
        assert!(
            sliding <= 100.0,
            "{sliding} against a limit of 100: {decided:?}"
        );
    }

    /// A request that read its time in one window is decided after a request of the next
    /// window moved the key's counts on. Judged in its own window, it passed, though the
    /// requests of the next window, decided before it and without it, had filled the key's
    /// sliding count with its window weighing whole. And counted in the latest exact window
    /// while its units were in its own window of the sketch, it was in neither of the smaller
    /// counts a request of the next window is judged by (the older window's exact count, the
    /// newer window's sketch count): the key was admitted past its limit by its cost.
    #[test]
    fn a_request_decided_after_its_window_ended_is_judged_in_the_window_now() {
        let clock = ManualClock::new();
        let limiter = hundred_a_second(&clock);
        let shared = &*limiter.shared;
        let hash = shared.sketches.hash("host");
        // Window 0: 60 admitted (promoted at 50), then 30 units count themselves and wait.
        for _ in 0..60 {
            drop(limiter.try_acquire("host").unwrap());
        }
        let late = shared.sketches.observe(hash, 30);
        // Window 1, at its start: window 0 weighs whole.
        clock.advance(Duration::from_secs(1));
        drop(limiter.try_acquire("host").unwrap());
        let t = shared.defaults.load();
        let line = shared.exact.lines().key_line(spread(hash));
        let decided = shared.decide_hot("host", line, &late, &t, true, false);
        assert!(matches!(decided, Ok(Some(_))), "the 30 units fit");
        let mut admitted_in_window_1 = 1;
        while limiter.try_acquire("host").is_ok() {
            admitted_in_window_1 += 1;
        }
        assert!(
            90 + admitted_in_window_1 <= 100,
            "90 in window 0, {admitted_in_window_1} in window 1 at its start"
        );
    }

    /// A request that read the time just before a window ended reaches the lock, and
    /// promotes its key, after the clock moved into the next window, where requests that read
    /// the new time were admitted by the sketch alone (they counted before the key was
    /// flagged). The promotion's counts must hold them: counted from the request's own,
    /// older window, the exact stage took the new one for empty and admitted past the limit
    /// (a review found up to 199 units in a window of limit 100, racing `ManualClock`).
    #[test]
    fn a_promotion_by_a_request_of_an_older_window_counts_the_newer_ones_admissions() {
        let clock = ManualClock::new();
        let limiter = hundred_a_second(&clock);
        let shared = &*limiter.shared;
        let hash = shared.sketches.hash("host");
        // Window 0: 49 admissions by the sketch alone, then the 50th counts itself (it is
        // hot: the promotion threshold is 50) and waits.
        for _ in 0..49 {
            drop(limiter.try_acquire("host").unwrap());
        }
        let early = shared.sketches.observe(hash, 1);
        let t = shared.defaults.load();
        assert!(decision::is_hot(&early, t.promotion()));
        // Window 1, 99% in: the 50 of window 0 weigh 0.5, and 49 more are admitted by the
        // sketch alone, each below the threshold.
        clock.advance(Duration::from_millis(1990));
        for _ in 0..49 {
            drop(limiter.try_acquire("host").unwrap());
        }
        assert_eq!(limiter.stats().promoted, 0, "not hot in window 1 yet");
        let line = shared.exact.lines().key_line(spread(hash));
        let decided = shared.decide_hot("host", line, &early, &t, true, false);
        assert!(matches!(decided, Ok(Some(_))), "promoted, and admitted");
        assert_eq!(limiter.stats().promoted, 1);
        let mut admitted_in_window_1 = 49;
        while limiter.try_acquire("host").is_ok() {
            admitted_in_window_1 += 1;
        }
        // The sliding count now: window 0's 50 at a weight of 1%, and window 1's.
        let sliding = 50.0 * 0.01 + admitted_in_window_1 as f64;
        assert!(
            sliding <= 100.0,
            "{admitted_in_window_1} admitted in window 1: {sliding}"
        );
    }

    /// An admission that fills a key's rate for another request of its cost holds that
    /// request's deadline in the over-limit cache. A request of another cost refused for its
    /// in-flight limit holds none and leaves the slot as it was; a request of a third cost
    /// then admitted makes that deadline early, and must forget it: a request of the first
    /// cost is refused with a wait after which it fits (the fuzz input of a limit near 2^30,
    /// retried 2 ns early).
    #[test]
    fn an_in_flight_refusal_keeps_the_deadline_an_admission_held_for_the_next_to_forget() {
        let clock = ManualClock::new();
        let limiter: Limiter<String> = Limiter::builder()
            .max_inflight(13)
            .max_rate(10, Duration::from_secs(1))
            .promotion_threshold(0.01)
            .clock(&clock)
            .build()
            .unwrap();
        // 6 of 10: another 6 would not fit the rate (the cache holds its deadline), and would
        // fit in flight (13); another 8 would not.
        let _six = limiter.with_cost(6).try_acquire("host").unwrap();
        assert_eq!(limiter.stats().promoted, 1);
        let refused = limiter.with_cost(8).try_acquire("host").unwrap_err();
        assert_eq!(refused.reason, Reason::Inflight, "{refused}");
        let _one = limiter.with_cost(1).try_acquire("host").unwrap();
        // 7 of 10 now: 6 more fit when 7·(1 − g) + 6 ≤ 10 in the next window, g ≥ 3/7.
        let refused = limiter.with_cost(6).try_acquire("host").unwrap_err();
        let retry = refused.retry_after.unwrap();
        assert!(
            retry >= Duration::from_nanos(1_428_571_429),
            "{refused}: early (the deadline held for 6 of 10)"
        );
        clock.advance(retry);
        assert!(
            limiter.with_cost(6).try_acquire("host").is_ok(),
            "{retry:?} later"
        );
    }
}

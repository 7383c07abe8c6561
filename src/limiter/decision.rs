//! The limiter's decision, whole: every judgement of a request against its limits, as
//! arithmetic on values (what the sketches said, a promoted key's exact counts, the
//! thresholds). Nothing here touches an atomic or takes a lock: the request path
//! (`path/`) reads the storage (the sketches, the exact stage, the over-limit cache), asks
//! these functions, and writes back what they say.
//!
//! - [`is_hot`]: whether a request's estimates reached a promotion threshold;
//! - [`alone`]: the sketch's estimates against the limits, for a key the exact stage does
//!   not count;
//! - [`promoted`]: the counts a key starts from when the exact stage takes it;
//! - [`exact`]: the smaller of the sketch's estimates and the exact counts against the limits,
//!   and the request counted in those;
//! - [`is_cool`]: whether a promoted key can leave the exact stage;
//! - [`held_until`]: how long the over-limit cache may refuse a key without asking;
//! - [`Thresholds::refuses`](super::limits::Thresholds::refuses) (beside the thresholds):
//!   the requests no count can admit (a limit of 0, a cost over its limit);
//! - [`estimate`]: a key's counts as the limiter judges them, for reports.
//!
//! A request counts its cost, `s.cost` units (1 unless it says otherwise), wherever it is
//! counted, and is admitted only if all of them fit.
//!
//! What they judge comes from the storage as values: [`Sketched`] (what a request's counting
//! said), [`Recount`] (the request's key read again under the exact stage's lock), [`Reread`]
//! (a key's estimates now), [`Counts`] (a promoted key's exact counts).
//!
//! With a fleet (feature `redis`), [`exact`] judges the rate on the fleet's counts too: the one
//! place the decision looks at a remote view.

use super::counts::{Counts, InflightCount};
use super::fleet::{FleetRate, FleetState};
use super::limits::{Promotion, RateThreshold, Thresholds};
use super::overlimit::limit_mix;
use super::sketches::{less_own, Recount, Reread, Sketched, SATURATED};
use super::{Estimate, Figure, Limits, Rejected};
use crate::rate::{ExactWindows, WindowView};

/// Whether an estimate of the request reached its promotion threshold (`p`: see
/// [`Thresholds::promotion`]).
#[inline]
pub(crate) fn is_hot(s: &Sketched, p: Promotion) -> bool {
    let inflight = s.inflight.is_some_and(|n| p.inflight_reached(n));
    let rate = s.window.is_some_and(|w| w.reaches(p.rate()));
    inflight || rate
}

/// A request the decision refused, and for a rate rejection on exact counts, until when
/// (nanoseconds on the limiter's clock) the key stays over its limit for a request of the same
/// cost if nothing else is admitted: what the over-limit cache may hold. Not for a rejection
/// on the sketch's counts alone: those also count the key's rejected requests, so a
/// promotion before then may admit it sooner.
#[derive(Debug, PartialEq)]
pub(crate) struct Refusal {
    pub(crate) rejected: Rejected,
    pub(crate) over_until: Option<u64>,
}

impl From<Rejected> for Refusal {
    fn from(rejected: Rejected) -> Self {
        Refusal {
            rejected,
            over_until: None,
        }
    }
}

/// The refusal of a request whose units its in-flight counters could not hold (past 2^31 with
/// those they hold): counted nowhere in flight, over its in-flight limit, or over
/// [`Limits::MAX_LIMIT`] (what any limit can be) without one.
#[cold]
pub(crate) fn uncountable(t: &Thresholds) -> Rejected {
    let limit = t.inflight.map_or(Limits::MAX_LIMIT as isize, |t| t.limit);
    Rejected::inflight(SATURATED, limit)
}

/// The decision when the exact stage cannot help: the sketch's estimates against the limits.
pub(crate) fn alone(s: &Sketched, t: &Thresholds) -> Result<(), Refusal> {
    if let (Some(t), Some(estimate)) = (t.inflight, s.inflight) {
        if estimate > t.limit {
            return Err(Rejected::inflight(estimate, t.limit).into());
        }
    }
    if let (Some(t), Some(view)) = (t.rate, s.window) {
        if !view.fits(t.limit) {
            // The sketch keeps this rejected request: a retry finds it counted.
            return Err(Rejected::rate(&view, t.limit, view.curr, s.cost).into());
        }
    }
    Ok(())
}

/// The thresholds of a decision in a fleet in state `fleet`: the promotion threshold of the
/// rate divided by the fleet's size (a key that stays under it on every node sends at most the
/// promotion fraction of the limit in all), the fleet's view judged; and, while Redis has been
/// away too long to trust that view, the limit itself becomes this node's share, `⌈L ÷ N⌉`,
/// on its own counts.
#[inline]
pub(crate) fn in_fleet(t: &Thresholds, fleet: &FleetState) -> Thresholds {
    let mut t = *t;
    if let Some(rate) = t.rate.as_mut() {
        let recheck = if fleet.degraded { 0 } else { fleet.sync_nanos };
        if fleet.nodes == 1 {
            // Alone: the share is the limit, and promotion stays where it is.
            rate.fleet = FleetRate::new(None, !fleet.degraded, recheck);
            return t;
        }
        // ⌈L ÷ N⌉ in integers (no libm call on the request path). Checked: a size past
        // `isize::MAX` read as negative made every share negative, refusing every key.
        let n = isize::try_from(fleet.nodes).unwrap_or(isize::MAX);
        let share = rate.limit / n + isize::from(rate.limit % n > 0);
        if fleet.degraded {
            // A limit of its own in the cache, in shadow if the limit was.
            let shadow_mix = rate.tag_mix ^ limit_mix(rate.limit);
            rate.limit = share;
            rate.tag_mix = limit_mix(share) ^ shadow_mix;
        }
        rate.fleet = FleetRate::new(Some(share), !fleet.degraded, recheck);
        rate.promote_at = (rate.promote_at * fleet.inverse)
            .max(1.0)
            .min(rate.limit.max(1) as f64);
    }
    t
}

/// The counts of a key promoted now by the request `s`, from the sketches read after its flag
/// was set (`now`, in the request's windows, that request included): upper bounds on what was
/// admitted before the exact stage counts it. `proven`: a bound on the key's admissions in
/// this rate window and the one before that the promotion threshold proves, when it holds
/// (see the `proof` module), asked for after the reads; the counts are lowered to it. A
/// saturated estimate less the request is no bound on the rest: it starts saturated.
pub(crate) fn promoted(
    s: &Sketched,
    now: &Recount,
    past: Option<WindowView>,
    proven: Option<isize>,
) -> Counts {
    let inflight = InflightCount {
        base: now
            .inflight
            .map_or(0, |estimate| less_own(estimate, s.cost).max(0)),
    };
    let rate = match (now.window, s.window, past) {
        // The clock has passed the request's window: the counts start in the window it is in
        // now, whose admissions by the sketch alone (requests that read the newer time) the
        // request's own windows do not hold, and would be taken for none. The request is in
        // neither count of it, and is counted in that window (the latest) if admitted.
        (Some(_), Some(_), Some(later)) => {
            let current = proven.map_or(later.curr, |p| later.curr.min(p));
            let mut exact = ExactWindows::new(later.bucket, current);
            exact.before = proven.map(|p| later.prev.min(p));
            exact
        }
        (Some((prev, curr)), Some(w), None) => {
            let current = less_own(curr, s.cost);
            let previous = w.bucket.checked_sub(1).map(|_| prev);
            let mut exact = ExactWindows::new(w.bucket, proven.map_or(current, |p| current.min(p)));
            exact.before = proven.zip(previous).map(|(p, n)| n.min(p));
            exact
        }
        _ => ExactWindows::new(0, 0),
    };
    Counts {
        inflight,
        rate,
        fleet: Default::default(),
    }
}

/// Decides a request with the smaller of the sketch's estimates and a promoted key's exact
/// counts, and counts it in those when admitted. `now`: the sketches read again under the
/// exact stage's lock, in the request's windows, so that they include every request the
/// entry admitted before this one (each counted itself in the sketches before taking the
/// lock, and what its lease gave was counted there as the lane closed for this decision,
/// before the read); the estimates read before the lock may miss one admitted in between, and
/// a bound on them would be short of it. `tracked`: the key's units in flight its place counts, read
/// after `now`. Admitted, the request's rate units are counted here, and `Ok` says whether its
/// in-flight units are to be tracked (the caller adds them to its place's word) and, when
/// `near` (a ratio of the limits) is given, whether the key's counts with this request reach
/// that ratio of a limit.
pub(crate) fn exact(
    counts: &mut Counts,
    tracked: isize,
    s: &Sketched,
    now: &Recount,
    t: &Thresholds,
    near: Option<f64>,
) -> Result<Admitted, Refusal> {
    let near_at = |limit: isize| near.map(|ratio| ratio * limit as f64);
    let cost = s.cost;
    let mut admitted = Admitted::default();
    // Whether another request of this cost would fit the in-flight limit, by the exact
    // counts (which only fall while nothing is admitted): a key full for its rate but not
    // for this may be held in the over-limit cache, which answers "rate".
    let mut inflight_room = true;
    if let (Some(estimate), Some(_)) = (now.inflight, s.inflight) {
        // A saturated estimate bounds nothing: less this request, it would lower the bound
        // below the others in flight (issue 38).
        if estimate < SATURATED {
            counts.inflight.rebase(estimate - cost, tracked);
        }
        let with_it = counts.inflight.bound(tracked).saturating_add(cost);
        let bound = estimate.min(with_it);
        if let Some(t) = t.inflight {
            if bound > t.limit {
                return Err(Rejected::inflight(bound, t.limit).into());
            }
            admitted.near |= near_at(t.limit).is_some_and(|at| bound as f64 >= at);
            inflight_room = with_it.saturating_add(cost) <= t.limit;
        }
        // Tracked whatever the limit, so that the release finds it counted here.
        admitted.tracked = true;
    }
    if let (Some(counts_now), Some(view)) = (now.window, s.window) {
        let mut view = view.with_counts(counts_now);
        counts.rate.roll_to(view.bucket);
        view.lower_to(&counts.rate, cost);
        if let Some(rate) = t.rate {
            if let Err(rejected) = judge_rate(counts, &view, &rate, cost) {
                let over_until = held_until(&rejected, &view, t);
                return Err(Refusal {
                    rejected,
                    over_until,
                });
            }
            admitted.near |= near_at(rate.limit).is_some_and(|at| view.reaches(at));
            admitted.over_until = inflight_room
                .then(|| full_until(&view, &rate, t, cost))
                .flatten();
            // Room for more in the request's own window, on this node's counts alone.
            if !rate.fleet.judges_view() && counts.rate.windows.at == view.bucket {
                admitted.room = view.room(rate.limit);
            }
        }
        // The window it is counted in: the latest the counts reached, which another thread's
        // later request may have moved past the request's own.
        admitted.window = Some(counts.rate.count(cost));
    }
    Ok(admitted)
}

/// A request the exact stage admits: whether its in-flight units are tracked (the limiter
/// counts requests in flight), whether its key is near a limit (see [`exact`]), the rate
/// window its units were counted in (what a refund takes them back from), until when the
/// key is now over its rate limit for another request of the same cost (see [`full_until`]),
/// and how many more units its rate limit has room for in that window from the request's
/// time on (0 without a rate limit, in a fleet, or for a request whose window the key's
/// counts have passed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Admitted {
    pub(crate) tracked: bool,
    pub(crate) near: bool,
    pub(crate) window: Option<u64>,
    pub(crate) over_until: Option<u64>,
    pub(crate) room: u64,
}

/// Until when (nanoseconds on the limiter's clock) a key whose admission `view` counted (this
/// request of `cost` units included) stays over its rate limit for another request of the
/// same cost, if nothing else is admitted: the deadline that request's refusal would put in
/// the over-limit cache, known now. Held from the admission, the key's next requests are
/// refused there, with one load, instead of the first of them under the exact stage's lock:
/// a key over its limit had every admission followed by such a refusal. `None` while another
/// request of the cost fits, and for a view a fleet judges (its refusals are the fleet's).
fn full_until(view: &WindowView, rate: &RateThreshold, t: &Thresholds, cost: isize) -> Option<u64> {
    if rate.fleet.judges_view() {
        return None;
    }
    let next = WindowView {
        curr: view.curr.saturating_add(cost),
        ..*view
    };
    if next.fits(rate.limit) {
        return None;
    }
    held_until(
        &Rejected::rate(&next, rate.limit, view.curr, cost),
        &next,
        t,
    )
}

/// The rate judgement of [`exact`]: this node's counts (`view`, this request of `cost` units
/// included), and in a fleet the fleet's.
#[inline]
fn judge_rate(
    counts: &mut Counts,
    view: &WindowView,
    t: &RateThreshold,
    cost: isize,
) -> Result<(), Rejected> {
    if t.fleet.judges_view() {
        return judge_in_fleet(counts, view, t, cost);
    }
    judge_alone(view, t, cost)
}

/// The rate decision on one node's own counts (`view`, this request of `cost` units
/// included) against the limit of `t`.
#[inline]
fn judge_alone(view: &WindowView, t: &RateThreshold, cost: isize) -> Result<(), Rejected> {
    if view.fits(t.limit) {
        Ok(())
    } else {
        // The exact stage does not keep a rejected request: a retry finds it gone.
        Err(Rejected::rate(
            view,
            t.limit,
            less_own(view.curr, cost),
            cost,
        ))
    }
}

/// The rate decision of a node in a fleet, under the exact stage's lock: on the fleet's counts
/// as the last sync left them (see `FleetView`; they include the node's own, `view`, this
/// request included), or, for a key the fleet has said nothing of lately, on this node's own
/// counts and its share. Each refusal is counted, for the fleet to learn that this node takes
/// any room left.
fn judge_in_fleet(
    counts: &mut Counts,
    view: &WindowView,
    t: &RateThreshold,
    cost: isize,
) -> Result<(), Rejected> {
    // Windows by the Rate's bucket number, which the sync uses too: no division here.
    let window = view.bucket;
    let own = |b: Option<u64>| {
        b.and_then(|b| counts.rate.bound(b))
            .map_or(0, |n| n.max(0) as u64)
    };
    let (now, before) = (own(Some(window)), own(window.checked_sub(1)));
    let on_share = |()| match t.fleet.share() {
        Some(share) => judge_alone(view, &RateThreshold { limit: share, ..*t }, cost),
        None => Ok(()),
    };
    let judged = match counts.fleet.judged(view, window, now, before, cost) {
        // At least this node's own counts: judging it judges those too. The fleet's first
        // word on the key does not show the nodes that hold it unseen on their shares: until
        // this node's next sync, its own share holds too (`FleetView::is_first_word`).
        Some(fleet) => judge_alone(&fleet, t, cost).and_then(|()| {
            if counts.fleet.is_first_word(t.fleet.sync_nanos()) {
                on_share(())
            } else {
                Ok(())
            }
        }),
        None => judge_alone(view, t, cost).and_then(on_share),
    };
    if judged.is_err() {
        counts.fleet.note_refusal(window);
    }
    judged
}

/// Whether a promoted key has cooled down: nothing tracked in flight (`tracked`), estimates below half
/// their promotion thresholds, and (for rates) no rejected request in the windows the sketch
/// would still be read for, so that a demoted key is not judged later on windows that its
/// rejected requests inflate. `now`: the sketches' estimates, with `own` units of the request
/// being decided counted in them (0 without one; they are not yet in `counts`, and not held
/// against the key here). `t` are the key's thresholds (its last request's); a kind it has no
/// limit of is cool once nothing is tracked.
pub(crate) fn is_cool(
    counts: &Counts,
    tracked: isize,
    now: &Reread,
    own: isize,
    t: &Thresholds,
) -> bool {
    let inflight_cool = now.inflight.map_or(true, |estimate| {
        tracked == 0
            && t.inflight
                .map_or(true, |t| less_own(estimate, own) * 2 < t.promote_at)
    });
    let rate_cool = match (now.window, t.rate) {
        (Some(w), Some(t)) => {
            let mut exact = counts.rate;
            exact.roll_to(w.bucket);
            let clean_prev = w
                .bucket
                .checked_sub(1)
                .map_or(true, |b| exact.bound(b).map_or(true, |n| w.prev <= n));
            let clean_curr = exact
                .bound(w.bucket)
                .map_or(true, |n| less_own(w.curr, own) <= n);
            clean_prev && clean_curr && (w.sliding() - own as f64) * 2.0 < t.promote_at
        }
        _ => true,
    };
    inflight_cool && rate_cool
}

/// Until when (nanoseconds on the limiter's clock) the over-limit cache may refuse requests of
/// the same cost for a key that the exact stage refused for its rate in `view` with
/// `rejected`: its `retry_after`, from the request's time, as long as the limit allows (a
/// fleet's renews its counts sooner). `None` for a refusal with no wait.
fn held_until(rejected: &Rejected, view: &WindowView, t: &Thresholds) -> Option<u64> {
    let wait = crate::clock::saturating_nanos(rejected.retry_after?);
    Some(
        view.at
            .saturating_add(t.rate.map_or(wait, |rate| rate.held_for(wait))),
    )
}

/// A key's counts as the limiter judges them now, without counting a request: the sketch's
/// estimates (`now`), lowered to the exact counts if the key is promoted (with its units in
/// flight tracked).
pub(crate) fn estimate(now: &Reread, counts: Option<(&Counts, isize)>) -> Estimate {
    Estimate {
        inflight: now.inflight.map(|estimate| {
            counts.map_or(estimate, |(c, tracked)| {
                estimate.min(c.inflight.bound(tracked))
            })
        }),
        rate: now.window.map(|mut view| {
            if let Some((c, _)) = counts {
                let mut exact = c.rate;
                exact.roll_to(view.bucket);
                view.lower_to(&exact, 0);
            }
            view.sliding()
        }),
    }
}

/// A key's figures for a report: [`estimate`]'s, each marked counted where the exact stage
/// counted every request it covers (`counts`, for a promoted key), estimated otherwise.
pub(crate) fn figures(
    now: &Reread,
    counts: Option<(&Counts, isize)>,
) -> (Option<Figure<isize>>, Option<Figure<f64>>) {
    let bounds = estimate(now, counts);
    let inflight = bounds.inflight.map(|at_most| match counts {
        // Nothing admitted before the promotion is still in flight: all are tracked.
        Some((c, tracked)) if c.inflight.base == 0 => Figure::Counted(tracked),
        _ => Figure::Estimated { at_most },
    });
    let rate = bounds.rate.map(|at_most| {
        let counted = counts.zip(now.window).and_then(|((c, _), mut view)| {
            let mut exact = c.rate;
            exact.roll_to(view.bucket);
            view.prev = match view.bucket.checked_sub(1) {
                Some(prev) => exact.counted(prev)?,
                // No window before the first: the sketch's is empty.
                None if view.prev == 0 => 0,
                None => return None,
            };
            view.curr = exact.counted(view.bucket)?;
            Some(view.sliding())
        });
        counted.map_or(Figure::Estimated { at_most }, Figure::Counted)
    });
    (inflight, rate)
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use crate::limiter::Reason;
    use crate::Limits;

    const LEN: u64 = 1_000_000_000;

    /// A rate of 10 per window and 4 in flight, promoted at half of each.
    fn thresholds() -> Thresholds {
        Thresholds::new(&Limits::new().max_inflight(4).max_rate(10), 0.5)
    }

    /// A view of window 7, a quarter into it.
    fn view(prev: isize, curr: isize) -> WindowView {
        WindowView {
            bucket: 7,
            index: 7 % 5,
            prev,
            curr,
            into: LEN / 4,
            len: LEN,
            at: 7 * LEN + LEN / 4,
        }
    }

    fn sketched(inflight: isize, prev: isize, curr: isize) -> Sketched {
        Sketched {
            hash: 1,
            cost: 1,
            inflight: Some(inflight),
            window: Some(view(prev, curr)),
        }
    }

    fn reread(inflight: isize, prev: isize, curr: isize) -> Reread {
        Reread {
            inflight: Some(inflight),
            window: Some(view(prev, curr)),
        }
    }

    fn recount(inflight: isize, prev: isize, curr: isize) -> Recount {
        Recount {
            inflight: Some(inflight),
            window: Some((prev, curr)),
        }
    }

    #[test]
    fn a_request_is_hot_from_its_promotion_threshold_on() {
        let t = thresholds();
        assert!(
            !is_hot(&sketched(1, 0, 4), t.promotion()),
            "4 of 10, 1 of 4 in flight"
        );
        assert!(is_hot(&sketched(1, 0, 5), t.promotion()), "5 of 10: half");
        assert!(
            is_hot(&sketched(2, 0, 1), t.promotion()),
            "2 of 4 in flight: half"
        );
        // prev·(1 − 1/4) + curr = 6·0.75 + 1 = 5.5.
        assert!(
            is_hot(&sketched(1, 6, 1), t.promotion()),
            "the previous window counts too"
        );
    }

    #[test]
    fn alone_refuses_what_the_estimates_put_over_a_limit() {
        let t = thresholds();
        assert!(alone(&sketched(4, 0, 10), &t).is_ok(), "at the limits");
        assert_eq!(
            alone(&sketched(5, 0, 1), &t).unwrap_err().rejected.reason,
            Reason::Inflight
        );
        assert_eq!(
            alone(&sketched(1, 0, 11), &t).unwrap_err().rejected.reason,
            Reason::Rate
        );
    }

    #[test]
    fn a_promoted_key_starts_from_the_estimates_less_its_own_request_or_what_is_proven() {
        let counts = promoted(&sketched(3, 9, 12), &recount(3, 9, 12), None, None);
        assert_eq!(counts.inflight.base, 2);
        assert_eq!(
            counts.rate.bound(7),
            Some(11),
            "its own request not yet counted"
        );
        assert_eq!(
            counts.rate.bound(6),
            None,
            "the sketch alone bounds the window before"
        );
        let counts = promoted(&sketched(3, 9, 12), &recount(3, 9, 12), None, Some(4));
        assert_eq!(counts.rate.bound(7), Some(4));
        assert_eq!(counts.rate.bound(6), Some(4));
    }

    #[test]
    fn the_exact_counts_decide_where_they_are_lower_than_the_sketch() {
        let t = thresholds();
        // The sketch says 45 and more in this window, most of it other keys' (their counters
        // are shared); the key itself was promoted with 4 before its 5th request.
        let mut counts = promoted(&sketched(1, 0, 5), &recount(1, 0, 5), None, None);
        for n in 5..=10 {
            let s = sketched(1, 0, 40 + n);
            let admitted = exact(&mut counts, 0, &s, &recount(1, 0, 40 + n), &t, None);
            assert!(admitted.is_ok());
        }
        assert_eq!(counts.rate.bound(7), Some(10));
        let s = sketched(1, 0, 51);
        let refusal = exact(&mut counts, 0, &s, &recount(1, 0, 51), &t, None).unwrap_err();
        let rejected = refusal.rejected;
        assert_eq!((rejected.reason, rejected.estimate), (Reason::Rate, 11));
        assert_eq!(counts.rate.bound(7), Some(10), "a refusal is not counted");
    }

    #[test]
    fn a_key_is_cool_only_with_nothing_in_flight_below_half_its_threshold_and_no_refusal() {
        let t = thresholds();
        let mut counts = promoted(&sketched(1, 0, 1), &recount(1, 0, 1), None, None);
        counts.rate.count(1);
        assert!(is_cool(&counts, 0, &reread(0, 0, 1), 0, &t));
        assert!(
            !is_cool(&counts, 1, &reread(1, 0, 1), 0, &t),
            "one in flight"
        );
        assert!(
            !is_cool(&counts, 0, &reread(0, 0, 2), 0, &t),
            "the sketch counts a request the exact counts refused"
        );
        counts.rate.count(1);
        counts.rate.count(1);
        assert!(
            !is_cool(&counts, 0, &reread(0, 0, 3), 0, &t),
            "3: over 5 / 2"
        );
        assert!(
            is_cool(&counts, 0, &reread(1, 0, 3), 1, &t),
            "the request being decided is not held against it"
        );
    }

    #[test]
    fn a_refusal_is_held_for_its_retry_after_from_the_request() {
        let t = thresholds();
        let mut counts = promoted(&sketched(1, 0, 1), &recount(1, 0, 1), None, Some(0));
        counts.rate.count(10);
        let s = sketched(1, 0, 11);
        let refusal = exact(&mut counts, 0, &s, &recount(1, 0, 11), &t, None).unwrap_err();
        let retry = refusal.rejected.retry_after.unwrap();
        assert_eq!(
            refusal.over_until,
            Some(view(0, 0).at + crate::clock::saturating_nanos(retry))
        );
        let inflight = alone(&sketched(5, 0, 1), &t).unwrap_err();
        assert_eq!(inflight.over_until, None, "no wait to hold");
    }

    /// The admission that takes a key to its rate limit says until when the next request of
    /// its cost is refused: the deadline that request's refusal holds, if nothing else is
    /// admitted. Not while the key is also at its in-flight limit: the next request would be
    /// refused for that, and the cache answers "rate".
    #[test]
    fn the_admission_that_fills_the_rate_holds_the_next_requests_deadline() {
        let t = thresholds();
        let mut counts = promoted(&sketched(1, 0, 1), &recount(1, 0, 1), None, Some(0));
        counts.rate.count(8);
        let ninth = exact(
            &mut counts,
            0,
            &sketched(1, 0, 9),
            &recount(1, 0, 9),
            &t,
            None,
        );
        assert_eq!(ninth.unwrap().over_until, None, "9 of 10: one more fits");
        let tenth = exact(
            &mut counts,
            0,
            &sketched(1, 0, 10),
            &recount(1, 0, 10),
            &t,
            None,
        );
        let held = tenth.unwrap().over_until;
        let mut next = counts;
        let refusal = exact(
            &mut next,
            0,
            &sketched(1, 0, 11),
            &recount(1, 0, 11),
            &t,
            None,
        );
        assert_eq!(held, refusal.unwrap_err().over_until);
        assert!(held.is_some());

        let mut counts = promoted(&sketched(1, 0, 1), &recount(1, 0, 1), None, Some(0));
        counts.rate.count(9);
        let full = exact(
            &mut counts,
            3,
            &sketched(4, 0, 10),
            &recount(4, 0, 10),
            &t,
            None,
        );
        assert_eq!(full.unwrap().over_until, None, "4 of 4 in flight");
    }

    /// Requests of several units against 4 in flight and 10 per window: admitted only whole;
    /// refused, nothing of them counted in the exact counts, and held in the over-limit cache
    /// until their whole cost fits (the cache holds it for that cost only).
    #[test]
    fn a_request_with_a_cost_is_admitted_only_if_all_its_units_fit() {
        let t = thresholds();
        let costly = |inflight: isize, curr: isize, cost: isize| Sketched {
            cost,
            ..sketched(inflight, 0, curr)
        };
        let mut counts = promoted(&sketched(1, 0, 1), &recount(1, 0, 1), None, Some(0));
        let admitted = exact(
            &mut counts,
            0,
            &costly(3, 3, 3),
            &recount(3, 0, 3),
            &t,
            None,
        );
        assert!(admitted.is_ok(), "3 of 4 and 3 of 10");
        assert!(admitted.unwrap().tracked, "its 3 units are tracked");
        assert_eq!(counts.rate.bound(7), Some(3));
        let refusal = exact(
            &mut counts,
            3,
            &costly(5, 5, 2),
            &recount(5, 0, 5),
            &t,
            None,
        );
        let rejected = refusal.unwrap_err().rejected;
        assert_eq!((rejected.reason, rejected.estimate), (Reason::Inflight, 5));
        counts.rate.count(4);
        let refusal = exact(
            &mut counts,
            0,
            &costly(4, 11, 4),
            &recount(4, 0, 11),
            &t,
            None,
        );
        let refusal = refusal.unwrap_err();
        assert_eq!(refusal.rejected.reason, Reason::Rate);
        assert_eq!(
            counts.rate.bound(7),
            Some(7),
            "nothing of a refusal is counted"
        );
        let retry = refusal.rejected.retry_after.unwrap();
        assert!(
            retry > std::time::Duration::ZERO,
            "7 of 10: 4 more do not fit"
        );
        let at = view(0, 0).at + crate::clock::saturating_nanos(retry);
        assert_eq!(refusal.over_until, Some(at));
    }

    /// Redis away, a node decides on its share of the limit, which can be smaller than a cost
    /// the limit itself admits: refused with no wait (it never fits while the share holds),
    /// not a division by an empty window's count.
    #[cfg(feature = "redis")]
    #[test]
    fn a_cost_over_a_degraded_fleets_share_is_refused_with_no_wait() {
        use crate::limiter::fleet::FleetState;
        let t = Thresholds::new(&Limits::new().max_rate(10), 0.5);
        assert!(t.refuses(4).is_none(), "4 fits the limit of 10");
        let away = FleetState {
            nodes: 4,
            inverse: 0.25,
            degraded: true,
            sync_nanos: 100,
        };
        let t = in_fleet(&t, &away);
        let mut counts = promoted(&sketched(0, 0, 0), &recount(0, 0, 0), None, Some(0));
        let s = Sketched {
            cost: 4,
            ..sketched(4, 0, 4)
        };
        let refusal = exact(&mut counts, 0, &s, &recount(4, 0, 4), &t, None).unwrap_err();
        assert_eq!(refusal.rejected.reason, Reason::Rate);
        assert_eq!(refusal.rejected.limit, 3, "the share: 10 over 4 nodes");
        assert_eq!(refusal.rejected.retry_after, None);
        assert_eq!(refusal.over_until, None, "nothing for the cache to hold");
    }

    /// A request decided on a window that another thread's later request has already moved
    /// the counts past is counted in that later window, and says so: a refund taken from the
    /// request's own window would take units another window never had.
    #[test]
    fn an_admission_says_the_window_it_was_counted_in() {
        let t = thresholds();
        let mut counts = promoted(&sketched(1, 0, 1), &recount(1, 0, 1), None, Some(0));
        counts.rate.roll_to(8);
        let admitted = exact(
            &mut counts,
            0,
            &sketched(1, 0, 1),
            &recount(1, 0, 1),
            &t,
            None,
        );
        assert_eq!(
            admitted.unwrap().window,
            Some(8),
            "the view was of window 7"
        );
        counts.rate.uncount(8, 1);
        assert_eq!(counts.rate.bound(7), Some(0), "window 7 never counted it");
        assert_eq!(counts.rate.bound(8), Some(0));
    }

    #[test]
    fn a_key_promoted_by_a_request_with_a_cost_starts_from_the_estimates_without_it() {
        let s = Sketched {
            cost: 3,
            ..sketched(5, 0, 9)
        };
        let counts = promoted(&s, &recount(5, 0, 9), None, None);
        assert_eq!((counts.inflight.base, counts.rate.bound(7)), (2, Some(6)));
    }
}

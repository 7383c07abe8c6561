#![cfg(not(floodgate_loom))]
//! Requests with a cost (`Limiter::with_cost`, `WithLimits::cost`): a request counts its units
//! in every limit it meets, is admitted only if all of them fit, takes nothing when refused,
//! and gives its in-flight units back together; a cost over a limit is refused at once,
//! counted nowhere. The fuzz harness's model (`fuzz/harness/src/limiter.rs`, run by
//! `tests/limiter.rs`) checks the same with costs among any operations; these are the named
//! scenarios.
//!
//! Rate windows run on a `ManualClock`: no test sleeps, none asserts a timing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Limiter, Limits, Reason};

const SECOND: Duration = Duration::from_secs(1);

fn rate_limiter(clock: &ManualClock, limit: u32) -> Limiter<String> {
    Limiter::builder()
        .max_rate(limit, SECOND)
        .clock(clock)
        .build()
        .unwrap()
}

/// The case: 4 units left, a request of 6 is refused whole and takes none of them.
#[test]
fn a_request_is_admitted_only_if_all_its_units_fit_and_a_refusal_takes_none() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    let six = limiter.with_cost(6).try_acquire("origin").unwrap();
    let rejected = limiter.with_cost(6).try_acquire("origin").unwrap_err();
    assert_eq!((rejected.reason, rejected.limit), (Reason::Inflight, 10));
    assert_eq!(rejected.estimate, 12, "6 held and the 6 asked");
    assert_eq!(
        limiter.estimate("origin").inflight,
        Some(6),
        "the refusal took none"
    );
    let four: Vec<_> = (0..4)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert!(limiter.try_acquire("origin").is_err(), "10 of 10");
    drop((six, four));
}

/// Held in the sketch (a light key) or in the exact stage (a promoted one), a permit gives its
/// units back together.
#[test]
fn a_permit_gives_all_its_units_back_together_from_either_stage() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    let light = limiter.with_cost(3).try_acquire("light").unwrap();
    let hot = limiter.with_cost(8).try_acquire("hot").unwrap();
    let hitters = limiter.heavy_hitters();
    assert_eq!(hitters.len(), 1, "8 of 10 is past the promotion threshold");
    assert_eq!(
        (hitters[0].key.as_str(), hitters[0].inflight),
        ("hot", Some(floodgate::Figure::Counted(8))),
        "promoted by its own request: all of its units were counted by the exact stage"
    );
    drop((light, hot));
    assert_eq!(limiter.estimate("light").inflight, Some(0));
    assert_eq!(limiter.estimate("hot").inflight, Some(0));
    let ten = limiter.with_cost(10).try_acquire("hot");
    assert!(ten.is_ok(), "all 10 units back");
}

/// A rate of 10 units a second: 7 admitted, a request of 5 refused with the time until 5 fit,
/// and a request of 3 admitted at once — the over-limit cache holds the refusal for requests
/// of 5 only, and the refusal spent none of the 3 units left.
#[test]
fn a_refused_large_request_leaves_the_units_left_to_smaller_ones() {
    let clock = ManualClock::new();
    let limiter = rate_limiter(&clock, 10);
    drop(limiter.with_cost(7).try_acquire("client").unwrap());
    let rejected = limiter.with_cost(5).try_acquire("client").unwrap_err();
    assert_eq!(rejected.reason, Reason::Rate);
    // 7 in this window: 5 more fit once 2/7 of the next window has passed (7·(1 − g) ≤ 5).
    let wait = rejected.retry_after.unwrap();
    let expected = SECOND + SECOND * 2 / 7;
    assert!(
        wait.abs_diff(expected) <= Duration::from_nanos(1),
        "{wait:?}"
    );
    drop(limiter.with_cost(3).try_acquire("client").unwrap());
    assert!(limiter.try_acquire("client").is_err(), "10 of 10");
}

/// A flood of requests of one cost is refused from the over-limit cache once refused on exact
/// counts, without a lock or a count, as a flood of single requests is; a request of another
/// cost meanwhile is decided the usual way, and admitted if it fits.
#[test]
fn a_flood_of_one_cost_is_refused_from_the_over_limit_cache_and_other_costs_are_decided() {
    let clock = ManualClock::new();
    let limiter = rate_limiter(&clock, 40);
    for _ in 0..9 {
        drop(limiter.with_cost(4).try_acquire("client").unwrap()); // 36 of 40
    }
    let first = limiter.with_cost(8).try_acquire("client").unwrap_err();
    assert_eq!(first.reason, Reason::Rate);
    let locks = limiter.exact_locks_taken();
    for _ in 0..100 {
        let again = limiter.with_cost(8).try_acquire("client").unwrap_err();
        assert_eq!(again.estimate, 41, "from the cache: limit + 1");
    }
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "no lock for the cached refusals"
    );
    assert_eq!(
        limiter.estimate("client").rate,
        Some(36.0),
        "nothing counted"
    );
    assert!(
        limiter.with_cost(4).try_acquire("client").is_ok(),
        "4 more fit"
    );
}

/// The retry time of a refused request is the time until its whole cost fits: retried then,
/// it is admitted; a little sooner, it is not.
#[test]
fn a_retry_after_retry_after_fits_the_whole_cost() {
    let clock = ManualClock::new();
    let limiter = rate_limiter(&clock, 10);
    clock.advance(SECOND / 2);
    drop(limiter.with_cost(9).try_acquire("client").unwrap());
    let wait = limiter
        .with_cost(4)
        .try_acquire("client")
        .unwrap_err()
        .retry_after
        .unwrap();
    clock.advance(wait - Duration::from_millis(20));
    let early = limiter.with_cost(4).try_acquire("client");
    assert_eq!(early.unwrap_err().reason, Reason::Rate, "20 ms early");
    clock.advance(Duration::from_millis(20));
    assert!(limiter.with_cost(4).try_acquire("client").is_ok());
}

/// A refusal's deadline held in the over-limit cache for one cost assumed nothing more would
/// be admitted: once a request of another cost is, the key's next refusal of the first cost is
/// decided anew, and its wait is never early (the fuzz harness found a cached one 80 ms early).
#[test]
fn a_deadline_held_for_one_cost_does_not_outlive_an_admission_of_another() {
    let clock = ManualClock::new();
    let limiter = rate_limiter(&clock, 9);
    drop(limiter.with_cost(5).try_acquire("client").unwrap());
    let refused = limiter.with_cost(7).try_acquire("client").unwrap_err();
    assert_eq!(refused.reason, Reason::Rate, "5 + 7 of 9");
    drop(limiter.with_cost(3).try_acquire("client").unwrap());
    let wait = limiter
        .with_cost(7)
        .try_acquire("client")
        .unwrap_err()
        .retry_after
        .unwrap();
    clock.advance(wait);
    assert!(
        limiter.with_cost(7).try_acquire("client").is_ok(),
        "7 fit {wait:?} later, with 8 counted"
    );
}

/// More than a limit can never fit: refused at once, with no retry time, counted nowhere;
/// waiting does not help, so `acquire` answers at once too.
#[test]
fn a_cost_over_its_limit_is_refused_at_once_and_counted_nowhere() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(5)
        .max_rate(20, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    let rejected = limiter.with_cost(6).try_acquire("origin").unwrap_err();
    assert_eq!(rejected.reason, Reason::CostOverLimit);
    assert_eq!(
        (rejected.estimate, rejected.limit),
        (6, 5),
        "the limit it is over"
    );
    assert_eq!(rejected.retry_after, None);
    let plan = Limits::new().max_rate(3);
    let rejected = limiter.with_limits(plan).cost(4).try_acquire("origin");
    assert_eq!(rejected.unwrap_err().limit, 3, "the plan's limit");
    let estimate = limiter.estimate("origin");
    assert_eq!((estimate.inflight, estimate.rate), (Some(0), Some(0.0)));

    let mut waiting = limiter.with_cost(6).acquire("origin", SECOND);
    let waker = floodgate_test_support::waker::noop();
    let polled = Pin::new(&mut waiting).poll(&mut Context::from_waker(&waker));
    match polled {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, Reason::CostOverLimit),
        other => panic!("expected an answer at once: {other:?}"),
    }
    // Past what the counters hold, under a plan with no limit of a kind they count.
    let plan = Limits::new().max_inflight(5);
    let rejected = limiter
        .with_limits(plan)
        .cost(u32::MAX)
        .try_acquire("origin");
    let rejected = rejected.unwrap_err();
    assert_eq!(
        (rejected.reason, rejected.limit),
        (Reason::CostOverLimit, 5)
    );
    let unlimited_rate = Limits::new().max_rate(Limits::MAX_LIMIT).no_inflight();
    let rejected = limiter
        .with_limits(unlimited_rate)
        .cost(u32::MAX)
        .try_acquire("origin");
    assert_eq!(rejected.unwrap_err().limit, Limits::MAX_LIMIT);
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
}

/// Issue 38: a request of the largest cost under a plan with no in-flight limit, on a key
/// with 5 of its 10 in flight, took a counter past its ceiling. Given back, it took 4 of the
/// other 5 units with it (the estimate read 1, and 9 more were admitted: 14 in flight against
/// 10). Its units come back exactly: 5 still count, and 5 more fit.
#[test]
fn a_cost_past_the_counters_ceiling_given_back_takes_no_other_units_with_it() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    let five: Vec<_> = (0..5)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    let unlimited = limiter
        .with_limits(Limits::new().no_inflight())
        .cost(Limits::MAX_LIMIT);
    let largest = unlimited.try_acquire("origin").expect("no in-flight limit");
    assert!(limiter.try_acquire("origin").is_err(), "over 10 meanwhile");
    drop(largest);
    assert_eq!(limiter.estimate("origin").inflight, Some(5));
    let more: Vec<_> = (0..5)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    let refused = limiter.try_acquire("origin").unwrap_err();
    assert_eq!((refused.reason, refused.estimate), (Reason::Inflight, 11));
    drop((five, more));
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
}

/// Issue 38: under a plan of the largest in-flight limit, with 3 held, a request of one unit
/// less than that limit is refused, as it should be; but the key's counts then read 2 with 3
/// held, and 2 for good once all were dropped (the defaults' limit of 10 then admitted 8).
/// The refusal leaves the counts as it found them.
#[test]
fn a_refused_cost_near_the_ceiling_leaves_the_in_flight_counts_as_it_found_them() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    let plan = limiter.with_limits(Limits::new().max_inflight(Limits::MAX_LIMIT));
    let three: Vec<_> = (0..3)
        .map(|_| plan.try_acquire("origin").unwrap())
        .collect();
    let refused = plan
        .cost(Limits::MAX_LIMIT - 1)
        .try_acquire("origin")
        .unwrap_err();
    assert_eq!(
        (refused.reason, refused.limit),
        (Reason::Inflight, Limits::MAX_LIMIT)
    );
    assert_eq!(limiter.estimate("origin").inflight, Some(3));
    drop(three);
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
    let ten: Vec<_> = (0..10)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert!(limiter.try_acquire("origin").is_err(), "10 of 10");
    drop(ten);
}

/// Issue 38, under a rate limit: 3 admitted under a plan of the largest rate limit, then a
/// request of one unit less than it refused: the key's rate then read 2, under the 3 it
/// admitted. It reads those 3 (the refused units stay in the window's sketch, as offered
/// load, not in the exact counts it is judged by), and once both windows that saw the refused
/// units have passed, the key gets its 10.
#[test]
fn a_refused_cost_near_the_ceiling_leaves_no_rate_count_under_what_was_admitted() {
    let clock = ManualClock::new();
    let limiter = rate_limiter(&clock, 10);
    let plan = limiter.with_limits(Limits::new().max_rate(Limits::MAX_LIMIT));
    for _ in 0..3 {
        drop(plan.try_acquire("client").unwrap());
    }
    let refused = plan.cost(Limits::MAX_LIMIT - 1).try_acquire("client");
    assert_eq!(refused.unwrap_err().reason, Reason::Rate);
    assert_eq!(limiter.estimate("client").rate, Some(3.0));
    assert!(plan.cost(5).try_acquire("client").is_ok(), "room for more");
    clock.advance(2 * SECOND);
    for n in 0..10 {
        assert!(limiter.try_acquire("client").is_ok(), "request {n} of 10");
    }
    assert!(limiter.try_acquire("client").is_err(), "10 of 10");
}

/// A key's in-flight counters hold exactly up to 2^31 units: past that (more than twice the
/// largest limit, under plans with no in-flight limit), a request is refused as over
/// `MAX_LIMIT` and counted nowhere, rather than parked in a count that stays saturated for
/// good once the others are given back.
#[test]
fn a_cost_its_counters_cannot_hold_is_refused_and_counted_nowhere() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    let largest = limiter
        .with_limits(Limits::new().no_inflight())
        .cost(Limits::MAX_LIMIT);
    let two: Vec<_> = (0..2)
        .map(|_| largest.try_acquire("origin").unwrap())
        .collect();
    let refused = largest.try_acquire("origin").unwrap_err();
    assert_eq!(
        (refused.reason, refused.estimate, refused.limit),
        (Reason::Inflight, 1 << 31, Limits::MAX_LIMIT),
        "{refused}"
    );
    let one = limiter
        .with_limits(Limits::new().no_inflight())
        .try_acquire("origin");
    assert!(one.is_ok(), "a unit more fits: 2^31 − 2 held");
    drop((two, one));
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
    let ten: Vec<_> = (0..10)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert!(limiter.try_acquire("origin").is_err(), "10 of 10");
    drop(ten);
}

/// A key's rate counters saturate at 2^31 units in a window: requests under a plan with no
/// rate limit, of the largest cost, take them there. A saturated count is a bound from below,
/// not the count: it weighs whole for as long as its window weighs at all. Read as the count,
/// it slid under the limit a few nanoseconds before the next window ended, where the true
/// count (three times `MAX_LIMIT`) was still past it, and a request was admitted there.
#[test]
fn a_saturated_rate_count_weighs_whole_until_its_window_slides_out() {
    let clock = ManualClock::new();
    let len = Duration::from_millis(100);
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(271, len)
        .clock(&clock)
        .build()
        .unwrap();
    let free = limiter
        .with_limits(Limits::new().no_rate())
        .cost(Limits::MAX_LIMIT);
    for _ in 0..3 {
        drop(free.try_acquire("origin").unwrap());
    }
    let in_window_0 = 3 * u128::from(Limits::MAX_LIMIT);
    let len = len.as_nanos();
    let mut refused = 0;
    loop {
        let now = clock.now().as_nanos();
        let (window, into) = (now / len, now % len);
        match limiter.try_acquire("origin") {
            Ok(_) => {
                // prev·(1 − f) + curr ≤ limit, in integer nanoseconds (the refused requests
                // of window 0 were never admitted; window 1 admitted nothing).
                let prev = if window == 1 { in_window_0 } else { 0 };
                assert!(
                    window >= 1 && prev * (len - into) + len <= 271 * len,
                    "admitted {into} ns into window {window} after {refused} refusals"
                );
                break;
            }
            Err(rejected) => {
                refused += 1;
                assert!(refused < 100, "never admitted again");
                clock.advance(rejected.retry_after.unwrap_or(Duration::from_millis(1)));
            }
        }
    }
}

/// A waiting request of 7 units with 6 of 10 held: woken by a permit of 3 coming back, it fits.
#[test]
fn a_waiting_request_with_a_cost_is_admitted_when_its_units_fit() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    let first = limiter.with_cost(3).try_acquire_owned("origin").unwrap();
    let second = limiter.with_cost(3).try_acquire_owned("origin").unwrap();
    let mut waiting = limiter.with_cost(7).acquire("origin", SECOND);
    let waker = floodgate_test_support::waker::noop();
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut waiting).poll(&mut cx).is_pending());
    drop(first);
    let Poll::Ready(Ok(permit)) = Pin::new(&mut waiting).poll(&mut cx) else {
        panic!("7 units fit with 3 held");
    };
    assert_eq!(limiter.estimate("origin").inflight, Some(10));
    drop((permit, second));
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
}

/// A permit of 4 units coming back wakes as many waiters of one unit as fit, oldest first:
/// the second is not left waiting for its deadline with 3 units free.
#[test]
fn a_permit_of_several_units_coming_back_admits_as_many_waiters_as_fit() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(4).build().unwrap();
    let four = limiter.with_cost(4).try_acquire_owned("origin").unwrap();
    let wakes: Vec<Arc<CountWakes>> = (0..3).map(|_| Arc::new(CountWakes::default())).collect();
    let mut waiting: Vec<_> = (0..3).map(|_| limiter.acquire("origin", SECOND)).collect();
    for (future, wakes) in waiting.iter_mut().zip(&wakes) {
        let waker = Waker::from(Arc::clone(wakes));
        assert!(Pin::new(future)
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    drop(four);
    let mut admitted = Vec::new();
    for (future, wakes) in waiting.iter_mut().zip(&wakes) {
        assert_eq!(wakes.count(), 1, "woken once its turn came");
        let waker = Waker::from(Arc::clone(wakes));
        let Poll::Ready(Ok(permit)) = Pin::new(future).poll(&mut Context::from_waker(&waker))
        else {
            panic!("a unit of the 4 is free for it");
        };
        admitted.push(permit);
    }
    assert_eq!(limiter.estimate("origin").inflight, Some(3));
}

/// A cost of 0 counts nothing and is admitted at once: at the in-flight limit, and while the
/// over-limit cache refuses the key's other requests. A limit of 0 still refuses it.
#[test]
fn a_cost_of_zero_counts_nothing_and_is_admitted_but_under_a_limit_of_zero() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(2)
        .max_rate(3, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    let held: Vec<_> = (0..2)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    let free = limiter.with_cost(0).try_acquire("origin").unwrap();
    assert_eq!(limiter.estimate("origin").inflight, Some(2));
    drop(free);
    assert_eq!(limiter.estimate("origin").inflight, Some(2));
    drop(held);
    drop(limiter.try_acquire("origin").unwrap()); // 3 of 3
    let refused = limiter.try_acquire("origin").unwrap_err();
    assert_eq!(refused.reason, Reason::Rate);
    assert!(limiter.with_cost(0).try_acquire("origin").is_ok());
    assert_eq!(
        limiter.estimate("origin").rate,
        Some(3.0),
        "nothing counted"
    );
    let closed = Limits::new().max_rate(0);
    let refused = limiter.with_limits(closed).cost(0).try_acquire("origin");
    assert_eq!(refused.unwrap_err().reason, Reason::Rate);
}

/// In shadow, a request whose units do not fit is served, says so, and holds none of them.
#[test]
fn a_request_with_a_cost_in_shadow_is_served_and_holds_nothing() {
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(10)
        .shadow(true)
        .build()
        .unwrap();
    let eight = limiter.with_cost(8).try_acquire("origin").unwrap();
    assert!(eight.shadow_rejection().is_none());
    let five = limiter.with_cost(5).try_acquire("origin").unwrap();
    let would = five.shadow_rejection().expect("13 of 10 would be refused");
    assert_eq!((would.reason, would.estimate), (Reason::Inflight, 13));
    drop(five);
    assert_eq!(limiter.estimate("origin").inflight, Some(8));
    let over = limiter.with_cost(11).try_acquire("origin").unwrap();
    assert_eq!(
        over.shadow_rejection().map(|r| r.reason),
        Some(Reason::CostOverLimit)
    );
    drop((eight, over));
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct CountWakes(std::sync::atomic::AtomicUsize);

impl CountWakes {
    fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

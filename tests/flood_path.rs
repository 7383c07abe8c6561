//! The flood path: a key already over its rate limit is rejected without a lock and without
//! counting, from any number of threads, until the moment one more request fits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Limiter, Reason};

const LIMIT: u32 = 10;
const INTERVAL: Duration = Duration::from_secs(1);

fn limiter(clock: &ManualClock) -> Limiter<String> {
    Limiter::builder()
        .max_rate(LIMIT, INTERVAL)
        .clock(clock)
        .build()
        .unwrap()
}

/// Takes the key to its limit: `LIMIT` admitted, the last of which holds the key's deadline
/// in the over-limit cache.
fn fill(limiter: &Limiter<String>, key: &str) {
    for i in 0..LIMIT {
        drop(
            limiter
                .try_acquire(key)
                .unwrap_or_else(|r| panic!("request {i}: {r}")),
        );
    }
}

/// Takes the key to its limit and past it: `LIMIT` admitted, the last of which holds the
/// key's deadline in the over-limit cache, then one rejection. Returns that rejection's
/// `retry_after`.
fn take_over_the_limit(limiter: &Limiter<String>, key: &str) -> Duration {
    fill(limiter, key);
    let rejected = limiter.try_acquire(key).unwrap_err();
    assert_eq!(rejected.reason, Reason::Rate);
    rejected.retry_after.unwrap()
}

#[test]
fn a_flooding_key_is_rejected_without_a_lock_and_without_counting() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let retry = take_over_the_limit(&limiter, "flooded");
    let noise = limiter.stats().rate_noise;
    let locks = limiter.exact_locks_taken();
    for _ in 0..10_000 {
        let rejected = limiter.try_acquire("flooded").unwrap_err();
        assert_eq!(rejected.reason, Reason::Rate);
        assert!(rejected.estimate > rejected.limit, "{rejected}");
        let left = rejected.retry_after.unwrap();
        assert!(left >= retry, "{left:?} is earlier than {retry:?}");
    }
    assert_eq!(limiter.exact_locks_taken(), locks, "the flood took a lock");
    assert_eq!(
        limiter.stats().rate_noise,
        noise,
        "the flood was counted in the rate sketch"
    );
}

/// The over-limit cache holds a flooded key until its `retry_after`, across the window change
/// too (where its current window is empty and only the previous one holds it back): a cache
/// consulted only when the key's own counts say it may be over would have to see that.
#[test]
fn a_flooding_key_is_refused_without_a_lock_until_its_retry_after_across_the_window_change() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let retry = take_over_the_limit(&limiter, "flooded");
    assert!(
        retry > INTERVAL,
        "the test wants a wait past the window's end"
    );
    let locks = limiter.exact_locks_taken();
    let step = retry / 64;
    let mut waited = Duration::ZERO;
    while waited + step < retry {
        let rejected = limiter.try_acquire("flooded").unwrap_err();
        assert_eq!(rejected.reason, Reason::Rate);
        assert_eq!(
            limiter.exact_locks_taken(),
            locks,
            "{waited:?} after the refusal, the flood took a lock"
        );
        clock.advance(step);
        waited += step;
    }
}

/// `LIMIT` requests at the start of the first window: one more fits once the second window's
/// sliding count `LIMIT·(1 − f) + 1` is at most `LIMIT`, at `f = 1 / LIMIT`.
fn one_more_fits_at() -> Duration {
    INTERVAL + INTERVAL / LIMIT
}

#[test]
fn a_flooding_key_is_admitted_again_the_moment_one_more_request_fits() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let retry = take_over_the_limit(&limiter, "flooded");
    let fits = one_more_fits_at();
    assert_eq!(retry, fits, "retry_after is when one more fits");
    clock.advance(fits - Duration::from_nanos(1));
    assert!(limiter.try_acquire("flooded").is_err(), "admitted early");
    clock.advance(Duration::from_nanos(1));
    assert!(
        limiter.try_acquire("flooded").is_ok(),
        "rejected at {fits:?}, when one more fits"
    );
}

/// The admission that takes a key to its limit knows until when another request of its cost
/// is refused: it holds that deadline in the over-limit cache at once, so that no refusal of a
/// key over its limit is decided under the exact stage's lock, the first one included.
#[test]
fn the_admission_that_fills_a_key_holds_its_next_request_without_a_lock() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    fill(&limiter, "full");
    let locks = limiter.exact_locks_taken();
    let rejected = limiter.try_acquire("full").unwrap_err();
    assert_eq!(rejected.reason, Reason::Rate);
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "the first refusal took the exact stage's lock"
    );
    assert_eq!(
        rejected.retry_after,
        Some(one_more_fits_at()),
        "retry_after is when one more fits"
    );
}

/// A flooded key's refusals all come from the over-limit cache, none decided under the lock;
/// the report still counts each run of them once for the key, as it did when each run began
/// with a refusal under the lock: the run's first refusal marks its deadline used, and the
/// key's entry counts it (before the report settles it, at the key's next admission, across
/// the sweep at each window's end, and at a refund). A deadline no request came for counts
/// nothing, before the key leaves the stage and after.
#[test]
fn the_report_counts_each_run_of_refusals_from_the_cache_once() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let rejected = |limiter: &Limiter<String>| {
        let hitters = limiter.heavy_hitters();
        let flooded = hitters.iter().find(|h| h.key == "flooded");
        flooded.map(|h| h.rejected)
    };
    let mut retry = take_over_the_limit(&limiter, "flooded");
    assert_eq!(
        rejected(&limiter),
        Some(1),
        "the first run, not settled yet"
    );
    for _ in 0..100 {
        limiter.try_acquire("flooded").unwrap_err();
    }
    assert_eq!(rejected(&limiter), Some(1), "one run");
    // Each time one more fits, it is admitted and fills the key again; then a run.
    for run in 2..=4 {
        clock.advance(retry);
        drop(limiter.try_acquire("flooded").unwrap());
        for _ in 0..10 {
            retry = limiter
                .try_acquire("flooded")
                .unwrap_err()
                .retry_after
                .unwrap();
        }
        assert_eq!(rejected(&limiter), Some(run));
    }
    // A run within a decision taken back (the key's refusal refuses it): counted once.
    clock.advance(retry);
    let refunded = limiter.try_acquire_and("flooded", || limiter.try_acquire("flooded"));
    assert_eq!(refunded.unwrap_err().reason, Reason::Rate);
    assert_eq!(
        rejected(&limiter),
        Some(5),
        "the refused run within the refund"
    );
    // A key filled with no request after: no run; one refused once: one. Before and after
    // they leave the stage.
    for _ in 0..LIMIT {
        drop(limiter.try_acquire("unused").unwrap());
        drop(limiter.try_acquire("once").unwrap());
    }
    assert!(limiter.try_acquire("once").is_err());
    let report = |limiter: &Limiter<String>, key: &str| {
        let hitters = limiter.heavy_hitters();
        let hitter = hitters.iter().find(|h| h.key == key);
        hitter.map(|h| (h.rejected, h.left_ago.is_some()))
    };
    assert_eq!(report(&limiter, "unused"), Some((0, false)));
    assert_eq!(report(&limiter, "once"), Some((1, false)));
    clock.advance(3 * INTERVAL);
    assert_eq!(report(&limiter, "unused"), Some((0, true)), "left");
    assert_eq!(report(&limiter, "once"), Some((1, true)), "left");
}

/// A key that keeps flooding changes nothing for the others: each healthy key, alone with the
/// flood in its windows, gets exactly its limit and is refused right after it.
///
/// Each healthy key has two windows of its own (the flood's are the only other requests in
/// them): healthy keys at their limits in one window would meet each other, and a key whose
/// rows all share another's line (see "What the promotion threshold proves" in the exact
/// stage's docs) may lose up to the promotion threshold of its first windows to it — the
/// collision this test is not about. The sketch is sized so that meeting the flood that way
/// is a one-in-40,000 event.
#[test]
fn other_keys_are_decided_as_usual_while_one_floods() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(LIMIT, INTERVAL)
        .sketch(2, 1 << 20)
        .clock(&clock)
        .build()
        .unwrap();
    take_over_the_limit(&limiter, "flooded");
    // Five flood requests to each healthy one: in each key's windows, the flood's first 10
    // are admitted and the rest refused, nearly all by the over-limit cache.
    let flood = || (0..5).for_each(|_| drop(limiter.try_acquire("flooded")));
    for i in 0..200 {
        let key = format!("healthy-{i}");
        for n in 0..LIMIT {
            flood();
            if let Err(r) = limiter.try_acquire(&key) {
                panic!("{key}, request {n} of {LIMIT}: {r}");
            }
        }
        flood();
        assert!(
            limiter.try_acquire(&key).is_err(),
            "{key} got over its limit"
        );
        clock.advance(2 * INTERVAL);
    }
}

#[test]
fn threads_flooding_one_key_never_get_more_than_its_limit_and_take_no_locks_once_it_is_over() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let admitted = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..20_000 {
                    if limiter.try_acquire("flooded").is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let admitted = admitted.load(Ordering::Relaxed);
    // Requests that raced the promotion may be counted in its base as well as here, which
    // only rejects more.
    assert!(
        admitted <= LIMIT as usize,
        "{admitted} admitted over a limit of {LIMIT}"
    );
    assert!(admitted > 0);
    let locks = limiter.exact_locks_taken();
    // Promoted at half the limit: the requests from there to the first rejection, plus the
    // few that raced it, took the lock; the rest of the 80,000 none.
    assert!(locks < 100, "{locks} locks for 80,000 requests");
}

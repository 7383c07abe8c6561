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

/// Takes the key to its limit and past it: `LIMIT` admitted, then one rejection decided on
/// the exact counts. Returns that rejection's `retry_after`.
fn take_over_the_limit(limiter: &Limiter<String>, key: &str) -> Duration {
    for i in 0..LIMIT {
        drop(
            limiter
                .try_acquire(key)
                .unwrap_or_else(|r| panic!("request {i}: {r}")),
        );
    }
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

#[test]
fn a_flooding_key_is_admitted_again_the_moment_one_more_request_fits() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let retry = take_over_the_limit(&limiter, "flooded");
    clock.advance(retry - Duration::from_nanos(1));
    assert!(limiter.try_acquire("flooded").is_err(), "admitted early");
    clock.advance(Duration::from_nanos(1));
    assert!(
        limiter.try_acquire("flooded").is_ok(),
        "rejected at its retry_after ({retry:?})"
    );
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

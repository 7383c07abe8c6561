//! Per-key limits (`Limits`, `with_limits`) and live defaults (`set_limits`): each key is
//! admitted exactly up to its own limit, changes are seen by the next decision, and limits a
//! limiter cannot judge are refused clearly.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{ConfigError, LimitKind, Limiter, Limits, Permit, Reason, Rejected, WithLimits};

const SECOND: Duration = Duration::from_secs(1);

/// Per-key limits from 1 to 200: key `i` has in-flight limit `i` and rate limit `2i`.
fn plan(i: u32) -> Limits {
    Limits::new().max_inflight(i).max_rate(2 * i)
}

/// All 200 keys hold their permits at once, so the in-flight table is given 4 rows of 2^20
/// (a full collision between two of them once in 3,000 runs): at the sized width, 2 rows of
/// 2^17, a key whose counters all share a key holding many permits is judged with those in
/// flight too (docs/guide.md's sizing section), which failed this test 1 run in 40.
#[test]
fn each_key_is_held_exactly_to_its_own_in_flight_limit() {
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(10)
        .sketch(4, 1 << 20)
        .build()
        .unwrap();
    let mut held: Vec<Permit<'_, u64>> = Vec::new();
    for i in 1..=200u32 {
        let key = i as u64;
        // This limiter counts no rate: the plan's in-flight limit only.
        let limits = Limits::new().max_inflight(plan(i).inflight_limit().unwrap());
        let mut admitted = 0;
        while let Ok(permit) = limiter.with_limits(limits).try_acquire(&key) {
            held.push(permit);
            admitted += 1;
            assert!(admitted <= i, "key {i} admitted over its own limit");
        }
        assert_eq!(admitted, i, "key {i} refused under its own limit");
    }
    // Keys with limits above the default's threshold are promoted at their own threshold (half
    // their limit), not the default's (5): every key of limit ≥ 2 reached its own.
    assert!(limiter.stats().promoted >= 199);
    drop(held);
    for i in 1..=200u32 {
        assert_eq!(limiter.estimate(&(i as u64)).inflight, Some(0), "key {i}");
    }
}

/// Each key alone in its windows: keys at their limits in one window may meet another's
/// line in full (see docs/guide.md's sizing section), which is not what this test is about.
#[test]
fn each_key_is_admitted_exactly_its_own_rate_per_window() {
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_rate(10, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    for round in 0..3 {
        for i in 1..=200u32 {
            // Whole windows apart: the previous window no longer weighs on this one.
            clock.advance(2 * SECOND);
            let key = i as u64;
            let limits = Limits::new().max_rate(plan(i).rate_limit().unwrap());
            let admitted = (0..4 * i)
                .filter(|_| limiter.with_limits(limits).try_acquire(&key).is_ok())
                .count() as u32;
            assert_eq!(admitted, 2 * i, "key {i}, round {round}");
        }
    }
}

#[test]
fn promotion_follows_the_keys_own_limit() {
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(10)
        .promotion_threshold(0.5)
        .build()
        .unwrap();
    let roomy = Limits::new().max_inflight(1000);
    let held: Vec<_> = (0..100)
        .map(|_| limiter.with_limits(roomy).try_acquire(&1).unwrap())
        .collect();
    // 100 in flight is far over the default's threshold (5) but a tenth of this key's limit:
    // it stays in the sketch stage.
    assert_eq!(limiter.stats().promoted, 0);
    let strict = Limits::new().max_inflight(4);
    let _a = limiter.with_limits(strict).try_acquire(&2).unwrap();
    let _b = limiter.with_limits(strict).try_acquire(&2).unwrap();
    assert_eq!(limiter.stats().promoted, 1, "2 in flight is half of 4");
    drop(held);
}

#[test]
fn set_limits_is_seen_by_the_next_decision_on_every_thread() {
    let limiter: Limiter<u64> = Limiter::builder().max_inflight(1).build().unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let setter = {
        let (limiter, barrier) = (limiter.clone(), Arc::clone(&barrier));
        thread::spawn(move || {
            limiter.set_limits(Limits::new().max_inflight(3)).unwrap();
            barrier.wait();
            barrier.wait();
            limiter.set_limits(Limits::new().max_inflight(1)).unwrap();
            barrier.wait();
        })
    };
    let first = limiter.try_acquire(&7).unwrap();
    barrier.wait(); // the limit is 3 now
    let second = limiter.try_acquire(&7).unwrap();
    let third = limiter.try_acquire(&7).unwrap();
    let rejected = limiter.try_acquire(&7).unwrap_err();
    assert_eq!(rejected.limit, 3);
    barrier.wait();
    barrier.wait(); // back to 1: the key holds 3, so nothing more until two are back
    drop((second, third));
    assert_eq!(limiter.try_acquire(&7).unwrap_err().limit, 1);
    drop(first);
    assert!(limiter.try_acquire(&7).is_ok());
    setter.join().unwrap();
}

#[test]
fn a_key_rejected_for_its_rate_is_judged_again_under_a_raised_limit() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(2, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    drop(limiter.try_acquire("origin").unwrap());
    drop(limiter.try_acquire("origin").unwrap());
    // Rejected, and remembered as over its limit (the over-limit cache) for a while.
    let first = limiter.try_acquire("origin").unwrap_err();
    assert!(first.retry_after.unwrap() > Duration::from_millis(500));
    assert!(limiter.try_acquire("origin").is_err());
    // A raised limit is not held to the deadline computed under the old one.
    limiter.set_limits(Limits::new().max_rate(10)).unwrap();
    assert!(limiter.try_acquire("origin").is_ok());
    // Nor a key's own, higher limit.
    limiter.set_limits(Limits::new().max_rate(2)).unwrap();
    let gold = Limits::new().max_rate(20);
    assert!(limiter.try_acquire("origin").is_err());
    assert!(limiter.with_limits(gold).try_acquire("origin").is_ok());
}

/// A key the sketches admitted alone under a high default limit is judged by a lowered one
/// from its next request: what a healthy request reads of the defaults (their promotion
/// thresholds, one word) follows `set_limits` as the thresholds do.
#[test]
fn a_lowered_default_limit_holds_for_a_key_the_sketches_admitted_alone() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(100, SECOND)
        .promotion_threshold(0.5)
        .clock(&clock)
        .build()
        .unwrap();
    for _ in 0..20 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    assert_eq!(
        limiter.stats().promoted,
        0,
        "20 of 100: below its threshold"
    );
    limiter.set_limits(Limits::new().max_rate(10)).unwrap();
    let rejected = limiter.try_acquire("origin").unwrap_err();
    assert_eq!((rejected.reason, rejected.limit), (Reason::Rate, 10));
}

#[test]
fn limits_of_a_kind_the_limiter_does_not_count_are_refused_clearly() {
    let clock = ManualClock::new();
    let inflight_only: Limiter<String> = Limiter::builder().max_inflight(5).build().unwrap();
    let rate_only: Limiter<String> = Limiter::builder()
        .max_rate(5, SECOND)
        .clock(&clock)
        .build()
        .unwrap();

    let rejected = inflight_only
        .with_limits(Limits::new().max_rate(3))
        .try_acquire("origin")
        .unwrap_err();
    assert_eq!(
        (rejected.reason, rejected.limit),
        (Reason::RateNotCounted, 3)
    );
    assert!(
        rejected.to_string().contains("counts no rate"),
        "{rejected}"
    );
    let rejected = rate_only
        .with_limits(Limits::new().max_inflight(3))
        .try_acquire_owned("origin")
        .unwrap_err();
    assert_eq!(rejected.reason, Reason::InflightNotCounted);
    assert!(rejected.to_string().contains("max_inflight"), "{rejected}");

    let err = rate_only
        .set_limits(Limits::new().max_inflight(3))
        .unwrap_err();
    assert!(matches!(err, ConfigError::InvalidLimit(_)));
    assert!(err.to_string().contains("max_inflight"), "{err}");
    assert_eq!(rate_only.limits(), Limits::new().max_rate(5), "unchanged");
    // Nothing was counted by the refusals.
    assert_eq!(inflight_only.estimate("origin").inflight, Some(0));
}

#[test]
fn limits_turned_off_are_not_limited_but_still_counted() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let unlimited = Limits::new().no_inflight();
    let held: Vec<_> = (0..50)
        .map(|_| {
            limiter
                .with_limits(unlimited)
                .try_acquire("origin")
                .unwrap()
        })
        .collect();
    assert_eq!(limiter.estimate("origin").inflight, Some(50));
    assert!(
        limiter.try_acquire("origin").is_err(),
        "the default limit sees them"
    );
    drop(held);
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
    assert!(limiter.try_acquire("origin").is_ok());
}

#[test]
fn a_limit_of_zero_admits_nothing_and_counts_nothing() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(5)
        .max_rate(5, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    for limits in [Limits::new().max_inflight(0), Limits::new().max_rate(0)] {
        for _ in 0..10 {
            let rejected = limiter
                .with_limits(limits)
                .try_acquire("suspended")
                .unwrap_err();
            assert_eq!(rejected.limit, 0, "{limits:?}");
            assert_eq!(
                rejected.retry_after, None,
                "waiting never helps: {limits:?}"
            );
        }
    }
    let estimate = limiter.estimate("suspended");
    assert_eq!((estimate.inflight, estimate.rate), (Some(0), Some(0.0)));
}

/// The sketches count in 32-bit counters that read at most 2^31: a limit they cannot judge
/// would never refuse, so it is refused where it enters — at build, by `set_limits` (the
/// defaults left unchanged) and per request (a misconfigured plan) — never wrapped or clamped.
#[test]
fn limits_the_counters_cannot_reach_are_refused_wherever_they_enter() {
    const MAX_LIMIT: u32 = floodgate::Limits::MAX_LIMIT;
    let too_large = MAX_LIMIT + 1;
    for builder in [
        Limiter::<u64>::builder().max_inflight(too_large),
        Limiter::<u64>::builder().max_rate(too_large, SECOND),
        Limiter::<u64>::builder()
            .max_inflight(1)
            .max_rate(u32::MAX, SECOND),
    ] {
        let err = builder.build().unwrap_err();
        assert!(
            matches!(err, ConfigError::LimitTooLarge { max, .. } if max == MAX_LIMIT),
            "{err:?}"
        );
        assert!(err.to_string().contains("1073741823"), "{err}");
    }

    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(MAX_LIMIT)
        .max_rate(MAX_LIMIT, SECOND)
        .clock(&clock)
        .build()
        .expect("the largest limit is allowed");
    let err = limiter
        .set_limits(Limits::new().max_rate(too_large))
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::LimitTooLarge {
            limit: too_large,
            max: MAX_LIMIT
        }
    );
    assert_eq!(limiter.limits().rate_limit(), Some(MAX_LIMIT), "unchanged");

    let plan = Limits::new().max_inflight(too_large);
    let rejected = limiter.with_limits(plan).try_acquire(&1).unwrap_err();
    assert_eq!(
        (rejected.reason, rejected.limit),
        (Reason::LimitTooLarge, too_large)
    );
    assert!(rejected.to_string().contains("largest limit"), "{rejected}");
    assert_eq!(limiter.estimate(&1).inflight, Some(0), "nothing counted");
    assert!(limiter.try_acquire(&1).is_ok(), "the defaults still admit");
}

/// `set_limits` checks the defaults as `build` does: a push that would refuse every key (a
/// limit below 1) or switch limiting off (no limit at all) is refused with the builder's
/// error, and the defaults in force stay. Per-key `Limits` of 0 still refuse their key: that
/// is asked for one key at a time.
#[test]
fn a_push_of_defaults_that_would_refuse_every_key_or_limit_nothing_is_refused() {
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(5)
        .max_rate(10, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    let before = limiter.limits();
    for (push, what) in [
        (Limits::new().max_rate(0), "max_rate must be at least 1"),
        (
            Limits::new().max_inflight(0).max_rate(10),
            "max_inflight must be at least 1",
        ),
        (Limits::new(), "max_inflight, max_rate or both"),
    ] {
        let err = limiter.set_limits(push).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidLimit(_)),
            "{push:?}: {err:?}"
        );
        assert!(err.to_string().contains(what), "{push:?}: {err}");
        assert_eq!(limiter.limits(), before, "{push:?} changed the defaults");
    }
    assert!(limiter.try_acquire(&1).is_ok(), "the defaults still admit");
    let suspended = Limits::new().max_rate(0);
    assert!(
        limiter.with_limits(suspended).try_acquire(&2).is_err(),
        "a key's own limit of 0 refuses it"
    );
}

/// Issue 38: a limiter of 10 in flight and 100 a second took `set_limits` of 1000 in flight
/// alone as "no rate limit" (500 of 500 admitted from then on). A push that leaves out a kind
/// the limiter counts is refused, names that kind, and leaves the defaults as they were.
#[test]
fn a_push_that_names_one_kind_is_refused_and_does_not_turn_the_other_off() {
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(10)
        .max_rate(100, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    let before = limiter.limits();
    let err = limiter
        .set_limits(Limits::new().max_inflight(1000))
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::LimitLeftOut {
            kind: LimitKind::Rate
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("rate") && message.contains("no_rate") && message.contains("max_rate"),
        "{message}"
    );
    let err = limiter.set_limits(Limits::new().max_rate(5)).unwrap_err();
    assert_eq!(
        err,
        ConfigError::LimitLeftOut {
            kind: LimitKind::Inflight
        }
    );
    assert_eq!(limiter.limits(), before, "the defaults in force stay");
    let admitted = (0..500)
        .filter(|&i| limiter.try_acquire(&(i % 5)).is_ok())
        .count();
    assert_eq!(admitted, 500, "5 keys, 100 each: up to the rate limit");
    let refused = limiter.try_acquire(&0).unwrap_err();
    assert_eq!((refused.reason, refused.limit), (Reason::Rate, 100));
}

/// A push that turns one kind off and says nothing of the other is refused for the kind it
/// left out, not as a push of no limit at all: the operator who meant "in flight off" learns
/// that the rate must be named too.
#[test]
fn a_push_that_turns_one_kind_off_and_leaves_the_other_out_names_the_one_left_out() {
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(10)
        .max_rate(100, SECOND)
        .build()
        .unwrap();
    let before = limiter.limits();
    for (push, left_out) in [
        (Limits::new().no_inflight(), LimitKind::Rate),
        (Limits::new().no_rate(), LimitKind::Inflight),
    ] {
        assert_eq!(
            limiter.set_limits(push).unwrap_err(),
            ConfigError::LimitLeftOut { kind: left_out },
            "{push:?}"
        );
        assert_eq!(limiter.limits(), before);
    }
}

/// Turning a kind off is said, for that kind, and then holds: the rate is no longer limited,
/// the in-flight limit still is. Turning every kind off limits nothing and is refused.
#[test]
fn turning_a_kind_off_is_said_and_turns_off_that_kind_alone() {
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(10)
        .max_rate(100, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    let pushed = Limits::new().max_inflight(1000).no_rate();
    limiter.set_limits(pushed).unwrap();
    assert_eq!(limiter.limits(), pushed);
    assert_eq!(limiter.limits().rate_limit(), None);
    for i in 0..500 {
        assert!(
            limiter.try_acquire(&0).is_ok(),
            "request {i}: no rate limit"
        );
    }
    let held: Vec<_> = (0..1000)
        .map(|_| limiter.try_acquire(&1).unwrap())
        .collect();
    let refused = limiter.try_acquire(&1).unwrap_err();
    assert_eq!((refused.reason, refused.limit), (Reason::Inflight, 1000));
    drop(held);
    let err = limiter
        .set_limits(Limits::new().no_inflight().no_rate())
        .unwrap_err();
    assert!(matches!(err, ConfigError::InvalidLimit(_)), "{err:?}");
    assert_eq!(limiter.limits(), pushed, "unchanged");
}

/// A key's own limits that name one kind take the limiter's default of the other, as it is
/// at each decision (they used to leave that kind unlimited); `no_rate` exempts the key from
/// the rate, said explicitly.
#[test]
fn a_plan_that_names_one_kind_keeps_the_defaults_other() {
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(2)
        .max_rate(3, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    let wide = limiter.with_limits(Limits::new().max_inflight(100));
    for _ in 0..3 {
        drop(wide.try_acquire(&1).unwrap());
    }
    let refused = wide.try_acquire(&1).unwrap_err();
    assert_eq!((refused.reason, refused.limit), (Reason::Rate, 3));
    limiter
        .set_limits(Limits::new().max_inflight(2).max_rate(5))
        .unwrap();
    let refused = fill(&wide, 2, 5);
    assert_eq!(
        (refused.reason, refused.limit),
        (Reason::Rate, 5),
        "the new default"
    );
    let unmetered = limiter.with_limits(Limits::new().max_inflight(100).no_rate());
    for i in 0..50 {
        assert!(
            unmetered.try_acquire(&3).is_ok(),
            "request {i}: no rate limit"
        );
    }
}

/// Admits `expected` requests of one unit of `key`, and returns the refusal of the next.
fn fill(limits: &WithLimits<'_, u64>, key: u64, expected: usize) -> Rejected {
    for i in 0..expected {
        assert!(
            limits.try_acquire(&key).is_ok(),
            "request {i} of {expected}"
        );
    }
    limits.try_acquire(&key).unwrap_err()
}

//! Who gets a place in the exact stage: keys with evidence, not the latest arrivals; and
//! cooled-down keys leave it without a request of theirs, on the clock's sweep.
//!
//! The sketch here is one counter, so every key looks as heavy as all the traffic together
//! (a limiter far past what its sketch can tell apart): only the exact stage can tell a
//! healthy key from the flood, and it has one set of 16 places.

use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::Limiter;

const INTERVAL: Duration = Duration::from_secs(1);
const LIMIT: u32 = 100;

fn saturated(clock: &ManualClock) -> Limiter<String> {
    Limiter::builder()
        .max_rate(LIMIT, INTERVAL)
        .sketch(1, 1)
        .exact_capacity(16)
        .clock(clock)
        .build()
        .unwrap()
}

/// One window of traffic: `steady` requests of the healthy key and a rotating flood of
/// `one_shot` invented keys, each sent twice, interleaved. Returns the healthy key's refusals.
fn window(
    limiter: &Limiter<String>,
    clock: &ManualClock,
    healthy: &str,
    steady: usize,
    one_shot: usize,
    next_key: &mut u64,
) -> usize {
    let step = INTERVAL / (steady + 2 * one_shot) as u32;
    let mut refused = 0;
    for i in 0..steady + one_shot {
        if i < steady && limiter.try_acquire(healthy).is_err() {
            refused += 1;
        }
        if i < one_shot {
            let key = format!("invented-{next_key}");
            *next_key += 1;
            let _ = limiter.try_acquire(&key);
            let _ = limiter.try_acquire(&key);
        }
        clock.advance(step);
    }
    refused
}

fn promoted(limiter: &Limiter<String>, key: &str) -> bool {
    limiter.heavy_hitters().iter().any(|h| h.key == key)
}

#[test]
fn a_steady_origin_keeps_its_place_against_a_stream_of_one_shot_keys() {
    let clock = ManualClock::new();
    let limiter = saturated(&clock);
    let mut next_key = 0;
    // Warm-up: promoted as the flood saturates the counter, with the counter's count as its
    // base, which is gone from the sliding window two windows later.
    for _ in 0..3 {
        window(&limiter, &clock, "steady.example", 20, 300, &mut next_key);
    }
    for w in 0..10 {
        let refused = window(&limiter, &clock, "steady.example", 20, 300, &mut next_key);
        assert_eq!(refused, 0, "window {w}: the steady origin was refused");
        assert!(
            promoted(&limiter, "steady.example"),
            "window {w}: pushed out"
        );
    }
    let stats = limiter.stats();
    assert!(stats.saturated, "{stats:?}");
    // The one-shot keys did compete (the set was full) and took turns among themselves.
    assert!(stats.exact_full > 0 && stats.replaced > 0, "{stats:?}");
}

#[test]
fn a_key_that_keeps_coming_earns_a_place_in_a_set_full_of_one_shot_keys() {
    let clock = ManualClock::new();
    let limiter = saturated(&clock);
    let mut next_key = 0;
    // The one set fills with invented keys.
    window(&limiter, &clock, "unused", 0, 300, &mut next_key);
    assert_eq!(limiter.stats().promoted, 16);
    assert!(!promoted(&limiter, "returning.example"));
    // A key with 40 requests a window among 30 invented keys gets in within the window: it
    // knocks more than a fifth of all knocks at the set, so its door count grows.
    window(&limiter, &clock, "returning.example", 40, 30, &mut next_key);
    assert!(promoted(&limiter, "returning.example"));
}

#[test]
fn a_cooled_down_key_is_demoted_by_the_sweep_without_a_request_of_its_own() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(10, INTERVAL)
        .clock(&clock)
        .build()
        .unwrap();
    for _ in 0..10 {
        let _ = limiter.try_acquire("busy");
    }
    assert_eq!(limiter.stats().promoted, 1);
    // Two windows later its sliding count is 0; no request for it ever comes again.
    clock.advance(3 * INTERVAL);
    assert_eq!(limiter.stats().promoted, 0, "still promoted");
    assert!(limiter.heavy_hitters().iter().all(|h| h.left_ago.is_some()));
}

#[test]
fn an_in_flight_limiter_sweeps_a_key_that_cooled_down_through_an_untracked_release() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(4)
        .clock(&clock)
        .build()
        .unwrap();
    // Promoted at 2 in flight: the first permit was admitted by the sketch alone (untracked),
    // the second by the exact stage.
    let first = limiter.try_acquire("busy").unwrap();
    let second = limiter.try_acquire("busy").unwrap();
    assert_eq!(limiter.stats().promoted, 1);
    // The tracked release finds the key still warm (1 in flight); the untracked one gives its
    // slot back in the sketch alone, without the exact stage's lock.
    drop(second);
    drop(first);
    assert_eq!(limiter.estimate("busy").inflight, Some(0));
    assert_eq!(limiter.stats().promoted, 1);
    // The sweep finds it cool.
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.stats().promoted, 0, "still promoted after a sweep");
}

/// Sized from the peak rate, the stage has a place for every key that can be at its promotion
/// threshold at that rate: here 100,000 requests a second, a limit of 100 (promotion at 50)
/// allow 2,000 such keys, and the stage gets twice that. 1,000 keys at 60 requests a second
/// (60,000 a second, under the peak) are each promoted, none is decided by the sketch alone
/// for want of a place, and none is refused. (A fixed stage of 1,024 places, 64 sets of 16,
/// could not hold them.)
///
/// Places come in sets of 16 chosen by hash: 1,000 keys over the 250 sets fill one past its
/// 16 about once in 5,000 runs (1,500 keys did in 6 runs of 100). The sketch is given 64
/// times its sized width: keys above half their limit may lose some of their first windows
/// to a full line collision (docs/guide.md's sizing section), which this test is not about (at
/// the sized width it failed 1 run in 40 on that).
#[test]
fn a_stage_sized_from_the_peak_rate_holds_every_key_that_can_be_hot_at_it() {
    const KEYS: u64 = 1_000;
    const PER_KEY: u32 = 60;
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_rate(LIMIT, INTERVAL)
        .peak_rate(100_000)
        .sketch(2, 1 << 20)
        .clock(&clock)
        .build()
        .unwrap();
    let capacity = limiter.stats().exact_capacity;
    assert!(
        capacity >= 4_000,
        "sized for 100,000 requests a second at a threshold of 50: {capacity} places"
    );
    // Three windows, each key's requests spread evenly over each.
    let per_window = KEYS * u64::from(PER_KEY);
    let step = INTERVAL / per_window as u32;
    let mut refused = 0;
    for i in 0..3 * per_window {
        if limiter.try_acquire(&(i % KEYS)).is_err() {
            refused += 1;
        }
        clock.advance(step);
    }
    let stats = limiter.stats();
    assert_eq!(refused, 0, "healthy keys refused: {stats:?}");
    assert_eq!(stats.exact_full, 0, "keys decided alone: {stats:?}");
    assert_eq!(stats.promoted as u64, KEYS, "{stats:?}");
}
